package model

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/frognano/frognano/kernels"
)

// Training: the decoder's forward pass keeping what the backward pass needs,
// and the backward pass itself, over the backward operations of a
// kernels.GradBackend. A Trainer scores a packed batch of sequences (every
// token's log-probability given its prefix, what a policy-gradient loss is
// made of) and adds the gradient of any linear function of those
// log-probabilities to its gradient buffers, one per weight.
//
// The Trainer computes on the model's own weights, not a copy: a Param's
// Value is the tensor the decoder multiplies by (for q/k/v and gate/up, a
// view into the stacked matrix of fuse.go), so an optimizer that updates
// Values in place updates what every Runner of the model computes, with
// nothing to copy back.
//
// Memory. The residual stream's input to each layer is kept; unless
// TrainOptions.Recompute is set, so are the layer's projections (q, k, v
// after RoPE, the attention output, gate and up) and the stream between
// attention and MLP. The normalised inputs and the SwiGLU product are
// recomputed in the backward pass (element-wise work, cheaper to redo than
// to keep). With Recompute, only the layer inputs are kept and each layer's
// forward pass runs again just before its backward pass, giving the same
// gradients for about a quarter more work. Logits (rows × vocabulary) are
// held one chunk of ChunkRows rows at a time: LogProbs computes the
// log-probabilities chunk by chunk, and Backward goes through the chunks
// from the last, whose logits are still in the buffer, recomputing the
// others; each chunk's logits are turned into their gradient in place and
// add their share to the output projection's gradient before the next. A
// batch that fits in one chunk (the default holds 256 MiB of logits) never
// recomputes them.

// Param is one trainable tensor of the model under its Hugging Face name
// ("model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight",
// …). Value is the model's own fp32 weight storage: updating it in place
// changes what the model (and every Runner) computes. Grad has Value's
// shape.
type Param struct {
	Name        string
	Value, Grad kernels.Tensor
}

// TrainOptions configure a Trainer. The zero value keeps every layer's
// activations and computes logits 256 rows at a time.
type TrainOptions struct {
	// Recompute keeps only each block's input and recomputes the block's
	// forward pass in Backward: less memory (one layer's activations
	// instead of all of them), the same gradients, about a quarter more
	// compute.
	Recompute bool
	// ChunkRows is how many rows of logits are computed at once; 0 means
	// as many as fit in 256 MiB (1365 rows for a vocabulary of 49152, 441
	// for 152064).
	ChunkRows int
	// TrainLayers, when positive, trains only the top TrainLayers decoder
	// layers and the final norm; the embedding, the output projection and
	// the layers below stay frozen. Frozen weights get no gradient buffer
	// (Params lists only the trained ones, so an optimizer keeps moments
	// for those alone), the frozen layers' activations are not kept, and
	// the backward pass stops at the lowest trained layer: for the top
	// quarter of a model, about half the compute of a whole step and a
	// fraction of its memory. 0 (or the number of layers or more) trains
	// every weight.
	TrainLayers int
	// NoPrefixSharing runs every sequence of a batch in full. By default
	// consecutive sequences that begin with the same tokens (a GRPO
	// group's episodes all start with one prompt) share those rows: see
	// "Shared prefixes" below.
	NoPrefixSharing bool
}

// Shared prefixes. The G episodes of a GRPO group start with one prompt,
// often a thousand tokens, and differ in a short answer; run one by one,
// a batch computes the prompt G times. With masks (LogProbsOf with want),
// consecutive sequences whose first p tokens are equal (p at least
// MinSharedPrefix, and no wanted row among them, as those rows would have
// a target per sequence; the first two set p, and a later sequence joins
// only if it shares all p) form a unit: the p prefix rows are computed once
// and each sequence adds only its own rows, at positions p and on. The
// prefix rows attend to themselves; a sequence's own rows attend to the
// prefix's keys and values and to their own, through a copy of both into
// one contiguous buffer. In the backward pass each sequence's attention is
// differentiated over prefix and own rows together (the gradient of the
// prefix's attention output counted once, with the first sequence), and
// the prefix rows' query, key and value gradients add up over the unit's
// sequences. Every other operation is row by row, so the unit computes
// exactly what its sequences computed apart, in fewer rows.

// MinSharedPrefix is the fewest equal leading tokens for which consecutive
// sequences share their prefix rows.
const MinSharedPrefix = 16

// Frozen reports whether the Trainer leaves weight name unchanged.
func (t *Trainer) Frozen(name string) bool { return !t.trained(name) }

