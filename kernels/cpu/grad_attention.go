package cpu

import (
	"fmt"
	"math"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/blas"
	"github.com/frognano/frognano/kernels/cpu/simd"
)

// attnGradBlock is how many query rows one work item of AttentionBackward
// takes.
const attnGradBlock = 64

// AttentionBackward is the backward of a full causal pass of grouped-query
// attention. With S = Q·Kᵀ/sqrt(d) and P its causal softmax for one head,
//
//	dP = dY·Vᵀ,  dS = P ⊙ (dP − rowsum(P ⊙ dP)) / sqrt(d)
//	dQ = dS·K,   dK += dSᵀ·Q,   dV += Pᵀ·dY
//
// where rowsum(P ⊙ dP) equals rowsum(dY ⊙ Y), so the forward output is not
// needed. A work item is one query head for a block of attnGradBlock query
// rows, against the keys up to its last row: two strided products
// recompute its P and dP, the softmax and dS are package simd's vector
// kernel (or Go), and three more
// products give its dQ rows and its contributions to dK and dV. Items are
// dealt round-robin to the cores; each core adds its dK and dV terms into
// its own buffers (the first core straight into dk and dv), summed at the
// end, since the heads of a group and the blocks of a head all add to the
// same rows.
func (Backend) AttentionBackward(dq, dk, dv, dy, q, k, v kernels.Tensor, nHeads, nKVHeads int) {
	dQ, dK, dV, g, qs, ks, vs := host(dq), host(dk), host(dv), host(dy), host(q), host(k), host(v)
	t := qs.Rows()
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || qs.Cols()%nHeads != 0 {
		panic(fmt.Sprintf("cpu: AttentionBackward: %d heads, %d kv heads for query rows of %d", nHeads, nKVHeads, qs.Cols()))
	}
	hd := qs.Cols() / nHeads
	qc, kc := nHeads*hd, nKVHeads*hd
	// A full pass: as many keys as queries.
	mustMatrix("AttentionBackward", "k", ks, t, kc)
	mustMatrix("AttentionBackward", "v", vs, t, kc)
	mustMatrix("AttentionBackward", "dy", g, t, qc)
	mustMatrix("AttentionBackward", "dq", dQ, t, qc)
	mustMatrix("AttentionBackward", "dk", dK, t, kc)
	mustMatrix("AttentionBackward", "dv", dV, t, kc)
	mustNotOverlap("AttentionBackward", dQ, g, qs, ks, vs, dK, dV)
	mustNotOverlap("AttentionBackward", dK, g, qs, ks, vs, dV)
	mustNotOverlap("AttentionBackward", dV, g, qs, ks, vs)
	clear(dK.Data())
	clear(dV.Data())
	if t == 0 || hd == 0 {
		clear(dQ.Data())
		return
	}
	group := nHeads / nKVHeads
	scale := 1 / math.Sqrt(float64(hd))
	qd, kd, vd, gd, dqd := qs.Data(), ks.Data(), vs.Data(), g.Data(), dQ.Data()
	blocks := (t + attnGradBlock - 1) / attnGradBlock
	items := blocks * nHeads
	rowsPerItem := min(t, attnGradBlock)
	// The items' cost grows with the block index; count the mean block.
	costPerItem := rowsPerItem * (t/2 + rowsPerItem) * (10*hd + costExp)
	nw := workers(items, costPerItem)
	dks, dvs := make([][]float32, nw), make([][]float32, nw)
	dks[0], dvs[0] = dK.Data(), dV.Data()
	for w := 1; w < nw; w++ {
		dks[w], dvs[w] = make([]float32, t*kc), make([]float32, t*kc)
	}
	forStrided(items, costPerItem, func(w, nw int) {
		p := make([]float32, rowsPerItem*t)
		dp := make([]float32, rowsPerItem*t)
		dkw, dvw := dks[w], dvs[w]
		for it := w; it < items; it += nw {
			blk, h := it/nHeads, it%nHeads
			i0 := blk * attnGradBlock
			rows := min(attnGradBlock, t-i0)
			keys := i0 + rows
			kvOff := (h / group) * hd
			qOff := i0*qc + h*hd
			pb, dpb := p[:rows*keys], dp[:rows*keys]
			blas.Gemm(true, rows, keys, hd, qd[qOff:], qc, kd[kvOff:], kc, pb, keys)
			blas.Gemm(true, rows, keys, hd, gd[qOff:], qc, vd[kvOff:], kc, dpb, keys)
			if simd.On() {
				simd.SoftmaxCausalBackward(pb, dpb, rows, keys, i0+1, float32(scale))
			} else {
				for r := range rows {
					softmaxBackwardRow(pb[r*keys:(r+1)*keys], dpb[r*keys:(r+1)*keys], i0+r+1, scale)
				}
			}
			blas.Gemm(false, rows, hd, keys, dpb, keys, kd[kvOff:], kc, dqd[qOff:], qc)
			blas.GemmFull(true, false, true, keys, hd, rows, dpb, keys, qd[qOff:], qc, dkw[kvOff:], kc)
			blas.GemmFull(true, false, true, keys, hd, rows, pb, keys, gd[qOff:], qc, dvw[kvOff:], kc)
		}
	})
	for w := 1; w < nw; w++ {
		addInto(dK.Data(), dks[w])
		addInto(dV.Data(), dvs[w])
	}
}

// softmaxBackwardRow takes one query's raw scores s and the gradient dp of
// its probabilities, and leaves in s the causal softmax of scale·s over the
// first n keys and in dp the gradient of the raw scores,
// scale·p_j·(dp_j − Σ_i p_i·dp_i); both are zero from key n on. The sums
// are float64.
func softmaxBackwardRow(s, dp []float32, n int, scale float64) {
	sr, dr := s[:n], dp[:n:n]
	dr = dr[:len(sr)]
	mx := rowMax(sr)
	sc := float32(scale)
	inv := float32(1 / expShifted(sr, sr, sc, mx*sc))
	var d0, d1 float64
	for j, e := range sr {
		p := e * inv
		sr[j] = p
		d0, d1 = d1, d0+float64(p)*float64(dr[j])
	}
	d := float32(d0 + d1)
	for j, p := range sr {
		dr[j] = sc * p * (dr[j] - d)
	}
	clear(s[n:])
	clear(dp[n:])
}

// addInto sets dst += x, split across the cores.
func addInto(dst, x []float32) {
	forRows(len(dst), 1, func(lo, hi int) {
		d, s := dst[lo:hi], x[lo:hi]
		for i := range d {
			d[i] += s[i]
		}
	})
}
