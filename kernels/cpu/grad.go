package cpu

import (
	"fmt"
	"math"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/blas"
	"github.com/frognano/frognano/kernels/cpu/simd"
)

// The backward of the decoder's operations (kernels.GradBackend). Products
// go to OpenBLAS like the forward's; the rest is Go split across the cores.
// Sums that reduce many terms (column sums, the norms' dot products,
// softmax denominators, squared norms) are accumulated in float64.

var _ kernels.GradBackend = Backend{}

// MatMulNN sets dst[m,n] = a[m,k]·b[k,n].
func (Backend) MatMulNN(dst, a, b kernels.Tensor) {
	d, x, w := host(dst), host(a), host(b)
	m, k, n := x.Rows(), x.Cols(), w.Cols()
	mustMatrix("MatMulNN", "b", w, k, n)
	mustMatrix("MatMulNN", "dst", d, m, n)
	mustNotOverlap("MatMulNN", d, x, w)
	blas.MatMulNN(d.Data(), x.Data(), w.Data(), m, n, k)
}

// MatMulTN sets dst[n,k] = a[m,n]ᵀ·b[m,k], or adds it to dst.
func (Backend) MatMulTN(dst, a, b kernels.Tensor, accumulate bool) {
	d, x, y := host(dst), host(a), host(b)
	m, n, k := x.Rows(), x.Cols(), y.Cols()
	mustMatrix("MatMulTN", "b", y, m, k)
	mustMatrix("MatMulTN", "dst", d, n, k)
	mustNotOverlap("MatMulTN", d, x, y)
	blas.MatMulTN(d.Data(), x.Data(), y.Data(), m, n, k, accumulate)
}

// SumRows adds the column sums of x[m,n] to dst[n]. Each core takes a range
// of columns and sums it down the rows in float64.
func (Backend) SumRows(dst, x kernels.Tensor) {
	d, xs := host(dst), host(x)
	m, n := xs.Rows(), xs.Cols()
	if d.Len() != n {
		panic(fmt.Sprintf("cpu: SumRows: dst has shape %v for rows of %d", d.Shape(), n))
	}
	dd, xd := d.Data(), xs.Data()
	forRows(n, m, func(lo, hi int) {
		acc := make([]float64, hi-lo)
		for r := range m {
			for j, v := range xd[r*n+lo : r*n+hi] {
				acc[j] += float64(v)
			}
		}
		for j, s := range acc {
			dd[lo+j] = float32(float64(dd[lo+j]) + s)
		}
	})
}

// EmbeddingBackward adds row i of dy to row ids[i] of dtable. The cores
// split the columns, so repeated ids never race and add up in order.
func (Backend) EmbeddingBackward(dtable, dy kernels.Tensor, ids []int32) {
	tab, g := host(dtable), host(dy)
	vocab, dim := tab.Rows(), tab.Cols()
	mustMatrix("EmbeddingBackward", "dy", g, len(ids), dim)
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			panic(fmt.Sprintf("cpu: EmbeddingBackward: id %d at %d outside vocabulary of %d", id, i, vocab))
		}
	}
	td, gd := tab.Data(), g.Data()
	forRows(dim, len(ids), func(lo, hi int) {
		for i, id := range ids {
			dst, src := td[int(id)*dim+lo:int(id)*dim+hi], gd[i*dim+lo:i*dim+hi]
			for j, v := range src {
				dst[j] += v
			}
		}
	})
}

