package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/frognano/frognano/actors/frontier"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/synth/mutate"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Config sets up a simulation. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	Seed uint64
	// Budget is the number of rollouts (episodes) each arm may spend.
	Budget int64
	// BatchTasks tasks per batch, Group episodes per task.
	BatchTasks, Group int
	// PoolSize is the static pool of arms (a) and (b), and the initial pool of (c).
	PoolSize     int
	Environments int
	Operators    []string
	MaxBugs      int
	// Difficulty costs (see the package comment).
	OpCostMin, OpCostMax, BugCost, HintCost, EnvCostStep, DistanceCost, TaskNoise float64
	// Learner: s = Gain·ln(1 + L/Scale).
	Gain, Scale float64
	// EvalTasks is the size of the held-out evaluation set.
	EvalTasks int
	// SynthYield is the share of asked-for tasks the simulated Synthesizer
	// delivers; SynthDelay the batches it takes.
	SynthYield float64
	SynthDelay int
	// Params of the frontier arm's estimator (zero: its defaults, with the
	// simulation's operators and a target of 4 batches of frontier tasks).
	Params frontier.Params
}

// WorldOperators is how many operator kinds the default simulated world has:
// the first ones of mutate.OperatorNames. The world is smaller than mutate's
// list on purpose (the figures in docs/frontier.md were measured with ten);
// its names come from mutate so its tasks carry real operators.
const WorldOperators = 10

