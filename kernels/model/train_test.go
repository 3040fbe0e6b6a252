package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu"
	"github.com/frognano/frognano/kernels/kernelstest"
	"github.com/frognano/frognano/kernels/model/modeltest"
	"github.com/frognano/frognano/kernels/tensor"
)

// The Trainer is checked three ways on tiny random models: against finite
// differences of modeltest's float64 reference (an independent forward
// pass, so the check covers every operation's backward and the wiring
// between them), against PyTorch's autograd through Hugging Face's own
// modelling code (testdata/train_grads.golden, from
// testdata/gen/gen_grads.py), and against itself (recomputation,
// accumulation, packing). SmolLM2 tests, when FROGNANO_TEST_GGUF is set,
// compare its log-probabilities with the inference Runner's logits.

// trainBatch is a packed batch of sequences of different lengths, one of a
// single token (which predicts nothing), and random loss coefficients.
func trainBatch(vocab int, lens []int, seed uint64) (seqs [][]int32, coef [][]float32) {
	r := rand.New(rand.NewPCG(seed, 7))
	for _, n := range lens {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(r.IntN(vocab))
		}
		c := make([]float32, n-1)
		for i := range c {
			c[i] = float32(r.NormFloat64())
		}
		seqs, coef = append(seqs, s), append(coef, c)
	}
	return seqs, coef
}

func mustTrainer(t testing.TB, m *Model, o TrainOptions) *Trainer {
	t.Helper()
	tr, err := m.NewTrainer(o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// gradsOf runs one LogProbs and Backward from zero gradients and returns
// the log-probabilities and a copy of every gradient by name.
func gradsOf(t testing.TB, tr *Trainer, seqs [][]int32, coef [][]float32) ([][]float32, map[string][]float32) {
	t.Helper()
	tr.ZeroGrad()
	lp, err := tr.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Backward(coef); err != nil {
		t.Fatal(err)
	}
	return lp, gradMap(tr)
}

func gradMap(tr *Trainer) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range tr.Params() {
		out[p.Name] = hostCopy(tr.b, p.Grad)
	}
	return out
}

func hostCopy(b kernels.Backend, x kernels.Tensor) []float32 {
	out := make([]float32, numel(x.Shape()))
	b.ToHost(out, x)
	return out
}

// refLoss is Σ coef·logp with every log-probability from the float64
// reference.
func refLoss(s modeltest.Spec, w modeltest.Weights, seqs [][]int32, coef [][]float32) float64 {
	var loss float64
	for i, ids := range seqs {
		if len(ids) < 2 {
			continue
		}
		for j, row := range s.Reference(w, ids)[:len(ids)-1] {
			loss += float64(coef[i][j]) * refLogSoftmax(row, int(ids[j+1]))
		}
	}
	return loss
}

func refLogSoftmax(row []float64, target int) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, v)
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(v - mx)
	}
	return row[target] - mx - math.Log(sum)
}

