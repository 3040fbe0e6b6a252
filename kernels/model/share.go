package model

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu"
	"github.com/frognano/frognano/kernels/tokenizer"
)

// Shared weights. A Learner and a Sampler in one process each load the
// model they train and serve; when the Learner trains only the top layers
// (TrainOptions.TrainLayers), everything below, and the embedding, is the
// same in both for the whole run. Options.Shared makes the second load of
// a file share the first's weight storage, copy-on-write:
//
//   - The unit of sharing is the embedding (with a tied output projection),
//     each decoder layer (its norms, its projections and the stacked q/k/v
//     and gate/up matrices of fuse.go, whose views the projections are),
//     the final norm, and an untied output projection.
//   - Every write path owns what it writes first: SetParams and
//     UpdateParams copy the units of the weights they are given before
//     writing, and NewTrainer copies the units it trains (the top layers
//     and the final norm with TrainLayers; everything without) before an
//     optimizer can step them. Owning a layer copies its stacked matrices
//     and points the q/k/v and gate/up views into the copies.
//   - Each Model keeps its own layer structs, so quantized copies
//     (SetQuantization) are its own, made from the shared float32 weights.
//   - The process-wide cache counts, per unit, the Models that share it. A
//     Model that owns a unit, or is garbage collected, gives its references
//     back; a unit no Model shares is dropped from the cache (a later load
//     reads it from the file again), and so is a file no Model shares.
//
// Only the CPU backend shares: on another backend (CUDA) Options.Shared is
// ignored and every load is private.
//
// Writing through the tensors Params returns, or through Weights, bypasses
// the copy: on a shared Model, own them first (Own).

// shareCache holds the shared weights of every file loaded with
// Options.Shared, by file and version (fingerprint). Its mutex guards the
// entries' and the Models' sharing state.
var shareCache = struct {
	sync.Mutex
	m map[string]*sharedEntry
}{m: map[string]*sharedEntry{}}

// sharedEntry is one file's shared weights: a Transformer whose layer
// structs no Model uses (each Model gets its own, pointing at the same
// tensors), the stacked matrices, the tokenizer, and per unit how many
// Models share it. A unit no Model shares is nil here.
type sharedEntry struct {
	key   string
	cfg   Config
	tok   *tokenizer.Tokenizer
	w     Transformer
	fused []fusedLayer
	has   []bool // per unit: held here
	refs  []int  // per unit: Models sharing it
}

// modelShare is a Model's side: the entry and the units it still shares.
// It is what the Model's cleanup releases, so it must not point back at
// the Model.
type modelShare struct {
	e      *sharedEntry
	shared []bool
}

// Units: 0 the embedding, 1 … Layers the decoder layers, Layers+1 the final
// norm, Layers+2 an untied output projection.
func numUnits(c Config) int         { return c.Layers + 3 }
func blockUnit(l int) int           { return 1 + l }
func normUnit(c Config) int         { return c.Layers + 1 }
func outputUnit(c Config) int       { return c.Layers + 2 }
func unitBlock(c Config, u int) int { return u - 1 } // for 1 ≤ u ≤ Layers

// unitOf is the unit of a tensor named in format tag ("gguf", "hf"), or -1.
func unitOf(c Config, tag, name string) int {
	ty := reflect.TypeFor[Transformer]()
	field := func(f string) string {
		sf, _ := ty.FieldByName(f)
		n, _, _ := strings.Cut(sf.Tag.Get(tag), ",")
		return n
	}
	switch {
	case name == field("TokenEmbedding"):
		return 0
	case strings.HasPrefix(name, field("OutputNorm")+"."):
		return normUnit(c)
	case strings.HasPrefix(name, field("Output")+"."):
		return outputUnit(c)
	}
	if rest, ok := strings.CutPrefix(name, field("Blocks")+"."); ok {
		idx, _, _ := strings.Cut(rest, ".")
		if l, err := strconv.Atoi(idx); err == nil && l >= 0 && l < c.Layers {
			return blockUnit(l)
		}
	}
	return -1
}

