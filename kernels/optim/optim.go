// Package optim is the Learner's optimizer: AdamW over a model's trainable
// parameters (model.Trainer.Params), using the backend's fused AdamW
// kernel, with global-norm gradient clipping, a learning-rate schedule, a
// guard against non-finite gradients, and state (first and second moments,
// step) that round-trips through a checkpoint bit for bit.
//
// A step reads top to bottom:
//
//  1. The global gradient norm ‖g‖ = sqrt(Σ_params Σ g²), accumulated in
//     float64 (one SumSquares per parameter).
//  2. A NaN or Inf norm means some gradient is not finite: the update is
//     skipped, every gradient is zeroed, and the Report says so; the
//     moments, weights and step are untouched, so training goes on as if
//     the batch had never been seen.
//  3. Clipping: with MaxGradNorm > 0 and ‖g‖ > MaxGradNorm every gradient
//     is scaled by MaxGradNorm/(‖g‖+1e-6) (torch.nn.utils.clip_grad_norm_).
//  4. The learning rate of this step from the Schedule.
//  5. AdamW on every parameter (decoupled weight decay, as
//     torch.optim.AdamW), with weight decay only where Config.Decay says.
//
// Which parameters decay: by default the matrices (embedding, attention and
// MLP projections, an untied output head) do, and the vectors (RMSNorm
// weights, the q/k/v biases of Qwen2, Qwen3's q/k norms) do not, the usual
// convention: shrinking a norm's gain or a bias towards zero is not a
// regulariser, it is a bias. Config.Decay overrides the rule.
package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/tensor"
)

// ErrInvalid is wrapped by errors about bad configuration or state.
var ErrInvalid = errors.New("optim: invalid")

// ScheduleKind names a learning-rate schedule.
type ScheduleKind string

const (
	// Constant keeps the peak rate after the warm-up.
	Constant ScheduleKind = "constant"
	// Cosine decays from the peak to MinRatio·peak along a half cosine
	// between the end of the warm-up and TotalSteps.
	Cosine ScheduleKind = "cosine"
	// Linear decays linearly from the peak to MinRatio·peak over the
	// same span.
	Linear ScheduleKind = "linear"
)

// Schedule is a learning-rate multiplier by step: a linear warm-up from
// 1/WarmupSteps to 1 over the first WarmupSteps steps, then Kind's decay,
// constant at MinRatio after TotalSteps.
type Schedule struct {
	Kind        ScheduleKind
	WarmupSteps int
	TotalSteps  int     // end of the decay (cosine, linear)
	MinRatio    float64 // final multiplier of the decay, in [0, 1]
}

// Validate reports a schedule that cannot be followed.
func (s Schedule) Validate() error {
	switch {
	case s.Kind != Constant && s.Kind != Cosine && s.Kind != Linear && s.Kind != "":
		return fmt.Errorf("%w: schedule %q (want constant, cosine or linear)", ErrInvalid, s.Kind)
	case s.WarmupSteps < 0:
		return fmt.Errorf("%w: %d warm-up steps", ErrInvalid, s.WarmupSteps)
	case (s.Kind == Cosine || s.Kind == Linear) && s.TotalSteps <= s.WarmupSteps:
		return fmt.Errorf("%w: a %s schedule needs TotalSteps (%d) beyond the warm-up (%d)", ErrInvalid, s.Kind, s.TotalSteps, s.WarmupSteps)
	case !(s.MinRatio >= 0 && s.MinRatio <= 1):
		return fmt.Errorf("%w: MinRatio %v outside [0, 1]", ErrInvalid, s.MinRatio)
	}
	return nil
}

// Factor is the multiplier of the peak rate at a 1-based step.
func (s Schedule) Factor(step int) float64 {
	if step < 1 {
		step = 1
	}
	if step <= s.WarmupSteps {
		return float64(step) / float64(s.WarmupSteps)
	}
	if s.Kind == Constant || s.Kind == "" {
		return 1
	}
	span := float64(s.TotalSteps - s.WarmupSteps)
	progress := math.Min(1, float64(step-s.WarmupSteps)/span)
	var decay float64
	switch s.Kind {
	case Cosine:
		decay = 0.5 * (1 + math.Cos(math.Pi*progress))
	case Linear:
		decay = 1 - progress
	}
	return s.MinRatio + (1-s.MinRatio)*decay
}

