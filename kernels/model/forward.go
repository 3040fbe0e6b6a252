package model

import (
	"fmt"
	"slices"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/tensor"
)

// Runner runs batches through a Model. It owns the activation buffers, sized
// for the largest batch so far and reused from call to call, so that a
// decoding loop allocates nothing but a few tensor views per step. A Runner
// is not safe for concurrent use; make one per generating goroutine (they
// share the Model's weights).
type Runner struct {
	m *Model
	b kernels.Backend

	rows                                 int            // capacity, in token rows, of the buffers below
	x, h, q, k, v, att, o, gate, up, out kernels.Tensor // [rows, …]
	qkv, gateUp                          kernels.Tensor // [fuseRows, …], outputs of the fused products
	outRows                              int
	logits                               kernels.Tensor // [outRows, vocab]
	host                                 []float32      // logits copied back from a device backend

	// Views of the buffers for the current batch layout, rebuilt only when
	// the layout changes (a decoding loop keeps the same one).
	layout   []int // tokens per sequence
	all      bool
	cur      views
	ids, pos []int32

	// groups are the batch's decoding sequences that read one cache's
	// prefix (prefixGroups), attended together; grouped marks them.
	groups  []prefixGroup
	grouped []bool
	gDst    []kernels.Tensor // scratch for one group's call
	gQ      []kernels.Tensor
	gK      []kernels.Tensor
	gV      []kernels.Tensor
}

// prefixGroup is sequences (indices into the batch) decoding one token
// each over the first nb positions of root: caches that share them
// (SharePrefix) and root itself, if it decodes in the batch.
type prefixGroup struct {
	root    *Cache
	nb      int
	members []int
}

// prefixGroups finds the batch's groups of at least two decoding
// sequences over one shared prefix, on a backend with
// kernels.PrefixAttention.
func (r *Runner) prefixGroups(caches []*Cache, tokens [][]int32) {
	r.groups = r.groups[:0]
	r.grouped = slices.Grow(r.grouped[:0], len(caches))[:len(caches)]
	clear(r.grouped)
	if !r.m.CanShare() {
		return
	}
	for i, c := range caches {
		if len(tokens[i]) != 1 || c.nb == 0 {
			continue
		}
		g := slices.IndexFunc(r.groups, func(g prefixGroup) bool { return g.root == c.base && g.nb == c.nb })
		if g < 0 {
			g = len(r.groups)
			if g < cap(r.groups) {
				r.groups = r.groups[:g+1] // reuses the element's members
			} else {
				r.groups = append(r.groups, prefixGroup{})
			}
			r.groups[g].root, r.groups[g].nb, r.groups[g].members = c.base, c.nb, r.groups[g].members[:0]
		}
		r.groups[g].members = append(r.groups[g].members, i)
	}
	// A root decoding in the batch joins the first group over its
	// prefix: its own positions from nb on are its part.
	for i, c := range caches {
		if len(tokens[i]) != 1 || c.nb != 0 {
			continue
		}
		for g := range r.groups {
			if r.groups[g].root == c && c.n >= r.groups[g].nb {
				r.groups[g].members = append(r.groups[g].members, i)
				break
			}
		}
	}
	kept := 0
	for g := range r.groups {
		if len(r.groups[g].members) < 2 {
			continue
		}
		r.groups[kept], r.groups[g] = r.groups[g], r.groups[kept] // members' buffers swap too
		for _, i := range r.groups[kept].members {
			r.grouped[i] = true
		}
		kept++
	}
	for g := kept; g < len(r.groups); g++ {
		r.groups[g].root = nil // holds no cache alive
	}
	r.groups = r.groups[:kept]
}

type views struct {
	x, h, q, k, v, att, o, gate, up kernels.Tensor // [T, …]
	qHeads, kHeads                  kernels.Tensor // q and k as [T·heads, headDim]
	seqQ, seqK, seqV, seqAtt        []kernels.Tensor
	last                            []int // row of each sequence's last token
	out, logits                     kernels.Tensor

	// The fused path (fuse.go), for batches of at most fuseRows tokens:
	// per token row, its q, k, v, gate rows and the parts of the fused
	// products' rows they come from.
	fused                  bool
	qkv, gateUp            kernels.Tensor
	rowQ, rowK, rowV, rowG []kernels.Tensor
	fromQ, fromK, fromV    []kernels.Tensor
	fromGate, fromUp       []kernels.Tensor
}