// TestTrainFiniteDifferences compares, for every weight tensor of each
// architecture, a sample of gradient elements (random ones and the largest)
// with central differences of the float64 reference's loss. The reference
// is exact to far below float32's precision, so the tolerance is our
// float32 arithmetic's.
func TestTrainFiniteDifferences(t *testing.T) {
	for _, name := range []string{"llama", "llama-untied", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			s := tinySpecs[name]
			w := s.RandomWeights(11)
			m := mustLoad(t, s.WriteHF(t, w, nil))
			tr := mustTrainer(t, m, TrainOptions{ChunkRows: 5}) // several chunks, one partial
			seqs, coef := trainBatch(s.Vocab(), []int{9, 1, 6}, 12)
			lp, grads := gradsOf(t, tr, seqs, coef)

			// The forward pass itself, against the reference.
			for i, ids := range seqs {
				var want []float32
				if len(ids) > 1 {
					for j, row := range s.Reference(w, ids)[:len(ids)-1] {
						want = append(want, float32(refLogSoftmax(row, int(ids[j+1]))))
					}
				}
				if msg := kernelstest.Mismatch(lp[i], want, tinyTol); msg != "" {
					t.Errorf("sequence %d: log-probabilities: %s", i, msg)
				}
			}

			r := rand.New(rand.NewPCG(13, 1))
			const h = 1e-3
			checked := 0
			for _, p := range tr.Params() {
				g := grads[p.Name]
				data := w[p.Name].Data
				if len(g) != len(data) {
					t.Fatalf("%s: gradient of %d values for a weight of %d", p.Name, len(g), len(data))
				}
				var scale float64
				for _, v := range g {
					scale = math.Max(scale, math.Abs(float64(v)))
				}
				if scale == 0 {
					t.Errorf("%s: gradient is all zero", p.Name)
					continue
				}
				idx := []int{int(argmax(absAll(g)))}
				for range 4 {
					idx = append(idx, r.IntN(len(g)))
				}
				for _, i := range idx {
					old := data[i]
					data[i] = old + h
					up := float64(data[i]) - float64(old)
					lossUp := refLoss(s, w, seqs, coef)
					data[i] = old - h
					down := float64(old) - float64(data[i])
					lossDown := refLoss(s, w, seqs, coef)
					data[i] = old
					fd := (lossUp - lossDown) / (up + down)
					if d := math.Abs(float64(g[i]) - fd); d > 2e-4+1e-3*math.Abs(fd)+1e-5*scale {
						t.Errorf("%s[%d]: gradient %v, finite difference %v (|diff| %.3g)", p.Name, i, g[i], fd, d)
					}
					checked++
				}
			}
			t.Logf("%d gradient elements of %d tensors checked", checked, len(tr.Params()))
		})
	}
}

func absAll(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(math.Abs(float64(v)))
	}
	return out
}

// gradTol bounds our float32 gradients' distance from PyTorch's float32
// ones on the tiny models (gradients up to about 40).
var gradTol = kernelstest.Tolerance{Abs: 5e-5, Rel: 5e-5}

// TestTrainGolden loads the weights PyTorch used, and compares
// log-probabilities and every gradient with autograd's through Hugging
// Face's LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM.
func TestTrainGolden(t *testing.T) {
	g, err := kernelstest.ReadGolden("testdata/train_grads.golden")
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			cfg, ok := g[arch+"/config"]
			if !ok {
				t.Fatalf("golden %s/config missing", arch)
			}
			c := kernelstest.Ints(cfg)
			s := modeltest.Spec{Arch: arch, Dim: int(c[0]), Heads: int(c[1]), KV: int(c[2]), HD: int(c[3]), FFN: int(c[4]), Layers: int(c[5]), Untied: c[6] == 1}
			w := modeltest.Weights{}
			for name, x := range g {
				if n, ok := strings.CutPrefix(name, arch+"/w/"); ok {
					w[n] = modeltest.Tensor{Shape: x.Shape(), Data: x.Data()}
				}
			}
			m := mustLoad(t, s.WriteHF(t, w, nil))
			var seqs [][]int32
			var coef, wantLP [][]float32
			for i := 0; ; i++ {
				ids, ok := g[fmt.Sprintf("%s/ids/%d", arch, i)]
				if !ok {
					break
				}
				seqs = append(seqs, kernelstest.Ints(ids))
				coef = append(coef, g[fmt.Sprintf("%s/dlogp/%d", arch, i)].Data())
				wantLP = append(wantLP, g[fmt.Sprintf("%s/logp/%d", arch, i)].Data())
			}
			for _, recompute := range []bool{false, true} {
				tr := mustTrainer(t, m, TrainOptions{Recompute: recompute, ChunkRows: 8})
				lp, grads := gradsOf(t, tr, seqs, coef)
				for i := range seqs {
					if msg := kernelstest.Mismatch(lp[i], wantLP[i], tinyTol); msg != "" {
						t.Errorf("recompute %v: sequence %d: log-probabilities: %s", recompute, i, msg)
					}
				}
				var worst float64
				for _, p := range tr.Params() {
					want, ok := g[arch+"/grad/"+p.Name]
					if !ok {
						t.Errorf("%s: no golden gradient", p.Name)
						continue
					}
					if msg := kernelstest.Mismatch(grads[p.Name], want.Data(), gradTol); msg != "" {
						t.Errorf("recompute %v: %s: %s", recompute, p.Name, msg)
					}
					worst = math.Max(worst, maxDiff(grads[p.Name], want.Data()))
				}
				if len(tr.Params()) != len(w) {
					t.Errorf("%d params, PyTorch has %d", len(tr.Params()), len(w))
				}
				t.Logf("recompute %v: largest |ours - PyTorch| over every gradient: %.3g", recompute, worst)
			}
		})
	}
}

