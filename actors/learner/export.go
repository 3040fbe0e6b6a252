package learner

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/safetensors"
)

// hfArchitectures maps frognano's architecture names to Hugging Face's
// class and model_type.
var hfArchitectures = map[string][2]string{
	"llama": {"LlamaForCausalLM", "llama"},
	"qwen2": {"Qwen2ForCausalLM", "qwen2"},
	"qwen3": {"Qwen3ForCausalLM", "qwen3"},
}

// ExportOptions vary ExportHF.
type ExportOptions struct {
	// DType of the weights: safetensors.F32 (the default, exact),
	// safetensors.BF16 or safetensors.F16.
	DType safetensors.DType
	// Metadata goes into the safetensors header (run id, step, version).
	Metadata map[string]string
}

// ExportHF writes m as a Hugging Face checkpoint directory that
// transformers, vLLM or llama.cpp's converter can read: model.safetensors,
// config.json, tokenizer.json, tokenizer_config.json (with the chat
// template) and generation_config.json. dir is created if needed; files
// are written atomically (temporary file, then rename).
func ExportHF(m *model.Model, dir string, o ExportOptions) error {
	arch, ok := hfArchitectures[m.Config.Architecture]
	if !ok {
		return fmt.Errorf("learner: export: no Hugging Face class for architecture %q", m.Config.Architecture)
	}
	if o.DType == "" {
		o.DType = safetensors.F32
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	w := &safetensors.Writer{Metadata: map[string]string{"format": "pt"}}
	for k, v := range o.Metadata {
		w.Metadata[k] = v
	}
	b := m.Backend()
	for _, p := range m.Params() {
		h := make([]float32, numel(p.Value.Shape()))
		b.ToHost(h, p.Value)
		if err := w.AddFloat32s(p.Name, o.DType, p.Value.Shape(), h); err != nil {
			return fmt.Errorf("learner: export: %w", err)
		}
	}
	if err := w.WriteFile(filepath.Join(dir, "model.safetensors")); err != nil {
		return fmt.Errorf("learner: export: %w", err)
	}
	// Exported files are for other tools and users to read.
	if err := os.Chmod(filepath.Join(dir, "model.safetensors"), 0o644); err != nil {
		return err
	}

	c, tok := m.Config, m.Tokenizer
	tied := m.Weights().Output == nil
	torchDType := map[safetensors.DType]string{safetensors.F32: "float32", safetensors.BF16: "bfloat16", safetensors.F16: "float16"}[o.DType]
	id := func(v int32) any {
		if v < 0 {
			return nil
		}
		return v
	}
	cfg := map[string]any{
		"architectures":           []string{arch[0]},
		"model_type":              arch[1],
		"vocab_size":              c.VocabSize,
		"hidden_size":             c.HiddenSize,
		"intermediate_size":       c.FFNSize,
		"num_hidden_layers":       c.Layers,
		"num_attention_heads":     c.Heads,
		"num_key_value_heads":     c.KVHeads,
		"head_dim":                c.HeadDim,
		"hidden_act":              "silu",
		"max_position_embeddings": c.ContextLength,
		"rms_norm_eps":            c.NormEps,
		"rope_theta":              c.RopeTheta,
		"rope_scaling":            nil,
		"tie_word_embeddings":     tied,
		"torch_dtype":             torchDType,
		"bos_token_id":            id(tok.BOS()),
		"eos_token_id":            id(tok.EOS()),
		"pad_token_id":            id(tok.PAD()),
		"initializer_range":       0.02,
		"use_cache":               true,
		"attention_dropout":       0.0,
	}
	switch c.Architecture {
	case "llama":
		cfg["attention_bias"], cfg["mlp_bias"], cfg["pretraining_tp"] = false, false, 1
	case "qwen2":
		cfg["use_sliding_window"], cfg["sliding_window"], cfg["max_window_layers"] = false, nil, c.Layers
	case "qwen3":
		cfg["attention_bias"], cfg["use_sliding_window"], cfg["sliding_window"], cfg["max_window_layers"] = false, false, nil, c.Layers
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	gen := map[string]any{"bos_token_id": id(tok.BOS()), "eos_token_id": id(tok.EOS())}
	if endTurn, ok := tok.TokenID("<|im_end|>"); ok && endTurn != tok.EOS() {
		eos := []int32{endTurn}
		if tok.EOS() >= 0 {
			eos = append(eos, tok.EOS())
		}
		gen["eos_token_id"] = eos
	}
	if tok.PAD() >= 0 {
		gen["pad_token_id"] = tok.PAD()
	}
	if err := writeJSON(filepath.Join(dir, "generation_config.json"), gen); err != nil {
		return err
	}
	tj, err := tok.HFJSON()
	if err != nil {
		return fmt.Errorf("learner: export: %w", err)
	}
	if err := writeFile(filepath.Join(dir, "tokenizer.json"), tj); err != nil {
		return err
	}
	tc, err := tok.HFConfigJSON()
	if err != nil {
		return fmt.Errorf("learner: export: %w", err)
	}
	return writeFile(filepath.Join(dir, "tokenizer_config.json"), tc)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}

// writeFile replaces path atomically.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