// canShare reports whether weights on b can be shared: host memory only.
func canShare(b kernels.Backend) bool {
	_, ok := b.(cpu.Backend)
	return ok
}

// fingerprint names a model file or directory and its version (sizes and
// modification times), so that a file replaced on disk is not served from
// the cache.
func fingerprint(path, tag string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	parts := []string{tag, abs}
	stamp := func(fi os.FileInfo) string {
		return fmt.Sprintf("%s:%d:%d", fi.Name(), fi.Size(), fi.ModTime().UnixNano())
	}
	if !st.IsDir() {
		parts = append(parts, stamp(st))
	} else {
		ents, err := os.ReadDir(abs)
		if err != nil {
			return "", err
		}
		var stamps []string
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
				stamps = append(stamps, stamp(fi))
			}
		}
		sort.Strings(stamps)
		parts = append(parts, stamps...)
	}
	return strings.Join(parts, "\x00"), nil
}

// sharedLoad is a shared load in progress: the units it takes from the
// cache (referenced already, so that they cannot be dropped meanwhile).
type sharedLoad struct {
	e     *sharedEntry
	taken []bool
}

// beginShared finds or makes the entry of key and references every unit it
// holds for the Model being loaded, which will not read them from the
// file.
func beginShared(key string) *sharedLoad {
	shareCache.Lock()
	defer shareCache.Unlock()
	e := shareCache.m[key]
	if e == nil {
		e = &sharedEntry{key: key}
		shareCache.m[key] = e
	}
	sl := &sharedLoad{e: e, taken: make([]bool, len(e.has))}
	for u, h := range e.has {
		if h {
			sl.taken[u] = true
			e.refs[u]++
		}
	}
	return sl
}

// abort gives back the references of a load that failed before take.
func (sl *sharedLoad) abort() {
	ms := &modelShare{e: sl.e, shared: append([]bool(nil), sl.taken...)}
	ms.releaseAll()
}

// skip reports whether the binder should leave the tensor name (in format
// tag) unread: its unit comes from the cache.
func (sl *sharedLoad) skip(c Config, tag string) func(name string) bool {
	return func(name string) bool {
		u := unitOf(c, tag, name)
		return u >= 0 && u < len(sl.taken) && sl.taken[u]
	}
}

// take puts the units taken from the cache into m, whose other tensors the
// binder read from the file, and registers m's references to them. It
// runs before m is checked and fused (fuse skips the layers taken).
func (sl *sharedLoad) take(m *Model) {
	shareCache.Lock()
	defer shareCache.Unlock()
	e, c := sl.e, m.Config
	n := numUnits(c)
	m.fused = make([]fusedLayer, c.Layers)
	ms := &modelShare{e: e, shared: make([]bool, n)}
	if e.has != nil {
		m.Tokenizer = e.tok
	}
	for u := range n {
		if u < len(sl.taken) && sl.taken[u] {
			copyUnit(c, &m.w, m.fused, &e.w, e.fused, u)
			ms.shared[u] = true
		}
	}
	m.share = ms
	runtime.AddCleanup(m, func(ms *modelShare) { ms.releaseAll() }, ms)
}

// give hands m's units read from the file to the cache where it lacks
// them, once m is checked and fused.
func (sl *sharedLoad) give(m *Model) {
	shareCache.Lock()
	defer shareCache.Unlock()
	e, c, ms := sl.e, m.Config, m.share
	n := numUnits(c)
	if shareCache.m[e.key] == nil {
		shareCache.m[e.key] = e // every unit was dropped while m loaded
	}
	if shareCache.m[e.key] != e {
		return // a newer entry: m keeps what it read
	}
	if e.has == nil {
		e.cfg, e.tok = c, m.Tokenizer
		e.has, e.refs = make([]bool, n), make([]int, n)
		e.w.Blocks = make([]Block, c.Layers)
		e.fused = make([]fusedLayer, c.Layers)
	}
	for u := range n {
		if ms.shared[u] || e.has[u] || !unitExists(&m.w, c, u) {
			// Taken from the cache; put there by another load meanwhile
			// (m keeps its own); or a tied output projection.
			continue
		}
		copyUnit(c, &e.w, e.fused, &m.w, m.fused, u)
		e.has[u], e.refs[u] = true, 1
		ms.shared[u] = true
	}
}

