package quantbench

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels/cpu/blas"
)

// TestRun measures SmolLM2 (FROGNANO_TEST_GGUF) with the smallest sizes:
// every type gets positive speeds, and the mismatch measure is sound: a
// float32 sampler matches the float32 learner to float32 rounding and no
// token is masked, while q8_0 moves log-probabilities measurably.
func TestRun(t *testing.T) {
	p := os.Getenv("FROGNANO_TEST_GGUF")
	if p == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset")
	}
	rep, err := Run(context.Background(), Options{Model: p, Rounds: 1, Decode: 2, Prefill: 32, Prompts: 2, Samples: 2, Tokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	want := 3
	if q := blas.Q8Impl(); q == "avx512-vnni" || q == "amx" {
		want = 5 // q8_0@avx2 and q8_0-f32@avx2 beside the newer kernels
	}
	if len(rep.Speeds) != want || len(rep.Mismatches) != want {
		t.Fatalf("%d speeds, %d mismatches", len(rep.Speeds), len(rep.Mismatches))
	}
	for _, s := range rep.Speeds {
		if !(s.Decode1 > 0 && s.Decode16 > 0 && s.PrefillTokens > 0 && s.WeightBytes > 0) {
			t.Errorf("%+v", s)
		}
	}
	if f, q := rep.Speeds[0], rep.Speeds[1]; f.Type != "f32" || q.Type != "q8_0" || q.WeightBytes*3 > f.WeightBytes {
		t.Errorf("weights read: %s %d bytes, %s %d bytes", f.Type, f.WeightBytes, q.Type, q.WeightBytes)
	}
	f, q := rep.Mismatches[0], rep.Mismatches[1]
	if f.Tokens == 0 || f.MaxAbs > 2e-3 || f.TVDropped != 0 {
		t.Errorf("float32 sampler against the float32 learner: %+v", f)
	}
	if q.Type != "q8_0" || q.Tokens == 0 || !(q.MeanAbs > 10*f.MeanAbs) {
		t.Errorf("q8_0 sampler: %+v (float32: %+v)", q, f)
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| q8_0-f32 |") {
		t.Errorf("table:\n%s", b.String())
	}
	t.Logf("\n%s", b.String())
}

// TestRunSpeedOnly: SpeedOnly times the asked types and nothing else, and
// the table has no mismatch section; a prefill shorter than the decoding
// prompt (32 tokens) decodes after the whole prefill prompt.
func TestRunSpeedOnly(t *testing.T) {
	p := os.Getenv("FROGNANO_TEST_GGUF")
	if p == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset")
	}
	rep, err := Run(context.Background(), Options{Model: p, Types: []string{"q8_0"}, Rounds: 1, Decode: 2, Prefill: 16, SpeedOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Speeds) != 1 || rep.Speeds[0].Type != "q8_0" || len(rep.Mismatches) != 0 {
		t.Fatalf("speeds %+v, %d mismatches", rep.Speeds, len(rep.Mismatches))
	}
	// A type pinned to a kernel set is served with it, reported with it,
	// and the kernels in use are put back; an unknown set is refused.
	before := blas.Q8Impl()
	rep2, err := Run(context.Background(), Options{Model: p, Types: []string{"q8_0@go"}, Rounds: 1, Decode: 2, Prefill: 16, SpeedOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep2.Speeds[0].Type != "q8_0@go" || blas.Q8Impl() != before {
		t.Fatalf("q8_0@go: type %q, kernels after %q (before %q)", rep2.Speeds[0].Type, blas.Q8Impl(), before)
	}
	if _, err := Run(context.Background(), Options{Model: p, Types: []string{"q8_0@avx1024"}, Rounds: 1, Decode: 2, Prefill: 16, SpeedOnly: true}); err == nil || !strings.Contains(err.Error(), "unknown Q8_0 kernels") {
		t.Fatalf("q8_0@avx1024: %v", err)
	}
	if s := rep.Speeds[0]; !(s.Decode1 > 0 && s.Decode16 > 0 && s.PrefillTokens > 0) {
		t.Errorf("%+v", s)
	}
	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| q8_0 |") || strings.Contains(b.String(), "sampler weights") {
		t.Errorf("table:\n%s", b.String())
	}
}
