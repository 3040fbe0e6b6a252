// Package sim is a seeded, deterministic simulator of RL training on
// synthesized tasks, used to measure what the FrontierEstimator buys: a
// synthetic learner whose skill grows with the learning signal it gets is
// trained, at an equal rollout budget, by three task samplers side by side:
//
//	(a) uniform: tasks drawn uniformly from a static pool;
//	(b) dapo: DAPO-style dynamic sampling from the same pool: groups whose
//	    rewards are all equal are discarded and more tasks are rolled out
//	    until the batch is full (discarded rollouts count);
//	(c) frontier: the frontier.Estimator itself (the code the actor runs, on
//	    in-memory stores) choosing batches from the same initial pool and
//	    asking a simulated Synthesizer for tasks in its target band.
//
// # The learner
//
// A task has features like a real one: operator, bugs, hint level,
// environment, test distance (plus edits, files, lines and failing tests
// that only correlate with bugs). Its difficulty is a sum of per-feature
// costs plus task-specific noise:
//
//	d = op_cost[op] + BugCost·(bugs−1) + HintCost·(2−hint) + env_cost[env] + DistanceCost·distance + N(0, TaskNoise²)
//
// The learner solves it in one episode with probability
//
//	p = σ(g + s_op[op] + s_hint[hint] + s_bugs[bugs] − d)
//
// where g is a general skill and the s are per-feature skills. Each skill
// component c grows with the learning signal L_c it has received, with
// diminishing returns: s_c = Gain·ln(1 + L_c/Scale). A group of G episodes
// of one task carries the signal Σ|r_i − r̄| (the total absolute
// group-relative advantage, as in GRPO without standard-deviation
// normalisation: 2G·k/G·(1−k/G) for k successes, zero when all rewards are
// equal), shared equally among the four components the task touches. The
// learner is updated after every batch; each update is a policy version.
//
// "Skill" in the report is g + mean(s_op) + mean(s_hint) + mean(s_bugs): the
// learner's logit advantage on a task drawn uniformly over the features. The
// evaluation solve rate is the mean p over a fixed held-out set of tasks
// drawn uniformly over all settings.
//
// Assumptions: learning transfers only through the shared components (no
// transfer between operators); signal from a task far too easy or too hard
// is rare because its groups are rarely mixed, not because it is
// discounted; the Synthesizer makes a task to any setting asked for, with a
// fixed yield and a delay of a few batches, and its cost is not counted in
// rollouts. Nothing in the learner knows which sampler is used.
package sim