// DefaultConfig is what `frognano bench frontier` runs.
func DefaultConfig() Config {
	return Config{
		Seed: 1, Budget: 200_000, BatchTasks: 32, Group: 8, PoolSize: 512, Environments: 3,
		Operators: slices.Clone(mutate.OperatorNames[:WorldOperators]),
		MaxBugs:   3, OpCostMin: -1, OpCostMax: 3, BugCost: 1, HintCost: 0.75, EnvCostStep: 0.5, DistanceCost: 0.25, TaskNoise: 0.5,
		Gain: 0.5, Scale: 1000, EvalTasks: 2000, SynthYield: 0.7, SynthDelay: 2,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	if c.Budget == 0 {
		c.Budget = d.Budget
	}
	if c.BatchTasks == 0 {
		c.BatchTasks = d.BatchTasks
	}
	if c.Group == 0 {
		c.Group = d.Group
	}
	if c.PoolSize == 0 {
		c.PoolSize = d.PoolSize
	}
	if c.Environments == 0 {
		c.Environments = d.Environments
	}
	if len(c.Operators) == 0 {
		c.Operators = d.Operators
	}
	if c.MaxBugs == 0 {
		c.MaxBugs = d.MaxBugs
	}
	if c.OpCostMin == 0 && c.OpCostMax == 0 {
		c.OpCostMin, c.OpCostMax = d.OpCostMin, d.OpCostMax
	}
	for _, f := range []struct {
		x *float64
		v float64
	}{{&c.BugCost, d.BugCost}, {&c.HintCost, d.HintCost}, {&c.EnvCostStep, d.EnvCostStep}, {&c.DistanceCost, d.DistanceCost},
		{&c.TaskNoise, d.TaskNoise}, {&c.Gain, d.Gain}, {&c.Scale, d.Scale}, {&c.SynthYield, d.SynthYield}} {
		if *f.x == 0 {
			*f.x = f.v
		}
	}
	if c.EvalTasks == 0 {
		c.EvalTasks = d.EvalTasks
	}
	if c.SynthDelay == 0 {
		c.SynthDelay = d.SynthDelay
	}
	if len(c.Params.Operators) == 0 {
		c.Params.Operators = c.Operators
	}
	if c.Params.TargetFrontier == 0 {
		c.Params.TargetFrontier = 4 * c.BatchTasks
	}
	if len(c.Params.HintLevels) == 0 {
		c.Params.HintLevels = []int{0, 1, 2} // the world's hint levels (world.go)
	}
	if len(c.Params.Bugs) == 0 {
		for b := 1; b <= c.MaxBugs; b++ {
			c.Params.Bugs = append(c.Params.Bugs, b)
		}
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Budget < int64(c.BatchTasks*c.Group):
		return fmt.Errorf("budget %d is less than one batch (%d tasks × %d episodes)", c.Budget, c.BatchTasks, c.Group)
	case c.BatchTasks < 1 || c.Group < 2:
		return fmt.Errorf("batch of %d tasks × %d episodes: want at least 1 task and 2 episodes", c.BatchTasks, c.Group)
	case c.PoolSize < c.BatchTasks:
		return fmt.Errorf("pool of %d tasks cannot fill a batch of %d", c.PoolSize, c.BatchTasks)
	case c.SynthYield <= 0 || c.SynthYield > 1:
		return fmt.Errorf("synthesis yield %v: want (0, 1]", c.SynthYield)
	case c.Scale <= 0 || c.Gain <= 0:
		return fmt.Errorf("learner gain and scale must be positive")
	}
	return nil
}

// Point is the learner after some rollouts.
type Point struct {
	Rollouts int64   `json:"rollouts"`
	Skill    float64 `json:"skill"`
}

// Arm is the result of one sampler.
type Arm struct {
	Name                   string  `json:"name"`
	Rollouts               int64   `json:"rollouts"`
	Steps                  int     `json:"steps"`
	Groups                 int64   `json:"groups"`
	EffectiveGroups        int64   `json:"effective_groups"`
	EffectiveBatchFraction float64 `json:"effective_batch_fraction"`
	SkillStart             float64 `json:"skill_start"`
	SkillFinal             float64 `json:"skill_final"`
	// RolloutsPerSkill is rollouts spent per unit of skill gained.
	RolloutsPerSkill float64 `json:"rollouts_per_skill"`
	EvalStart        float64 `json:"eval_solve_rate_start"`
	EvalFinal        float64 `json:"eval_solve_rate_final"`
	// RolloutsToUniformFinal is the rollouts this arm needed to reach the
	// uniform arm's final skill (-1: never within the budget).
	RolloutsToUniformFinal int64 `json:"rollouts_to_uniform_final_skill"`
	// SignalPerRollout is the learning signal (total absolute group-relative
	// advantage) the learner received per rollout spent.
	SignalPerRollout  float64 `json:"signal_per_rollout"`
	TasksSynthesized  int     `json:"tasks_synthesized"`
	SynthesisRequests int64   `json:"synthesis_requests"`
	Curve             []Point `json:"-"`
	signal            float64
}

// Report is a whole simulation.
type Report struct {
	Seed       uint64 `json:"seed"`
	Budget     int64  `json:"budget"`
	BatchTasks int    `json:"batch_tasks"`
	Group      int    `json:"group"`
	PoolSize   int    `json:"pool_size"`
	Arms       []Arm  `json:"arms"`
	// Goals of the issue: the frontier arm's effective-batch fraction is at
	// least 0.8, and it reaches the uniform arm's final skill with at most
	// half the rollouts.
	GoalEffectiveFraction bool `json:"goal_effective_fraction"`
	GoalHalfRollouts      bool `json:"goal_half_rollouts"`
	// RolloutsBound is the fewest rollouts in which any sampler, in this
	// world, can expect to reach the uniform arm's final skill (see
	// Config.RolloutsBound): every group at p = 1/2, signal spread evenly.
	// When it exceeds half the budget, the half-rollouts goal is out of
	// reach for every sampler, not only for the frontier arm.
	RolloutsBound int64 `json:"rollouts_bound_to_uniform_final_skill"`
}

// Run simulates the three arms with the same seed, world and budget.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rep := &Report{Seed: cfg.Seed, Budget: cfg.Budget, BatchTasks: cfg.BatchTasks, Group: cfg.Group, PoolSize: cfg.PoolSize}
	for _, arm := range []func(context.Context, Config) (Arm, error){runUniform, runDAPO, runFrontier} {
		a, err := arm(ctx, cfg)
		if err != nil {
			return nil, err
		}
		rep.Arms = append(rep.Arms, a)
	}
	target := rep.Arms[0].SkillFinal
	for i := range rep.Arms {
		rep.Arms[i].RolloutsToUniformFinal = reach(rep.Arms[i].Curve, target)
	}
	rep.RolloutsBound = cfg.RolloutsBound(target)
	f := rep.Arms[2]
	rep.GoalEffectiveFraction = f.EffectiveBatchFraction >= 0.8
	rep.GoalHalfRollouts = f.RolloutsToUniformFinal >= 0 && f.RolloutsToUniformFinal*2 <= rep.Arms[0].Rollouts
	return rep, nil
}

func reach(curve []Point, target float64) int64 {
	for _, p := range curve {
		if p.Skill >= target {
			return p.Rollouts
		}
	}
	return -1
}

// run holds what every arm shares: the world, its static pool, a learner
// and the episode random stream.
type run struct {
	cfg     Config
	w       *World
	pool    []*records.Task
	l       *Learner
	episode *rand.Rand
	arm     Arm
}