// TestTrainRecomputeAndChunks: recomputing each block in Backward, and any
// chunking of the logits, give the stored pass's gradients.
func TestTrainRecomputeAndChunks(t *testing.T) {
	for _, name := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			s := tinySpecs[name]
			m := mustLoad(t, s.WriteHF(t, s.RandomWeights(21), nil))
			seqs, coef := trainBatch(s.Vocab(), []int{40, 3, 1, 17}, 22)
			lp0, g0 := gradsOf(t, mustTrainer(t, m, TrainOptions{}), seqs, coef)
			for _, o := range []TrainOptions{{Recompute: true}, {ChunkRows: 1}, {Recompute: true, ChunkRows: 7}} {
				lp, g := gradsOf(t, mustTrainer(t, m, o), seqs, coef)
				// The recomputed pass is the same operations on the same
				// inputs, so it is exact; other chunks of logits change
				// the shapes of the output products, and so the float32
				// summation order of what depends on them.
				exact := o.ChunkRows == 0
				lpTol := kernelstest.Tolerance{}
				if !exact {
					lpTol = tinyTol
				}
				for i := range lp {
					if msg := kernelstest.Mismatch(lp[i], lp0[i], lpTol); msg != "" {
						t.Errorf("%+v: sequence %d: log-probabilities: %s", o, i, msg)
					}
				}
				for _, p := range sortedKeys(g0) {
					tol := kernelstest.Tolerance{}
					if !exact {
						tol = summationTol(g0[p])
					}
					if msg := kernelstest.Mismatch(g[p], g0[p], tol); msg != "" {
						t.Errorf("%+v: %s: %s", o, p, msg)
					}
				}
			}
		})
	}
}

// summationTol bounds the difference between two float32 computations of
// the gradient want that sum the same terms in different orders: relative
// to the tensor's largest element, as an element that is a small sum of
// large terms of both signs carries their rounding.
func summationTol(want []float32) kernelstest.Tolerance {
	var scale float64
	for _, v := range want {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	return kernelstest.Tolerance{Abs: 1e-4 * scale, Rel: 1e-5}
}

func sortedKeys[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestTrainAccumulation: Backward adds, so a batch split in two halves
// (without ZeroGrad between) gives the whole batch's gradient, and two
// Backward calls for one LogProbs give twice the gradient. The Trainer's
// buffers, grown by the larger batch, serve the smaller one.
func TestTrainAccumulation(t *testing.T) {
	s := tinySpecs["qwen2"]
	m := mustLoad(t, s.WriteHF(t, s.RandomWeights(31), nil))
	seqs, coef := trainBatch(s.Vocab(), []int{12, 5, 30, 8}, 32)
	tr := mustTrainer(t, m, TrainOptions{})
	_, whole := gradsOf(t, tr, seqs, coef)

	tr.ZeroGrad()
	for _, half := range [][2]int{{0, 2}, {2, 4}} {
		if _, err := tr.LogProbs(seqs[half[0]:half[1]]); err != nil {
			t.Fatal(err)
		}
		if err := tr.Backward(coef[half[0]:half[1]]); err != nil {
			t.Fatal(err)
		}
	}
	halves := gradMap(tr)
	for _, p := range sortedKeys(whole) {
		if msg := kernelstest.Mismatch(halves[p], whole[p], summationTol(whole[p])); msg != "" {
			t.Errorf("two halves: %s: %s", p, msg)
		}
	}

	tr.ZeroGrad()
	if _, err := tr.LogProbs(seqs); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := tr.Backward(coef); err != nil {
			t.Fatal(err)
		}
	}
	twice := gradMap(tr)
	for _, p := range sortedKeys(whole) {
		want := make([]float32, len(whole[p]))
		for i, v := range whole[p] {
			want[i] = 2 * v
		}
		if msg := kernelstest.Mismatch(twice[p], want, summationTol(want)); msg != "" {
			t.Errorf("two Backward calls: %s: %s", p, msg)
		}
	}
}

// TestTrainPacking: a sequence's log-probabilities do not depend on what it
// is packed with.
func TestTrainPacking(t *testing.T) {
	s := tinySpecs["qwen3"]
	m := mustLoad(t, s.WriteHF(t, s.RandomWeights(41), nil))
	seqs, _ := trainBatch(s.Vocab(), []int{7, 19, 2}, 42)
	tr := mustTrainer(t, m, TrainOptions{})
	packed, err := tr.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		alone, err := tr.LogProbs(seqs[i : i+1])
		if err != nil {
			t.Fatal(err)
		}
		if msg := kernelstest.Mismatch(packed[i], alone[0], tinyTol); msg != "" {
			t.Errorf("sequence %d: packed differs from alone: %s", i, msg)
		}
	}
}

