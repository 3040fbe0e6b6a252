package grpo

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// seq builds a sequence whose policy tokens are at the given positions,
// with sampler log-probs of -1 at each.
func seq(n int, reward float64, policy ...int) Sequence {
	s := Sequence{Tokens: make([]int32, n), PolicyMask: make([]bool, n), SamplerLogProbs: make([]float32, n), Reward: reward}
	for _, t := range policy {
		s.PolicyMask[t] = true
		s.SamplerLogProbs[t] = -1
	}
	return s
}

// logps gives each sequence's policy log-probs: sampler + delta at every
// position (only policy positions matter).
func logps(p *Plan, delta func(k, t int) float64) [][]float32 {
	out := make([][]float32, len(p.Items))
	for k, it := range p.Items {
		out[k] = make([]float32, len(it.Seq.Tokens)-1)
		for j := range out[k] {
			out[k][j] = it.Seq.SamplerLogProbs[j+1] + float32(delta(k, j+1))
		}
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6+1e-6*math.Abs(b) }

// TestLossTable checks hand-computed losses and gradients. The batch is
// one group with rewards 1 and 0 (mean 0.5, std 0.5, so advantages ±1 with
// std scaling and ±0.5 without) where the rewarded sequence has two policy
// tokens and the other one, plus a group whose rewards are equal.
func TestLossTable(t *testing.T) {
	batch := func() []Group {
		return []Group{
			{seq(4, 1, 1, 2), seq(3, 0, 2)},
			{seq(3, 1, 1), seq(3, 1, 2)}, // all equal: skipped
		}
	}
	noEps := func(o Options) Options { o.StdEps = 0; return o }
	e5, em5 := math.Exp(0.5), math.Exp(-0.5)
	cases := []struct {
		name     string
		o        Options
		delta    func(k, t int) float64
		loss     float64
		grads    [][]float64 // per item, per logp position
		clipped  int
		meanRate float64
	}{
		{
			name:  "on-policy token mean",
			o:     noEps(DefaultOptions()),
			delta: func(k, t int) float64 { return 0 },
			// (−1·1 −1·1 + 1·1) / 3 tokens
			loss:     -1.0 / 3,
			grads:    [][]float64{{-1.0 / 3, -1.0 / 3, 0}, {0, 1.0 / 3}},
			meanRate: 1,
		},
		{
			name:  "on-policy sequence mean",
			o:     func() Options { o := noEps(DefaultOptions()); o.Norm = NormSequenceMean; return o }(),
			delta: func(k, t int) float64 { return 0 },
			// sequence means −1 and +1, averaged
			loss:     0,
			grads:    [][]float64{{-0.25, -0.25, 0}, {0, 0.5}},
			meanRate: 1,
		},
		{
			name:  "no std scaling",
			o:     func() Options { o := noEps(DefaultOptions()); o.ScaleByStd = false; return o }(),
			delta: func(k, t int) float64 { return 0 },
			loss:  -0.5 / 3, grads: [][]float64{{-0.5 / 3, -0.5 / 3, 0}, {0, 0.5 / 3}}, meanRate: 1,
		},
		{
			// r = e^0.5 > 1.28 on the rewarded sequence's first token
			// (clipped, loss −1.28/3); r = e^-0.5 < 0.8 on the other
			// sequence (A < 0: clipped, loss +0.8/3); the rewarded
			// sequence's second token is on-policy (r = 1).
			name: "ppo clip",
			o:    noEps(DefaultOptions()),
			delta: func(k, t int) float64 {
				switch {
				case k == 0 && t == 1:
					return 0.5
				case k == 1:
					return -0.5
				}
				return 0
			},
			loss:     (-1.28 - 1 + 0.8) / 3,
			grads:    [][]float64{{0, -1.0 / 3, 0}, {0, 0}},
			clipped:  2,
			meanRate: (e5 + 1 + em5) / 3,
		},
		{
			// The same ratios on the unclipped sides: A > 0 with r < 1
			// and A < 0 with r > 1 keep their gradient −r·A.
			name: "ppo clip, unclipped sides",
			o:    noEps(DefaultOptions()),
			delta: func(k, t int) float64 {
				switch {
				case k == 0 && t == 1:
					return -0.5
				case k == 1:
					return 0.5
				}
				return 0
			},
			loss:     (-em5 - 1 + e5) / 3,
			grads:    [][]float64{{-em5 / 3, -1.0 / 3, 0}, {0, e5 / 3}},
			meanRate: (e5 + 1 + em5) / 3,
		},
		{
			name: "tv mask",
			o:    func() Options { o := noEps(DefaultOptions()); o.Trust = TrustTVMask; return o }(),
			delta: func(k, t int) float64 {
				if k == 0 && t == 1 {
					return 0.5 // |r−1| = 0.65 > 0.2: dropped
				}
				if k == 1 {
					return math.Log(1.1) // |r−1| = 0.1: kept
				}
				return 0
			},
			loss:     (-1 + 1.1) / 3,
			grads:    [][]float64{{0, -1.0 / 3, 0}, {0, 1.1 / 3}},
			clipped:  1,
			meanRate: (e5 + 1 + 1.1) / 3,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := NewPlan(batch(), c.o)
			if err != nil {
				t.Fatal(err)
			}
			if p.GroupsUsed != 1 || p.GroupsSkipped != 1 || len(p.Items) != 2 || p.PolicyTokens != 3 {
				t.Fatalf("plan: used %d skipped %d items %d tokens %d, want 1 1 2 3", p.GroupsUsed, p.GroupsSkipped, len(p.Items), p.PolicyTokens)
			}
			res, err := p.Loss(logps(p, c.delta))
			if err != nil {
				t.Fatal(err)
			}
			if !near(res.Loss, c.loss) {
				t.Errorf("loss %.9f, want %.9f", res.Loss, c.loss)
			}
			for k := range c.grads {
				for j, want := range c.grads[k] {
					if got := float64(res.DLogP[k][j]); !near(got, want) {
						t.Errorf("dL/dlogp[%d][%d] = %.9f, want %.9f", k, j, got, want)
					}
				}
			}
			if res.Stats.Clipped != c.clipped || res.Stats.PolicyTokens != 3 || res.Stats.GroupsSkipped != 1 || res.Stats.GroupsUsed != 1 {
				t.Errorf("stats %+v, want %d clipped of 3 tokens, 1 group used, 1 skipped", res.Stats, c.clipped)
			}
			if !near(res.Stats.MeanRatio, c.meanRate) {
				t.Errorf("mean ratio %v, want %v", res.Stats.MeanRatio, c.meanRate)
			}
		})
	}
}

