package optim

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/frognano/frognano/kernels/cpu"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/tensor"
)

func TestScheduleFactor(t *testing.T) {
	cases := []struct {
		s    Schedule
		step int
		want float64
	}{
		{Schedule{Kind: Constant}, 1, 1},
		{Schedule{Kind: Constant}, 1000, 1},
		{Schedule{Kind: Constant, WarmupSteps: 4}, 1, 0.25},
		{Schedule{Kind: Constant, WarmupSteps: 4}, 4, 1},
		{Schedule{Kind: Constant, WarmupSteps: 4}, 5, 1},
		{Schedule{Kind: Cosine, WarmupSteps: 2, TotalSteps: 12}, 2, 1},
		{Schedule{Kind: Cosine, WarmupSteps: 2, TotalSteps: 12}, 7, 0.5}, // half-way: cos(π/2)
		{Schedule{Kind: Cosine, WarmupSteps: 2, TotalSteps: 12}, 12, 0},  // the end
		{Schedule{Kind: Cosine, WarmupSteps: 2, TotalSteps: 12}, 50, 0},  // past the end
		{Schedule{Kind: Cosine, TotalSteps: 10, MinRatio: 0.1}, 5, 0.55}, // 0.1 + 0.9·0.5
		{Schedule{Kind: Cosine, TotalSteps: 10, MinRatio: 0.1}, 10, 0.1}, // floor
		{Schedule{Kind: Linear, WarmupSteps: 1, TotalSteps: 5}, 3, 0.5},  // 2 of 4 steps
		{Schedule{Kind: Linear, WarmupSteps: 1, TotalSteps: 5, MinRatio: 0.2}, 5, 0.2},
		{Schedule{Kind: Linear, WarmupSteps: 1, TotalSteps: 5, MinRatio: 0.2}, 4, 0.4}, // 0.2 + 0.8·0.25
	}
	for _, c := range cases {
		if err := c.s.Validate(); err != nil {
			t.Fatalf("%+v: %v", c.s, err)
		}
		if got := c.s.Factor(c.step); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%+v step %d: %v, want %v", c.s, c.step, got, c.want)
		}
	}
	for _, bad := range []Schedule{{Kind: "step"}, {Kind: Cosine, WarmupSteps: 5, TotalSteps: 5}, {Kind: Constant, MinRatio: 2}, {WarmupSteps: -1}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// params makes a matrix, a vector and their gradients on the CPU backend.
func params(seed uint64) []model.Param {
	r := rand.New(rand.NewPCG(seed, 7))
	mk := func(shape ...int) *tensor.Tensor {
		t := tensor.New(shape...)
		for i := range t.Data() {
			t.Data()[i] = float32(r.NormFloat64())
		}
		return t
	}
	return []model.Param{
		{Name: "w", Value: mk(3, 4), Grad: mk(3, 4)},
		{Name: "norm", Value: mk(4), Grad: mk(4)},
	}
}

func data(t any) []float32 { return t.(*tensor.Tensor).Data() }

// reference is torch.optim.AdamW written out in float64, with the global
// norm clipping of clip_grad_norm_.
type reference struct {
	p, m, v [][]float64
	decay   []bool
	step    int
}

func (r *reference) update(c Config, grads [][]float64) {
	var ss float64
	for _, g := range grads {
		for _, x := range g {
			ss += x * x
		}
	}
	norm := math.Sqrt(ss)
	scale := 1.0
	if c.MaxGradNorm > 0 && norm > c.MaxGradNorm {
		scale = c.MaxGradNorm / (norm + 1e-6)
	}
	r.step++
	lr := c.LR * c.Schedule.Factor(r.step)
	for i := range r.p {
		wd := 0.0
		if r.decay[i] {
			wd = c.WeightDecay
		}
		for j := range r.p[i] {
			g := grads[i][j] * scale
			r.m[i][j] = c.Beta1*r.m[i][j] + (1-c.Beta1)*g
			r.v[i][j] = c.Beta2*r.v[i][j] + (1-c.Beta2)*g*g
			mh := r.m[i][j] / (1 - math.Pow(c.Beta1, float64(r.step)))
			vh := r.v[i][j] / (1 - math.Pow(c.Beta2, float64(r.step)))
			r.p[i][j] -= lr * (mh/(math.Sqrt(vh)+c.Eps) + wd*r.p[i][j])
		}
	}
}

func to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// TestMatchesReference runs five steps with clipping active, a warm-up and
// cosine decay and the default decay rule, and compares the weights with
// the float64 reference.
func TestMatchesReference(t *testing.T) {
	b := cpu.New()
	ps := params(1)
	c := Config{LR: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, MaxGradNorm: 1.5,
		Schedule: Schedule{Kind: Cosine, WarmupSteps: 2, TotalSteps: 6, MinRatio: 0.1}}
	o, err := New(b, ps, c)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Decays("w") || o.Decays("norm") {
		t.Fatalf("decay rule: w %v norm %v, want matrices only", o.Decays("w"), o.Decays("norm"))
	}
	ref := &reference{decay: []bool{true, false}}
	for _, p := range ps {
		n := len(data(p.Value))
		ref.p = append(ref.p, to64(data(p.Value)))
		ref.m = append(ref.m, make([]float64, n))
		ref.v = append(ref.v, make([]float64, n))
	}
	r := rand.New(rand.NewPCG(3, 3))
	clipped := 0
	for step := 1; step <= 5; step++ {
		var grads [][]float64
		for _, p := range ps {
			g := data(p.Grad)
			for j := range g {
				g[j] = float32(r.NormFloat64())
			}
			grads = append(grads, to64(g))
		}
		rep := o.Update()
		ref.update(c, grads)
		if rep.Skipped || rep.Step != step {
			t.Fatalf("step %d: report %+v", step, rep)
		}
		if want := c.LR * c.Schedule.Factor(step); math.Abs(rep.LR-want) > 1e-15 {
			t.Errorf("step %d: lr %v, want %v", step, rep.LR, want)
		}
		if rep.Clipped {
			clipped++
		}
		for i, p := range ps {
			for j, got := range data(p.Value) {
				if want := ref.p[i][j]; math.Abs(float64(got)-want) > 1e-6+1e-5*math.Abs(want) {
					t.Fatalf("step %d: %s[%d] = %v, reference %v", step, p.Name, j, got, want)
				}
			}
		}
	}
	if clipped == 0 {
		t.Fatal("no step was clipped; the test does not cover clipping")
	}
}

// TestNonFiniteSkips puts a NaN and then an Inf in a gradient: the update
// is skipped, gradients zeroed, weights and moments kept, and the next
// finite step proceeds as the first.
func TestNonFiniteSkips(t *testing.T) {
	b := cpu.New()
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		ps := params(2)
		o, err := New(b, ps, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		before := append([]float32(nil), data(ps[0].Value)...)
		data(ps[1].Grad)[2] = bad
		rep := o.Update()
		if !rep.Skipped || rep.Step != 0 || o.Step() != 0 || !(math.IsNaN(rep.GradNorm) || math.IsInf(rep.GradNorm, 0)) {
			t.Fatalf("gradient %v: report %+v, optimizer step %d", bad, rep, o.Step())
		}
		for i, p := range ps {
			for j, g := range data(p.Grad) {
				if g != 0 {
					t.Fatalf("gradient %s[%d] = %v after a skipped step", ps[i].Name, j, g)
				}
			}
		}
		for j, v := range data(ps[0].Value) {
			if v != before[j] {
				t.Fatalf("weight changed on a skipped step")
			}
		}
		data(ps[0].Grad)[0] = 1
		if rep := o.Update(); rep.Skipped || rep.Step != 1 {
			t.Fatalf("finite step after a skip: %+v", rep)
		}
	}
}

// TestStateRoundTrip runs three steps, moves the state into a second
// optimizer over a copy of the weights, and checks that both then take
// bit-identical steps.
func TestStateRoundTrip(t *testing.T) {
	b := cpu.New()
	c := DefaultConfig()
	c.LR = 1e-2
	a := params(4)
	oa, _ := New(b, a, c)
	r := rand.New(rand.NewPCG(5, 5))
	fill := func(ps ...[]model.Param) {
		for i := range ps[0] {
			for j := range data(ps[0][i].Grad) {
				g := float32(r.NormFloat64())
				for _, p := range ps {
					data(p[i].Grad)[j] = g
				}
			}
		}
	}
	for range 3 {
		fill(a)
		oa.Update()
	}
	bb := params(99)
	for i := range bb {
		copy(data(bb[i].Value), data(a[i].Value))
	}
	ob, _ := New(b, bb, c)
	if err := ob.SetState(oa.State()); err != nil {
		t.Fatal(err)
	}
	if ob.Step() != 3 {
		t.Fatalf("restored step %d, want 3", ob.Step())
	}
	for range 2 {
		fill(a, bb)
		oa.Update()
		ob.Update()
	}
	for i := range a {
		for j, v := range data(a[i].Value) {
			if math.Float32bits(v) != math.Float32bits(data(bb[i].Value)[j]) {
				t.Fatalf("%s[%d]: %v and %v after a restored state", a[i].Name, j, v, data(bb[i].Value)[j])
			}
		}
	}

	// A state of other parameters is refused and changes nothing.
	st := oa.State()
	delete(st.M, "norm")
	if err := ob.SetState(st); !errors.Is(err, ErrInvalid) {
		t.Errorf("state without a moment: %v", err)
	}
	st = oa.State()
	st.V["w"] = st.V["w"][:3]
	if err := ob.SetState(st); !errors.Is(err, ErrInvalid) {
		t.Errorf("state with a short moment: %v", err)
	}
}

func TestBadConfig(t *testing.T) {
	b := cpu.New()
	for name, c := range map[string]Config{
		"lr":    {LR: math.NaN(), Beta1: 0.9, Beta2: 0.9, Eps: 1e-8},
		"beta":  {LR: 1, Beta1: 1, Beta2: 0.9, Eps: 1e-8},
		"eps":   {LR: 1, Beta1: 0.9, Beta2: 0.9},
		"wd":    {LR: 1, Beta1: 0.9, Beta2: 0.9, Eps: 1e-8, WeightDecay: -1},
		"clip":  {LR: 1, Beta1: 0.9, Beta2: 0.9, Eps: 1e-8, MaxGradNorm: -1},
		"sched": {LR: 1, Beta1: 0.9, Beta2: 0.9, Eps: 1e-8, Schedule: Schedule{Kind: Linear}},
	} {
		if _, err := New(b, params(1), c); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
	ps := params(1)
	ps[1].Name = "w"
	if _, err := New(b, ps, DefaultConfig()); !errors.Is(err, ErrInvalid) {
		t.Errorf("duplicate names: err %v", err)
	}
}