// Config holds AdamW's hyper-parameters. DefaultConfig is a reasonable RL
// fine-tuning setting.
type Config struct {
	LR           float64
	Beta1, Beta2 float64
	Eps          float64
	WeightDecay  float64
	// MaxGradNorm clips the global gradient norm; 0 turns clipping off.
	MaxGradNorm float64
	Schedule    Schedule
	// Decay says whether a parameter gets weight decay; nil means
	// DecayMatrices.
	Decay func(name string, shape []int) bool
}

// DefaultConfig: lr 1e-6 (RL on an instruction-tuned model moves it
// little), betas (0.9, 0.999), eps 1e-8, weight decay 0.01, clipping at
// norm 1, constant rate.
func DefaultConfig() Config {
	return Config{LR: 1e-6, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, MaxGradNorm: 1, Schedule: Schedule{Kind: Constant}}
}

// DecayMatrices is the default weight-decay rule: tensors of two or more
// dimensions decay, vectors (norm weights, biases) do not.
func DecayMatrices(_ string, shape []int) bool { return len(shape) >= 2 }

// Validate reports hyper-parameters AdamW cannot run with.
func (c Config) Validate() error {
	switch {
	case !(c.LR >= 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("%w: learning rate %v", ErrInvalid, c.LR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1) || !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("%w: betas (%v, %v) must be in [0, 1)", ErrInvalid, c.Beta1, c.Beta2)
	case !(c.Eps > 0):
		return fmt.Errorf("%w: eps %v must be positive", ErrInvalid, c.Eps)
	case !(c.WeightDecay >= 0):
		return fmt.Errorf("%w: weight decay %v is negative", ErrInvalid, c.WeightDecay)
	case !(c.MaxGradNorm >= 0):
		return fmt.Errorf("%w: MaxGradNorm %v is negative", ErrInvalid, c.MaxGradNorm)
	}
	return c.Schedule.Validate()
}

// AdamW holds the moments of every parameter and the step count. It is not
// safe for concurrent use.
type AdamW struct {
	cfg    Config
	b      kernels.GradBackend
	params []model.Param
	m, v   []kernels.Tensor
	decay  []bool
	step   int // updates applied so far
}

// New makes an optimizer for params, whose tensors live on b. The moments
// start at zero.
func New(b kernels.GradBackend, params []model.Param, cfg Config) (*AdamW, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, fmt.Errorf("%w: no parameters", ErrInvalid)
	}
	rule := cfg.Decay
	if rule == nil {
		rule = DecayMatrices
	}
	o := &AdamW{cfg: cfg, b: b, params: params}
	seen := map[string]bool{}
	for _, p := range params {
		if seen[p.Name] {
			return nil, fmt.Errorf("%w: parameter %q listed twice", ErrInvalid, p.Name)
		}
		seen[p.Name] = true
		shape := p.Value.Shape()
		if fmt.Sprint(shape) != fmt.Sprint(p.Grad.Shape()) {
			return nil, fmt.Errorf("%w: parameter %q has shape %v and gradient %v", ErrInvalid, p.Name, shape, p.Grad.Shape())
		}
		o.m = append(o.m, b.New(shape...))
		o.v = append(o.v, b.New(shape...))
		o.decay = append(o.decay, rule(p.Name, shape))
	}
	return o, nil
}

// Config returns the hyper-parameters.
func (o *AdamW) Config() Config { return o.cfg }

// Step is the number of updates applied so far.
func (o *AdamW) Step() int { return o.step }

// Decays reports whether the named parameter gets weight decay.
func (o *AdamW) Decays(name string) bool {
	for i, p := range o.params {
		if p.Name == name {
			return o.decay[i]
		}
	}
	return false
}

