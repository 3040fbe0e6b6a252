package model

import (
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"weak"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu"
	"github.com/frognano/frognano/kernels/model/modeltest"
	"github.com/frognano/frognano/kernels/tensor"
)

// Shared weights (share.go): two Models loaded from one file with
// Options.Shared hold one copy of the weights, and every write path copies
// what it writes first, so that the other Model computes bit for bit what
// it computed before.

// shareSpecs are the tiny architectures with four layers, so that training
// the top two leaves two frozen.
func shareSpecs() map[string]modeltest.Spec {
	out := map[string]modeltest.Spec{}
	for name, s := range tinySpecs {
		s.Layers = 4
		out[name] = s
	}
	return out
}

func mustLoadOpts(t testing.TB, path string, o Options) *Model {
	t.Helper()
	m, err := Load(path, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// storage is the address of a CPU tensor's first element: two tensors with
// the same storage are the same memory.
func storage(t kernels.Tensor) *float32 { return &t.(*tensor.Tensor).Data()[0] }

// paramStorage maps every weight of m to its storage.
func paramStorage(m *Model) map[string]*float32 {
	out := map[string]*float32{}
	for _, p := range m.Params() {
		out[p.Name] = storage(p.Value)
	}
	return out
}

// bothLogits is every position's logits of tinyIDs in one pass (the
// separate products) followed by a short batch's (the fused ones).
func bothLogits(t testing.TB, m *Model) []float32 {
	t.Helper()
	return append(forwardAll(t, m, tinyIDs), forwardAll(t, m, tinyIDs[:7])...)
}

func bitwiseEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// perturbed returns new values for the weights whose names satisfy keep:
// each value moved by a small amount that depends on its index.
func perturbed(m *Model, keep func(name string) bool) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range m.Params() {
		if !keep(p.Name) {
			continue
		}
		v := make([]float32, numel(p.Value.Shape()))
		m.b.ToHost(v, p.Value)
		for i := range v {
			v[i] += 0.01 * float32(i%7-3)
		}
		out[p.Name] = v
	}
	return out
}

func topLayer(c Config) func(string) bool {
	prefix := "model.layers." + strconv.Itoa(c.Layers-1) + "."
	return func(name string) bool { return strings.HasPrefix(name, prefix) || name == "model.norm.weight" }
}

// sharedEntryOf is the cache's entry for m, or nil.
func sharedEntryOf(m *Model) *sharedEntry {
	shareCache.Lock()
	defer shareCache.Unlock()
	if m.share == nil {
		return nil
	}
	return m.share.e
}

// TestSharedLoadSharesStorage: a second shared load of a file holds the
// first one's tensors (the stacked q/k/v and gate/up matrices included)
// and computes bit for bit what a private load does; a private load, or a
// shared load on a backend that is not the CPU's, shares nothing.
func TestSharedLoadSharesStorage(t *testing.T) {
	for name, s := range shareSpecs() {
		t.Run(name, func(t *testing.T) {
			w := s.RandomWeights(3)
			gpath, _ := s.WriteGGUF(t, w, modeltest.GGUFOptions{})
			for format, path := range map[string]string{"gguf": gpath, "hf": s.WriteHF(t, w, nil)} {
				private := mustLoad(t, path)
				want := bothLogits(t, private)
				a := mustLoadOpts(t, path, Options{Shared: true})
				b := mustLoadOpts(t, path, Options{Shared: true})
				sa, sb, sp := paramStorage(a), paramStorage(b), paramStorage(private)
				for n := range sa {
					if sa[n] != sb[n] {
						t.Errorf("%s: %s is not shared", format, n)
					}
					if sa[n] == sp[n] {
						t.Errorf("%s: %s of a private load is shared", format, n)
					}
					if !a.Shared(n) || !b.Shared(n) || private.Shared(n) {
						t.Errorf("%s: %s: Shared says %v, %v and (private) %v", format, n, a.Shared(n), b.Shared(n), private.Shared(n))
					}
				}
				for l := range a.fused {
					if storage(a.fused[l].qkv.Weight) != storage(b.fused[l].qkv.Weight) || storage(a.fused[l].gateUp.Weight) != storage(b.fused[l].gateUp.Weight) {
						t.Errorf("%s: layer %d's stacked matrices are not shared", format, l)
					}
				}
				if a.Weights().Blocks[0].Attn == b.Weights().Blocks[0].Attn || a.Weights().Blocks[0].Attn.Q == b.Weights().Blocks[0].Attn.Q {
					t.Errorf("%s: the layer structs are shared; each Model needs its own", format)
				}
				for i, m := range []*Model{a, b} {
					if got := bothLogits(t, m); !bitwiseEqual(got, want) {
						t.Errorf("%s: shared model %d: logits differ from a private load's", format, i)
					}
				}
				// A backend that is not the CPU's (as CUDA) never shares.
				other := mustLoadOpts(t, path, Options{Shared: true, Backend: wrappedCPU{cpu.New()}})
				for n, p := range paramStorage(other) {
					if p == sa[n] {
						t.Errorf("%s: %s shared on a backend that is not the CPU's", format, n)
					}
				}
				runtime.KeepAlive(a)
				runtime.KeepAlive(b)
			}
		})
	}
}

// wrappedCPU is the CPU backend under another type: a backend the cache
// must not share with (as it does not know its memory).
type wrappedCPU struct{ cpu.Backend }

// TestSharedUpdateParamsCopyOnWrite: UpdateParams and SetParams on one of
// two shared Models leave the other's logits bitwise unchanged, the written
// Model computes what a private load given the same weights computes, and
// the layers not written stay shared.
func TestSharedUpdateParamsCopyOnWrite(t *testing.T) {
	for name, s := range shareSpecs() {
		t.Run(name, func(t *testing.T) {
			path := s.WriteRandomGGUF(t, 5)
			a := mustLoadOpts(t, path, Options{Shared: true})
			b := mustLoadOpts(t, path, Options{Shared: true})
			private := mustLoad(t, path)
			before := bothLogits(t, b)

			top := topLayer(a.Config)
			upd := perturbed(a, top)
			if err := a.UpdateParams(upd); err != nil {
				t.Fatal(err)
			}
			if err := private.UpdateParams(upd); err != nil {
				t.Fatal(err)
			}
			if got := bothLogits(t, b); !bitwiseEqual(got, before) {
				t.Fatal("UpdateParams on one shared model changed the other's logits")
			}
			want := bothLogits(t, private)
			if got := bothLogits(t, a); !bitwiseEqual(got, want) {
				t.Fatal("the updated shared model's logits differ from a private model given the same update")
			}
			if bitwiseEqual(want, before) {
				t.Fatal("the update changed nothing: the test cannot tell")
			}
			sa, sb := paramStorage(a), paramStorage(b)
			for n := range sa {
				if top(n) == (sa[n] == sb[n]) || top(n) == a.Shared(n) {
					t.Errorf("%s: updated %v, same storage %v, Shared %v", n, top(n), sa[n] == sb[n], a.Shared(n))
				}
			}

			// SetParams (every weight) on the other one: a keeps its own.
			aBefore := bothLogits(t, a)
			all := perturbed(b, func(string) bool { return true })
			if err := b.SetParams(all); err != nil {
				t.Fatal(err)
			}
			if got := bothLogits(t, a); !bitwiseEqual(got, aBefore) {
				t.Fatal("SetParams on one shared model changed the other's logits")
			}
			p2 := mustLoad(t, path)
			if err := p2.SetParams(all); err != nil {
				t.Fatal(err)
			}
			if !bitwiseEqual(bothLogits(t, b), bothLogits(t, p2)) {
				t.Fatal("after SetParams the shared model's logits differ from a private model's")
			}
			// A failed update changes and copies nothing.
			c := mustLoadOpts(t, path, Options{Shared: true})
			if err := c.UpdateParams(map[string][]float32{"model.norm.weight": {1}}); err == nil {
				t.Fatal("UpdateParams with a wrong size succeeded")
			}
			if !c.Shared("model.norm.weight") || storage(c.Weights().OutputNorm.Weight) != sharedNormStorage(t, c) {
				t.Error("a refused UpdateParams copied the weight")
			}
			runtime.KeepAlive(a)
		})
	}
}

// sharedNormStorage is the cache's final norm for m's file.
func sharedNormStorage(t *testing.T, m *Model) *float32 {
	e := sharedEntryOf(m)
	shareCache.Lock()
	defer shareCache.Unlock()
	if e == nil || e.w.OutputNorm == nil {
		t.Fatal("the cache holds no final norm")
	}
	return storage(e.w.OutputNorm.Weight)
}

// TestSharedTrainerOwnsTrainedLayers: a Trainer of the top two of four
// layers owns exactly those and the final norm; a step written into its
// Params leaves the other shared Model's logits bitwise unchanged, and the
// frozen layers stay shared.
func TestSharedTrainerOwnsTrainedLayers(t *testing.T) {
	for name, s := range shareSpecs() {
		t.Run(name, func(t *testing.T) {
			path := s.WriteRandomGGUF(t, 9)
			learner := mustLoadOpts(t, path, Options{Shared: true})
			sampler := mustLoadOpts(t, path, Options{Shared: true})
			before := bothLogits(t, sampler)
			tr := mustTrainer(t, learner, TrainOptions{TrainLayers: 2})
			trained := map[string]bool{}
			for _, p := range tr.Params() {
				trained[p.Name] = true
			}
			ss := paramStorage(sampler)
			for n, p := range paramStorage(learner) {
				if trained[n] == (p == ss[n]) || trained[n] == learner.Shared(n) {
					t.Errorf("%s: trained %v, shares storage %v, Shared %v", n, trained[n], p == ss[n], learner.Shared(n))
				}
			}
			for _, p := range tr.Params() {
				if storage(p.Value) == ss[p.Name] {
					t.Errorf("the Trainer's %s is the sampler's storage", p.Name)
				}
			}
			for l := range 2 { // frozen: the stacked matrices too
				if storage(learner.fused[l].qkv.Weight) != storage(sampler.fused[l].qkv.Weight) {
					t.Errorf("frozen layer %d's q/k/v matrix is no longer shared", l)
				}
			}
			seqs, coef := trainBatch(s.Vocab(), []int{9, 5, 12}, 2)
			lpBefore, err := tr.LogProbs(seqs)
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.Backward(coef); err != nil {
				t.Fatal(err)
			}
			// A plain gradient step, in place, as an optimizer takes it.
			for _, p := range tr.Params() {
				v, g := p.Value.(*tensor.Tensor).Data(), p.Grad.(*tensor.Tensor).Data()
				for i := range v {
					v[i] -= 0.5 * g[i]
				}
			}
			if got := bothLogits(t, sampler); !bitwiseEqual(got, before) {
				t.Fatal("a training step on one shared model changed the other's logits")
			}
			lpAfter, err := tr.LogProbs(seqs)
			if err != nil {
				t.Fatal(err)
			}
			if bitwiseEqual(lpAfter[0], lpBefore[0]) {
				t.Fatal("the step changed nothing: the test cannot tell")
			}
			// The learner's Runner (the fused path included) sees the step.
			if bitwiseEqual(bothLogits(t, learner), before) {
				t.Fatal("the learner's logits did not change after its step")
			}
			ss2 := paramStorage(sampler)
			for n, p := range paramStorage(learner) {
				if !trained[n] && p != ss2[n] {
					t.Errorf("frozen %s is no longer shared after the step", n)
				}
			}
			// Every weight trained: nothing stays shared.
			all := mustLoadOpts(t, path, Options{Shared: true})
			mustTrainer(t, all, TrainOptions{})
			for n, p := range paramStorage(all) {
				if p == ss2[n] || all.Shared(n) {
					t.Errorf("a Trainer of every weight left %s shared", n)
				}
			}
		})
	}
}

// TestSharedQuantizedUpdate: a Sampler's quantized copies are its own. One
// shared model serving q8_0 keeps its logits while the other takes an
// update, and after the same update it computes bit for bit what a private
// q8_0 model given it computes.
func TestSharedQuantizedUpdate(t *testing.T) {
	for name, s := range shareSpecs() {
		t.Run(name, func(t *testing.T) {
			path := s.WriteRandomGGUF(t, 11)
			learner := mustLoadOpts(t, path, Options{Shared: true})
			sampler := mustLoadOpts(t, path, Options{Shared: true})
			private := mustLoad(t, path)
			for _, m := range []*Model{sampler, private} {
				if err := m.SetQuantization("q8_0"); err != nil {
					t.Fatal(err)
				}
			}
			f32Before := bothLogits(t, learner)
			before := bothLogits(t, sampler)
			if !bitwiseEqual(before, bothLogits(t, private)) {
				t.Fatal("a shared q8_0 model's logits differ from a private one's")
			}
			upd := perturbed(learner, topLayer(learner.Config))
			if err := learner.UpdateParams(upd); err != nil {
				t.Fatal(err)
			}
			if !bitwiseEqual(bothLogits(t, sampler), before) {
				t.Fatal("an update of the float32 learner changed the q8_0 sampler's logits")
			}
			for _, m := range []*Model{sampler, private} {
				if err := m.UpdateParams(upd); err != nil {
					t.Fatal(err)
				}
			}
			got, want := bothLogits(t, sampler), bothLogits(t, private)
			if !bitwiseEqual(got, want) {
				t.Fatal("after the update the shared q8_0 sampler's logits differ from a private q8_0 model's")
			}
			if bitwiseEqual(got, before) {
				t.Fatal("the update did not reach the quantized weights")
			}
			if bitwiseEqual(bothLogits(t, learner), f32Before) {
				t.Fatal("the learner's float32 logits did not follow its own update")
			}
			if sampler.QuantizedBytes() == 0 || learner.QuantizedBytes() != 0 {
				t.Fatalf("quantized bytes: sampler %d, learner %d", sampler.QuantizedBytes(), learner.QuantizedBytes())
			}
		})
	}
}

// TestSharedCacheDropsUnusedWeights: a unit every Model has copied is
// dropped from the cache, a later shared load reads it from the file again
// (and computes what a private load does), and once no Model uses a file
// the cache holds nothing of it and its storage is collected.
func TestSharedCacheDropsUnusedWeights(t *testing.T) {
	s := shareSpecs()["qwen2"]
	path := s.WriteRandomGGUF(t, 13)
	want := bothLogits(t, mustLoad(t, path))
	a := mustLoadOpts(t, path, Options{Shared: true})
	b := mustLoadOpts(t, path, Options{Shared: true})
	e := sharedEntryOf(a)
	if e == nil || e != sharedEntryOf(b) {
		t.Fatal("the two loads do not share one cache entry")
	}
	c := a.Config
	top := blockUnit(c.Layers - 1)
	refs := func(u int) (int, bool) {
		shareCache.Lock()
		defer shareCache.Unlock()
		return e.refs[u], e.has[u]
	}
	if n, has := refs(top); n != 2 || !has {
		t.Fatalf("top layer: %d references, held %v; want 2, true", n, has)
	}
	upd := perturbed(a, topLayer(c))
	for _, m := range []*Model{a, b} {
		if err := m.UpdateParams(upd); err != nil {
			t.Fatal(err)
		}
	}
	if n, has := refs(top); n != 0 || has {
		t.Fatalf("after both models copied the top layer: %d references, held %v; want 0, false", n, has)
	}
	if n, has := refs(0); n != 2 || !has {
		t.Fatalf("embedding: %d references, held %v; want 2, true", n, has)
	}
	// A third load shares what the cache holds and reads the top layer
	// from the file: the base weights, not a or b's update.
	d := mustLoadOpts(t, path, Options{Shared: true})
	if got := bothLogits(t, d); !bitwiseEqual(got, want) {
		t.Fatal("a load over a partly dropped cache computes other logits than a private load")
	}
	if storage(d.Weights().TokenEmbedding) != storage(a.Weights().TokenEmbedding) {
		t.Fatal("the third load does not share the embedding")
	}
	if n, has := refs(top); n != 1 || !has {
		t.Fatalf("top layer after the third load: %d references, held %v; want 1, true", n, has)
	}

	emb := weak.Make(a.Weights().TokenEmbedding.(*tensor.Tensor))
	key := e.key
	a, b, d = nil, nil, nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		shareCache.Lock()
		_, cached := shareCache.m[key]
		shareCache.Unlock()
		if !cached && emb.Value() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the last Model went: cached %v, embedding alive %v", cached, emb.Value() != nil)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSharedLoadMemory: the second shared load of a model adds a small
// fraction of what a private load adds to the live heap.
func TestSharedLoadMemory(t *testing.T) {
	s := modeltest.Spec{Arch: "qwen2", Dim: 256, Heads: 8, KV: 2, HD: 32, FFN: 1024, Layers: 4}
	path := s.WriteRandomGGUF(t, 17)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	h0 := heap()
	a := mustLoadOpts(t, path, Options{Shared: true})
	h1 := heap()
	b := mustLoadOpts(t, path, Options{Shared: true})
	h2 := heap()
	p := mustLoad(t, path)
	h3 := heap()
	first, second, private := int64(h1-h0), int64(h2)-int64(h1), int64(h3)-int64(h2)
	t.Logf("live heap added: first shared load %d B, second %d B, private load %d B", first, second, private)
	if private < 4<<20 || second*10 > private {
		t.Fatalf("the second shared load added %d B, a private one %d B: want under a tenth", second, private)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(p)
}

// TestSharedSmolLM2 is the Learner and Sampler of a run on SmolLM2-135M:
// the second shared load adds little memory, a step of a Trainer of the
// top 2 layers leaves the other's logits bitwise unchanged and the frozen
// layers shared.
func TestSharedSmolLM2(t *testing.T) {
	p := os.Getenv("FROGNANO_TEST_GGUF")
	if p == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset")
	}
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	h0 := heap()
	learner := mustLoadOpts(t, p, Options{Shared: true})
	h1 := heap()
	sampler := mustLoadOpts(t, p, Options{Shared: true})
	h2 := heap()
	t.Logf("live heap added: first load %.1f MB, second shared load %.1f MB", float64(h1-h0)/1e6, float64(h2-h1)/1e6)
	if (h2-h1)*50 > h1-h0 {
		t.Fatalf("the second shared load added %d B, the first %d B: want under 2%%", h2-h1, h1-h0)
	}
	ids := tinyIDs[:20]
	before := forwardAll(t, sampler, ids)
	tr := mustTrainer(t, learner, TrainOptions{TrainLayers: 2})
	seqs := [][]int32{ids, ids[:12]}
	coef := [][]float32{make([]float32, len(ids)-1), make([]float32, 11)}
	for i := range coef {
		for j := range coef[i] {
			coef[i][j] = 1
		}
	}
	if _, err := tr.LogProbs(seqs); err != nil {
		t.Fatal(err)
	}
	if err := tr.Backward(coef); err != nil {
		t.Fatal(err)
	}
	for _, p := range tr.Params() {
		v, g := p.Value.(*tensor.Tensor).Data(), p.Grad.(*tensor.Tensor).Data()
		for i := range v {
			v[i] += 1e-3 * g[i]
		}
	}
	if !bitwiseEqual(forwardAll(t, sampler, ids), before) {
		t.Fatal("a training step on the learner changed the sampler's logits")
	}
	if bitwiseEqual(forwardAll(t, learner, ids), before) {
		t.Fatal("the learner's step changed nothing")
	}
	ss := paramStorage(sampler)
	frozen := 0
	for n, st := range paramStorage(learner) {
		if !tr.Frozen(n) {
			continue
		}
		frozen++
		if st != ss[n] {
			t.Errorf("frozen %s is not shared", n)
		}
	}
	if frozen == 0 {
		t.Fatal("no frozen weights")
	}
}