// trained reports whether weight name is trained under t's options: every
// weight when all layers train, else the top layers' weights and the final
// norm.
func (t *Trainer) trained(name string) bool {
	if t.first == 0 {
		return true
	}
	if name == "model.norm.weight" {
		return true
	}
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return false
	}
	idx, _, _ := strings.Cut(rest, ".")
	l, err := strconv.Atoi(idx)
	return err == nil && l >= t.first
}

// logitsBudget is the memory, in bytes, that a default chunk of float32
// logits may take.
const logitsBudget = 256 << 20

// Trainer runs the training forward and backward passes of a Model. It
// owns gradient buffers (one per Param) and activation buffers, sized for
// the largest batch so far and reused from call to call. A Trainer is not
// safe for concurrent use, and its Params' Values are the model's weights:
// do not update them while a Runner of the model computes.
type Trainer struct {
	m      *Model
	b      kernels.GradBackend
	o      TrainOptions
	g      Transformer // gradients, mirroring m.w (nil for frozen weights)
	params []Param
	first  int // the lowest trained layer (0: every weight trains)

	rows  int            // capacity of the per-token buffers, in rows
	xs    []bufs         // per layer: the kept activations; xs[l].xIn is layer l's input
	re    bufs           // with Recompute: the activations of the layer being recomputed
	fz    bufs           // with frozen layers: their activations, overwritten layer by layer
	final kernels.Tensor // [rows, hidden], the last layer's output
	work  bufs           // scratch: h, o, act, and the backward pass's gradients
	s     bufs           // views of work for the current batch
	ones  kernels.Tensor // [rows] of 1s: biases are added as a rank-one update

	outCap            int            // capacity, in rows, of the output buffers below
	xOut, hOut, dhOut kernels.Tensor // [outCap, hidden]: the rows that predict a token
	chunk             int            // rows of logits at once, for the current batch
	logits            kernels.Tensor // [≥ chunk, vocab]
	held              int            // first row of the chunk whose logits are in logits, or -1

	// The last LogProbs' batch.
	lens              []int  // tokens per sequence
	units             []unit // the packed batch: prefixes and the sequences' own rows
	catCap            int    // rows of the concatenation buffers below
	qCat, kCat, vCat  kernels.Tensor
	dyCat, dqCat      kernels.Tensor
	dkCat, dvCat      kernels.Tensor
	ids, pos, targets []int32   // its tokens, their positions, the tokens they predict
	total, outputs    int       // token rows, predicting rows
	ready             bool      // LogProbs succeeded, so Backward may run
	segs              []seg     // runs of rows whose log-probabilities are computed
	logp, dlogp       []float32 // per computed row
}

// seg is a run of n consecutive token rows, from row, whose
// log-probabilities are computed; they are rows off… of the output
// buffers, and positions j… of sequence seq.
type seg struct{ row, off, n, seq, j int }

// unit is a run of packed rows: a prefix of rows [row, row+p) and, when
// sequences share it, each one's own rows (positions p and on). A
// sequence that shares nothing is a unit of its own with no tails.
type unit struct {
	row, p int
	tails  []span
}

// span is n packed rows from row.
type span struct{ row, n int }

// bufs are the per-token buffers of one layer, or the scratch buffers,
// each [rows, …]; a field is nil where it is not used.
type bufs struct {
	xIn, xMid        kernels.Tensor // the layer's input; the stream between attention and MLP
	qRaw, kRaw       kernels.Tensor // q and k before the per-head norm (Qwen3)
	q, k, v, att     kernels.Tensor // q and k after RoPE, v, the attention output
	gate, up         kernels.Tensor // [rows, ffn]
	h, o, act        kernels.Tensor // scratch: a normalised input, a projection's output, SwiGLU
	dx, dh, tmp      kernels.Tensor // scratch gradients [rows, hidden]; dx runs down the residual stream
	dq, dk, dv, datt kernels.Tensor
	dgate, dup       kernels.Tensor
}