// TestKL checks the k3 penalty by hand: one token with logp = sampler +
// 0.5 has kl = e^-0.5 + 0.5 − 1 and dkl/dlogp = 1 − e^-0.5.
func TestKL(t *testing.T) {
	o := DefaultOptions()
	o.StdEps, o.KLCoef = 0, 0.1
	p, err := NewPlan([]Group{{seq(2, 1, 1), seq(2, 0)}}, o) // the second has no policy token
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1 {
		t.Fatalf("%d items, want 1 (a sequence without policy tokens contributes nothing)", len(p.Items))
	}
	res, err := p.Loss(logps(p, func(k, t int) float64 { return 0.1 }))
	if err != nil {
		t.Fatal(err)
	}
	r := math.Exp(0.1)
	kl := math.Exp(-0.1) + 0.1 - 1
	if want := -r + 0.1*kl; !near(res.Loss, want) {
		t.Errorf("loss %v, want %v", res.Loss, want)
	}
	if want := -r + 0.1*(1-math.Exp(-0.1)); !near(float64(res.DLogP[0][0]), want) {
		t.Errorf("grad %v, want %v", res.DLogP[0][0], want)
	}
	if !near(res.Stats.KL, kl) {
		t.Errorf("KL stat %v, want %v", res.Stats.KL, kl)
	}
}

