package learner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/model/modeltest"
)

func logits(t *testing.T, m *model.Model, ids []int32) []float32 {
	t.Helper()
	out, err := m.NewRunner().Forward([]*model.Cache{m.NewCache(len(ids))}, [][]int32{ids}, true)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), out.Data...)
}

// TestExportRoundTrip exports each architecture, loaded from GGUF (so the
// tokenizer.json is written from GGUF metadata and llama's q/k rows are in
// Hugging Face order), and checks that LoadHF reads back a model with the
// same logits and a tokenizer with the same ids.
func TestExportRoundTrip(t *testing.T) {
	ids := []int32{258, 104, 101, 108, 32, 260, 10, 257, 111, 33, 12, 200, 5, 99}
	text := "<|im_start|>user\nhello 123 wörld<|im_end|>\n"
	for name, spec := range map[string]modeltest.Spec{"llama": modeltest.Llama, "qwen2": modeltest.Qwen2, "qwen3": modeltest.Qwen3} {
		t.Run(name, func(t *testing.T) {
			src, err := model.Load(spec.WriteRandomGGUF(t, 3), model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "export")
			if err := ExportHF(src, dir, ExportOptions{Metadata: map[string]string{"run": "r"}}); err != nil {
				t.Fatal(err)
			}
			back, err := model.LoadHF(dir, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if back.Config != src.Config {
				t.Fatalf("config %+v, want %+v", back.Config, src.Config)
			}
			a, b := logits(t, src, ids), logits(t, back, ids)
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("logit %d: %v after export, %v before", i, b[i], a[i])
				}
			}
			ea, eb := src.Tokenizer.Encode(text), back.Tokenizer.Encode(text)
			if len(ea) != len(eb) {
				t.Fatalf("tokenizer: %v after export, %v before", eb, ea)
			}
			for i := range ea {
				if ea[i] != eb[i] {
					t.Fatalf("tokenizer: %v after export, %v before", eb, ea)
				}
			}
			if back.Tokenizer.EOS() != src.Tokenizer.EOS() || back.Tokenizer.BOS() != src.Tokenizer.BOS() {
				t.Fatalf("special tokens: bos %d eos %d, want %d %d", back.Tokenizer.BOS(), back.Tokenizer.EOS(), src.Tokenizer.BOS(), src.Tokenizer.EOS())
			}
			for _, f := range []string{"generation_config.json", "tokenizer_config.json", "config.json"} {
				raw, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				var v map[string]any
				if err := json.Unmarshal(raw, &v); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
			}
		})
	}
}