// NewTrainer makes a Trainer for m. It needs a backend that can train (a
// kernels.GradBackend, as the CPU backend is); its gradient buffers start
// at zero.
func (m *Model) NewTrainer(o TrainOptions) (*Trainer, error) {
	gb, ok := m.b.(kernels.GradBackend)
	if !ok {
		return nil, fmt.Errorf("model: backend %s cannot train (it does not implement kernels.GradBackend)", m.b.Name())
	}
	if o.ChunkRows < 0 {
		return nil, fmt.Errorf("model: TrainOptions.ChunkRows %d is negative", o.ChunkRows)
	}
	if o.TrainLayers < 0 {
		return nil, fmt.Errorf("model: TrainOptions.TrainLayers %d is negative", o.TrainLayers)
	}
	if o.ChunkRows == 0 {
		o.ChunkRows = max(1, logitsBudget/(4*m.Config.VocabSize))
	}
	t := &Trainer{m: m, b: gb, o: o}
	if o.TrainLayers > 0 && o.TrainLayers < m.Config.Layers {
		t.first = m.Config.Layers - o.TrainLayers
	}
	// The weights it trains become the model's own (share.go) before an
	// optimizer can step them; frozen ones stay shared.
	for _, p := range m.Params() {
		if t.trained(p.Name) {
			m.Own(p.Name)
		}
	}
	values := m.Params()
	i := 0
	mirrorWeights(reflect.ValueOf(&t.g).Elem(), reflect.ValueOf(&m.w).Elem(), "", func(name string, v kernels.Tensor) kernels.Tensor {
		if values[i].Name != name {
			panic("model: weights listed in a different order: " + name + " and " + values[i].Name)
		}
		i++
		if !t.trained(name) {
			return nil
		}
		g := gb.New(v.Shape()...)
		t.params = append(t.params, Param{Name: name, Value: v, Grad: g})
		return g
	})
	return t, nil
}

// Params lists every trained tensor once (a tied embedding once, its
// gradient holding both its input and output contributions), in the order
// of Model.Params; with TrainOptions.TrainLayers, only the top layers' and
// the final norm.
func (t *Trainer) Params() []Param { return t.params }

// ZeroGrad sets every gradient to zero.
func (t *Trainer) ZeroGrad() {
	for _, p := range t.params {
		t.b.Fill(p.Grad, 0)
	}
}

// LogProbs runs sequences through the model, each its own causal sequence
// from position 0 (a packed batch of different lengths), and returns for
// each sequence i and j in [0, len-2]:
//
//	out[i][j] = log p(seqs[i][j+1] | seqs[i][:j+1])
//
// (a sequence of one token has none). It keeps what Backward needs, until
// the next call. The result is the caller's.
func (t *Trainer) LogProbs(seqs [][]int32) ([][]float32, error) {
	return t.LogProbsOf(seqs, nil)
}

// LogProbsOf is LogProbs computing only the log-probabilities want marks:
// out[i][j] when want[i][j] (with want nil: all of them, as LogProbs).
// The others are 0, and Backward ignores their gradients. Rows nothing
// wants skip the output projection in both passes, which for a
// policy-gradient or SFT loss (only the policy's tokens count) is most of
// a long prompt's: for a vocabulary of 151,936 over a hidden size of 896,
// the projection is as much work per row as nine of the 24 layers.
func (t *Trainer) LogProbsOf(seqs [][]int32, want [][]bool) ([][]float32, error) {
	t.ready, t.held = false, -1
	if err := t.check(seqs); err != nil {
		return nil, err
	}
	if want != nil {
		if len(want) != len(seqs) {
			return nil, fmt.Errorf("model: LogProbsOf: %d masks for %d sequences", len(want), len(seqs))
		}
		for i, s := range seqs {
			if len(want[i]) != max(len(s)-1, 0) {
				return nil, fmt.Errorf("model: LogProbsOf: sequence %d of %d tokens has a mask of %d (want %d)", i, len(s), len(want[i]), max(len(s)-1, 0))
			}
		}
	}
	t.prepare(seqs, want)
	b, w := t.b, &t.m.w
	n := t.total

	// Frozen layers run in place in one set of scratch buffers (a layer's
	// output overwrites its input once it is no longer read); the last of
	// them writes the lowest trained layer's input.
	if t.first > 0 {
		a := t.views(&t.fz)
		b.Embedding(a.xIn, w.TokenEmbedding, t.ids)
		for l := range t.first {
			out := a.xIn
			if l+1 == t.first {
				out = slice(b, t.xs[t.first].xIn, n)
			}
			t.forwardBlock(l, &a, out)
		}
	} else {
		b.Embedding(slice(b, t.xs[0].xIn, n), w.TokenEmbedding, t.ids)
	}
	for l := t.first; l < len(w.Blocks); l++ {
		out := t.final
		if l+1 < len(t.xs) {
			out = t.xs[l+1].xIn
		}
		a := t.layer(l)
		t.forwardBlock(l, &a, slice(b, out, n))
	}
	if t.outputs > 0 {
		t.gatherOutputs()
		xOut, hOut := slice(b, t.xOut, t.outputs), slice(b, t.hOut, t.outputs)
		w.OutputNorm.Forward(b, hOut, xOut, t.m.Config.NormEps)
		wOut := w.outputWeight()
		for r0 := 0; r0 < t.outputs; r0 += t.chunk {
			r1 := min(r0+t.chunk, t.outputs)
			logits := slice(b, t.logits, r1-r0)
			b.MatMul(logits, b.Slice(hOut, r0, r1), wOut)
			b.TokenLogProbs(t.logp[r0:r1], logits, t.targets[r0:r1])
			t.held = r0
		}
	}
	out := make([][]float32, len(seqs))
	size := 0
	for _, s := range seqs {
		size += max(len(s)-1, 0)
	}
	flat := make([]float32, size)
	off := 0
	for i, s := range seqs {
		k := max(len(s)-1, 0)
		out[i] = flat[off : off+k : off+k]
		off += k
	}
	for _, g := range t.segs {
		copy(out[g.seq][g.j:g.j+g.n], t.logp[g.off:g.off+g.n])
	}
	t.ready = true
	return out, nil
}

