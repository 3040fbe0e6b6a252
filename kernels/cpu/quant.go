package cpu

import (
	"errors"
	"fmt"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/blas"
	"github.com/frognano/frognano/kernels/gguf"
)

// ErrQuantType is a quantization the CPU kernels have no dot product for.
var ErrQuantType = errors.New("cpu: no kernels for this quantization")

// QuantTypes are the quantizations Quantize makes and MatMul multiplies by:
// Q8_0 weights times activations quantized to int8 per block as llama.cpp
// does ("q8_0", the fastest), or times float32 activations ("q8_0-f32":
// about half the error, and the same result whatever the batch, at some
// speed; docs/quantized-sampling.md has both measured).
var QuantTypes = []string{"q8_0", "q8_0-f32"}

// QuantTensor is a weight matrix [rows, cols] held quantized, in the
// block layout of the GGUF tensor type it names (Q8_0: ggml's block_q8_0,
// 34 bytes per 32 values), for MatMul's b. It is read-only: made by
// Quantize, sliced by rows with Slice, and multiplied by, nothing else.
type QuantTensor struct {
	rows, cols int
	typ        gguf.TensorType
	f32act     bool   // multiply float32 activations (q8_0-f32)
	data       []byte // rows × RowBytes(cols)
}

var _ kernels.Tensor = (*QuantTensor)(nil)

// Shape is [rows, cols], the float32 matrix's.
func (q *QuantTensor) Shape() []int { return []int{q.rows, q.cols} }

// Type names the quantization ("q8_0", "q8_0-f32").
func (q *QuantTensor) Type() string {
	if q.f32act {
		return quantName(q.typ) + "-f32"
	}
	return quantName(q.typ)
}

// Bytes is the storage the matrix takes.
func (q *QuantTensor) Bytes() int { return len(q.data) }

func quantName(t gguf.TensorType) string {
	if t == gguf.Q8_0 {
		return "q8_0"
	}
	return t.String()
}

// Quantize makes a quantized copy of the float32 matrix w (its rows along
// the last dimension) for MatMul, with ggml's reference quantizer: typ one
// of QuantTypes. Another type, or a row length that is not a whole number
// of blocks, is an error wrapping ErrQuantType; the caller keeps w.
func (Backend) Quantize(w kernels.Tensor, typ string) (kernels.Tensor, error) {
	x := host(w)
	if typ != "q8_0" && typ != "q8_0-f32" {
		return nil, fmt.Errorf("%w: %q (the CPU kernels have %v)", ErrQuantType, typ, QuantTypes)
	}
	rows, cols := x.Rows(), x.Cols()
	if cols%blas.Q8Block != 0 {
		return nil, fmt.Errorf("%w: q8_0 rows of %d values are not whole blocks of %d", ErrQuantType, cols, blas.Q8Block)
	}
	// Rows are whole blocks, so row ranges quantize apart, one per core.
	rb := gguf.Q8_0.RowBytes(cols)
	data := make([]byte, rows*rb)
	src := x.Data()
	forRows(rows, 4*cols, func(lo, hi int) {
		q, err := gguf.Quantize(gguf.Q8_0, src[lo*cols:hi*cols])
		if err != nil {
			panic(err) // whole blocks: cannot fail
		}
		copy(data[lo*rb:hi*rb], q)
	})
	return &QuantTensor{rows: rows, cols: cols, typ: gguf.Q8_0, f32act: typ == "q8_0-f32", data: data}, nil
}

// Dequantize returns q's values as float32, row-major.
func (q *QuantTensor) Dequantize() []float32 {
	out := make([]float32, q.rows*q.cols)
	if err := gguf.Dequantize(q.typ, q.data, out); err != nil {
		panic(err) // made by Quantize: the sizes fit
	}
	return out
}

// slice is rows [lo, hi), sharing storage.
func (q *QuantTensor) slice(lo, hi int) *QuantTensor {
	if lo < 0 || hi < lo || hi > q.rows {
		panic(fmt.Sprintf("cpu: Slice [%d, %d) of a quantized [%d, %d]", lo, hi, q.rows, q.cols))
	}
	rb := q.typ.RowBytes(q.cols)
	return &QuantTensor{rows: hi - lo, cols: q.cols, typ: q.typ, f32act: q.f32act, data: q.data[lo*rb : hi*rb : hi*rb]}
}

// matMulQuant is MatMul with a quantized b.
func matMulQuant(dst, a kernels.Tensor, w *QuantTensor) {
	d, x := host(dst), host(a)
	m, k, n := x.Rows(), x.Cols(), w.rows
	if w.cols != k {
		panic(fmt.Sprintf("cpu: MatMul: quantized b has shape [%d, %d], want [%d, %d]", w.rows, w.cols, n, k))
	}
	mustMatrix("MatMul", "dst", d, m, n)
	if w.f32act {
		blas.MatMulTQ8F32(d.Data(), x.Data(), w.data, m, n, k)
		return
	}
	blas.MatMulTQ8(d.Data(), x.Data(), w.data, m, n, k)
}
