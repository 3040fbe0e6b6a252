package cuda

import "strconv"

// Precision is the arithmetic of the CUDA backend's matrix products
// (MatMul, MatMulNN, MatMulTN); see Backend.SetMatMulPrecision. It is
// declared in every build so that code choosing it compiles without the
// cuda tag.
type Precision int

const (
	// F32 multiplies and accumulates in float32, the default: results agree
	// with the CPU twin to float32 rounding.
	F32 Precision = iota
	// BF16 rounds both inputs of each product to bfloat16 (to nearest, ties
	// to even) and multiplies them on tensor cores, accumulating in
	// float32: the mixed precision of training on a GPU (PyTorch autocast),
	// with float32 master weights and every other operation in float32.
	// Products then carry bfloat16's 8-bit mantissa, about 4e-3 relative
	// error per input.
	BF16
)

func (p Precision) String() string {
	switch p {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	}
	return "Precision(" + strconv.Itoa(int(p)) + ")"
}