// TestFiniteDifferences compares dL/dlogp with central differences of the
// loss on random batches, for every option combination, away from the
// trust-region boundaries (where the loss has kinks or, for the TV mask,
// jumps).
func TestFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, trust := range []Trust{TrustPPOClip, TrustTVMask} {
		for _, norm := range []Norm{NormTokenMean, NormSequenceMean} {
			for _, kl := range []float64{0, 0.05} {
				o := DefaultOptions()
				o.Trust, o.Norm, o.KLCoef, o.ScaleByStd = trust, norm, kl, kl == 0
				var groups []Group
				for range 3 {
					var g Group
					for range 4 {
						n := 3 + r.IntN(8)
						s := seq(n, float64(r.IntN(3)))
						for t := 1; t < n; t++ {
							if r.IntN(3) > 0 {
								s.PolicyMask[t] = true
								s.SamplerLogProbs[t] = -float32(r.Float64() * 3)
							}
						}
						g = append(g, s)
					}
					groups = append(groups, g)
				}
				p, err := NewPlan(groups, o)
				if err != nil {
					t.Fatal(err)
				}
				lp := logps(p, func(k, t int) float64 { return r.Float64() - 0.5 })
				res, err := p.Loss(lp)
				if err != nil {
					t.Fatal(err)
				}
				bounds := []float64{1 - o.EpsLow, 1 + o.EpsHigh, 1 - o.TVDelta, 1 + o.TVDelta}
				const h = 1e-3
				checked := 0
				for k := range lp {
					for j := range lp[k] {
						s := p.Items[k].Seq
						if !s.PolicyMask[j+1] {
							if res.DLogP[k][j] != 0 {
								t.Fatalf("%v/%v: gradient %v on a non-policy token", trust, norm, res.DLogP[k][j])
							}
							continue
						}
						ratio := math.Exp(float64(lp[k][j] - s.SamplerLogProbs[j+1]))
						skip := false
						for _, b := range bounds {
							skip = skip || math.Abs(ratio-b) < 0.01
						}
						if skip {
							continue
						}
						orig := lp[k][j]
						lp[k][j] = orig + h
						up, _ := p.Loss(lp)
						lp[k][j] = orig - h
						down, _ := p.Loss(lp)
						lp[k][j] = orig
						step := float64(orig+h) - float64(orig-h)
						fd := (up.Loss - down.Loss) / step
						if got := float64(res.DLogP[k][j]); math.Abs(got-fd) > 1e-4+1e-3*math.Abs(fd) {
							t.Errorf("%v/%v/kl %v: item %d token %d: gradient %v, finite difference %v", trust, norm, kl, k, j, got, fd)
						}
						checked++
					}
				}
				if checked < 10 {
					t.Fatalf("only %d tokens checked", checked)
				}
			}
		}
	}
}