// unitExists reports whether w has unit u (an untied output projection
// may be absent).
func unitExists(w *Transformer, c Config, u int) bool {
	if u == outputUnit(c) {
		return w.Output != nil
	}
	return true
}

// copyUnit makes dst's unit u point at src's tensors, in layer structs of
// its own (no quantized copies), the stacked matrices included.
func copyUnit(c Config, dst *Transformer, dstFused []fusedLayer, src *Transformer, srcFused []fusedLayer, u int) {
	same := func(_ string, t kernels.Tensor) kernels.Tensor { return t }
	switch {
	case u == 0:
		dst.TokenEmbedding = src.TokenEmbedding
	case u == normUnit(c):
		dst.OutputNorm = &RMSNorm{Weight: src.OutputNorm.Weight}
	case u == outputUnit(c):
		dst.Output = nil
		if src.Output != nil {
			dst.Output = &Linear{Weight: src.Output.Weight, Bias: src.Output.Bias}
		}
	default:
		l := unitBlock(c, u)
		dst.Blocks[l] = Block{}
		mirrorWeights(reflect.ValueOf(&dst.Blocks[l]).Elem(), reflect.ValueOf(&src.Blocks[l]).Elem(), "", same)
		sf := srcFused[l]
		dstFused[l] = fusedLayer{qkv: Linear{Weight: sf.qkv.Weight, Bias: sf.qkv.Bias}, gateUp: Linear{Weight: sf.gateUp.Weight}}
	}
}

// release gives back the Model's reference to unit u; the caller holds
// shareCache's lock.
func (ms *modelShare) release(u int) {
	if !ms.shared[u] {
		return
	}
	ms.shared[u] = false
	e := ms.e
	e.refs[u]--
	if e.refs[u] > 0 {
		return
	}
	// No Model shares the unit: the cache lets it go.
	e.has[u] = false
	c := e.cfg
	switch {
	case u == 0:
		e.w.TokenEmbedding = nil
	case u == normUnit(c):
		e.w.OutputNorm = nil
	case u == outputUnit(c):
		e.w.Output = nil
	default:
		l := unitBlock(c, u)
		e.w.Blocks[l], e.fused[l] = Block{}, fusedLayer{}
	}
	e.dropIfEmpty()
}

// dropIfEmpty removes the entry from the cache when it holds no unit; the
// caller holds shareCache's lock. A load under way that took nothing puts
// it back (give).
func (e *sharedEntry) dropIfEmpty() {
	for _, h := range e.has {
		if h {
			return
		}
	}
	if shareCache.m[e.key] == e {
		delete(shareCache.m, e.key)
	}
}

// releaseAll gives back every unit (the Model was collected).
func (ms *modelShare) releaseAll() {
	shareCache.Lock()
	defer shareCache.Unlock()
	for u := range ms.shared {
		ms.release(u)
	}
	ms.e.dropIfEmpty() // a first load that failed leaves an empty entry
}

// Shared reports whether the Model shares weight name (a Hugging Face name,
// as Params lists) with other Models of the process.
func (m *Model) Shared(name string) bool {
	u := unitOf(m.Config, "hf", name)
	if u < 0 {
		return false
	}
	shareCache.Lock()
	defer shareCache.Unlock()
	return m.share != nil && m.share.shared[u]
}

