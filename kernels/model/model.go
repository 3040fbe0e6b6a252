// Package model is frognano's transformer: Llama- and Qwen-family decoders
// written, as ollama writes its models, as small layer structs (nn.go) over
// the kernels.Backend interface, their weights bound by tensor name from a
// GGUF file or a Hugging Face checkpoint (config.json + safetensors) and
// dequantised to float32 at load.
//
// Each architecture is one file (llama.go, qwen2.go, qwen3.go) that
// registers itself by name: it turns its file formats' hyper-parameters into
// a Config and undoes whatever its exporters did to the weights. The forward
// pass (forward.go) is shared: a Runner runs a batch of sequences, each with
// its own KV Cache and position, through the decoder in one pass; prompts of
// different lengths (prefill) and one new token per sequence (decoding) are
// the same call. For short batches, the decoding steps, the q/k/v and
// gate/up weights are stacked so that each layer runs fewer, larger
// products (fuse.go). generate.go samples with kernels/sample on top.
// train.go is the training forward and backward passes over a
// kernels.GradBackend; params.go lists and sets the weights by Hugging Face
// name (checkpoints, weights pushed to samplers).
package model

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/gguf"
	"github.com/frognano/frognano/kernels/tokenizer"
)

// Errors returned, wrapped with details, by the loaders and the Runner.
var (
	// ErrUnsupported is a model this package cannot run: an unknown
	// architecture, a quantisation it cannot dequantise, a feature (rope
	// scaling, partial rotary) it does not implement.
	ErrUnsupported = errors.New("model: unsupported")
	// ErrMalformed is a model file whose tensors or hyper-parameters do not
	// fit together.
	ErrMalformed = errors.New("model: malformed model")
	// ErrCacheFull is a sequence that would grow past its cache.
	ErrCacheFull = errors.New("model: KV cache full")
)

// Config is a decoder's shape, whatever file it came from.
type Config struct {
	Architecture  string  // registered name: "llama", "qwen2", "qwen3"
	VocabSize     int     // rows of the token embedding
	HiddenSize    int     // residual stream width
	Layers        int     // decoder blocks
	Heads         int     // query heads
	KVHeads       int     // key/value heads (grouped-query attention)
	HeadDim       int     // per-head width (Qwen3: not HiddenSize/Heads)
	FFNSize       int     // SwiGLU inner width
	ContextLength int     // positions the model was trained for
	RopeTheta     float32 // rotary base
	NormEps       float32 // RMSNorm epsilon
	QKVBias       bool    // q/k/v projections have biases (Qwen2)
	QKNorm        bool    // per-head RMSNorm of q and k before RoPE (Qwen3)
}

// QDim and KVDim are the widths of a row of queries and of keys (or values).
func (c Config) QDim() int  { return c.Heads * c.HeadDim }
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }

func (c Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrMalformed, c.Architecture, fmt.Sprintf(format, a...))
	}
	switch {
	case c.VocabSize <= 0 || c.HiddenSize <= 0 || c.Layers <= 0 || c.FFNSize <= 0:
		return bad("vocabulary %d, hidden size %d, %d layers, feed-forward size %d must all be positive", c.VocabSize, c.HiddenSize, c.Layers, c.FFNSize)
	case c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0:
		return bad("%d attention heads is not a positive multiple of %d key/value heads", c.Heads, c.KVHeads)
	case c.HeadDim <= 0 || c.HeadDim%2 != 0:
		return bad("head dimension %d is not positive and even", c.HeadDim)
	case !(c.RopeTheta > 0):
		return bad("rope theta %v is not positive", c.RopeTheta)
	case !(c.NormEps >= 0):
		return bad("norm epsilon %v is negative", c.NormEps)
	}
	return nil
}

// Architecture adapts one model family's files to the shared decoder.
type Architecture struct {
	// Name is the GGUF general.architecture value ("llama").
	Name string
	// HFNames are the config.json "architectures" entries it serves
	// ("LlamaForCausalLM").
	HFNames []string
	// FromGGUF reads the hyper-parameters of a GGUF file.
	FromGGUF func(f *gguf.File) (Config, error)
	// FromHF reads a Hugging Face config.json.
	FromHF func(c HFConfig) (Config, error)
	// FixGGUF, if set, rewrites a tensor read from a GGUF file into the
	// Hugging Face layout the decoder computes in (llama.cpp permutes
	// Llama's q/k rows for its interleaved rotary form).
	FixGGUF func(c Config, name string, data []float32) error
}

var (
	registryMu sync.RWMutex
	registry   = map[string]*Architecture{}
)

// Register makes an architecture loadable. It panics on a duplicate name,
// as two files claiming one architecture is a programming error.
func Register(a Architecture) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[a.Name]; dup {
		panic("model: architecture " + a.Name + " registered twice")
	}
	registry[a.Name] = &a
}

