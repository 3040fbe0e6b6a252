package gguf

import (
	"errors"
	"fmt"
)

// ModelParams are the decoder hyper-parameters of a llama-family model
// (llama, qwen2, qwen3, ...) read from "<arch>.*" metadata keys.
type ModelParams struct {
	Architecture      string  // general.architecture
	EmbeddingLength   int     // <arch>.embedding_length (hidden size)
	BlockCount        int     // <arch>.block_count (layers)
	HeadCount         int     // <arch>.attention.head_count
	HeadCountKV       int     // <arch>.attention.head_count_kv (defaults to HeadCount)
	FeedForwardLength int     // <arch>.feed_forward_length
	ContextLength     int     // <arch>.context_length
	KeyLength         int     // <arch>.attention.key_length (defaults to EmbeddingLength/HeadCount)
	ValueLength       int     // <arch>.attention.value_length (defaults to KeyLength)
	RopeDimension     int     // <arch>.rope.dimension_count (defaults to KeyLength)
	RopeFreqBase      float32 // <arch>.rope.freq_base (defaults to 10000)
	RMSNormEpsilon    float32 // <arch>.attention.layer_norm_rms_epsilon
	VocabSize         int     // <arch>.vocab_size, else len(tokenizer.ggml.tokens), else 0
}

// Architecture returns general.architecture.
func (f *File) Architecture() (string, error) { return f.Meta.String("general.architecture") }

// ModelParams reads the hyper-parameters for the file's architecture. Keys
// that llama.cpp treats as required are required here; optional ones get
// llama.cpp's defaults.
func (f *File) ModelParams() (ModelParams, error) {
	arch, err := f.Architecture()
	if err != nil {
		return ModelParams{}, err
	}
	p := ModelParams{Architecture: arch}
	m := &f.Meta
	req := func(dst *int, suffix string) {
		if err != nil {
			return
		}
		var u uint64
		if u, err = m.Uint(arch + "." + suffix); err == nil {
			*dst = int(u)
		}
	}
	opt := func(dst *int, suffix string, def int) {
		if err != nil {
			return
		}
		u, e := m.Uint(arch + "." + suffix)
		switch {
		case e == nil:
			*dst = int(u)
		case errors.Is(e, ErrNotFound):
			*dst = def
		default:
			err = e
		}
	}
	optF := func(dst *float32, suffix string, def float32, required bool) {
		if err != nil {
			return
		}
		v, e := m.Float(arch + "." + suffix)
		switch {
		case e == nil:
			*dst = float32(v)
		case errors.Is(e, ErrNotFound) && !required:
			*dst = def
		default:
			err = e
		}
	}
	req(&p.EmbeddingLength, "embedding_length")
	req(&p.BlockCount, "block_count")
	req(&p.HeadCount, "attention.head_count")
	req(&p.FeedForwardLength, "feed_forward_length")
	req(&p.ContextLength, "context_length")
	if err != nil {
		return ModelParams{}, fmt.Errorf("%s model: %w", arch, err)
	}
	if p.HeadCount == 0 {
		return ModelParams{}, fmt.Errorf("%w: %s.attention.head_count is 0", ErrMalformed, arch)
	}
	opt(&p.HeadCountKV, "attention.head_count_kv", p.HeadCount)
	opt(&p.KeyLength, "attention.key_length", p.EmbeddingLength/p.HeadCount)
	opt(&p.ValueLength, "attention.value_length", p.KeyLength)
	opt(&p.RopeDimension, "rope.dimension_count", p.KeyLength)
	optF(&p.RopeFreqBase, "rope.freq_base", 10000, false)
	optF(&p.RMSNormEpsilon, "attention.layer_norm_rms_epsilon", 0, true)
	opt(&p.VocabSize, "vocab_size", 0)
	if err != nil {
		return ModelParams{}, fmt.Errorf("%s model: %w", arch, err)
	}
	if p.VocabSize == 0 {
		if v, ok := m.Lookup("tokenizer.ggml.tokens"); ok {
			p.VocabSize = v.Len()
		}
	}
	if p.HeadCountKV == 0 || p.HeadCount%p.HeadCountKV != 0 {
		return ModelParams{}, fmt.Errorf("%w: %s has %d attention heads, not a multiple of %d key/value heads", ErrMalformed, arch, p.HeadCount, p.HeadCountKV)
	}
	return p, nil
}