// Backward adds to every Param's Grad the gradient of
//
//	Σ_i Σ_j dlogp[i][j] · out[i][j]
//
// for out the result of the last LogProbs call (dlogp is dLoss/dlogp, in
// out's shape). Gradients add up over calls, so two half batches give what
// one whole batch gives; Backward may run more than once for one LogProbs.
func (t *Trainer) Backward(dlogp [][]float32) error {
	if !t.ready {
		return fmt.Errorf("model: Backward without a successful LogProbs before it")
	}
	if len(dlogp) != len(t.lens) {
		return fmt.Errorf("model: Backward with gradients for %d sequences, LogProbs ran %d", len(dlogp), len(t.lens))
	}
	for i, d := range dlogp {
		if len(d) != max(t.lens[i]-1, 0) {
			return fmt.Errorf("model: Backward: sequence %d has %d log-probabilities but %d gradients", i, max(t.lens[i]-1, 0), len(d))
		}
	}
	t.dlogp = t.dlogp[:0]
	for _, g := range t.segs {
		t.dlogp = append(t.dlogp, dlogp[g.seq][g.j:g.j+g.n]...)
	}
	b, c, w, g := t.b, t.m.Config, &t.m.w, &t.g
	dx := t.s.dx

	// Output: logits chunk by chunk, last chunk first, as LogProbs left
	// its logits in the buffer; the others are recomputed. Each is turned
	// into its gradient in place.
	b.Fill(dx, 0)
	if t.outputs > 0 {
		xOut, hOut, dhOut := slice(b, t.xOut, t.outputs), slice(b, t.hOut, t.outputs), slice(b, t.dhOut, t.outputs)
		wOut, gOut := w.outputWeight(), g.outputWeight()
		for r0 := (t.outputs - 1) / t.chunk * t.chunk; r0 >= 0; r0 -= t.chunk {
			r1 := min(r0+t.chunk, t.outputs)
			logits, h := slice(b, t.logits, r1-r0), b.Slice(hOut, r0, r1)
			if r0 != t.held {
				b.MatMul(logits, h, wOut)
			}
			t.held = -1
			b.TokenLogProbsBackward(logits, logits, t.targets[r0:r1], t.dlogp[r0:r1])
			if gOut != nil {
				b.MatMulTN(gOut, logits, h, true)
			}
			b.MatMulNN(b.Slice(dhOut, r0, r1), logits, wOut)
		}
		b.RMSNormBackward(dhOut, g.OutputNorm.Weight, dhOut, xOut, w.OutputNorm.Weight, c.NormEps)
		for _, s := range t.segs {
			b.Copy(b.Slice(dx, s.row, s.row+s.n), b.Slice(dhOut, s.off, s.off+s.n))
		}
	}

	for l := len(w.Blocks) - 1; l >= t.first; l-- {
		a := t.layer(l)
		if t.o.Recompute {
			t.forwardBlock(l, &a, nil)
		}
		t.backwardBlock(l, &a)
	}
	if g.TokenEmbedding != nil {
		b.EmbeddingBackward(g.TokenEmbedding, dx, t.ids)
	}
	return nil
}

// check refuses a batch before anything is computed.
func (t *Trainer) check(seqs [][]int32) error {
	if len(seqs) == 0 {
		return fmt.Errorf("model: LogProbs of no sequences")
	}
	vocab := int32(t.m.Config.VocabSize)
	for i, s := range seqs {
		if len(s) == 0 {
			return fmt.Errorf("model: LogProbs: sequence %d is empty", i)
		}
		for j, id := range s {
			if id < 0 || id >= vocab {
				return fmt.Errorf("model: LogProbs: sequence %d, position %d: token id %d outside the vocabulary of %d", i, j, id, vocab)
			}
		}
	}
	return nil
}

