package modelstore

import (
	"os"
	"testing"
)

func TestTokenizerOfAGGUF(t *testing.T) {
	path := os.Getenv("FROGNANO_TEST_GGUF")
	if path == "" {
		t.Skip("FROGNANO_TEST_GGUF is not set")
	}
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := s.Tokenizer(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.VocabSize(); got != 49152 {
		t.Fatalf("vocabulary of %d tokens, want SmolLM2's 49152", got)
	}
	ids := tok.Encode("def add(a, b):")
	if text, err := tok.Decode(ids); err != nil || text != "def add(a, b):" {
		t.Fatalf("round trip: %q, %v", text, err)
	}
	if _, err := s.Tokenizer("no-such-model"); err == nil {
		t.Fatal("a model the store does not know gave a tokenizer")
	}
}