// Report describes one call of Update.
type Report struct {
	// Step is the 1-based number of the update applied, or the number of
	// the last one when Skipped.
	Step int
	// GradNorm is the global norm before clipping (NaN or Inf when
	// Skipped).
	GradNorm float64
	Clipped  bool    // the gradients were scaled down to MaxGradNorm
	LR       float64 // the rate used (0 when Skipped)
	// Skipped means a gradient was not finite: nothing was updated and the
	// gradients were zeroed.
	Skipped bool
}

// GradNorm returns the global gradient norm, NaN or Inf if any gradient
// element is not finite.
func (o *AdamW) GradNorm() float64 {
	var ss float64
	for _, p := range o.params {
		ss += o.b.SumSquares(p.Grad)
	}
	return math.Sqrt(ss)
}

// Update applies one AdamW step from the parameters' accumulated
// gradients. It leaves the gradients as they are after a step (the caller
// zeroes them before the next accumulation) and zeroes them after a
// skipped one.
func (o *AdamW) Update() Report {
	norm := o.GradNorm()
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		for _, p := range o.params {
			o.b.Fill(p.Grad, 0)
		}
		return Report{Step: o.step, GradNorm: norm, Skipped: true}
	}
	r := Report{GradNorm: norm}
	if c := o.cfg.MaxGradNorm; c > 0 && norm > c {
		scale := float32(c / (norm + 1e-6))
		for _, p := range o.params {
			o.b.Scale(p.Grad, scale)
		}
		r.Clipped = true
	}
	o.step++
	r.Step = o.step
	r.LR = o.cfg.LR * o.cfg.Schedule.Factor(o.step)
	hp := kernels.AdamWParams{LR: float32(r.LR), Beta1: float32(o.cfg.Beta1), Beta2: float32(o.cfg.Beta2), Eps: float32(o.cfg.Eps)}
	for i, p := range o.params {
		h := hp
		if o.decay[i] {
			h.WeightDecay = float32(o.cfg.WeightDecay)
		}
		o.b.AdamW(p.Value, p.Grad, o.m[i], o.v[i], h, o.step)
	}
	return r
}

// State is the optimizer's checkpointable state: the step and, per
// parameter name, the first and second moments as host floats.
type State struct {
	Step int
	M, V map[string][]float32
}

// State copies the moments to the host.
func (o *AdamW) State() State {
	s := State{Step: o.step, M: map[string][]float32{}, V: map[string][]float32{}}
	for i, p := range o.params {
		n := numel(p.Value.Shape())
		s.M[p.Name] = make([]float32, n)
		s.V[p.Name] = make([]float32, n)
		o.b.ToHost(s.M[p.Name], o.m[i])
		o.b.ToHost(s.V[p.Name], o.v[i])
	}
	return s
}

// SetState restores a State taken from an optimizer over the same
// parameters. Every parameter needs both moments of the right size and no
// other names may appear; otherwise nothing changes and the error says
// what does not fit.
func (o *AdamW) SetState(s State) error {
	if s.Step < 0 {
		return fmt.Errorf("%w: optimizer state at step %d", ErrInvalid, s.Step)
	}
	if len(s.M) != len(o.params) || len(s.V) != len(o.params) {
		return fmt.Errorf("%w: optimizer state has moments for %d and %d parameters, the model has %d", ErrInvalid, len(s.M), len(s.V), len(o.params))
	}
	for _, p := range o.params {
		n := numel(p.Value.Shape())
		m, okM := s.M[p.Name]
		v, okV := s.V[p.Name]
		if !okM || !okV {
			return fmt.Errorf("%w: optimizer state lacks the moments of %q", ErrInvalid, p.Name)
		}
		if len(m) != n || len(v) != n {
			return fmt.Errorf("%w: optimizer state of %q has %d and %d values, the parameter %v holds %d", ErrInvalid, p.Name, len(m), len(v), p.Value.Shape(), n)
		}
	}
	for i, p := range o.params {
		shape := p.Value.Shape()
		// FromHost adopts its argument on the CPU backend, so copy first.
		o.b.Copy(o.m[i], o.b.FromHost(tensor.From(append([]float32(nil), s.M[p.Name]...), shape...)))
		o.b.Copy(o.v[i], o.b.FromHost(tensor.From(append([]float32(nil), s.V[p.Name]...), shape...)))
	}
	o.step = s.Step
	return nil
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