// TestTrainParamsShareStorage changes weights through Params in place, as
// an optimizer does, and checks that the Runner's logits, on both the
// stacked (short batch) and the separate (long batch) paths, are those of a
// model loaded with the changed weights.
func TestTrainParamsShareStorage(t *testing.T) {
	for _, name := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			s := tinySpecs[name]
			w := s.RandomWeights(51)
			m := mustLoad(t, s.WriteHF(t, w, nil))
			tr := mustTrainer(t, m, TrainOptions{})
			before := forwardAll(t, m, tinyIDs)
			// Scale every weight's elements by 1 + 0.1·sin(i), through the
			// backend, on the Param's tensor.
			b := tr.b
			for _, p := range tr.Params() {
				host := hostCopy(b, p.Value)
				orig := w[p.Name].Data
				for i := range host {
					host[i] *= 1 + 0.1*float32(math.Sin(float64(i)))
					orig[i] = host[i]
				}
				b.Copy(p.Value, b.FromHost(tensor.From(host, p.Value.Shape()...)))
			}
			want := mustLoad(t, s.WriteHF(t, w, nil))
			for _, n := range []int{len(tinyIDs), 5} { // unfused, fused
				got := forwardAll(t, m, tinyIDs[:n])
				if msg := kernelstest.Mismatch(got, forwardAll(t, want, tinyIDs[:n]), kernelstest.Tolerance{}); msg != "" {
					t.Errorf("%d tokens: logits after updating Params differ from a model loaded with the new weights: %s", n, msg)
				}
				if maxDiff(got, before[:len(got)]) < 1e-3 {
					t.Errorf("%d tokens: logits did not change", n)
				}
			}
		})
	}
}

// TestParamsNames checks Model.Params and Trainer.Params against the
// names a Hugging Face checkpoint has, and SetParams' round trip and
// errors.
func TestParamsNames(t *testing.T) {
	for _, name := range []string{"llama", "llama-untied", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			s := tinySpecs[name]
			w := s.RandomWeights(61)
			m := mustLoad(t, s.WriteHF(t, w, nil))
			// A GGUF file's weights come out in Hugging Face layout, under
			// Hugging Face names (llama's q/k permutation undone).
			gpath, _ := s.WriteGGUF(t, w, modeltest.GGUFOptions{})
			for _, p := range mustLoad(t, gpath).Params() {
				if msg := kernelstest.Mismatch(hostCopy(m.b, p.Value), w[p.Name].Data, kernelstest.Tolerance{}); msg != "" {
					t.Errorf("GGUF %s: %s", p.Name, msg)
				}
			}
			ps := m.Params()
			if len(ps) != len(w) {
				t.Errorf("%d params, the checkpoint has %d tensors", len(ps), len(w))
			}
			tr := mustTrainer(t, m, TrainOptions{})
			for i, p := range ps {
				hw, ok := w[p.Name]
				if !ok {
					t.Errorf("param %q is not a checkpoint tensor", p.Name)
					continue
				}
				if fmt.Sprint(p.Value.Shape()) != fmt.Sprint(hw.Shape) {
					t.Errorf("%s: shape %v, checkpoint %v", p.Name, p.Value.Shape(), hw.Shape)
				}
				if msg := kernelstest.Mismatch(hostCopy(m.b, p.Value), hw.Data, kernelstest.Tolerance{}); msg != "" {
					t.Errorf("%s: %s", p.Name, msg)
				}
				tp := tr.Params()[i]
				if tp.Name != p.Name || tp.Value != p.Value || fmt.Sprint(tp.Grad.Shape()) != fmt.Sprint(p.Value.Shape()) {
					t.Errorf("trainer param %d: %s %v, model's %s %v", i, tp.Name, tp.Grad.Shape(), p.Name, p.Value.Shape())
				}
			}
			if ps[0].Name != "model.embed_tokens.weight" || ps[len(ps)-1].Name != map[bool]string{true: "lm_head.weight", false: "model.norm.weight"}[s.Untied] {
				t.Errorf("order: first %s, last %s", ps[0].Name, ps[len(ps)-1].Name)
			}
		})
	}
}