func newRun(cfg Config, name string) *run {
	w := newWorld(cfg)
	pr := rand.New(rand.NewPCG(cfg.Seed, 0x9001))
	r := &run{cfg: cfg, w: w, l: newLearner(cfg), episode: rand.New(rand.NewPCG(cfg.Seed, 0xe915)), arm: Arm{Name: name}}
	for range cfg.PoolSize {
		r.pool = append(r.pool, w.uniformTask(pr, "task"))
	}
	r.arm.SkillStart = r.l.Skill(w)
	r.arm.EvalStart = r.l.EvalSolveRate(w)
	r.arm.Curve = append(r.arm.Curve, Point{0, r.arm.SkillStart})
	return r
}

// rollout plays G episodes of t with the current learner.
func (r *run) rollout(t *records.Task) (rewards []float64, effective bool) {
	p := r.l.P(r.w, t)
	rewards = make([]float64, r.cfg.Group)
	for i := range rewards {
		if r.episode.Float64() < p {
			rewards[i] = 1
		}
		if rewards[i] != rewards[0] {
			effective = true
		}
	}
	r.arm.Rollouts += int64(len(rewards))
	r.arm.Groups++
	if effective {
		r.arm.EffectiveGroups++
	}
	return rewards, effective
}

func (r *run) budgetLeft() bool { return r.arm.Rollouts+int64(r.cfg.Group) <= r.cfg.Budget }

// update trains the learner on a batch's groups (one policy version).
func (r *run) update(tasks []*records.Task, rewards [][]float64) {
	for i, t := range tasks {
		r.arm.signal += r.l.Learn(t, rewards[i])
	}
	r.arm.Steps++
	r.arm.Curve = append(r.arm.Curve, Point{r.arm.Rollouts, r.l.Skill(r.w)})
}

func (r *run) finish() Arm {
	a := r.arm
	a.SkillFinal = r.l.Skill(r.w)
	a.EvalFinal = r.l.EvalSolveRate(r.w)
	if a.Groups > 0 {
		a.EffectiveBatchFraction = float64(a.EffectiveGroups) / float64(a.Groups)
	}
	if a.Rollouts > 0 {
		a.SignalPerRollout = a.signal / float64(a.Rollouts)
	}
	if gain := a.SkillFinal - a.SkillStart; gain > 0 {
		a.RolloutsPerSkill = float64(a.Rollouts) / gain
	} else {
		a.RolloutsPerSkill = math.Inf(1)
	}
	return a
}

// runUniform is arm (a): B distinct tasks drawn uniformly from the static
// pool every step; all groups are trained on (equal rewards teach nothing).
func runUniform(ctx context.Context, cfg Config) (Arm, error) {
	r := newRun(cfg, "uniform")
	pick := rand.New(rand.NewPCG(cfg.Seed, 0xa))
	for r.budgetLeft() {
		if err := ctx.Err(); err != nil {
			return Arm{}, err
		}
		var tasks []*records.Task
		var rewards [][]float64
		for _, i := range pick.Perm(len(r.pool))[:cfg.BatchTasks] {
			if !r.budgetLeft() {
				break
			}
			rw, _ := r.rollout(r.pool[i])
			tasks, rewards = append(tasks, r.pool[i]), append(rewards, rw)
		}
		r.update(tasks, rewards)
	}
	return r.finish(), nil
}

// runDAPO is arm (b): tasks drawn uniformly (without replacement within a
// step); a group whose rewards are all equal is discarded, its rollouts
// spent, and sampling goes on until B effective groups fill the batch (or
// the pool is exhausted for this step, or the budget).
func runDAPO(ctx context.Context, cfg Config) (Arm, error) {
	r := newRun(cfg, "dapo")
	pick := rand.New(rand.NewPCG(cfg.Seed, 0xb))
	for r.budgetLeft() {
		if err := ctx.Err(); err != nil {
			return Arm{}, err
		}
		var tasks []*records.Task
		var rewards [][]float64
		for _, i := range pick.Perm(len(r.pool)) {
			if len(tasks) == cfg.BatchTasks || !r.budgetLeft() {
				break
			}
			rw, eff := r.rollout(r.pool[i])
			if eff {
				tasks, rewards = append(tasks, r.pool[i]), append(rewards, rw)
			}
		}
		r.update(tasks, rewards)
	}
	return r.finish(), nil
}

// delivery is a simulated synthesis request in flight.
type delivery struct {
	due int
	rec *records.SynthesisRecord
}

