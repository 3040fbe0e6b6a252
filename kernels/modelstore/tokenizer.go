package modelstore

import (
	"os"

	"github.com/frognano/frognano/kernels/gguf"
	"github.com/frognano/frognano/kernels/tokenizer"
)

// Tokenizer reads the tokenizer of a model without its weights: nameOrPath
// as Resolve takes it, a GGUF file's metadata or a Hugging Face directory's
// tokenizer.json.
func (s *Store) Tokenizer(nameOrPath string) (*tokenizer.Tokenizer, error) {
	path, err := s.Resolve(nameOrPath)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return tokenizer.LoadHF(path)
	}
	g, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	return tokenizer.FromGGUF(&g.Meta)
}