func TestSetParams(t *testing.T) {
	s := tinySpecs["qwen2"]
	src := mustLoad(t, s.WriteHF(t, s.RandomWeights(71), nil))
	dst := mustLoad(t, s.WriteHF(t, s.RandomWeights(72), nil))
	values := map[string][]float32{}
	for _, p := range src.Params() {
		values[p.Name] = hostCopy(src.b, p.Value)
	}
	before := forwardAll(t, dst, tinyIDs)

	bad := func(edit func(map[string][]float32)) map[string][]float32 {
		c := map[string][]float32{}
		for k, v := range values {
			c[k] = v
		}
		edit(c)
		return c
	}
	errs := []struct {
		name string
		src  map[string][]float32
		msg  string
	}{
		{"missing", bad(func(c map[string][]float32) { delete(c, "model.layers.1.self_attn.k_proj.bias") }), "model.layers.1.self_attn.k_proj.bias is missing"},
		{"size", bad(func(c map[string][]float32) { c["model.norm.weight"] = make([]float32, 3) }), "model.norm.weight has 3 values, the model's [32] holds 32"},
		{"unknown", bad(func(c map[string][]float32) { c["lm_head.weight"] = nil }), "lm_head.weight is not a weight of this qwen2 model"},
	}
	for _, e := range errs {
		err := dst.SetParams(e.src)
		if err == nil || !strings.Contains(err.Error(), e.msg) {
			t.Errorf("%s: err = %v, want %q", e.name, err, e.msg)
		}
		if msg := kernelstest.Mismatch(forwardAll(t, dst, tinyIDs), before, kernelstest.Tolerance{}); msg != "" {
			t.Errorf("%s: a refused SetParams changed the model: %s", e.name, msg)
		}
	}

	if err := dst.SetParams(values); err != nil {
		t.Fatal(err)
	}
	for _, p := range dst.Params() {
		if msg := kernelstest.Mismatch(hostCopy(dst.b, p.Value), values[p.Name], kernelstest.Tolerance{}); msg != "" {
			t.Errorf("%s after SetParams: %s", p.Name, msg)
		}
	}
	// Both the separate and the stacked (fused) weights took the values.
	for _, n := range []int{len(tinyIDs), 6} {
		if msg := kernelstest.Mismatch(forwardAll(t, dst, tinyIDs[:n]), forwardAll(t, src, tinyIDs[:n]), kernelstest.Tolerance{}); msg != "" {
			t.Errorf("%d tokens: logits after SetParams: %s", n, msg)
		}
	}
	// The values were copied: changing the map afterwards changes nothing.
	values["model.norm.weight"][0] = 1000
	if msg := kernelstest.Mismatch(forwardAll(t, dst, tinyIDs), forwardAll(t, src, tinyIDs), kernelstest.Tolerance{}); msg != "" {
		t.Errorf("SetParams kept a reference to its input: %s", msg)
	}
}

// inferenceOnly hides the CPU backend's training operations.
type inferenceOnly struct{ kernels.Backend }

