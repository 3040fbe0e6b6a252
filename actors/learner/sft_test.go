package learner

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/model/modeltest"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// demos draws n demonstrations of random tokens: a prompt of 4–8 tokens,
// an answer of 6–15 policy tokens, and, after every second answer, a
// few tokens that are not the policy's (an observation).
func demos(t testing.TB, m *model.Model, seed uint64, n int) []SFTSequence {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 13))
	out := make([]SFTSequence, n)
	for i := range out {
		prompt, answer, tail := 4+r.IntN(5), 6+r.IntN(10), 0
		if i%2 == 1 {
			tail = 2 + r.IntN(3)
		}
		s := SFTSequence{Tokens: make([]int32, prompt+answer+tail), PolicyMask: make([]bool, prompt+answer+tail)}
		for j := range s.Tokens {
			s.Tokens[j] = int32(r.IntN(m.Config.VocabSize))
			s.PolicyMask[j] = j >= prompt && j < prompt+answer
		}
		out[i] = s
	}
	return out
}

var testSFT = SFTOptions{LR: 1e-2}

func sftStep(t *testing.T, l *Learner, seqs []SFTSequence, o SFTOptions) StepResult {
	t.Helper()
	res, err := l.SFTStep(context.Background(), seqs, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped != "" {
		t.Fatalf("SFT step skipped: %s", res.Skipped)
	}
	return res
}

// TestSFTLowersNLL: a few SFT steps on one batch lower its mean negative
// log-likelihood per policy token, each step reports the loss before it,
// bumps the step and the policy version and publishes like a GRPO step.
func TestSFTLowersNLL(t *testing.T) {
	ctx := context.Background()
	m := load(t, tinyDir(t, modeltest.Qwen2, 21))
	seqs := demos(t, m, 1, 6)
	store := persistence.NewMemory().Checkpoints()
	cfg := testConfig(m, store)
	cfg.PublishEvery = 1
	l, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	nll0, n, err := l.SFTEvaluate(seqs)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, s := range seqs {
		for _, b := range s.PolicyMask {
			if b {
				want++
			}
		}
	}
	if n != want {
		t.Fatalf("%d policy tokens evaluated, the batch has %d", n, want)
	}
	if !(nll0 > 0) || math.IsInf(nll0, 0) {
		t.Fatalf("NLL %v", nll0)
	}
	prev := nll0
	for i := range 4 {
		res := sftStep(t, l, seqs, testSFT)
		if math.Abs(res.Loss-prev) > 1e-4 {
			t.Fatalf("step %d: loss %v, but the batch's NLL before it was %v", i+1, res.Loss, prev)
		}
		if res.Step != int64(i+1) || res.PolicyVersion != int64(i+1) || res.Published == nil || res.Published.PolicyVersion != int64(i+1) {
			t.Fatalf("step %d: %+v", i+1, res)
		}
		if res.Stats.PolicyTokens != want || res.Stats.Sequences != len(seqs) || res.MicroBatches < 2 {
			t.Fatalf("step %d: %d tokens, %d sequences, %d micro-batches", i+1, res.Stats.PolicyTokens, res.Stats.Sequences, res.MicroBatches)
		}
		if prev, _, err = l.SFTEvaluate(seqs); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("NLL %.4f → %.4f over %d policy tokens", nll0, prev, want)
	if !(prev < nll0-0.5) {
		t.Fatalf("NLL %v → %v: want a clear fall", nll0, prev)
	}
	if latest, err := store.Latest(ctx, "run1"); err != nil || latest.GetPolicyVersion() != 4 {
		t.Fatalf("newest publication %v, %v", latest, err)
	}
}

// grads runs one SFT pass with backward on seqs with a new Learner of m
// (so that the micro-batch order is the same on every call) and returns a
// copy of every gradient.
func grads(t *testing.T, m *model.Model, seqs []SFTSequence) map[string][]float32 {
	t.Helper()
	l, err := Open(context.Background(), testConfig(m, persistence.NewMemory().Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	ids, n, err := l.checkSFT(seqs)
	if err != nil {
		t.Fatal(err)
	}
	l.tr.ZeroGrad()
	if _, _, err := l.sftPass(seqs, ids, n, true); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, p := range l.tr.Params() {
		h := make([]float32, numel(p.Grad.Shape()))
		l.m.Backend().ToHost(h, p.Grad)
		out[p.Name] = h
	}
	l.tr.ZeroGrad()
	return out
}

// TestSFTMaskedTokensNoGradient checks through the Trainer that a token
// off the policy mask contributes nothing: replacing the last token of a
// demonstration (a non-policy token, so it is nobody's context) by another
// id leaves every gradient bit for bit the same, while replacing the last
// policy token changes them.
func TestSFTMaskedTokensNoGradient(t *testing.T) {
	m := load(t, tinyDir(t, modeltest.Llama, 22))
	seqs := demos(t, m, 2, 2)
	s := seqs[1] // has non-policy tokens after its answer
	last := len(s.Tokens) - 1
	if s.PolicyMask[last] {
		t.Fatal("the demonstration should end with a non-policy token")
	}
	base := grads(t, m, seqs)
	nonzero := false
	for _, g := range base {
		for _, v := range g {
			nonzero = nonzero || v != 0
		}
	}
	if !nonzero {
		t.Fatal("the SFT gradient is zero")
	}

	other := func(id int32) int32 { return (id + 1 + int32(m.Config.VocabSize)/2) % int32(m.Config.VocabSize) }
	masked := append([]SFTSequence(nil), seqs...)
	masked[1] = SFTSequence{Tokens: append([]int32(nil), s.Tokens...), PolicyMask: s.PolicyMask}
	masked[1].Tokens[last] = other(s.Tokens[last])
	sameBits(t, "gradients after changing a non-policy token", base, grads(t, m, masked))

	lastPolicy := 0
	for j, b := range s.PolicyMask {
		if b {
			lastPolicy = j
		}
	}
	changed := append([]SFTSequence(nil), seqs...)
	changed[1] = SFTSequence{Tokens: append([]int32(nil), s.Tokens[:lastPolicy+1]...), PolicyMask: s.PolicyMask[:lastPolicy+1]}
	changed[1].Tokens[lastPolicy] = other(s.Tokens[lastPolicy])
	g := grads(t, m, changed)
	differs := false
	for name, x := range base {
		for i := range x {
			differs = differs || x[i] != g[name][i]
		}
	}
	if !differs {
		t.Fatal("changing a policy token left the gradients unchanged")
	}
}

// TestSFTBadBatch: batches that cannot be trained on are refused with
// ErrBadBatch and change nothing.
func TestSFTBadBatch(t *testing.T) {
	m := load(t, tinyDir(t, modeltest.Llama, 23))
	l, err := Open(context.Background(), testConfig(m, persistence.NewMemory().Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	before := weights(t, m)
	fresh := func() []SFTSequence { return demos(t, m, 3, 3) }
	cases := map[string]func() ([]SFTSequence, SFTOptions){
		"empty": func() ([]SFTSequence, SFTOptions) { return nil, testSFT },
		"short mask": func() ([]SFTSequence, SFTOptions) {
			s := fresh()
			s[1].PolicyMask = s[1].PolicyMask[:3]
			return s, testSFT
		},
		"first token the policy's": func() ([]SFTSequence, SFTOptions) {
			s := fresh()
			s[0].PolicyMask[0] = true
			return s, testSFT
		},
		"no policy token": func() ([]SFTSequence, SFTOptions) {
			s := fresh()
			for i := range s {
				clear(s[i].PolicyMask)
			}
			return s, testSFT
		},
		"token outside the vocabulary": func() ([]SFTSequence, SFTOptions) {
			s := fresh()
			s[2].Tokens[1] = int32(m.Config.VocabSize)
			return s, testSFT
		},
		"empty sequence": func() ([]SFTSequence, SFTOptions) {
			s := fresh()
			s[0] = SFTSequence{}
			return s, testSFT
		},
		"no learning rate": func() ([]SFTSequence, SFTOptions) { return fresh(), SFTOptions{} },
		"negative warm-up": func() ([]SFTSequence, SFTOptions) { return fresh(), SFTOptions{LR: 1e-3, WarmupSteps: -1} },
	}
	for name, c := range cases {
		seqs, o := c()
		if _, err := l.SFTStep(context.Background(), seqs, o); !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: err %v, want ErrBadBatch", name, err)
		}
	}
	if l.Step() != 0 || l.PolicyVersion() != 0 {
		t.Fatalf("bad batches moved the Learner to step %d, version %d", l.Step(), l.PolicyVersion())
	}
	sameBits(t, "weights after bad batches", before, weights(t, m))
	if _, err := SFTFromProto([]*records.Trajectory{{Id: "x", TokenIds: []int32{1, 2}, PolicyMask: []bool{false}}}); !errors.Is(err, ErrBadBatch) {
		t.Fatalf("trajectory with a short mask: %v", err)
	}
}

// TestSFTResumeExact: SFT steps (with a warm-up and a cosine schedule)
// then a GRPO step, interrupted after the second SFT step and resumed from
// the Badger checkpoint, end with the weights and optimizer step of an
// uninterrupted run, bit for bit: the rate switches (SFT's, then GRPO's)
// and the micro-batch order survive the resume.
func TestSFTResumeExact(t *testing.T) {
	ctx := context.Background()
	dir := tinyDir(t, modeltest.Llama, 24)
	base := load(t, dir)
	batches := [][]SFTSequence{demos(t, base, 10, 5), demos(t, base, 11, 5), demos(t, base, 12, 5)}
	grpoBatch := batch(t, base, 13)
	o := SFTOptions{LR: 5e-3, WarmupSteps: 1, TotalSteps: 3}

	whole, err := Open(ctx, testConfig(load(t, dir), persistence.NewMemory().Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	var lrs []float64
	for _, b := range batches {
		lrs = append(lrs, sftStep(t, whole, b, o).LR)
	}
	grpoLR := step(t, whole, grpoBatch).LR
	// Warm-up to the peak at step 1, cosine to a tenth at step 3.
	if !(lrs[0] == 5e-3 && math.Abs(lrs[1]-0.55*5e-3) < 1e-12 && math.Abs(lrs[2]-5e-4) < 1e-12 && grpoLR == testConfig(base, nil).Optim.LR) {
		t.Fatalf("rates: SFT %v, then GRPO %v", lrs, grpoLR)
	}

	db := openBadger(t)
	first, err := Open(ctx, testConfig(load(t, dir), db.Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches[:2] {
		sftStep(t, first, b, o)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := Open(ctx, testConfig(load(t, dir), db.Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	if second.Step() != 2 || second.PolicyVersion() != 2 {
		t.Fatalf("resumed at step %d version %d", second.Step(), second.PolicyVersion())
	}
	sftStep(t, second, batches[2], o)
	step(t, second, grpoBatch)
	sameBits(t, "weights after SFT, resume, SFT and GRPO", weights(t, whole.Model()), weights(t, second.Model()))
	if whole.opt.Step() != 4 || second.opt.Step() != 4 {
		t.Fatalf("optimizer steps %d and %d", whole.opt.Step(), second.opt.Step())
	}
}
