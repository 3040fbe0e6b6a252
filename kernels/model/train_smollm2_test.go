package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/frognano/frognano/kernels/kernelstest"
)

// TestSmolLM2LogProbs checks the Trainer's log-probabilities on SmolLM2
// (tied embedding, 30 layers) against log-softmax of the inference
// Runner's logits for the same sequences, packed together, and that its
// Backward runs and gives finite gradients.
func TestSmolLM2LogProbs(t *testing.T) {
	m := smollm2(t)
	g := readSmolGolden(t)
	seqs := [][]int32{goldenIDs(t, g, "prose"), goldenIDs(t, g, "chat"), goldenIDs(t, g, "single"), goldenIDs(t, g, "code")}
	tr := mustTrainer(t, m, TrainOptions{ChunkRows: 64})
	lp, err := tr.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	v := m.Config.VocabSize
	var worst float64
	for i, ids := range seqs {
		logits := forwardAll(t, m, ids)
		want := make([]float32, len(ids)-1)
		for j := range want {
			row := make([]float64, v)
			for k, x := range logits[j*v : (j+1)*v] {
				row[k] = float64(x)
			}
			want[j] = float32(refLogSoftmax(row, int(ids[j+1])))
		}
		if msg := kernelstest.Mismatch(lp[i], want, cacheTol); msg != "" {
			t.Errorf("sequence %d (%d tokens): %s", i, len(ids), msg)
		}
		worst = math.Max(worst, maxDiff(lp[i], want))
	}
	t.Logf("largest |Trainer - log-softmax(Runner logits)|: %.3g", worst)

	dlogp := make([][]float32, len(lp))
	for i := range lp {
		dlogp[i] = make([]float32, len(lp[i]))
		for j := range dlogp[i] {
			dlogp[i][j] = -1 / float32(len(lp[i]))
		}
	}
	tr.ZeroGrad()
	if err := tr.Backward(dlogp); err != nil {
		t.Fatal(err)
	}
	var sq float64
	for _, p := range tr.Params() {
		sq += tr.b.SumSquares(p.Grad)
	}
	if math.IsNaN(sq) || math.IsInf(sq, 0) || sq == 0 {
		t.Fatalf("gradient norm² %v", sq)
	}
	t.Logf("gradient norm of the mean negative log-likelihood: %.4g", math.Sqrt(sq))
}

// TestSmolLM2Gradients compares log-probabilities, a sample of every
// weight's gradient elements (its largest and 31 random ones) and every
// gradient's norm with PyTorch's autograd through Hugging Face's
// LlamaForCausalLM on the same weights (testdata/smollm2_grads.golden,
// from testdata/gen/gen_grads.py). Both sides compute in float32 through 30
// layers in different summation orders, so an element is compared within
// 0.3% of its tensor's root-mean-square gradient plus 0.03% of its value
// (the largest difference seen uses 37% of that), a norm within 0.05% (seen:
// 0.009%).
func TestSmolLM2Gradients(t *testing.T) {
	m := smollm2(t)
	g, err := kernelstest.ReadGolden("testdata/smollm2_grads.golden")
	if err != nil {
		t.Fatal(err)
	}
	var seqs [][]int32
	var coef [][]float32
	for i := 0; ; i++ {
		ids, ok := g[fmt.Sprintf("smollm2/ids/%d", i)]
		if !ok {
			break
		}
		seqs = append(seqs, kernelstest.Ints(ids))
		coef = append(coef, g[fmt.Sprintf("smollm2/dlogp/%d", i)].Data())
	}
	tr := mustTrainer(t, m, TrainOptions{})
	lp, err := tr.LogProbs(seqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range seqs {
		if msg := kernelstest.Mismatch(lp[i], g[fmt.Sprintf("smollm2/logp/%d", i)].Data(), cacheTol); msg != "" {
			t.Errorf("sequence %d: log-probabilities: %s", i, msg)
		}
	}
	if err := tr.Backward(coef); err != nil {
		t.Fatal(err)
	}
	var worstElem, worstNorm float64
	for _, p := range tr.Params() {
		idx, ok := g["smollm2/idx/"+p.Name]
		if !ok {
			t.Errorf("%s: not in the golden file", p.Name)
			continue
		}
		grad := hostCopy(tr.b, p.Grad)
		norm := math.Sqrt(tr.b.SumSquares(p.Grad))
		wantNorm := float64(g["smollm2/norm/"+p.Name].Data()[0])
		if d := math.Abs(norm-wantNorm) / wantNorm; d > 5e-4 {
			t.Errorf("%s: gradient norm %.6g, PyTorch's %.6g", p.Name, norm, wantNorm)
		}
		worstNorm = math.Max(worstNorm, math.Abs(norm-wantNorm)/wantNorm)
		rms := wantNorm / math.Sqrt(float64(len(grad)))
		want := g["smollm2/grad/"+p.Name].Data()
		for j, i := range kernelstest.Ints(idx) {
			d := math.Abs(float64(grad[i]) - float64(want[j]))
			tol := 3e-3*rms + 3e-4*math.Abs(float64(want[j]))
			if d > tol {
				t.Errorf("%s[%d]: %v, PyTorch's %v (|diff| %.3g, rms %.3g)", p.Name, i, grad[i], want[j], d, rms)
			}
			worstElem = math.Max(worstElem, d/tol)
		}
	}
	t.Logf("gradient elements within %.2g of their tolerance (0.3%% of the tensor's rms + 0.03%% of the value); norms within %.3g relative", worstElem, worstNorm)
}

// BenchmarkTrainStep measures a training step's forward and backward
// passes on SmolLM2 for a batch of 4 sequences of 256 tokens:
//
//	go test ./kernels/model -run '^$' -bench TrainStep -benchtime 3x
func BenchmarkTrainStep(b *testing.B) {
	m := smollm2(b)
	const batch, n = 4, 256
	seqs := make([][]int32, batch)
	dlogp := make([][]float32, batch)
	for i := range seqs {
		seqs[i] = benchTokens(n, i)
		dlogp[i] = make([]float32, n-1)
		for j := range dlogp[i] {
			dlogp[i][j] = -1.0 / float32(batch*(n-1))
		}
	}
	for _, recompute := range []bool{false, true} {
		b.Run(fmt.Sprintf("recompute=%v", recompute), func(b *testing.B) {
			tr := mustTrainer(b, m, TrainOptions{Recompute: recompute})
			for i := range b.N + 1 {
				if i == 1 {
					b.ResetTimer() // the first step allocates the buffers
				}
				if _, err := tr.LogProbs(seqs); err != nil {
					b.Fatal(err)
				}
				if err := tr.Backward(dlogp); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch*n)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