func TestTrainErrors(t *testing.T) {
	s := tinySpecs["llama"]
	path := s.WriteHF(t, s.RandomWeights(81), nil)
	inf, err := Load(path, Options{Backend: inferenceOnly{cpu.New()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf.NewTrainer(TrainOptions{}); err == nil || !strings.Contains(err.Error(), "cannot train") {
		t.Errorf("NewTrainer on an inference-only backend: err = %v", err)
	}
	m := mustLoad(t, path)
	if _, err := m.NewTrainer(TrainOptions{ChunkRows: -1}); err == nil || !strings.Contains(err.Error(), "ChunkRows -1") {
		t.Errorf("negative ChunkRows: err = %v", err)
	}
	tr := mustTrainer(t, m, TrainOptions{})
	if err := tr.Backward([][]float32{{1}}); err == nil || !strings.Contains(err.Error(), "without a successful LogProbs") {
		t.Errorf("Backward first: err = %v", err)
	}
	for _, tt := range []struct {
		name string
		seqs [][]int32
		msg  string
	}{
		{"none", nil, "no sequences"},
		{"empty", [][]int32{{1, 2}, {}}, "sequence 1 is empty"},
		{"vocabulary", [][]int32{{1, 263}}, "position 1: token id 263 outside the vocabulary of 263"},
		{"negative", [][]int32{{-1}}, "token id -1"},
	} {
		if _, err := tr.LogProbs(tt.seqs); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.msg)
		}
	}
	if err := tr.Backward([][]float32{{1}}); err == nil || !strings.Contains(err.Error(), "without a successful LogProbs") {
		t.Errorf("Backward after a refused LogProbs: err = %v", err)
	}
	if _, err := tr.LogProbs([][]int32{{1, 2, 3}, {4, 5}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		dlogp [][]float32
		msg   string
	}{
		{"count", [][]float32{{1, 2}}, "gradients for 1 sequences, LogProbs ran 2"},
		{"length", [][]float32{{1, 2}, {1, 2}}, "sequence 1 has 1 log-probabilities but 2 gradients"},
	} {
		if err := tr.Backward(tt.dlogp); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.msg)
		}
	}
	for _, p := range tr.Params() {
		for _, v := range hostCopy(tr.b, p.Grad) {
			if v != 0 {
				t.Fatalf("%s: a refused Backward changed the gradient", p.Name)
			}
		}
	}
}

// TestTrainHistoryIndependent: a batch gives bit-identical results on a
// fresh Trainer and on one whose buffers earlier, larger batches grew, as a
// learner resumed from a checkpoint must repeat an uninterrupted run.
func TestTrainHistoryIndependent(t *testing.T) {
	s := tinySpecs["llama"]
	m := mustLoad(t, s.WriteHF(t, s.RandomWeights(91), nil))
	seqs, coef := trainBatch(s.Vocab(), []int{6, 9}, 92)
	big, bigCoef := trainBatch(s.Vocab(), []int{30, 41, 2}, 93)
	for _, o := range []TrainOptions{{}, {ChunkRows: 4}, {Recompute: true}} {
		lpFresh, fresh := gradsOf(t, mustTrainer(t, m, o), seqs, coef)
		used := mustTrainer(t, m, o)
		gradsOf(t, used, big, bigCoef)
		lpUsed, again := gradsOf(t, used, seqs, coef)
		for i := range seqs {
			if msg := kernelstest.Mismatch(lpUsed[i], lpFresh[i], kernelstest.Tolerance{}); msg != "" {
				t.Errorf("%+v: sequence %d: %s", o, i, msg)
			}
		}
		for _, p := range sortedKeys(fresh) {
			if msg := kernelstest.Mismatch(again[p], fresh[p], kernelstest.Tolerance{}); msg != "" {
				t.Errorf("%+v: %s: %s", o, p, msg)
			}
		}
	}
}