// prepare records the batch's layout (with the rows whose log-probability
// want asks for; nil: all) and grows the buffers to fit it.
func (t *Trainer) prepare(seqs [][]int32, want [][]bool) {
	t.lens, t.ids, t.pos, t.targets, t.segs = t.lens[:0], t.ids[:0], t.pos[:0], t.targets[:0], t.segs[:0]
	t.units = t.units[:0]
	for _, s := range seqs {
		t.lens = append(t.lens, len(s))
	}
	// rows appends sequence i's tokens from position j0 at packed row row.
	rows := func(i, j0, row int) {
		s := seqs[i]
		t.ids = append(t.ids, s[j0:]...)
		for j := j0; j < len(s); j++ {
			t.pos = append(t.pos, int32(j))
		}
		for j := j0; j+1 < len(s); j++ {
			if want != nil && !want[i][j] {
				continue
			}
			r := row + j - j0
			if n := len(t.segs); n > 0 && t.segs[n-1].row+t.segs[n-1].n == r {
				t.segs[n-1].n++
			} else {
				t.segs = append(t.segs, seg{row: r, off: len(t.targets), n: 1, seq: i, j: j})
			}
			t.targets = append(t.targets, s[j+1])
		}
	}
	catRows := 0
	for lo := 0; lo < len(seqs); {
		hi, p := lo+1, 0
		if want != nil && !t.o.NoPrefixSharing {
			// The first two sequences set the prefix; a later one joins
			// only if it shares all of it, so that two groups whose
			// prompts begin alike (one system prompt) stay two units,
			// each sharing its whole prompt.
			p = sharable(seqs[lo], want[lo])
			for hi < len(seqs) {
				q := min(p, sharable(seqs[hi], want[hi]), commonPrefix(seqs[lo], seqs[hi]))
				if q < MinSharedPrefix || (hi > lo+1 && q < p) {
					break
				}
				p = q
				hi++
			}
		}
		row := len(t.ids)
		if hi == lo+1 {
			t.units = append(t.units, unit{row: row, p: len(seqs[lo])})
			rows(lo, 0, row)
			lo = hi
			continue
		}
		u := unit{row: row, p: p}
		t.ids = append(t.ids, seqs[lo][:p]...)
		for j := range p {
			t.pos = append(t.pos, int32(j))
		}
		for i := lo; i < hi; i++ {
			r := len(t.ids)
			u.tails = append(u.tails, span{row: r, n: len(seqs[i]) - p})
			rows(i, p, r)
			catRows = max(catRows, len(seqs[i]))
		}
		t.units = append(t.units, u)
		lo = hi
	}
	t.total, t.outputs = len(t.ids), len(t.targets)
	if cap(t.logp) < t.outputs {
		t.logp = make([]float32, t.outputs)
	}
	t.logp = t.logp[:t.outputs]

	b, c := t.b, t.m.Config
	d, q, kv, ff := c.HiddenSize, c.QDim(), c.KVDim(), c.FFNSize
	if t.total > t.rows {
		// Grow by a quarter at least, so that batches creeping up in size
		// do not reallocate every time.
		t.rows = max(t.total, t.rows+t.rows/4)
		n := t.rows
		kept := func(a *bufs) {
			a.xMid = b.New(n, d)
			a.q, a.att = b.New(n, q), b.New(n, q)
			a.k, a.v = b.New(n, kv), b.New(n, kv)
			a.gate, a.up = b.New(n, ff), b.New(n, ff)
			if c.QKNorm {
				a.qRaw, a.kRaw = b.New(n, q), b.New(n, kv)
			}
		}
		t.xs = make([]bufs, c.Layers)
		for l := t.first; l < len(t.xs); l++ {
			t.xs[l].xIn = b.New(n, d)
			if !t.o.Recompute {
				kept(&t.xs[l])
			}
		}
		if t.o.Recompute {
			kept(&t.re)
		}
		if t.first > 0 {
			t.fz = bufs{xIn: b.New(n, d)}
			if t.o.Recompute {
				t.fz.xMid, t.fz.q, t.fz.k, t.fz.v, t.fz.att = t.re.xMid, t.re.q, t.re.k, t.re.v, t.re.att
				t.fz.gate, t.fz.up, t.fz.qRaw, t.fz.kRaw = t.re.gate, t.re.up, t.re.qRaw, t.re.kRaw
			} else {
				kept(&t.fz)
			}
		}
		t.final = b.New(n, d)
		w := &t.work
		w.h, w.o, w.act = b.New(n, d), b.New(n, d), b.New(n, ff)
		w.dx, w.dh, w.tmp = b.New(n, d), b.New(n, d), b.New(n, d)
		w.dq, w.datt = b.New(n, q), b.New(n, q)
		w.dk, w.dv = b.New(n, kv), b.New(n, kv)
		w.dgate, w.dup = b.New(n, ff), b.New(n, ff)
		if c.QKVBias {
			t.ones = b.New(n)
			b.Fill(t.ones, 1)
		}
	}
	t.s = t.views(&t.work)
	if t.outputs > t.outCap {
		t.outCap = max(t.outputs, t.outCap+t.outCap/4)
		t.xOut, t.hOut, t.dhOut = b.New(t.outCap, d), b.New(t.outCap, d), b.New(t.outCap, d)
	}
	if catRows > t.catCap {
		t.catCap = max(catRows, t.catCap+t.catCap/4)
		n := t.catCap
		t.qCat, t.dyCat, t.dqCat = b.New(n, q), b.New(n, q), b.New(n, q)
		t.kCat, t.vCat, t.dkCat, t.dvCat = b.New(n, kv), b.New(n, kv), b.New(n, kv), b.New(n, kv)
	}
	// The chunks depend on the batch alone, not on earlier ones, so that a
	// batch's results do not depend on the Trainer's history.
	t.chunk = min(t.o.ChunkRows, max(t.outputs, 1))
	if t.logits == nil || t.logits.Shape()[0] < t.chunk {
		t.logits = b.New(t.chunk, c.VocabSize)
	}
}