// NewRunner makes a Runner; its buffers grow on first use.
func (m *Model) NewRunner() *Runner { return &Runner{m: m, b: m.b} }

// Logits are rows of next-token scores over the vocabulary. They belong to
// the Runner and are overwritten by its next call.
type Logits struct {
	Data  []float32
	Vocab int
}

// Rows is the number of rows.
func (l Logits) Rows() int { return len(l.Data) / l.Vocab }

// Row returns row i.
func (l Logits) Row(i int) []float32 { return l.Data[i*l.Vocab : (i+1)*l.Vocab : (i+1)*l.Vocab] }

// Forward appends tokens[i] to the sequence whose cache is caches[i], for
// every i at once, and returns logits: with all, one row per token, sequence
// by sequence in order (what scoring a trajectory needs); otherwise one row
// per sequence, for its last token (what generation needs).
//
// Prompts of any lengths (prefill), a single new token for each of many
// sequences (a decoding step), or a mix, are all one call: the matrix
// products run over every token of the batch together, attention over each
// sequence's own cache. The caches grow by their tokens only when Forward
// succeeds.
func (r *Runner) Forward(caches []*Cache, tokens [][]int32, all bool) (Logits, error) {
	if err := r.check(caches, tokens); err != nil {
		return Logits{}, err
	}
	r.prepare(caches, tokens, all)
	r.prefixGroups(caches, tokens)
	b, c, w, s := r.b, r.m.Config, &r.m.w, &r.cur

	b.Embedding(s.x, w.TokenEmbedding, r.ids)
	for l := range w.Blocks {
		blk := &w.Blocks[l]
		blk.AttnNorm.Forward(b, s.h, s.x, c.NormEps)
		r.attention(blk.Attn, l, caches, tokens)
		b.Add(s.x, s.x, s.o)
		blk.FFNNorm.Forward(b, s.h, s.x, c.NormEps)
		if s.fused {
			r.m.fused[l].gateUp.Forward(b, s.gateUp, s.h)
			for i, g := range s.rowG {
				b.SwiGLU(g, s.fromGate[i], s.fromUp[i])
			}
			blk.MLP.Down.Forward(b, s.o, s.gate)
		} else {
			blk.MLP.Forward(b, s.o, s.h, s.gate, s.up)
		}
		b.Add(s.x, s.x, s.o)
	}
	for i, cache := range caches {
		cache.n += len(tokens[i])
	}
	for g := range r.groups {
		r.groups[g].root = nil
	}

	if all {
		w.OutputNorm.Forward(b, s.h, s.x, c.NormEps)
		b.MatMul(s.logits, s.h, r.m.outputMatrix())
	} else {
		for i, row := range s.last {
			b.Copy(b.Slice(s.out, i, i+1), b.Slice(s.x, row, row+1))
		}
		w.OutputNorm.Forward(b, s.out, s.out, c.NormEps)
		b.MatMul(s.logits, s.out, r.m.outputMatrix())
	}
	return r.hostLogits(s.logits), nil
}