// TestTrainTopLayers: training only the top layers gives exactly the
// log-probabilities of training everything, and for the trained weights
// (the top layers' and the final norm) exactly the same gradients; the
// frozen weights have no gradient and are not listed, with and without
// recomputation.
func TestTrainTopLayers(t *testing.T) {
	for _, name := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			s := tinySpecs[name]
			m := mustLoad(t, s.WriteHF(t, s.RandomWeights(31), nil))
			layers := m.Config.Layers
			if layers < 2 {
				t.Fatalf("the tiny %s has %d layers; the test needs 2 or more", name, layers)
			}
			seqs, coef := trainBatch(s.Vocab(), []int{33, 5, 1, 12}, 32)
			lp0, g0 := gradsOf(t, mustTrainer(t, m, TrainOptions{}), seqs, coef)
			for _, o := range []TrainOptions{{TrainLayers: 1}, {TrainLayers: layers - 1, Recompute: true}, {TrainLayers: layers}} {
				tr := mustTrainer(t, m, o)
				lp, g := gradsOf(t, tr, seqs, coef)
				for i := range lp {
					if msg := kernelstest.Mismatch(lp[i], lp0[i], kernelstest.Tolerance{}); msg != "" {
						t.Errorf("%+v: sequence %d: log-probabilities: %s", o, i, msg)
					}
				}
				first := layers - o.TrainLayers
				want := 0
				for _, p := range m.Params() {
					layer := -1
					fmt.Sscanf(strings.TrimPrefix(p.Name, "model.layers."), "%d.", &layer)
					trained := o.TrainLayers >= layers || p.Name == "model.norm.weight" || (strings.HasPrefix(p.Name, "model.layers.") && layer >= first)
					if trained != !tr.Frozen(p.Name) {
						t.Errorf("%+v: %s: trained %v, want %v", o, p.Name, !tr.Frozen(p.Name), trained)
					}
					_, listed := g[p.Name]
					if listed != trained {
						t.Errorf("%+v: %s: has a gradient %v, want %v", o, p.Name, listed, trained)
					}
					if trained {
						want++
						if msg := kernelstest.Mismatch(g[p.Name], g0[p.Name], kernelstest.Tolerance{}); msg != "" {
							t.Errorf("%+v: %s: %s", o, p.Name, msg)
						}
					}
				}
				if len(g) != want || want == 0 {
					t.Errorf("%+v: %d gradients, want %d", o, len(g), want)
				}
			}
			if _, err := m.NewTrainer(TrainOptions{TrainLayers: -1}); err == nil {
				t.Error("TrainLayers -1 was accepted")
			}
		})
	}
}

// TestTrainWantedRows: LogProbsOf computes only the log-probabilities its
// mask asks for, equal to LogProbs's there and 0 elsewhere, and Backward
// then gives the gradient of the loss over those entries alone (the full
// pass's with the other coefficients zeroed), whatever it is handed for
// the others; with the top layer alone trained as well.
func TestTrainWantedRows(t *testing.T) {
	for _, name := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			s := tinySpecs[name]
			m := mustLoad(t, s.WriteHF(t, s.RandomWeights(41), nil))
			seqs, coef := trainBatch(s.Vocab(), []int{30, 6, 1, 19}, 42)
			r := rand.New(rand.NewPCG(43, 1))
			want := make([][]bool, len(seqs))
			masked := make([][]float32, len(seqs))
			for i := range seqs {
				want[i] = make([]bool, len(coef[i]))
				masked[i] = make([]float32, len(coef[i]))
				for j := range want[i] {
					// a prompt, then an answer with a gap in it
					want[i][j] = j >= len(want[i])/3 && r.IntN(5) > 0
					if want[i][j] {
						masked[i][j] = coef[i][j]
					}
				}
			}
			for _, o := range []TrainOptions{{}, {TrainLayers: 1, ChunkRows: 5}} {
				lp0, g0 := gradsOf(t, mustTrainer(t, m, o), seqs, masked)
				tr := mustTrainer(t, m, o)
				tr.ZeroGrad()
				lp, err := tr.LogProbsOf(seqs, want)
				if err != nil {
					t.Fatal(err)
				}
				for i := range lp {
					for j := range lp[i] {
						w := float32(0)
						if want[i][j] {
							w = lp0[i][j]
						}
						if d := math.Abs(float64(lp[i][j] - w)); d > 1e-5 {
							t.Fatalf("%+v: out[%d][%d] = %v, want %v", o, i, j, lp[i][j], w)
						}
					}
				}
				if err := tr.Backward(coef); err != nil { // unwanted coefficients are ignored
					t.Fatal(err)
				}
				g := gradMap(tr)
				for _, p := range sortedKeys(g0) {
					if msg := kernelstest.Mismatch(g[p], g0[p], summationTol(g0[p])); msg != "" {
						t.Errorf("%+v: %s: %s", o, p, msg)
					}
				}
			}
			tr := mustTrainer(t, m, TrainOptions{})
			if _, err := tr.LogProbsOf(seqs, want[:1]); err == nil {
				t.Error("a mask for one of four sequences was accepted")
			}
			if _, err := tr.LogProbsOf(seqs, [][]bool{want[0], want[1], want[2], want[2]}); err == nil {
				t.Error("a mask of the wrong length was accepted")
			}
		})
	}
}