// Own makes the weights named (Hugging Face names, as Params lists; none:
// every weight) the Model's own, copying those it shares with other Models
// (with the rest of their layer), so that they may be written in place.
// Unknown names are ignored. SetParams, UpdateParams and NewTrainer own
// what they write; Own is for writing through Params or Weights directly.
// Like SetParams it must not run during a computation on the Model.
func (m *Model) Own(names ...string) {
	if m.share == nil {
		return
	}
	if len(names) == 0 {
		for u := range numUnits(m.Config) {
			m.ownUnit(u)
		}
		return
	}
	for _, n := range names {
		if u := unitOf(m.Config, "hf", n); u >= 0 {
			m.ownUnit(u)
		}
	}
}

// ownUnit copies unit u if the Model shares it. The copy is made outside
// the cache's lock: the Model's reference keeps the shared tensors until
// it is released, after the copy.
func (m *Model) ownUnit(u int) {
	shareCache.Lock()
	ms := m.share
	shared := ms != nil && ms.shared[u]
	shareCache.Unlock()
	if !shared {
		return
	}
	m.copyUnitStorage(u)
	shareCache.Lock()
	ms.release(u)
	shareCache.Unlock()
}

// copyUnitStorage gives unit u storage of its own: a copy of every tensor,
// the stacked matrices copied once and the q/k/v and gate/up weights made
// views into the copies (fuse.go). Quantized copies are the Model's own
// already and hold the same values.
func (m *Model) copyUnitStorage(u int) {
	b, c := m.b, m.Config
	clone := func(p *kernels.Tensor) {
		if *p == nil {
			return
		}
		t := b.New((*p).Shape()...)
		b.Copy(t, *p)
		*p = t
	}
	w := &m.w
	switch {
	case u == 0:
		clone(&w.TokenEmbedding)
	case u == normUnit(c):
		clone(&w.OutputNorm.Weight)
	case u == outputUnit(c):
		if w.Output != nil {
			clone(&w.Output.Weight)
			clone(&w.Output.Bias)
		}
	default:
		l := unitBlock(c, u)
		blk, f := &w.Blocks[l], &m.fused[l]
		a, mlp := blk.Attn, blk.MLP
		for _, p := range []*kernels.Tensor{&blk.AttnNorm.Weight, &blk.FFNNorm.Weight, &a.O.Weight, &a.O.Bias,
			&mlp.Down.Weight, &mlp.Down.Bias, &mlp.Gate.Bias, &mlp.Up.Bias} {
			clone(p)
		}
		if a.QNorm != nil {
			clone(&a.QNorm.Weight)
		}
		if a.KNorm != nil {
			clone(&a.KNorm.Weight)
		}
		qd, kv, ff := c.QDim(), c.KVDim(), c.FFNSize
		clone(&f.qkv.Weight)
		a.Q.Weight = b.Slice(f.qkv.Weight, 0, qd)
		a.K.Weight = b.Slice(f.qkv.Weight, qd, qd+kv)
		a.V.Weight = b.Slice(f.qkv.Weight, qd+kv, qd+2*kv)
		if f.qkv.Bias != nil {
			clone(&f.qkv.Bias)
			a.Q.Bias = b.Slice(f.qkv.Bias, 0, qd)
			a.K.Bias = b.Slice(f.qkv.Bias, qd, qd+kv)
			a.V.Bias = b.Slice(f.qkv.Bias, qd+kv, qd+2*kv)
		}
		clone(&f.gateUp.Weight)
		mlp.Gate.Weight = b.Slice(f.gateUp.Weight, 0, ff)
		mlp.Up.Weight = b.Slice(f.gateUp.Weight, ff, 2*ff)
	}
}

// ownNames owns the units of the weights named by keys of src.
func (m *Model) ownNames(src map[string][]float32) {
	if m.share == nil {
		return
	}
	for n := range src {
		if u := unitOf(m.Config, "hf", n); u >= 0 {
			m.ownUnit(u)
		}
	}
}