// TestEmptySequence: an episode with no tokens (it ended before its prompt
// fitted) is a group member like any other: its reward moves the group's
// baseline, and it has no loss of its own.
func TestEmptySequence(t *testing.T) {
	empty := Sequence{Reward: 0}
	p, err := NewPlan([]Group{{seq(3, 1, 1), empty}, {empty, empty}}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if p.GroupsUsed != 1 || p.GroupsSkipped != 1 || len(p.Items) != 1 || p.PolicyTokens != 1 {
		t.Fatalf("used %d skipped %d items %d tokens %d", p.GroupsUsed, p.GroupsSkipped, len(p.Items), p.PolicyTokens)
	}
	// Rewards 1 and 0: mean 0.5, std 0.5, so the rewarded sequence's
	// advantage is 0.5/(0.5+eps).
	if want := 0.5 / (0.5 + p.Options.StdEps); !near(p.Items[0].Advantage, want) {
		t.Errorf("advantage %v, want %v", p.Items[0].Advantage, want)
	}
	if _, err := NewPlan([]Group{{Sequence{Tokens: nil, PolicyMask: make([]bool, 1)}}}, DefaultOptions()); !errors.Is(err, ErrInvalid) {
		t.Errorf("no tokens but a mask entry: err %v, want ErrInvalid", err)
	}
}

func TestBadInput(t *testing.T) {
	good := seq(3, 1, 1)
	cases := map[string]struct {
		groups []Group
		o      Options
	}{
		"empty group":      {[]Group{{}}, DefaultOptions()},
		"mask length":      {[]Group{{Sequence{Tokens: make([]int32, 3), PolicyMask: make([]bool, 2), SamplerLogProbs: make([]float32, 3)}}}, DefaultOptions()},
		"logprob length":   {[]Group{{Sequence{Tokens: make([]int32, 3), PolicyMask: make([]bool, 3), SamplerLogProbs: make([]float32, 1)}}}, DefaultOptions()},
		"first token":      {[]Group{{seq(3, 1, 0)}}, DefaultOptions()},
		"nan reward":       {[]Group{{good, seq(3, math.NaN(), 1)}}, DefaultOptions()},
		"positive logprob": {[]Group{{good, func() Sequence { s := seq(3, 0, 1); s.SamplerLogProbs[1] = 0.5; return s }()}}, DefaultOptions()},
		"bad eps":          {[]Group{{good}}, func() Options { o := DefaultOptions(); o.EpsLow = 1; return o }()},
		"bad delta":        {[]Group{{good}}, func() Options { o := DefaultOptions(); o.Trust, o.TVDelta = TrustTVMask, 0; return o }()},
		"negative kl":      {[]Group{{good}}, func() Options { o := DefaultOptions(); o.KLCoef = -1; return o }()},
	}
	for name, c := range cases {
		if _, err := NewPlan(c.groups, c.o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
	p, err := NewPlan([]Group{{seq(3, 1, 1), seq(3, 0, 2)}}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.SequenceLoss(0, make([]float32, 3), make([]float32, 3)); !errors.Is(err, ErrInvalid) {
		t.Errorf("wrong log-prob length: err %v, want ErrInvalid", err)
	}
	if _, err := p.Loss(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("missing rows: err %v, want ErrInvalid", err)
	}
	for _, s := range []string{"ppo", ""} {
		if _, err := ParseTrust(s); err == nil {
			t.Errorf("ParseTrust(%q) accepted", s)
		}
		if _, err := ParseNorm(s); err == nil {
			t.Errorf("ParseNorm(%q) accepted", s)
		}
	}
	for _, tr := range []Trust{TrustPPOClip, TrustTVMask} {
		if got, err := ParseTrust(tr.String()); err != nil || got != tr {
			t.Errorf("ParseTrust(%v) = %v, %v", tr, got, err)
		}
	}
	for _, n := range []Norm{NormTokenMean, NormSequenceMean} {
		if got, err := ParseNorm(n.String()); err != nil || got != n {
			t.Errorf("ParseNorm(%v) = %v, %v", n, got, err)
		}
	}
}

// TestAbsLogRatio: the mean |log r| weighs every policy token alike
// across sequences (as Stats.Add merges micro-batches) and the max is the
// largest single token's: three tokens off by +0.2 and one by −0.5 give a
// mean of 1.1/4 and a max of 0.5, whether the batch's stats come from one
// Loss or from each sequence's SequenceLoss added up.
func TestAbsLogRatio(t *testing.T) {
	p, err := NewPlan([]Group{{seq(4, 1, 1, 2, 3), seq(3, 0, 2)}}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	delta := func(k, _ int) float64 {
		if p.Items[k].Seq.Reward == 1 {
			return 0.2
		}
		return -0.5
	}
	lps := logps(p, delta)
	res, err := p.Loss(lps)
	if err != nil {
		t.Fatal(err)
	}
	var added Stats
	for k := range p.Items {
		_, st, err := p.SequenceLoss(k, lps[k], make([]float32, len(lps[k])))
		if err != nil {
			t.Fatal(err)
		}
		added.Add(st)
	}
	for name, st := range map[string]Stats{"Loss": res.Stats, "Add": added} {
		if !near(st.MeanAbsLogRatio, 1.1/4) || !near(st.MaxAbsLogRatio, 0.5) {
			t.Errorf("%s: mean |log r| %v, max %v; want %v and 0.5", name, st.MeanAbsLogRatio, st.MaxAbsLogRatio, 1.1/4)
		}
	}
}
