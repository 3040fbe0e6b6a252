package cpu

import (
	"fmt"
	"math"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/blas"
	"github.com/frognano/frognano/kernels/cpu/simd"
)

// attnBlock is how many query rows one work item takes: its scores are
// attnBlock × s floats.
const attnBlock = 64

// Attention is causal grouped-query attention of the t newest positions (q)
// over all s positions so far (k, v).
//
// A work item is one head for a block of up to attnBlock query rows: the
// scores Q·Kᵀ of that head's columns against its kv head's columns of the
// cache, one strided matrix product; the causal softmax of each row
// (package simd's vector kernel, or Go);
// then P·V, another product, written straight into dst's columns. Items are
// dealt round-robin to the cores, as later blocks see more keys.
func (Backend) Attention(dst, q, k, v kernels.Tensor, nHeads, nKVHeads int) {
	d, qs, ks, vs := host(dst), host(q), host(k), host(v)
	t, s := qs.Rows(), ks.Rows()
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || qs.Cols()%nHeads != 0 {
		panic(fmt.Sprintf("cpu: Attention: %d heads, %d kv heads for query rows of %d", nHeads, nKVHeads, qs.Cols()))
	}
	hd := qs.Cols() / nHeads
	qc, kc := nHeads*hd, nKVHeads*hd
	mustMatrix("Attention", "k", ks, s, kc)
	mustMatrix("Attention", "v", vs, s, kc)
	mustMatrix("Attention", "dst", d, t, qc)
	if t > s {
		panic(fmt.Sprintf("cpu: Attention: %d queries but only %d keys", t, s))
	}
	mustNotOverlap("Attention", d, qs, ks, vs)
	if t == 0 || hd == 0 {
		return
	}
	group := nHeads / nKVHeads
	scale := 1 / math.Sqrt(float64(hd))
	qd, kd, vd, dd := qs.Data(), ks.Data(), vs.Data(), d.Data()
	blocks := (t + attnBlock - 1) / attnBlock
	items := blocks * nHeads
	rowsPerItem := min(t, attnBlock)
	forStrided(items, rowsPerItem*s*(4*hd+costExp), func(w, nw int) {
		scores := make([]float32, rowsPerItem*s)
		for it := w; it < items; it += nw {
			blk, h := it/nHeads, it%nHeads
			i0 := blk * attnBlock
			rows := min(attnBlock, t-i0)
			keys := s - t + i0 + rows // keys the block's last row sees
			kvOff := (h / group) * hd
			p := scores[:rows*keys]
			blas.Gemm(true, rows, keys, hd, qd[i0*qc+h*hd:], qc, kd[kvOff:], kc, p, keys)
			if simd.On() {
				simd.SoftmaxCausal(p, rows, keys, s-t+i0+1, float32(scale))
			} else {
				for r := range rows {
					causalSoftmax(p[r*keys:(r+1)*keys], s-t+i0+r+1, scale)
				}
			}
			blas.Gemm(false, rows, hd, keys, p, keys, vd[kvOff:], kc, dd[i0*qc+h*hd:], qc)
		}
	})
}

// causalSoftmax turns the first n raw scores of row into probabilities of
// scale·score and zeroes the rest, the keys this query must not see. The
// exponentials are float32 (exp32); their sum is float64.
func causalSoftmax(row []float32, n int, scale float64) {
	mx := float32(math.Inf(-1))
	for _, x := range row[:n] {
		mx = max(mx, x)
	}
	sc := float32(scale)
	m := mx * sc
	var sum float64
	for j, x := range row[:n] {
		e := exp32(x*sc - m)
		row[j] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for j := range row[:n] {
		row[j] *= inv
	}
	clear(row[n:])
}
