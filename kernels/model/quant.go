package model

import (
	"fmt"

	"github.com/frognano/frognano/kernels"
)

// Quantized serving. A Sampler may run its matrix products on quantized
// copies of the weights (Q8_0: int8 blocks, a quarter of the memory
// traffic of float32), while the float32 weights stay the model's own:
// Params, SetParams, checkpoints and the Trainer read and write them, and
// SetParams re-quantizes, so a published float32 version is served
// quantized. Only the Runner's products (every Linear and the output
// logits) use the copies; the embedding lookup, norms and biases stay
// float32, as does everything a Trainer computes. Weights written in place
// through Params (an optimizer step) reach the copies only at the next
// SetParams or SetQuantization, so a model being trained is not one to
// quantize: the Learner and the Sampler each load their own.

// Quantizer is a backend that can hold weights quantized: Quantize returns
// a tensor its MatMul accepts as b, and its Slice cuts by rows (the CPU
// backend, quantizations cpu.QuantTypes).
type Quantizer interface {
	Quantize(w kernels.Tensor, typ string) (kernels.Tensor, error)
}

// Float32 names the unquantized weights, for SetQuantization.
const Float32 = "f32"

// Quantization is the type the Runner's products use: Float32, or e.g.
// "q8_0".
func (m *Model) Quantization() string {
	if m.quant == "" {
		return Float32
	}
	return m.quant
}

// SetQuantization makes the Runner's products use weights quantized to typ
// ("q8_0"), or the float32 weights (Float32 or ""). A type the backend has
// no kernels for is an error wrapping ErrUnsupported, and the model keeps
// what it had. Like SetParams it must not run during a computation.
func (m *Model) SetQuantization(typ string) error {
	if typ == "" || typ == Float32 || typ == "fp32" {
		m.quant = ""
		m.dropQuantized()
		return nil
	}
	q, ok := m.b.(Quantizer)
	if !ok {
		return fmt.Errorf("%w: the %s backend holds no quantized weights (asked for %s)", ErrUnsupported, m.b.Name(), typ)
	}
	old := m.quant
	m.quant = typ
	if err := m.quantize(q); err != nil {
		m.quant = old
		if old == "" {
			m.dropQuantized()
		} else if err2 := m.quantize(q); err2 != nil { // cannot happen: it worked before
			panic(err2)
		}
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return nil
}

// QuantizedBytes is the storage of the quantized copies (0 when float32).
func (m *Model) QuantizedBytes() int {
	type sized interface{ Bytes() int }
	n := 0
	add := func(t kernels.Tensor) {
		if s, ok := t.(sized); ok {
			n += s.Bytes()
		}
	}
	if m.quant == "" {
		return 0
	}
	add(m.outQ)
	for l := range m.fused {
		add(m.fused[l].qkv.q)
		add(m.fused[l].gateUp.q)
		add(m.w.Blocks[l].Attn.O.q)
		add(m.w.Blocks[l].MLP.Down.q)
	}
	return n
}

// quantize (re)makes every quantized copy from the float32 weights: the
// stacked q/k/v and gate/up matrices once each, the separate projections
// as row ranges of them (fuse.go), the output projection, o and down.
func (m *Model) quantize(q Quantizer) error {
	b := m.b
	var err error
	qz := func(w kernels.Tensor) kernels.Tensor {
		if err != nil {
			return nil
		}
		var t kernels.Tensor
		t, err = q.Quantize(w, m.quant)
		return t
	}
	c := m.Config
	for l := range m.w.Blocks {
		blk, f := &m.w.Blocks[l], &m.fused[l]
		f.qkv.q = qz(f.qkv.Weight)
		f.gateUp.q = qz(f.gateUp.Weight)
		blk.Attn.O.q = qz(blk.Attn.O.Weight)
		blk.MLP.Down.q = qz(blk.MLP.Down.Weight)
		if err != nil {
			return err
		}
		qd, kv, ff := c.QDim(), c.KVDim(), c.FFNSize
		blk.Attn.Q.q = b.Slice(f.qkv.q, 0, qd)
		blk.Attn.K.q = b.Slice(f.qkv.q, qd, qd+kv)
		blk.Attn.V.q = b.Slice(f.qkv.q, qd+kv, qd+2*kv)
		blk.MLP.Gate.q = b.Slice(f.gateUp.q, 0, ff)
		blk.MLP.Up.q = b.Slice(f.gateUp.q, ff, 2*ff)
	}
	m.outQ = qz(m.w.outputWeight())
	return err
}

func (m *Model) dropQuantized() {
	m.outQ = nil
	for l := range m.w.Blocks {
		blk := &m.w.Blocks[l]
		for _, lin := range []*Linear{blk.Attn.Q, blk.Attn.K, blk.Attn.V, blk.Attn.O, blk.MLP.Gate, blk.MLP.Up, blk.MLP.Down, &m.fused[l].qkv, &m.fused[l].gateUp} {
			lin.q = nil
		}
	}
}

// requantize refreshes the quantized copies after the float32 weights
// changed (SetParams).
func (m *Model) requantize() error {
	if m.quant == "" {
		return nil
	}
	return m.quantize(m.b.(Quantizer))
}

// outputMatrix is what the logits multiply by: the quantized output
// projection when there is one.
func (m *Model) outputMatrix() kernels.Tensor {
	if m.outQ != nil {
		return m.outQ
	}
	return m.w.outputWeight()
}
