//go:build !cuda

package cuda

// SetMatMulPrecision mirrors the CUDA build's; there is no device here, and
// New never returns a Backend to call it on.
func (*Backend) SetMatMulPrecision(Precision) {}

// MatMulPrecision mirrors the CUDA build's.
func (*Backend) MatMulPrecision() Precision { return F32 }