// TestTrainSharedPrefixes runs batches in which consecutive sequences begin
// with one prompt (a GRPO group's episodes), with masks that want only the
// answers, and checks that sharing the prompt rows gives the
// log-probabilities and gradients of running every sequence in full, for
// each architecture, with every layer or only the top ones trained, with
// and without recomputation; and that the shared batch is shorter.
func TestTrainSharedPrefixes(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 7))
	tokens := func(vocab, n int) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(r.IntN(vocab))
		}
		return s
	}
	for _, name := range []string{"llama", "qwen2", "qwen3"} {
		s := tinySpecs[name]
		m := mustLoad(t, s.WriteHF(t, s.RandomWeights(43), nil))
		v := s.Vocab()
		// Two groups sharing prompts of 40 and 24 tokens (the second
		// group's answers begin with one more given token, not wanted),
		// a sequence alone, and a pair whose common prefix is too short.
		// Prompt B begins with prompt A's first 20 tokens (one system
		// prompt): the groups stay two units, each sharing its whole
		// prompt, not one sharing 20 tokens.
		promptA := tokens(v, 40)
		promptB := append(append([]int32{}, promptA[:20]...), tokens(v, 4)...)
		var seqs [][]int32
		var want [][]bool
		add := func(prompt []int32, given, answer int) {
			seq := append(append([]int32{}, prompt...), tokens(v, given+answer)...)
			w := make([]bool, len(seq)-1)
			for j := len(prompt) + given - 1; j < len(w); j++ {
				w[j] = true
			}
			seqs, want = append(seqs, seq), append(want, w)
		}
		add(promptA, 0, 5)
		add(promptA, 0, 9)
		add(promptA, 0, 1)
		add(promptB, 1, 3)
		add(promptB, 1, 7)
		add(tokens(v, 12), 0, 6)
		short := tokens(v, MinSharedPrefix-1)
		add(short, 0, 4)
		add(short, 0, 2)
		coef := make([][]float32, len(seqs))
		for i, w := range want {
			coef[i] = make([]float32, len(w))
			for j := range w {
				if w[j] {
					coef[i][j] = float32(r.NormFloat64())
				}
			}
		}
		for _, o := range []TrainOptions{{}, {Recompute: true}, {TrainLayers: 1}} {
			run := func(o TrainOptions) ([][]float32, map[string][]float32, int) {
				tr := mustTrainer(t, m, o)
				tr.ZeroGrad()
				lp, err := tr.LogProbsOf(seqs, want)
				if err != nil {
					t.Fatal(err)
				}
				if err := tr.Backward(coef); err != nil {
					t.Fatal(err)
				}
				return lp, gradMap(tr), tr.total
			}
			full := o
			full.NoPrefixSharing = true
			lpFull, gFull, rowsFull := run(full)
			lp, g, rows := run(o)
			// Prompt A's 39 rows shared by three, prompt B's 24 by two.
			if want := rowsFull - 2*39 - 24; rows != want {
				t.Errorf("%s %+v: %d rows shared, want %d (of %d)", name, o, rows, want, rowsFull)
			}
			for i := range seqs {
				if msg := kernelstest.Mismatch(lp[i], lpFull[i], tinyTol); msg != "" {
					t.Errorf("%s %+v: sequence %d: log-probabilities shared differ from full: %s", name, o, i, msg)
				}
			}
			if len(g) != len(gFull) || len(g) == 0 {
				t.Fatalf("%s %+v: %d gradients shared, %d full", name, o, len(g), len(gFull))
			}
			for _, k := range sortedKeys(gFull) {
				if msg := kernelstest.Mismatch(g[k], gFull[k], summationTol(gFull[k])); msg != "" {
					t.Errorf("%s %+v: gradient of %s shared differs from full: %s", name, o, k, msg)
				}
			}
		}
	}
}