// attention runs layer l's self-attention on s.h into s.o, writing the
// batch's keys and values into each sequence's cache.
func (r *Runner) attention(a *Attention, l int, caches []*Cache, tokens [][]int32) {
	b, c, s := r.b, r.m.Config, &r.cur
	if s.fused {
		r.m.fused[l].qkv.Forward(b, s.qkv, s.h)
		for i := range s.rowQ {
			b.Copy(s.rowQ[i], s.fromQ[i])
			b.Copy(s.rowK[i], s.fromK[i])
			b.Copy(s.rowV[i], s.fromV[i])
		}
	} else {
		a.Q.Forward(b, s.q, s.h)
		a.K.Forward(b, s.k, s.h)
		a.V.Forward(b, s.v, s.h)
	}
	if a.QNorm != nil {
		a.QNorm.Forward(b, s.qHeads, s.qHeads, c.NormEps)
		a.KNorm.Forward(b, s.kHeads, s.kHeads, c.NormEps)
	}
	b.RoPE(s.q, s.q, r.pos, c.HeadDim, c.RopeTheta)
	b.RoPE(s.k, s.k, r.pos, c.HeadDim, c.RopeTheta)
	for i, cache := range caches {
		n0, n1 := cache.n, cache.n+len(tokens[i])
		b.Copy(b.Slice(cache.k[l], n0, n1), s.seqK[i])
		b.Copy(b.Slice(cache.v[l], n0, n1), s.seqV[i])
	}
	for _, g := range r.groups {
		r.gDst, r.gQ, r.gK, r.gV = r.gDst[:0], r.gQ[:0], r.gK[:0], r.gV[:0]
		for _, i := range g.members {
			n1 := caches[i].n + 1
			r.gDst, r.gQ = append(r.gDst, s.seqAtt[i]), append(r.gQ, s.seqQ[i])
			r.gK = append(r.gK, b.Slice(caches[i].k[l], g.nb, n1))
			r.gV = append(r.gV, b.Slice(caches[i].v[l], g.nb, n1))
		}
		bk, bv := g.root.k[l], g.root.v[l]
		b.(kernels.PrefixAttention).AttentionPrefixGroup(r.gDst, r.gQ, b.Slice(bk, 0, g.nb), b.Slice(bv, 0, g.nb), r.gK, r.gV, c.Heads, c.KVHeads)
		clear(r.gK) // views of caches the runner must not keep alive
		clear(r.gV)
	}
	for i, cache := range caches {
		if r.grouped[i] {
			continue
		}
		n1 := cache.n + len(tokens[i])
		kc, vc := cache.k[l], cache.v[l]
		if nb := cache.nb; nb > 0 {
			bk, bv := cache.base.k[l], cache.base.v[l]
			b.(kernels.PrefixAttention).AttentionPrefix(s.seqAtt[i], s.seqQ[i], b.Slice(bk, 0, nb), b.Slice(bv, 0, nb),
				b.Slice(kc, nb, n1), b.Slice(vc, nb, n1), c.Heads, c.KVHeads)
			continue
		}
		b.Attention(s.seqAtt[i], s.seqQ[i], b.Slice(kc, 0, n1), b.Slice(vc, 0, n1), c.Heads, c.KVHeads)
	}
	a.O.Forward(b, s.o, s.att)
}

// check refuses a batch before anything is computed or cached.
func (r *Runner) check(caches []*Cache, tokens [][]int32) error {
	if len(caches) == 0 || len(caches) != len(tokens) {
		return fmt.Errorf("model: Forward with %d caches and %d token lists", len(caches), len(tokens))
	}
	vocab := int32(r.m.Config.VocabSize)
	for i, c := range caches {
		if c == nil || c.m != r.m {
			return fmt.Errorf("model: cache %d belongs to another model", i)
		}
		for j := range i {
			if caches[j] == c {
				return fmt.Errorf("model: caches %d and %d are the same sequence", j, i)
			}
		}
		if len(tokens[i]) == 0 {
			return fmt.Errorf("model: sequence %d has no new tokens", i)
		}
		if c.n+len(tokens[i]) > c.Cap() {
			return fmt.Errorf("%w: sequence %d holds %d of %d positions and cannot take %d more", ErrCacheFull, i, c.n, c.Cap(), len(tokens[i]))
		}
		for _, id := range tokens[i] {
			if id < 0 || id >= vocab {
				return fmt.Errorf("model: sequence %d: token id %d outside the vocabulary of %d", i, id, vocab)
			}
		}
	}
	return nil
}