// RMSNormBackward: with r = 1/sqrt(mean(x²)+eps) for a row of n,
//
//	dx_j = r·w_j·dy_j − x_j · r³/n · Σ_i dy_i·w_i·x_i
//	dw_j += Σ_rows dy_j · x_j·r
//
// Each core sums its rows' dw terms in float64; the partial sums are added
// to dweight in a fixed order, so results do not depend on scheduling.
func (Backend) RMSNormBackward(dx, dweight, dy, x, weight kernels.Tensor, eps float32) {
	d, dw, g, xs, w := host(dx), host(dweight), host(dy), host(x), host(weight)
	mustSameLen("RMSNormBackward", xs, g, d)
	cols := xs.Cols()
	if w.Len() != cols || dw.Len() != cols {
		panic(fmt.Sprintf("cpu: RMSNormBackward: weight %v and dweight %v for rows of %d", w.Shape(), dw.Shape(), cols))
	}
	mustNotOverlap("RMSNormBackward", dw, d, g, xs, w)
	mustNotOverlap("RMSNormBackward", d, xs, w)
	wd := w.Data()
	partials := forRowsIndexed(xs.Rows(), 6*cols, func(lo, hi int) []float64 {
		acc := make([]float64, cols)
		for r := lo; r < hi; r++ {
			in, gr, out := xs.Row(r), g.Row(r), d.Row(r)
			var ss, dot float64
			for i, v := range in {
				ss += float64(v) * float64(v)
				dot += float64(gr[i]) * float64(wd[i]) * float64(v)
			}
			rs := 1 / math.Sqrt(ss/float64(cols)+float64(eps))
			c := dot * rs * rs * rs / float64(cols)
			for i, v := range in {
				gv := float64(gr[i])
				acc[i] += gv * float64(float32(float64(v)*rs))
				out[i] = float32(rs*float64(wd[i])*gv - float64(v)*c)
			}
		}
		return acc
	})
	dwd := dw.Data()
	for j := range dwd {
		s := float64(dwd[j])
		for _, p := range partials {
			s += p[j]
		}
		dwd[j] = float32(s)
	}
}

// RoPEBackward rotates each head of row i back by the angles RoPE turned it
// by: the transpose of the rotation, with the same float32 angles.
func (Backend) RoPEBackward(dx, dy kernels.Tensor, pos []int32, headDim int, theta float32) {
	d, g := host(dx), host(dy)
	mustSameLen("RoPEBackward", d, g)
	cols := g.Cols()
	if headDim <= 0 || headDim%2 != 0 || cols%headDim != 0 {
		panic(fmt.Sprintf("cpu: RoPEBackward: head dimension %d for rows of %d", headDim, cols))
	}
	if len(pos) != g.Rows() {
		panic(fmt.Sprintf("cpu: RoPEBackward: %d positions for %d rows", len(pos), g.Rows()))
	}
	half := headDim / 2
	invFreq := make([]float32, half)
	for j := range invFreq {
		invFreq[j] = float32(1 / math.Pow(float64(theta), float64(2*j)/float64(headDim)))
	}
	forRows(len(pos), 2*costExp*half+3*cols, func(lo, hi int) {
		cos, sin := make([]float32, half), make([]float32, half)
		for r := lo; r < hi; r++ {
			if pos[r] < 0 {
				panic(fmt.Sprintf("cpu: RoPEBackward: negative position %d", pos[r]))
			}
			p := float32(pos[r])
			for j, f := range invFreq {
				s, c := math.Sincos(float64(p * f))
				sin[j], cos[j] = float32(s), float32(c)
			}
			in, out := g.Row(r), d.Row(r)
			for h := 0; h < cols; h += headDim {
				g1, g2 := in[h:h+half], in[h+half:h+headDim]
				x1, x2 := out[h:h+half], out[h+half:h+headDim]
				for j := range half {
					a, b := g1[j], g2[j]
					x1[j] = a*cos[j] + b*sin[j]
					x2[j] = b*cos[j] - a*sin[j]
				}
			}
		}
	})
}