// layer is the views, for the current batch, of layer l's kept
// activations (with Recompute: of the recomputation buffers, with layer
// l's input).
func (t *Trainer) layer(l int) bufs {
	src := t.xs[l]
	if t.o.Recompute {
		src = t.re
		src.xIn = t.xs[l].xIn
	}
	return t.views(&src)
}

// views slices every buffer of s to the current batch's rows.
func (t *Trainer) views(s *bufs) bufs {
	var v bufs
	dst := v.all()
	for i, x := range s.all() {
		if *x != nil {
			*dst[i] = slice(t.b, *x, t.total)
		}
	}
	return v
}

func (a *bufs) all() []*kernels.Tensor {
	return []*kernels.Tensor{&a.xIn, &a.xMid, &a.qRaw, &a.kRaw, &a.q, &a.k, &a.v, &a.att, &a.gate, &a.up,
		&a.h, &a.o, &a.act, &a.dx, &a.dh, &a.tmp, &a.dq, &a.dk, &a.dv, &a.datt, &a.dgate, &a.dup}
}

// slice is the first n rows of x.
func slice(b kernels.Backend, x kernels.Tensor, n int) kernels.Tensor {
	return b.Slice(x, 0, n)
}

// gatherOutputs copies the final hidden state of every row whose
// log-probability is wanted (by default all but each sequence's last) into
// xOut, segment after segment.
func (t *Trainer) gatherOutputs() {
	b := t.b
	for _, s := range t.segs {
		b.Copy(b.Slice(t.xOut, s.off, s.off+s.n), b.Slice(t.final, s.row, s.row+s.n))
	}
}

// forwardBlock runs layer l on a.xIn, filling a's kept activations, and
// writes the layer's output into out. With out nil (recomputation before
// the backward pass) it stops once gate and up are known.
func (t *Trainer) forwardBlock(l int, a *bufs, out kernels.Tensor) {
	b, c, blk := t.b, t.m.Config, &t.m.w.Blocks[l]
	s, n := &t.s, t.total

	blk.AttnNorm.Forward(b, s.h, a.xIn, c.NormEps)
	at := blk.Attn
	if at.QNorm != nil {
		t.linear(at.Q, a.qRaw, s.h)
		t.linear(at.K, a.kRaw, s.h)
		at.QNorm.Forward(b, b.Reshape(a.q, n*c.Heads, c.HeadDim), b.Reshape(a.qRaw, n*c.Heads, c.HeadDim), c.NormEps)
		at.KNorm.Forward(b, b.Reshape(a.k, n*c.KVHeads, c.HeadDim), b.Reshape(a.kRaw, n*c.KVHeads, c.HeadDim), c.NormEps)
	} else {
		t.linear(at.Q, a.q, s.h)
		t.linear(at.K, a.k, s.h)
	}
	t.linear(at.V, a.v, s.h)
	b.RoPE(a.q, a.q, t.pos, c.HeadDim, c.RopeTheta)
	b.RoPE(a.k, a.k, t.pos, c.HeadDim, c.RopeTheta)
	for _, u := range t.units {
		r0, r1 := u.row, u.row+u.p
		b.Attention(b.Slice(a.att, r0, r1), b.Slice(a.q, r0, r1), b.Slice(a.k, r0, r1), b.Slice(a.v, r0, r1), c.Heads, c.KVHeads)
		for _, tl := range u.tails {
			t1 := tl.row + tl.n
			kc, vc := t.concat(t.kCat, a.k, u, tl), t.concat(t.vCat, a.v, u, tl)
			b.Attention(b.Slice(a.att, tl.row, t1), b.Slice(a.q, tl.row, t1), kc, vc, c.Heads, c.KVHeads)
		}
	}
	t.linear(at.O, s.o, a.att)
	b.Add(a.xMid, a.xIn, s.o)

	blk.FFNNorm.Forward(b, s.h, a.xMid, c.NormEps)
	t.linear(blk.MLP.Gate, a.gate, s.h)
	t.linear(blk.MLP.Up, a.up, s.h)
	if out == nil {
		return
	}
	b.SwiGLU(s.act, a.gate, a.up)
	t.linear(blk.MLP.Down, s.o, s.act)
	b.Add(out, a.xMid, s.o)
}

