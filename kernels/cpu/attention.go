package cpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu/blas"
	"github.com/frognano/frognano/kernels/cpu/simd"
	"github.com/frognano/frognano/kernels/tensor"
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
	attend("Attention", dst, q, nil, nil, k, v, nHeads, nKVHeads)
}

// AttentionPrefix is Attention over keys and values held in two places:
// the nb rows of kb and vb, a prefix every query row sees (a prompt that
// another sequence's cache holds), then the s rows of k and v, causal for
// the t query rows as in Attention. It equals Attention over the
// concatenations, up to the products' summation order: the scores of the
// two parts are computed apart and softmaxed as one row, and P·V sums the
// prefix's product and then adds the rest's.
//
// Sequences that share a prefix read the same memory: attended one after
// another, the later ones find its keys and values in the core's cache.
func (Backend) AttentionPrefix(dst, q, kb, vb, k, v kernels.Tensor, nHeads, nKVHeads int) {
	attend("AttentionPrefix", dst, q, host(kb), host(vb), k, v, nHeads, nKVHeads)
}

func attend(op string, dst, q kernels.Tensor, kbs, vbs *tensor.Tensor, k, v kernels.Tensor, nHeads, nKVHeads int) {
	d, qs, ks, vs := host(dst), host(q), host(k), host(v)
	t, s := qs.Rows(), ks.Rows()
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || qs.Cols()%nHeads != 0 {
		panic(fmt.Sprintf("cpu: %s: %d heads, %d kv heads for query rows of %d", op, nHeads, nKVHeads, qs.Cols()))
	}
	hd := qs.Cols() / nHeads
	qc, kc := nHeads*hd, nKVHeads*hd
	mustMatrix(op, "k", ks, s, kc)
	mustMatrix(op, "v", vs, s, kc)
	mustMatrix(op, "dst", d, t, qc)
	if t > s {
		panic(fmt.Sprintf("cpu: %s: %d queries but only %d keys", op, t, s))
	}
	nb := 0
	var kbd, vbd []float32
	if kbs != nil {
		nb = kbs.Rows()
		mustMatrix(op, "kb", kbs, nb, kc)
		mustMatrix(op, "vb", vbs, nb, kc)
		mustNotOverlap(op, d, qs, ks, vs, kbs, vbs)
		kbd, vbd = kbs.Data(), vbs.Data()
	} else {
		mustNotOverlap(op, d, qs, ks, vs)
	}
	if t == 0 || hd == 0 {
		return
	}
	group := nHeads / nKVHeads
	scale := 1 / math.Sqrt(float64(hd))
	qd, kd, vd, dd := qs.Data(), ks.Data(), vs.Data(), d.Data()
	blocks := (t + attnBlock - 1) / attnBlock
	items := blocks * nHeads
	rowsPerItem := min(t, attnBlock)
	forStrided(items, rowsPerItem*(nb+s)*(4*hd+costExp), func(w, nw int) {
		scores := make([]float32, rowsPerItem*(nb+s))
		for it := w; it < items; it += nw {
			blk, h := it/nHeads, it%nHeads
			i0 := blk * attnBlock
			rows := min(attnBlock, t-i0)
			own := s - t + i0 + rows // own keys the block's last row sees
			keys := nb + own
			kvOff := (h / group) * hd
			p := scores[:rows*keys]
			qh, dh := qd[i0*qc+h*hd:], dd[i0*qc+h*hd:]
			if nb > 0 {
				blas.Gemm(true, rows, nb, hd, qh, qc, kbd[kvOff:], kc, p, keys)
			}
			blas.Gemm(true, rows, own, hd, qh, qc, kd[kvOff:], kc, p[nb:], keys)
			if simd.On() {
				simd.SoftmaxCausal(p, rows, keys, nb+s-t+i0+1, float32(scale))
			} else {
				for r := range rows {
					causalSoftmax(p[r*keys:(r+1)*keys], nb+s-t+i0+r+1, scale)
				}
			}
			if nb > 0 {
				blas.Gemm(false, rows, hd, nb, p, keys, vbd[kvOff:], kc, dh, qc)
				blas.GemmFull(false, false, true, rows, hd, own, p[nb:], keys, vd[kvOff:], kc, dh, qc)
			} else {
				blas.Gemm(false, rows, hd, keys, p, keys, vd[kvOff:], kc, dh, qc)
			}
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

// groupThreads is the cores AttentionPrefixGroup slices its members for
// (a variable so that tests can ask for more than the machine has).
var groupThreads = blas.Threads

// memberParts is how many parts AttentionPrefixGroup slices its m members
// into, so that its kvHeads·parts items keep every one of the threads busy:
// the fewest parts that make the items a multiple of the threads (3 kv
// heads on 2 cores: 2 parts, 6 items, rather than 3 items, one core idle
// a third of the time), else enough for one item per thread. Each part
// reads the prefix again, from the cache the cores share.
func memberParts(m, kvHeads, threads int) int {
	for p := 1; p <= min(m, threads); p++ {
		if kvHeads*p%threads == 0 {
			return p
		}
	}
	return max(1, min(m, (threads+kvHeads-1)/kvHeads))
}

// AttentionPrefixGroup is AttentionPrefix for several one-row queries that
// share the prefix kb, vb (the decoding steps of a group's sequences): it
// equals calling AttentionPrefix(dst[i], q[i], kb, vb, k[i], v[i], …) for
// each i, up to the products' summation order.
//
// A work item is one kv head for a slice of the members: their query heads
// that read it, gathered as the rows of one matrix, take the prefix's
// scores in one product (Q·Kbᵀ) and its values in another (P·Vb), so the
// prefix is read once for them all rather than once per head and member;
// each member's own keys and values add theirs. Members are sliced so
// that every core has items (nKVHeads may be fewer than the cores).
func (Backend) AttentionPrefixGroup(dst, q []kernels.Tensor, kb, vb kernels.Tensor, k, v []kernels.Tensor, nHeads, nKVHeads int) {
	const op = "AttentionPrefixGroup"
	m := len(q)
	if len(dst) != m || len(k) != m || len(v) != m {
		panic(fmt.Sprintf("cpu: %s: %d destinations, %d queries, %d keys, %d values", op, len(dst), m, len(k), len(v)))
	}
	if m == 0 {
		return
	}
	kbs, vbs := host(kb), host(vb)
	nb := kbs.Rows()
	if nHeads <= 0 || nKVHeads <= 0 || nHeads%nKVHeads != 0 || host(q[0]).Cols()%nHeads != 0 {
		panic(fmt.Sprintf("cpu: %s: %d heads, %d kv heads for query rows of %d", op, nHeads, nKVHeads, host(q[0]).Cols()))
	}
	hd := host(q[0]).Cols() / nHeads
	qc, kc := nHeads*hd, nKVHeads*hd
	mustMatrix(op, "kb", kbs, nb, kc)
	mustMatrix(op, "vb", vbs, nb, kc)
	ds, qs, ks, vs := make([][]float32, m), make([][]float32, m), make([][]float32, m), make([][]float32, m)
	own := make([]int, m)
	for i := range m {
		di, qi, ki, vi := host(dst[i]), host(q[i]), host(k[i]), host(v[i])
		own[i] = ki.Rows()
		mustMatrix(op, "q", qi, 1, qc)
		mustMatrix(op, "dst", di, 1, qc)
		mustMatrix(op, "k", ki, own[i], kc)
		mustMatrix(op, "v", vi, own[i], kc)
		if own[i] < 1 {
			panic(fmt.Sprintf("cpu: %s: member %d has no key of its own for its query", op, i))
		}
		mustNotOverlap(op, di, qi, ki, vi, kbs, vbs)
		for j := range i {
			mustNotOverlap(op, di, host(dst[j]))
		}
		ds[i], qs[i], ks[i], vs[i] = di.Data(), qi.Data(), ki.Data(), vi.Data()
	}
	if hd == 0 {
		return
	}
	decodeGroup(ds, qs, ks, vs, own, kbs.Data(), vbs.Data(), nb, nHeads, nKVHeads, hd)
}

// decodeGroup is AttentionPrefixGroup after validation: member i's one
// query row qs[i] over the nb rows of kbd, vbd and its own[i] rows of
// ks[i], vs[i], into ds[i]; rows are nHeads·hd (queries, outputs) and
// nKVHeads·hd (keys, values) long.
func decodeGroup(ds, qs, ks, vs [][]float32, own []int, kbd, vbd []float32, nb, nHeads, nKVHeads, hd int) {
	m := len(qs)
	kc := nKVHeads * hd
	group := nHeads / nKVHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	ld := nb + slices.Max(own)
	parts := memberParts(m, nKVHeads, groupThreads())
	per := (m + parts - 1) / parts
	parts = (m + per - 1) / per
	items := nKVHeads * parts
	forStrided(items, per*group*ld*(4*hd+costExp), func(w, nw int) {
		rowsMax := per * group
		qbuf := make([]float32, rowsMax*hd)
		obuf := make([]float32, rowsMax*hd)
		p := make([]float32, rowsMax*ld)
		for it := w; it < items; it += nw {
			g, sl := it/parts, it%parts
			lo, hi := sl*per, min((sl+1)*per, m)
			rows := (hi - lo) * group
			kvOff := g * hd
			for i := lo; i < hi; i++ {
				r := (i - lo) * group
				copy(qbuf[r*hd:(r+group)*hd], qs[i][g*group*hd:(g+1)*group*hd])
			}
			if nb > 0 {
				scores(p, ld, qbuf, hd, rows, kbd[kvOff:], kc, nb, hd)
			}
			for i := lo; i < hi; i++ {
				r := (i - lo) * group
				scores(p[r*ld+nb:], ld, qbuf[r*hd:], hd, group, ks[i][kvOff:], kc, own[i], hd)
				for j := r; j < r+group; j++ {
					row := p[j*ld : (j+1)*ld]
					if simd.On() {
						simd.SoftmaxCausal(row, 1, ld, nb+own[i], scale)
					} else {
						causalSoftmax(row, nb+own[i], float64(scale))
					}
				}
			}
			if nb > 0 {
				weigh(obuf, hd, p, ld, rows, vbd[kvOff:], kc, nb, hd, false)
			}
			for i := lo; i < hi; i++ {
				r := (i - lo) * group
				weigh(obuf[r*hd:], hd, p[r*ld+nb:], ld, group, vs[i][kvOff:], kc, own[i], hd, nb > 0)
				copy(ds[i][g*group*hd:(g+1)*group*hd], obuf[r*hd:(r+group)*hd])
			}
		}
	})
}

// scores sets the rows×n matrix p (rows ldp apart) to q·kᵀ: q is rows×hd,
// k is n×hd, with their leading dimensions.
func scores(p []float32, ldp int, q []float32, ldq, rows int, k []float32, ldk, n, hd int) {
	blas.Gemm(true, rows, n, hd, q, ldq, k, ldk, p, ldp)
}

// weigh sets the rows×hd matrix o to p·v, or adds it to o with acc: p is
// rows×n, v is n×hd.
func weigh(o []float32, ldo int, p []float32, ldp, rows int, v []float32, ldv, n, hd int, acc bool) {
	blas.GemmFull(false, false, acc, rows, hd, n, p, ldp, v, ldv, o, ldo)
}