import (
	"fmt"
	"math"
	"math/rand/v2"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// World holds the features' difficulty costs and makes tasks.
type World struct {
	cfg       Config
	opCost    map[string]float64
	envs      []string
	envCost   map[string]float64
	truth     map[string]float64 // task id → difficulty
	nextID    int
	evalTasks []*records.Task
}

func newWorld(cfg Config) *World {
	r := rand.New(rand.NewPCG(cfg.Seed, 0x1d))
	w := &World{cfg: cfg, opCost: map[string]float64{}, envCost: map[string]float64{}, truth: map[string]float64{}}
	// Operator costs spread evenly over [OpCostMin, OpCostMax] in a seeded order.
	perm := r.Perm(len(cfg.Operators))
	for i, op := range cfg.Operators {
		frac := 0.0
		if len(cfg.Operators) > 1 {
			frac = float64(perm[i]) / float64(len(cfg.Operators)-1)
		}
		w.opCost[op] = cfg.OpCostMin + frac*(cfg.OpCostMax-cfg.OpCostMin)
	}
	for i := range cfg.Environments {
		env := fmt.Sprintf("sim-env-%d", i)
		w.envs = append(w.envs, env)
		w.envCost[env] = (float64(i) - float64(cfg.Environments-1)/2) * cfg.EnvCostStep
	}
	er := rand.New(rand.NewPCG(cfg.Seed, 0xe7a1))
	for range cfg.EvalTasks {
		w.evalTasks = append(w.evalTasks, w.uniformTask(er, "eval"))
	}
	return w
}

// spec is a synthesis setting.
type spec struct {
	env  string
	op   string
	bugs int
	hint int
}

func (w *World) uniformSpec(r *rand.Rand) spec {
	return spec{
		env: w.envs[r.IntN(len(w.envs))], op: w.cfg.Operators[r.IntN(len(w.cfg.Operators))],
		bugs: 1 + r.IntN(w.cfg.MaxBugs), hint: r.IntN(3),
	}
}

func (w *World) uniformTask(r *rand.Rand, prefix string) *records.Task {
	return w.makeTask(r, w.uniformSpec(r), prefix)
}

// makeTask builds a task to spec with its hidden difficulty.
func (w *World) makeTask(r *rand.Rand, s spec, prefix string) *records.Task {
	w.nextID++
	id := fmt.Sprintf("%s-%06d", prefix, w.nextID)
	edits := s.bugs * (1 + r.IntN(2))
	dist := r.IntN(4)
	ops := make([]string, s.bugs)
	for i := range ops {
		ops[i] = s.op
	}
	d := w.opCost[s.op] + w.cfg.BugCost*float64(s.bugs-1) + w.cfg.HintCost*float64(2-s.hint) +
		w.envCost[s.env] + w.cfg.DistanceCost*float64(dist) + r.NormFloat64()*w.cfg.TaskNoise
	w.truth[id] = d
	return &records.Task{
		Id: id, Environment: s.env, Language: "python",
		Difficulty: &records.DifficultyFeatures{
			Operators: ops, Edits: int32(edits), Files: int32(1 + r.IntN(s.bugs)), LinesTouched: int32(edits * (1 + r.IntN(3))),
			FailingTests: int32(1 + r.IntN(6)), HintLevel: int32(s.hint), TestDistance: int32(dist), Mode: "agent",
		},
		Provenance: &records.Provenance{Operator: s.op, Generator: "sim/v1"},
	}
}

// Learner is the synthetic policy.
type Learner struct {
	cfg    Config
	signal map[string]float64 // component → accumulated signal
}

func newLearner(cfg Config) *Learner { return &Learner{cfg: cfg, signal: map[string]float64{}} }

func components(t *records.Task) []string {
	d := t.GetDifficulty()
	return []string{"general", "op=" + d.GetOperators()[0], fmt.Sprintf("hint=%d", d.GetHintLevel()), fmt.Sprintf("bugs=%d", len(d.GetOperators()))}
}

func (l *Learner) skillOf(component string) float64 {
	return l.cfg.Gain * math.Log1p(l.signal[component]/l.cfg.Scale)
}

// P is the probability that the learner solves t in one episode.
func (l *Learner) P(w *World, t *records.Task) float64 {
	z := -w.truth[t.GetId()]
	for _, c := range components(t) {
		z += l.skillOf(c)
	}
	return 1 / (1 + math.Exp(-z))
}

// Learn adds a group's signal to the task's skill components.
func (l *Learner) Learn(t *records.Task, rewards []float64) float64 {
	mean := 0.0
	for _, r := range rewards {
		mean += r
	}
	mean /= float64(len(rewards))
	sig := 0.0
	for _, r := range rewards {
		sig += math.Abs(r - mean)
	}
	cs := components(t)
	for _, c := range cs {
		l.signal[c] += sig / float64(len(cs))
	}
	return sig
}

// Skill is the learner's mean logit advantage over the features.
func (l *Learner) Skill(w *World) float64 {
	s := l.skillOf("general")
	mean := func(prefix string, keys []string) float64 {
		t := 0.0
		for _, k := range keys {
			t += l.skillOf(prefix + k)
		}
		return t / float64(len(keys))
	}
	s += mean("op=", w.cfg.Operators)
	var hints, bugs []string
	for h := range 3 {
		hints = append(hints, fmt.Sprint(h))
	}
	for b := 1; b <= w.cfg.MaxBugs; b++ {
		bugs = append(bugs, fmt.Sprint(b))
	}
	return s + mean("hint=", hints) + mean("bugs=", bugs)
}

// EvalSolveRate is the mean solve probability over the held-out tasks.
func (l *Learner) EvalSolveRate(w *World) float64 {
	t := 0.0
	for _, task := range w.evalTasks {
		t += l.P(w, task)
	}
	return t / float64(len(w.evalTasks))
}