// concat copies the rows of x for unit u's prefix and then those of tail
// tl into the first rows of buf, and returns them.
func (t *Trainer) concat(buf, x kernels.Tensor, u unit, tl span) kernels.Tensor {
	b := t.b
	b.Copy(b.Slice(buf, 0, u.p), b.Slice(x, u.row, u.row+u.p))
	b.Copy(b.Slice(buf, u.p, u.p+tl.n), b.Slice(x, tl.row, tl.row+tl.n))
	return b.Slice(buf, 0, u.p+tl.n)
}

// attentionBackwardShared is the attention's backward pass over a unit
// whose prefix its sequences share: each sequence's attention (prefix and
// own rows, a full pass) is differentiated on its own, the prefix's output
// gradient going in with the first sequence only, and the prefix rows'
// gradients add up over the sequences.
func (t *Trainer) attentionBackwardShared(a *bufs, u unit) {
	b, c, s := t.b, t.m.Config, &t.s
	pre := func(x kernels.Tensor) kernels.Tensor { return b.Slice(x, u.row, u.row+u.p) }
	for i, tl := range u.tails {
		m := u.p + tl.n
		own := func(x kernels.Tensor) kernels.Tensor { return b.Slice(x, tl.row, tl.row+tl.n) }
		qc, kc, vc := t.concat(t.qCat, a.q, u, tl), t.concat(t.kCat, a.k, u, tl), t.concat(t.vCat, a.v, u, tl)
		dy := t.concat(t.dyCat, s.datt, u, tl)
		if i > 0 {
			b.Fill(b.Slice(dy, 0, u.p), 0)
		}
		dq, dk, dv := b.Slice(t.dqCat, 0, m), b.Slice(t.dkCat, 0, m), b.Slice(t.dvCat, 0, m)
		b.AttentionBackward(dq, dk, dv, dy, qc, kc, vc, c.Heads, c.KVHeads)
		for _, g := range [][2]kernels.Tensor{{s.dq, dq}, {s.dk, dk}, {s.dv, dv}} {
			if i == 0 {
				b.Copy(pre(g[0]), b.Slice(g[1], 0, u.p))
			} else {
				b.Axpy(pre(g[0]), b.Slice(g[1], 0, u.p), 1)
			}
			b.Copy(own(g[0]), b.Slice(g[1], u.p, m))
		}
	}
}

// sharable is how many leading tokens of a sequence may be shared: up to
// its first wanted row (whose target would differ between sequences) and
// at least one token short of its end.
func sharable(s []int32, want []bool) int {
	for j, w := range want {
		if w {
			return j
		}
	}
	return max(len(s)-1, 0)
}

// commonPrefix is the number of leading tokens x and y have in common.
func commonPrefix(x, y []int32) int {
	n := 0
	for n < len(x) && n < len(y) && x[n] == y[n] {
		n++
	}
	return n
}

// linear sets dst = x·Wᵀ + bias. The bias goes onto every row at once as
// the rank-one product onesᵀ·bias, added by MatMulTN, where Linear.Forward
// adds it row by row (fine for a decoding step's few rows, not for a
// training batch's thousands).
func (t *Trainer) linear(l *Linear, dst, x kernels.Tensor) {
	t.b.MatMul(dst, x, l.Weight)
	if l.Bias != nil {
		b, n := t.b, dst.Shape()[0]
		b.MatMulTN(dst, b.Reshape(b.Slice(t.ones, 0, n), 1, n), b.Reshape(l.Bias, 1, numel(l.Bias.Shape())), true)
	}
}