// prepare sizes the buffers for the batch, sets its token ids and
// positions, and rebuilds the views when the layout changed.
func (r *Runner) prepare(caches []*Cache, tokens [][]int32, all bool) {
	c := r.m.Config
	total := 0
	for _, t := range tokens {
		total += len(t)
	}
	outRows := len(tokens)
	if all {
		outRows = total
	}
	b := r.b
	grown := false
	if total > r.rows {
		r.rows = max(total, 2*r.rows)
		n := r.rows
		r.x, r.h, r.o, r.out = b.New(n, c.HiddenSize), b.New(n, c.HiddenSize), b.New(n, c.HiddenSize), b.New(n, c.HiddenSize)
		r.q, r.att = b.New(n, c.QDim()), b.New(n, c.QDim())
		r.k, r.v = b.New(n, c.KVDim()), b.New(n, c.KVDim())
		r.gate, r.up = b.New(n, c.FFNSize), b.New(n, c.FFNSize)
		grown = true
	}
	if total <= fuseRows && r.qkv == nil {
		r.qkv = b.New(fuseRows, c.QDim()+2*c.KVDim())
		r.gateUp = b.New(fuseRows, 2*c.FFNSize)
	}
	if outRows > r.outRows {
		r.outRows = outRows
		r.logits = b.New(outRows, c.VocabSize)
		grown = true
	}

	r.ids, r.pos = r.ids[:0], r.pos[:0]
	for i, t := range tokens {
		r.ids = append(r.ids, t...)
		for j := range t {
			r.pos = append(r.pos, int32(caches[i].n+j))
		}
	}

	same := !grown && all == r.all && len(r.layout) == len(tokens)
	for i := 0; same && i < len(tokens); i++ {
		same = r.layout[i] == len(tokens[i])
	}
	if same {
		return
	}
	r.layout = r.layout[:0]
	for _, t := range tokens {
		r.layout = append(r.layout, len(t))
	}
	r.all = all
	s := views{}
	s.x, s.h, s.o = b.Slice(r.x, 0, total), b.Slice(r.h, 0, total), b.Slice(r.o, 0, total)
	s.q, s.att = b.Slice(r.q, 0, total), b.Slice(r.att, 0, total)
	s.k, s.v = b.Slice(r.k, 0, total), b.Slice(r.v, 0, total)
	s.gate, s.up = b.Slice(r.gate, 0, total), b.Slice(r.up, 0, total)
	s.qHeads = b.Reshape(s.q, total*c.Heads, c.HeadDim)
	s.kHeads = b.Reshape(s.k, total*c.KVHeads, c.HeadDim)
	s.out = b.Slice(r.out, 0, len(tokens))
	s.logits = b.Slice(r.logits, 0, outRows)
	if s.fused = total <= fuseRows; s.fused {
		q, kv, ff := c.QDim(), c.KVDim(), c.FFNSize
		s.qkv, s.gateUp = b.Slice(r.qkv, 0, total), b.Slice(r.gateUp, 0, total)
		for i := range total {
			s.rowQ = append(s.rowQ, b.Slice(s.q, i, i+1))
			s.rowK = append(s.rowK, b.Slice(s.k, i, i+1))
			s.rowV = append(s.rowV, b.Slice(s.v, i, i+1))
			s.rowG = append(s.rowG, b.Slice(s.gate, i, i+1))
			s.fromQ = append(s.fromQ, part(b, s.qkv, i, 0, q))
			s.fromK = append(s.fromK, part(b, s.qkv, i, q, q+kv))
			s.fromV = append(s.fromV, part(b, s.qkv, i, q+kv, q+2*kv))
			s.fromGate = append(s.fromGate, part(b, s.gateUp, i, 0, ff))
			s.fromUp = append(s.fromUp, part(b, s.gateUp, i, ff, 2*ff))
		}
	}
	row := 0
	for _, t := range tokens {
		n := len(t)
		s.seqQ = append(s.seqQ, b.Slice(s.q, row, row+n))
		s.seqK = append(s.seqK, b.Slice(s.k, row, row+n))
		s.seqV = append(s.seqV, b.Slice(s.v, row, row+n))
		s.seqAtt = append(s.seqAtt, b.Slice(s.att, row, row+n))
		row += n
		s.last = append(s.last, row-1)
	}
	r.cur = s
}

// part is columns [lo, hi) of row i of the matrix m, as a [1, hi-lo] view.
func part(b kernels.Backend, m kernels.Tensor, i, lo, hi int) kernels.Tensor {
	row := b.Slice(m, i, i+1)
	flat := b.Reshape(row, row.Shape()[1])
	return b.Reshape(b.Slice(flat, lo, hi), 1, hi-lo)
}

// hostLogits returns the logits as host floats: the CPU backend's tensor
// itself, a device backend's copied back.
func (r *Runner) hostLogits(t kernels.Tensor) Logits {
	vocab := r.m.Config.VocabSize
	if h, ok := t.(*tensor.Tensor); ok {
		return Logits{Data: h.Data(), Vocab: vocab}
	}
	n := t.Shape()[0] * vocab
	if cap(r.host) < n {
		r.host = make([]float32, n)
	}
	r.host = r.host[:n]
	r.b.ToHost(r.host, t)
	return Logits{Data: r.host, Vocab: vocab}
}
