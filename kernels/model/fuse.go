package model

import "github.com/frognano/frognano/kernels"

// Decoding steps multiply a few rows by every weight matrix, and at that
// size each product costs about as much to start (splitting it across
// cores) as its small matrices take to stream. So the weights that read the
// same input are stored as one matrix: q, k and v projections stacked into
// [q+2·kv, hidden], gate and up into [2·ffn, hidden]. The layers' own
// Linear weights become row ranges (Slice views) of these, so nothing is
// stored twice, and a step of at most fuseRows tokens runs two products
// where it would run five, then splits their rows with Copy and SwiGLU on
// per-row views. Longer batches (prefill) use the separate matrices, whose
// products are large enough already.
const fuseRows = 32

type fusedLayer struct {
	qkv    Linear // weight [q+2kv, hidden], bias [q+2kv] when the model has q/k/v biases
	gateUp Linear // weight [2·ffn, hidden]
}

// fuse restacks each layer's q/k/v and gate/up weights, but for the
// layers a shared load took stacked already from the cache (share.go).
func (m *Model) fuse() {
	b := m.b
	d := m.Config.HiddenSize
	if m.fused == nil {
		m.fused = make([]fusedLayer, len(m.w.Blocks))
	}
	for l := range m.w.Blocks {
		blk, f := &m.w.Blocks[l], &m.fused[l]
		if f.qkv.Weight != nil {
			continue
		}
		a := blk.Attn
		f.qkv.Weight = stack(b, d, &a.Q.Weight, &a.K.Weight, &a.V.Weight)
		if a.Q.Bias != nil {
			f.qkv.Bias = stack(b, 0, &a.Q.Bias, &a.K.Bias, &a.V.Bias)
		}
		f.gateUp.Weight = stack(b, d, &blk.MLP.Gate.Weight, &blk.MLP.Up.Weight)
	}
}

// stack copies the tensors into one, rows after rows, and replaces each
// with its view in the result. cols is the row length (0 for vectors).
func stack(b kernels.Backend, cols int, parts ...*kernels.Tensor) kernels.Tensor {
	rows := 0
	for _, p := range parts {
		rows += (*p).Shape()[0]
	}
	var out kernels.Tensor
	if cols == 0 {
		out = b.New(rows)
	} else {
		out = b.New(rows, cols)
	}
	r := 0
	for _, p := range parts {
		n := (*p).Shape()[0]
		view := b.Slice(out, r, r+n)
		b.Copy(view, *p)
		*p = view
		r += n
	}
	return out
}