// SwiGLUBackward: with s = sigmoid(gate), dup = dy·gate·s and
// dgate = dy·up·s·(1 + gate·(1−s)). The sigmoid is 1/(1+e) or e/(1+e) with
// e = exp(−|gate|) ≤ 1, the choice made on the sign bit without a branch.
// Every element is read before it is written, so any of the outputs may
// share memory with an input.
func (Backend) SwiGLUBackward(dgate, dup, dy, gate, up kernels.Tensor) {
	dg, du, g, gt, u := host(dgate), host(dup), host(dy), host(gate), host(up)
	mustSameLen("SwiGLUBackward", g, gt, u, dg, du)
	dgd, dud, gd, gtd, ud := dg.Data(), du.Data(), g.Data(), gt.Data(), u.Data()
	forRows(len(gd), costExp, func(lo, hi int) {
		dgd, dud, gd, gtd, ud := dgd[lo:hi], dud[lo:hi], gd[lo:hi], gtd[lo:hi:hi], ud[lo:hi]
		dgd, dud, ud = dgd[:len(gd)], dud[:len(gd)], ud[:len(gd)]
		gtd = gtd[:len(gd)]
		if simd.On() {
			simd.SwiGLUBackward(dgd, dud, gd, gtd, ud)
			return
		}
		for i, gv := range gd {
			x, y := gtd[i], ud[i]
			bits := math.Float32bits(x)
			a := math.Float32frombits(bits | 1<<31) // −|x|
			if a < -87.33654 {
				a = -87.33654 // e^a would not be normal; sigmoid is 0 or 1 to float32 anyway
			}
			e := expNeg(a)
			neg := uint32(int32(bits) >> 31) // all ones when x < 0
			num := math.Float32frombits(math.Float32bits(e)&neg | math.Float32bits(1)&^neg)
			s := num / (1 + e)
			dgd[i] = gv * y * s * (1 + x*(1-s))
			dud[i] = gv * x * s
		}
	})
}

// Axpy sets dst += alpha·x.
func (Backend) Axpy(dst, x kernels.Tensor, alpha float32) {
	d, xs := host(dst), host(x)
	mustSameLen("Axpy", d, xs)
	dd, xd := d.Data(), xs.Data()
	forRows(len(dd), 2, func(lo, hi int) {
		dd, xd := dd[lo:hi], xd[lo:hi]
		for i := range dd {
			dd[i] += alpha * xd[i]
		}
	})
}

// Scale sets t *= alpha.
func (Backend) Scale(t kernels.Tensor, alpha float32) {
	td := host(t).Data()
	forRows(len(td), 1, func(lo, hi int) {
		for i := range td[lo:hi] {
			td[lo+i] *= alpha
		}
	})
}

// Fill sets every element of t to v.
func (Backend) Fill(t kernels.Tensor, v float32) {
	td := host(t).Data()
	forRows(len(td), 1, func(lo, hi int) {
		x := td[lo:hi]
		if v == 0 && !math.Signbit(float64(v)) {
			clear(x)
			return
		}
		for i := range x {
			x[i] = v
		}
	})
}

// SumSquares returns Σ t² in float64. The elements are cut into blocks of
// sumBlock whose sums are added in block order, so the result is the same
// however many cores share the work. NaN and Inf carry through the sum.
func (Backend) SumSquares(t kernels.Tensor) float64 {
	td := host(t).Data()
	const sumBlock = 1 << 14
	blocks := (len(td) + sumBlock - 1) / sumBlock
	sums := make([]float64, blocks)
	forRows(blocks, 2*sumBlock, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			sums[b] = sumSquares(td[b*sumBlock : min((b+1)*sumBlock, len(td))])
		}
	})
	var s float64
	for _, x := range sums {
		s += x
	}
	return s
}

func sumSquares(x []float32) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		a, b, c, d := float64(x[i]), float64(x[i+1]), float64(x[i+2]), float64(x[i+3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(x); i++ {
		a := float64(x[i])
		s0 += a * a
	}
	return (s0 + s1) + (s2 + s3)
}

// forRowsIndexed is forRows for a reduction: fn returns each range's
// partial result, and the results come back in range order.
func forRowsIndexed[T any](n, costPerRow int, fn func(lo, hi int) T) []T {
	w := workers(n, costPerRow)
	step := (max(n, 1) + w - 1) / w
	out := make([]T, (max(n, 1)+step-1)/step)
	if len(out) == 1 {
		out[0] = fn(0, n)
		return out
	}
	blas.Run(len(out), func(i int) { out[i] = fn(i*step, min((i+1)*step, n)) })
	return out
}