// Architectures lists the registered names, sorted.
func Architectures() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	var names []string
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func lookupArch(name string) (*Architecture, error) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	if a, ok := registry[name]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("%w architecture %q: frognano runs %v", ErrUnsupported, name, Architectures())
}

func lookupHFArch(names []string) (*Architecture, error) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	for _, n := range names {
		for _, a := range registry {
			for _, h := range a.HFNames {
				if h == n {
					return a, nil
				}
			}
		}
	}
	var known []string
	for _, a := range registry {
		known = append(known, a.HFNames...)
	}
	sort.Strings(known)
	return nil, fmt.Errorf("%w architecture %v: frognano runs %v", ErrUnsupported, names, known)
}

// Model is a loaded decoder: its configuration, weights on a backend and
// tokenizer. It is safe for concurrent use; the state of a computation lives
// in Caches and Runners. Its weights change only through SetParams or in
// place through Params (a training step, train.go), which must not overlap
// with a computation on the model.
type Model struct {
	Config    Config
	Tokenizer *tokenizer.Tokenizer
	// Source describes where the weights came from, for logs.
	Source string

	b     kernels.Backend
	w     Transformer
	fused []fusedLayer   // per layer, see fuse.go
	quant string         // the products' quantization, "" for float32 (quant.go)
	outQ  kernels.Tensor // the output projection quantized, or nil
	share *modelShare    // the weights shared with other Models (share.go), or nil
}

// Backend is the backend the weights live on.
func (m *Model) Backend() kernels.Backend { return m.b }

// Weights exposes the bound layers (for tests, and for a learner that
// starts from them). On a Model loaded with Options.Shared they may be
// other Models' storage too: Own what you write through them.
func (m *Model) Weights() *Transformer { return &m.w }

// checkShapes compares every bound weight with the shape the Config implies.
func (m *Model) checkShapes() error {
	c := m.Config
	d, q, kv, ff := c.HiddenSize, c.QDim(), c.KVDim(), c.FFNSize
	var err error
	want := func(name string, t kernels.Tensor, shape ...int) {
		if err != nil || t == nil || reflect.ValueOf(t).IsNil() {
			return
		}
		got := t.Shape()
		if len(got) == 1 && len(shape) == 2 && shape[0] == 1 {
			shape = shape[1:] // a bias
		}
		if fmt.Sprint(got) != fmt.Sprint(shape) {
			err = fmt.Errorf("%w: %s has shape %v, the %s configuration implies %v", ErrMalformed, name, got, c.Architecture, shape)
		}
	}
	lin := func(name string, l *Linear, out, in int) {
		want(name+" weight", l.Weight, out, in)
		if l.Bias != nil {
			want(name+" bias", l.Bias, 1, out)
		}
	}
	w := &m.w
	want("token embedding", w.TokenEmbedding, c.VocabSize, d)
	want("output norm", w.OutputNorm.Weight, d)
	if w.Output != nil {
		lin("output", w.Output, c.VocabSize, d)
	}
	for i := range w.Blocks {
		b := &w.Blocks[i]
		p := fmt.Sprintf("layer %d ", i)
		want(p+"attention norm", b.AttnNorm.Weight, d)
		want(p+"feed-forward norm", b.FFNNorm.Weight, d)
		lin(p+"q", b.Attn.Q, q, d)
		lin(p+"k", b.Attn.K, kv, d)
		lin(p+"v", b.Attn.V, kv, d)
		lin(p+"o", b.Attn.O, d, q)
		lin(p+"gate", b.MLP.Gate, ff, d)
		lin(p+"up", b.MLP.Up, ff, d)
		lin(p+"down", b.MLP.Down, d, ff)
		hasBias := b.Attn.Q.Bias != nil && b.Attn.K.Bias != nil && b.Attn.V.Bias != nil
		if c.QKVBias && !hasBias {
			return fmt.Errorf("%w: %s layer %d lacks the q/k/v biases the architecture has", ErrMalformed, c.Architecture, i)
		}
		if !c.QKVBias && (b.Attn.Q.Bias != nil || b.Attn.K.Bias != nil || b.Attn.V.Bias != nil) {
			return fmt.Errorf("%w: %s layer %d has q/k/v biases the architecture does not use", ErrMalformed, c.Architecture, i)
		}
		hasNorm := b.Attn.QNorm != nil && b.Attn.KNorm != nil
		if c.QKNorm != hasNorm {
			return fmt.Errorf("%w: %s layer %d: q/k norms present %v, the architecture expects %v", ErrMalformed, c.Architecture, i, hasNorm, c.QKNorm)
		}
		if hasNorm {
			want(p+"q norm", b.Attn.QNorm.Weight, c.HeadDim)
			want(p+"k norm", b.Attn.KNorm.Weight, c.HeadDim)
		}
	}
	return err
}