// backwardBlock turns s.dx, the gradient of layer l's output, into the
// gradient of its input, adding to the layer's weight gradients on the way.
// a holds the layer's forward activations; it is only read.
func (t *Trainer) backwardBlock(l int, a *bufs) {
	b, c := t.b, t.m.Config
	blk, g := &t.m.w.Blocks[l], &t.g.Blocks[l]
	s, n, eps := &t.s, t.total, c.NormEps
	dx := s.dx

	// x_out = x_mid + down(silu(gate(h2)) · up(h2)), h2 = norm(x_mid)
	blk.FFNNorm.Forward(b, s.h, a.xMid, eps)
	b.SwiGLU(s.act, a.gate, a.up)
	b.MatMulTN(g.MLP.Down.Weight, dx, s.act, true)
	dact := s.act // the activations are no longer needed
	b.MatMulNN(dact, dx, blk.MLP.Down.Weight)
	b.SwiGLUBackward(s.dgate, s.dup, dact, a.gate, a.up)
	b.MatMulTN(g.MLP.Gate.Weight, s.dgate, s.h, true)
	b.MatMulTN(g.MLP.Up.Weight, s.dup, s.h, true)
	b.MatMulNN(s.dh, s.dgate, blk.MLP.Gate.Weight)
	b.MatMulNN(s.tmp, s.dup, blk.MLP.Up.Weight)
	b.Axpy(s.dh, s.tmp, 1)
	b.RMSNormBackward(s.dh, g.FFNNorm.Weight, s.dh, a.xMid, blk.FFNNorm.Weight, eps)
	b.Axpy(dx, s.dh, 1)

	// x_mid = x_in + o(attention(rope(q(h1)), rope(k(h1)), v(h1))), h1 = norm(x_in)
	at, ga := blk.Attn, g.Attn
	b.MatMulTN(ga.O.Weight, dx, a.att, true)
	b.MatMulNN(s.datt, dx, at.O.Weight)
	for _, u := range t.units {
		if len(u.tails) == 0 {
			r0, r1 := u.row, u.row+u.p
			b.AttentionBackward(b.Slice(s.dq, r0, r1), b.Slice(s.dk, r0, r1), b.Slice(s.dv, r0, r1),
				b.Slice(s.datt, r0, r1), b.Slice(a.q, r0, r1), b.Slice(a.k, r0, r1), b.Slice(a.v, r0, r1), c.Heads, c.KVHeads)
			continue
		}
		t.attentionBackwardShared(a, u)
	}
	b.RoPEBackward(s.dq, s.dq, t.pos, c.HeadDim, c.RopeTheta)
	b.RoPEBackward(s.dk, s.dk, t.pos, c.HeadDim, c.RopeTheta)
	if at.QNorm != nil {
		dqh, dkh := b.Reshape(s.dq, n*c.Heads, c.HeadDim), b.Reshape(s.dk, n*c.KVHeads, c.HeadDim)
		b.RMSNormBackward(dqh, ga.QNorm.Weight, dqh, b.Reshape(a.qRaw, n*c.Heads, c.HeadDim), at.QNorm.Weight, eps)
		b.RMSNormBackward(dkh, ga.KNorm.Weight, dkh, b.Reshape(a.kRaw, n*c.KVHeads, c.HeadDim), at.KNorm.Weight, eps)
	}
	if at.Q.Bias != nil {
		b.SumRows(ga.Q.Bias, s.dq)
		b.SumRows(ga.K.Bias, s.dk)
		b.SumRows(ga.V.Bias, s.dv)
	}
	blk.AttnNorm.Forward(b, s.h, a.xIn, eps)
	b.MatMulTN(ga.Q.Weight, s.dq, s.h, true)
	b.MatMulTN(ga.K.Weight, s.dk, s.h, true)
	b.MatMulTN(ga.V.Weight, s.dv, s.h, true)
	b.MatMulNN(s.dh, s.dq, at.Q.Weight)
	b.MatMulNN(s.tmp, s.dk, at.K.Weight)
	b.Axpy(s.dh, s.tmp, 1)
	b.MatMulNN(s.tmp, s.dv, at.V.Weight)
	b.Axpy(s.dh, s.tmp, 1)
	b.RMSNormBackward(s.dh, g.AttnNorm.Weight, s.dh, a.xIn, blk.AttnNorm.Weight, eps)
	b.Axpy(dx, s.dh, 1)
}
