package cpu

import (
	"fmt"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/blas"
)

// MatMul sets dst[m,n] = a[m,k]·b[n,k]ᵀ; b may be a QuantTensor.
func (Backend) MatMul(dst, a, b kernels.Tensor) {
	if q, ok := b.(*QuantTensor); ok {
		matMulQuant(dst, a, q)
		return
	}
	d, x, w := host(dst), host(a), host(b)
	m, k, n := x.Rows(), x.Cols(), w.Rows()
	mustMatrix("MatMul", "b", w, n, k)
	mustMatrix("MatMul", "dst", d, m, n)
	mustNotOverlap("MatMul", d, x, w)
	blas.MatMulT(d.Data(), x.Data(), w.Data(), m, n, k)
}

// Embedding gathers rows of table.
func (Backend) Embedding(dst, table kernels.Tensor, ids []int32) {
	d, tab := host(dst), host(table)
	vocab, dim := tab.Rows(), tab.Cols()
	mustMatrix("Embedding", "dst", d, len(ids), dim)
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			panic(fmt.Sprintf("cpu: Embedding: id %d at %d outside vocabulary of %d", id, i, vocab))
		}
		copy(d.Row(i), tab.Row(int(id)))
	}
}