// runFrontier is arm (c): the frontier.Estimator, on in-memory stores,
// selects every batch, learns from every report and plans synthesis; the
// simulated Synthesizer answers each request SynthDelay batches later with
// tasks made to the requested setting (each asked-for task delivered with
// probability SynthYield).
func runFrontier(ctx context.Context, cfg Config) (Arm, error) {
	r := newRun(cfg, "frontier")
	mem := persistence.NewMemory()
	if err := mem.Tasks().PutMany(ctx, r.pool); err != nil {
		return Arm{}, err
	}
	clock := time.Unix(1_700_000_000, 0)
	est, err := frontier.Open(ctx, frontier.Config{
		Name: "sim", Tasks: mem.Tasks(), State: mem.Frontier(),
		Params: cfg.Params, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return clock },
	})
	if err != nil {
		return Arm{}, err
	}
	synth := rand.New(rand.NewPCG(cfg.Seed, 0xc))
	var inFlight []delivery
	version := int64(0)
	for r.budgetLeft() {
		if err := ctx.Err(); err != nil {
			return Arm{}, err
		}
		clock = clock.Add(time.Minute)
		// Deliver what is due, then plan.
		var keep []delivery
		for _, d := range inFlight {
			if d.due > r.arm.Steps {
				keep = append(keep, d)
				continue
			}
			var made []*records.Task
			for range d.rec.GetAsked() {
				if synth.Float64() < cfg.SynthYield {
					s := d.rec.GetSpec()
					made = append(made, r.w.makeTask(synth, spec{env: s.GetEnvironment(), op: s.GetOperators()[0], bugs: int(s.GetBugs()), hint: int(s.GetHintLevel())}, "synth"))
				}
			}
			if err := mem.Tasks().PutMany(ctx, made); err != nil {
				return Arm{}, err
			}
			ids := make([]string, len(made))
			for i, t := range made {
				ids[i] = t.GetId()
			}
			if err := est.Delivered(ctx, d.rec.GetId(), ids, nil); err != nil {
				return Arm{}, err
			}
			r.arm.TasksSynthesized += len(made)
		}
		inFlight = keep
		recs, err := est.PlanSynthesis(ctx, nil)
		if err != nil {
			return Arm{}, err
		}
		for _, rec := range recs {
			inFlight = append(inFlight, delivery{due: r.arm.Steps + cfg.SynthDelay, rec: rec})
		}

		batch, err := est.SelectBatch(ctx, cfg.BatchTasks, version, 0, "")
		if err != nil {
			return Arm{}, err
		}
		var tasks []*records.Task
		var rewards [][]float64
		var outcomes []*messages.EpisodeOutcome
		for _, t := range batch {
			if !r.budgetLeft() {
				break
			}
			rw, _ := r.rollout(t)
			tasks, rewards = append(tasks, t), append(rewards, rw)
			for _, x := range rw {
				outcomes = append(outcomes, &messages.EpisodeOutcome{TaskId: t.GetId(), PolicyVersion: version, Reward: x})
			}
		}
		if _, err := est.Record(ctx, outcomes); err != nil {
			return Arm{}, err
		}
		r.update(tasks, rewards)
		version++
	}
	a := r.finish()
	a.SynthesisRequests = est.State().GetCounters()[frontier.CountSynthRequests]
	return a, nil
}

// WriteTable prints the report as a table.
func (rep *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "seed %d, budget %d rollouts per arm, batches of %d tasks × %d episodes, static pool %d tasks\n",
		rep.Seed, rep.Budget, rep.BatchTasks, rep.Group, rep.PoolSize)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "arm\trollouts\tsteps\teffective-batch fraction\tskill start→final\trollouts per unit skill\teval solve rate\trollouts to (a)'s final skill\tsignal per rollout\ttasks synthesized\t")
	for _, a := range rep.Arms {
		to := "never"
		if a.RolloutsToUniformFinal >= 0 {
			to = fmt.Sprintf("%d (%.2f×)", a.RolloutsToUniformFinal, float64(a.RolloutsToUniformFinal)/float64(rep.Arms[0].Rollouts))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.2f→%.2f\t%.0f\t%.3f→%.3f\t%s\t%.3f\t%d\t\n", a.Name, a.Rollouts, a.Steps, a.EffectiveBatchFraction,
			a.SkillStart, a.SkillFinal, a.RolloutsPerSkill, a.EvalStart, a.EvalFinal, to, a.SignalPerRollout, a.TasksSynthesized)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	if rep.RolloutsBound >= 0 {
		fmt.Fprintf(w, "bound: any sampler needs ≥ %d rollouts (%.2f×) to reach uniform's final skill (every group at p = 1/2, signal spread evenly)\n",
			rep.RolloutsBound, float64(rep.RolloutsBound)/float64(rep.Arms[0].Rollouts))
	}
	_, err := fmt.Fprintf(w, "goals: frontier effective-batch fraction ≥ 0.8: %s; frontier reaches uniform's final skill in ≤ half the rollouts: %s\n",
		mark(rep.GoalEffectiveFraction), mark(rep.GoalHalfRollouts))
	return err
}
