package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu"
	"github.com/frognano/frognano/kernels/gguf"
	"github.com/frognano/frognano/kernels/safetensors"
	"github.com/frognano/frognano/kernels/tensor"
	"github.com/frognano/frognano/kernels/tokenizer"
)

// Options control loading. The zero value loads onto the CPU backend.
type Options struct {
	// Backend receives the weights; nil means the CPU backend.
	Backend kernels.Backend
	// Shared shares the weights, copy-on-write, with the other Models of
	// the process loaded from the same file with Shared (share.go): a
	// Learner and a Sampler of one run then hold one copy of the weights
	// neither changes. Only the CPU backend shares; on another backend
	// the load is private.
	Shared bool
}

// sharing starts a shared load of path when the options ask for one and
// the backend can share; nil otherwise.
func (o Options) sharing(b kernels.Backend, path, tag string) (*sharedLoad, error) {
	if !o.Shared || !canShare(b) {
		return nil, nil
	}
	key, err := fingerprint(path, tag)
	if err != nil {
		return nil, err
	}
	return beginShared(key), nil
}

func (o Options) backend() kernels.Backend {
	if o.Backend == nil {
		return cpu.New()
	}
	return o.Backend
}

// Load opens a model from path: a .gguf file, or a directory in Hugging Face
// layout (config.json, tokenizer.json, *.safetensors).
func Load(path string, opts Options) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return LoadHF(path, opts)
	}
	return LoadGGUF(path, opts)
}

// LoadGGUF loads a GGUF model file with the tokenizer it carries.
func LoadGGUF(path string, opts Options) (*Model, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	archName, err := f.Architecture()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	arch, err := lookupArch(archName)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfg, err := arch.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	cfg.Architecture = arch.Name
	tok, err := tokenizer.FromGGUF(&f.Meta)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Quantisations are checked up front, so that the error names every
	// offending type rather than the first tensor that fails.
	bad := map[string][]string{}
	for _, t := range f.Tensors {
		if !t.Type.CanDequantize() {
			bad[t.Type.String()] = append(bad[t.Type.String()], t.Name)
		}
	}
	if len(bad) > 0 {
		var parts []string
		for typ, names := range bad {
			parts = append(parts, fmt.Sprintf("%s (%d tensors, e.g. %s)", typ, len(names), names[0]))
		}
		sort.Strings(parts)
		return nil, fmt.Errorf("%s: %w quantisation %s; frognano dequantises %s",
			path, ErrUnsupported, strings.Join(parts, ", "), gguf.DequantizableTypes())
	}
	var fix func(string, *tensor.Tensor) error
	if arch.FixGGUF != nil {
		fix = func(name string, t *tensor.Tensor) error { return arch.FixGGUF(cfg, name, t.Data()) }
	}
	b := opts.backend()
	sl, err := opts.sharing(b, path, "gguf")
	if err != nil {
		return nil, err
	}
	m, err := build(cfg, tok, ggufSource{f}, "gguf", fix, b, sl)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Source = path
	return m, nil
}

// ggufConfig reads the hyper-parameters every llama-like GGUF file shares
// and refuses the features this decoder does not implement.
func ggufConfig(f *gguf.File) (Config, error) {
	p, err := f.ModelParams()
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	c := Config{
		Architecture:  p.Architecture,
		HiddenSize:    p.EmbeddingLength,
		Layers:        p.BlockCount,
		Heads:         p.HeadCount,
		KVHeads:       p.HeadCountKV,
		HeadDim:       p.KeyLength,
		FFNSize:       p.FeedForwardLength,
		ContextLength: p.ContextLength,
		RopeTheta:     p.RopeFreqBase,
		NormEps:       p.RMSNormEpsilon,
	}
	if emb, ok := f.Tensor("token_embd.weight"); ok {
		c.VocabSize = emb.NumRows()
	} else {
		return Config{}, fmt.Errorf("%w: tensor \"token_embd.weight\" is missing", ErrMalformed)
	}
	if p.ValueLength != p.KeyLength {
		return Config{}, fmt.Errorf("%w: value heads of %d but key heads of %d", ErrUnsupported, p.ValueLength, p.KeyLength)
	}
	if p.RopeDimension != p.KeyLength {
		return Config{}, fmt.Errorf("%w: partial rotary embedding (%d of %d dimensions)", ErrUnsupported, p.RopeDimension, p.KeyLength)
	}
	if s, err := f.Meta.String(p.Architecture + ".rope.scaling.type"); err == nil && s != "none" {
		return Config{}, fmt.Errorf("%w: rope scaling %q", ErrUnsupported, s)
	}
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		return Config{}, fmt.Errorf("%w: rope frequency factors (rope_freqs.weight, Llama 3.1-style rope scaling)", ErrUnsupported)
	}
	return c, nil
}

