package model

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/tensor"
)

// NamedTensor is one weight of a model under its Hugging Face name
// ("model.layers.0.self_attn.q_proj.weight").
type NamedTensor struct {
	Name  string
	Value kernels.Tensor
}

// Params lists every weight of the model once, under the Hugging Face names
// LoadHF binds (a tied embedding appears once, as
// "model.embed_tokens.weight"), in a stable order: the embedding, each
// layer's weights in struct order, the final norm, the output projection
// when untied. Exporting these to safetensors beside a config.json makes a
// checkpoint LoadHF reads back.
//
// The tensors are the model's own storage: the q/k/v and gate/up weights are
// views into the stacked matrices the decoding path multiplies by (fuse.go),
// so writing into them (SetParams, an optimizer step) changes what every
// Runner computes. On a Model loaded with Options.Shared they may be other
// Models' storage too: Own them before writing through them.
func (m *Model) Params() []NamedTensor {
	var out []NamedTensor
	walkWeights(reflect.ValueOf(&m.w).Elem(), "", func(name string, t kernels.Tensor) {
		out = append(out, NamedTensor{Name: name, Value: t})
	})
	return out
}

// SetParams copies new values into every weight, by Hugging Face name (a
// checkpoint being restored, weights pushed from a learner). Every name of
// Params must be present with exactly its element count, and no other name;
// otherwise nothing is changed and the error lists what does not fit. The
// values are copied, so src may be reused afterwards.
//
// SetParams writes the storage Runners and Trainers compute with, so it must
// not run while any of them computes on this Model. A quantized model
// (SetQuantization) re-quantizes the new weights. Weights the Model shares
// with others (Options.Shared) are copied first, and the others keep
// theirs.
func (m *Model) SetParams(src map[string][]float32) error {
	return m.setParams(src, false, "SetParams")
}

// UpdateParams is SetParams for some of the weights: those named in src
// are replaced, the others keep their values (the frozen layers of a
// partly trained model, which its publications leave out). Every name
// must be a weight of the model with exactly its element count; otherwise
// nothing is changed.
func (m *Model) UpdateParams(src map[string][]float32) error {
	return m.setParams(src, true, "UpdateParams")
}

func (m *Model) setParams(src map[string][]float32, some bool, op string) error {
	params := m.Params()
	known := make(map[string]bool, len(params))
	var problems []string
	for _, p := range params {
		known[p.Name] = true
		v, ok := src[p.Name]
		if !ok {
			if !some {
				problems = append(problems, fmt.Sprintf("%s is missing", p.Name))
			}
			continue
		}
		if n := numel(p.Value.Shape()); len(v) != n {
			problems = append(problems, fmt.Sprintf("%s has %d values, the model's %v holds %d", p.Name, len(v), p.Value.Shape(), n))
		}
	}
	var unknown []string
	for name := range src {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		problems = append(problems, fmt.Sprintf("%s is not a weight of this %s model", name, m.Config.Architecture))
	}
	if len(problems) > 0 {
		const show = 8
		more := ""
		if len(problems) > show {
			more = fmt.Sprintf(" (and %d more)", len(problems)-show)
			problems = problems[:show]
		}
		return fmt.Errorf("%w: %s: %s%s", ErrMalformed, op, strings.Join(problems, "; "), more)
	}
	// Weights shared with other Models (share.go) are copied before they
	// are written, with the rest of their layer; the Params are listed
	// again, as owning a layer replaces its tensors.
	if m.share != nil {
		m.ownNames(src)
		params = m.Params()
	}
	for _, p := range params {
		v, ok := src[p.Name]
		if !ok {
			continue
		}
		// FromHost adopts its argument on the CPU backend; Copy only reads it.
		m.b.Copy(p.Value, m.b.FromHost(tensor.From(v, p.Value.Shape()...)))
	}
	// A quantized model serves the new weights quantized. The shapes are
	// the ones quantized before, so this cannot fail.
	if err := m.requantize(); err != nil {
		panic(err)
	}
	return nil
}

// walkWeights calls fn for every non-nil tensor field of the layer struct v
// (a Transformer, Block, …), named by the "hf" struct tags under prefix, in
// field order.
func walkWeights(v reflect.Value, prefix string, fn func(name string, t kernels.Tensor)) {
	ty := v.Type()
	for i := range ty.NumField() {
		f := ty.Field(i)
		tag, ok := f.Tag.Lookup("hf")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		full := join(prefix, name)
		fv := v.Field(i)
		switch {
		case f.Type == tensorType:
			if !fv.IsNil() {
				fn(full, fv.Interface().(kernels.Tensor))
			}
		case f.Type.Kind() == reflect.Pointer:
			if !fv.IsNil() {
				walkWeights(fv.Elem(), full, fn)
			}
		case f.Type.Kind() == reflect.Slice:
			for j := range fv.Len() {
				walkWeights(fv.Index(j), join(full, fmt.Sprint(j)), fn)
			}
		}
	}
}

// mirrorWeights fills dst, a zero layer struct of src's type, with the same
// structure as src: a tensor made by fn(name, t) for every non-nil tensor t
// of src (nil where fn returns nil: a frozen weight has no gradient), nil
// where src has nil. The Trainer keeps its gradients in such a
// mirror of the model's Transformer, so that the backward pass reads a
// weight and its gradient at the same path (w.Blocks[l].Attn.Q.Weight and
// g.Blocks[l].Attn.Q.Weight).
func mirrorWeights(dst, src reflect.Value, prefix string, fn func(name string, t kernels.Tensor) kernels.Tensor) {
	ty := src.Type()
	for i := range ty.NumField() {
		f := ty.Field(i)
		tag, ok := f.Tag.Lookup("hf")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		full := join(prefix, name)
		sv, dv := src.Field(i), dst.Field(i)
		switch {
		case f.Type == tensorType:
			if !sv.IsNil() {
				if r := fn(full, sv.Interface().(kernels.Tensor)); r != nil {
					dv.Set(reflect.ValueOf(r))
				}
			}
		case f.Type.Kind() == reflect.Pointer:
			if !sv.IsNil() {
				p := reflect.New(f.Type.Elem())
				mirrorWeights(p.Elem(), sv.Elem(), full, fn)
				dv.Set(p)
			}
		case f.Type.Kind() == reflect.Slice:
			dv.Set(reflect.MakeSlice(f.Type, sv.Len(), sv.Len()))
			for j := range sv.Len() {
				mirrorWeights(dv.Index(j), sv.Index(j), join(full, fmt.Sprint(j)), fn)
			}
		}
	}
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