// HFConfig is the part of a Hugging Face config.json the decoder reads.
type HFConfig struct {
	Architectures         []string `json:"architectures"`
	VocabSize             int      `json:"vocab_size"`
	HiddenSize            int      `json:"hidden_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	HeadDim               int      `json:"head_dim"`
	IntermediateSize      int      `json:"intermediate_size"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	RopeTheta             float64  `json:"rope_theta"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	HiddenAct             string   `json:"hidden_act"`
	AttentionBias         bool     `json:"attention_bias"`
	RopeScaling           any      `json:"rope_scaling"`
	// RopeParameters is where transformers 5 keeps rope_theta and the
	// scaling type.
	RopeParameters *struct {
		RopeTheta float64 `json:"rope_theta"`
		RopeType  string  `json:"rope_type"`
	} `json:"rope_parameters"`
}

// common turns the shared fields into a Config and refuses what the decoder
// does not implement.
func (h HFConfig) common(arch string) (Config, error) {
	c := Config{
		Architecture:  arch,
		VocabSize:     h.VocabSize,
		HiddenSize:    h.HiddenSize,
		Layers:        h.NumHiddenLayers,
		Heads:         h.NumAttentionHeads,
		KVHeads:       h.NumKeyValueHeads,
		HeadDim:       h.HeadDim,
		FFNSize:       h.IntermediateSize,
		ContextLength: h.MaxPositionEmbeddings,
		RopeTheta:     float32(h.RopeTheta),
		NormEps:       float32(h.RMSNormEps),
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.HiddenSize / c.Heads
	}
	if rp := h.RopeParameters; rp != nil {
		if rp.RopeTheta != 0 {
			c.RopeTheta = float32(rp.RopeTheta)
		}
		if rp.RopeType != "" && rp.RopeType != "default" {
			return Config{}, fmt.Errorf("%w: rope scaling %q", ErrUnsupported, rp.RopeType)
		}
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if h.RopeScaling != nil {
		return Config{}, fmt.Errorf("%w: rope scaling %v", ErrUnsupported, h.RopeScaling)
	}
	if h.HiddenAct != "" && h.HiddenAct != "silu" {
		return Config{}, fmt.Errorf("%w: activation %q (the decoder's MLP is SwiGLU)", ErrUnsupported, h.HiddenAct)
	}
	return c, nil
}

// LoadHF loads a Hugging Face checkpoint directory: config.json,
// tokenizer.json (with tokenizer_config.json if present), and
// model.safetensors or the shards model.safetensors.index.json names.
func LoadHF(dir string, opts Options) (*Model, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	var hc HFConfig
	if err := json.Unmarshal(raw, &hc); err != nil {
		return nil, fmt.Errorf("%s: config.json: %w", dir, err)
	}
	arch, err := lookupHFArch(hc.Architectures)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	cfg, err := arch.FromHF(hc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	cfg.Architecture = arch.Name
	tok, err := tokenizer.LoadHF(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	src, err := openSafetensors(dir)
	if err != nil {
		return nil, err
	}
	defer src.close()
	if hc.TieWordEmbeddings {
		src.hide("lm_head.weight") // some exporters write the tied copy anyway
	}
	b := opts.backend()
	sl, err := opts.sharing(b, dir, "hf")
	if err != nil {
		return nil, err
	}
	m, err := build(cfg, tok, src, "hf", nil, b, sl)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if !hc.TieWordEmbeddings && m.w.Output == nil {
		return nil, fmt.Errorf("%s: %w: tie_word_embeddings is false but lm_head.weight is missing", dir, ErrMalformed)
	}
	m.Source = dir
	return m, nil
}

// build binds the weights and checks them against cfg and the tokenizer.
// With sl (a shared load, share.go) the weights the cache holds are not
// read but shared, and those it lacks are handed to it.
func build(cfg Config, tok *tokenizer.Tokenizer, src source, tag string, fix func(string, *tensor.Tensor) error, b kernels.Backend, sl *sharedLoad) (*Model, error) {
	var took *modelShare // the shared units the Model holds references to
	fail := func(err error) (*Model, error) {
		switch {
		case took != nil:
			took.releaseAll()
		case sl != nil:
			sl.abort()
		}
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return fail(err)
	}
	if err := tok.CheckModel(cfg.VocabSize); err != nil {
		return fail(err)
	}
	m := &Model{Config: cfg, Tokenizer: tok, b: b}
	m.w.Blocks = make([]Block, cfg.Layers)
	if src.hasPrefix(join(blocksName(tag), fmt.Sprint(cfg.Layers))) {
		return fail(fmt.Errorf("%w: the file has more than the %d layers its hyper-parameters declare", ErrMalformed, cfg.Layers))
	}
	bd := &binder{b: b, src: src, tag: tag, fix: fix, used: map[string]bool{}}
	if sl != nil {
		bd.skip = sl.skip(cfg, tag)
	}
	if err := bd.bind(reflect.ValueOf(&m.w), ""); err != nil {
		return fail(err)
	}
	if sl != nil {
		sl.take(m)
		took = m.share
	}
	if err := m.checkShapes(); err != nil {
		return fail(err)
	}
	m.fuse()
	if sl != nil {
		sl.give(m)
	}
	return m, nil
}

// blocksName is the prefix of the layers' tensors in a format.
func blocksName(tag string) string {
	f, _ := reflect.TypeFor[Transformer]().FieldByName("Blocks")
	return f.Tag.Get(tag)
}

type ggufSource struct{ f *gguf.File }

func (s ggufSource) shape(name string) ([]int, bool) {
	t, ok := s.f.Tensor(name)
	if !ok {
		return nil, false
	}
	return t.Shape(), true
}

func (s ggufSource) load(name string) (*tensor.Tensor, error) {
	t, _ := s.f.Tensor(name)
	data, err := s.f.Float32s(name)
	if err != nil {
		if errors.Is(err, gguf.ErrUnsupportedType) {
			return nil, fmt.Errorf("%w quantisation: %w", ErrUnsupported, err)
		}
		return nil, err
	}
	return tensor.From(data, t.Shape()...), nil
}

func (s ggufSource) hasPrefix(prefix string) bool {
	for _, t := range s.f.Tensors {
		if strings.HasPrefix(t.Name, prefix+".") {
			return true
		}
	}
	return false
}

// stSource is a checkpoint's safetensors files, one or several shards.
type stSource struct {
	files  []*safetensors.File
	byName map[string]*safetensors.File
}

func openSafetensors(dir string) (*stSource, error) {
	var shards []string
	idx, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	switch {
	case err == nil:
		var index struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(idx, &index); err != nil {
			return nil, fmt.Errorf("%s: model.safetensors.index.json: %w", dir, err)
		}
		seen := map[string]bool{}
		for _, f := range index.WeightMap {
			if !seen[f] {
				seen[f] = true
				shards = append(shards, f)
			}
		}
		sort.Strings(shards)
	case errors.Is(err, os.ErrNotExist):
		shards = []string{"model.safetensors"}
	default:
		return nil, err
	}
	s := &stSource{byName: map[string]*safetensors.File{}}
	for _, name := range shards {
		f, err := safetensors.Open(filepath.Join(dir, name))
		if err != nil {
			s.close()
			return nil, err
		}
		s.files = append(s.files, f)
		for _, t := range f.Tensors {
			s.byName[t.Name] = f
		}
	}
	return s, nil
}

func (s *stSource) close() {
	for _, f := range s.files {
		f.Close()
	}
}

func (s *stSource) hide(name string) { delete(s.byName, name) }

func (s *stSource) shape(name string) ([]int, bool) {
	f, ok := s.byName[name]
	if !ok {
		return nil, false
	}
	t, _ := f.Tensor(name)
	return t.Shape, true
}

func (s *stSource) load(name string) (*tensor.Tensor, error) {
	f := s.byName[name]
	t, _ := f.Tensor(name)
	data, err := f.Float32s(name)
	if err != nil {
		if errors.Is(err, safetensors.ErrUnsupported) {
			return nil, fmt.Errorf("%w dtype: %w", ErrUnsupported, err)
		}
		return nil, err
	}
	shape := t.Shape
	if len(shape) == 0 {
		shape = []int{1}
	}
	return tensor.From(data, shape...), nil
}

func (s *stSource) hasPrefix(prefix string) bool {
	for n := range s.byName {
		if strings.HasPrefix(n, prefix+".") {
			return true
		}
	}
	return false
}
