// Package trainer is the training loop of frognano run: for each step it
// asks the FrontierEstimator for a batch of tasks at the current policy
// version (the run's own estimator: posteriors and versions belong to one
// policy's lineage), plays G episodes of every task with the current policy (the
// node's Sampler) in fresh sandboxes (actors/rollout), reports the graded
// outcomes to the FrontierEstimator, sends the groups to the run's Learner
// for one GRPO step, and moves the Sampler to the version the Learner
// published. Everything it talks to is an actor reached by PID, so the loop
// drives a node in this process or on another machine alike.
//
// # Durability
//
// The run record (persistence.RunStore, through the node's learner host)
// carries the run's settings and, after every step, the step number and the
// run's running totals. The Learner writes its full training state every
// Settings.CheckpointEvery steps and when the run ends. A run killed at any
// moment resumes with Resume: the Learner reopens from its newest
// checkpoint, the Sampler is moved to the newest published version, and the
// loop continues after the last recorded step. A step cut short is played
// again from its batch (its stored trajectories stay, unused; the replay's
// episodes are seeded anew, and the frontier records each step's outcomes
// once); a step whose update landed in a checkpoint but not in the record
// is counted as done. With Settings.MaxStaleness > 0 the steps overlap
// (pipeline.go): the same holds for every step produced but not recorded.
//
// # Sampling
//
// Training episodes sample at temperature 1 with neither top-p nor top-k:
// the Learner's importance ratio exp(logp − samplerLogp) compares the
// policy's log-probabilities with the sampler's, and the Sampler records
// log-probabilities of the distribution it sampled from, which is the
// policy's own only at temperature 1 without truncation.
package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/frontier"
	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// Settings are a run's choices, kept in its record (Run.ConfigYaml, as
// JSON) so that a resumed run trains as it started.
type Settings struct {
	// Model is what the Learner trains (model store name or path; "" the
	// store's default). It must be the model the node's Sampler serves.
	Model string `json:"model"`
	// Steps is the run's length in loop steps (batches).
	Steps        int `json:"steps"`
	TasksPerStep int `json:"tasks_per_step"`
	// Group is G, the episodes per task.
	Group int    `json:"group"`
	Mode  string `json:"mode"`
	// Limits of an episode (zero fields: harness.DefaultLimits; MaxContext
	// is capped by the Sampler's context).
	MaxTurns      int     `json:"max_turns"`
	MaxTurnTokens int     `json:"max_turn_tokens"`
	MaxContext    int     `json:"max_context"`
	WallSeconds   float64 `json:"wall_seconds"`
	// LR is AdamW's learning rate.
	LR float64 `json:"lr"`
	// TrainLayers trains only the model's top this many decoder layers and
	// its final norm, the rest frozen (model.TrainOptions.TrainLayers; 0:
	// every weight): the GRPO steps and the warm start alike.
	TrainLayers int `json:"train_layers,omitempty"`
	// CheckpointEvery writes the Learner's full state every this many of
	// its steps (0: the Learner's default); the run's end writes one too.
	CheckpointEvery int `json:"checkpoint_every"`
	// Seed seeds batches, episodes and the Learner's micro-batch order.
	Seed uint64 `json:"seed"`
	// Sampler picks each step's tasks: SamplerFrontier ("" too), the
	// FrontierEstimator's selection, or SamplerUniform, tasks drawn
	// uniformly from the same pool (the baseline arm of the learning
	// benchmark).
	Sampler string `json:"sampler,omitempty"`
	// Held-out evaluation points (eval.go): EvalTasks tasks of the
	// held-out set at the hint levels EvalHints (empty: all), EvalK
	// episodes each, at the start, after the warm start, every EvalEvery
	// steps (0: no points between) and at the end. EvalTasks 0: none.
	EvalTasks int   `json:"eval_tasks"`
	EvalK     int   `json:"eval_k"`
	EvalEvery int   `json:"eval_every"`
	EvalHints []int `json:"eval_hints"`
	// The warm start (warmstart.go): WarmStartEpochs epochs of SFT (0:
	// none) on verified gold-fix demonstrations of up to WarmStartTasks
	// tasks (0: all) of the training environments WarmStartEnvs (names,
	// comma-separated), at learning rate WarmStartLR, WarmStartBatch
	// demonstrations a step (0: DefaultWarmStartBatch), WarmStartHoldout
	// of them only evaluated.
	WarmStartEpochs  int     `json:"warm_start_epochs,omitempty"`
	WarmStartTasks   int     `json:"warm_start_tasks,omitempty"`
	WarmStartLR      float64 `json:"warm_start_lr,omitempty"`
	WarmStartBatch   int     `json:"warm_start_batch,omitempty"`
	WarmStartHoldout int     `json:"warm_start_holdout,omitempty"`
	WarmStartEnvs    string  `json:"warm_start_envs,omitempty"`
	// BudgetSeconds bounds the run's training time (0: no bound): no step
	// starts once the run's wall time, summed over resumes, less the time
	// its held-out evaluations took, has reached it; the run then ends
	// (its end point is evaluated) with Steps as an upper bound only. The
	// warm start counts; a step or warm start under way finishes.
	BudgetSeconds float64 `json:"budget_seconds,omitempty"`
	// MaxStaleness makes steps asynchronous (pipeline.go): the rollouts of
	// later steps are played while the Learner trains on the current one,
	// at most this many policy versions behind the version they are
	// trained at; a group older than that is dropped and counted, never
	// trained on. 0: synchronous steps (every group of the current
	// version).
	MaxStaleness int `json:"max_staleness,omitempty"`
	// StartFrom names another run of the same store whose start point
	// stands for this run's (eval.go, "Sharing a start point"): the held-out
	// episodes it played at policy v0 are read back instead of played
	// again, and the ones it lacks are played. Both runs start from the
	// same weights, so their start points are draws of one policy on the
	// same tasks and episode seeds; the runs must agree on everything such
	// an episode depends on (checked when the point is evaluated).
	StartFrom string `json:"start_from,omitempty"`
}

// MetricBudgetSpent is 1 once a run has ended on its BudgetSeconds.
const MetricBudgetSpent = "budget_spent"

// seconds prints a number of seconds as a duration (1h0m0s, 1ns).
func seconds(x float64) time.Duration {
	return time.Duration(x * float64(time.Second)).Round(time.Nanosecond)
}

// TrainSeconds is the run's training time so far: its wall time over every
// process that ran it, less the time its held-out evaluations took.
func TrainSeconds(run *records.Run) float64 {
	m := run.GetMetrics()
	return m[MetricWallSeconds] - m[MetricEvalSeconds]
}

// BudgetSpent says whether the run has used its training budget (never
// when it has none).
func BudgetSpent(run *records.Run, s Settings) bool {
	return s.BudgetSeconds > 0 && (run.GetMetrics()[MetricBudgetSpent] > 0 || TrainSeconds(run) >= s.BudgetSeconds)
}

// Finished says whether the run's training is over: all its steps taken,
// or its budget spent (then its end point is still to be evaluated if
// the curve lacks it).
func Finished(run *records.Run, s Settings) bool {
	return s.Steps > 0 && (int(run.GetStep()) >= s.Steps || run.GetMetrics()[MetricBudgetSpent] > 0)
}

// Samplers of a run's batches.
const (
	SamplerFrontier = "frontier"
	SamplerUniform  = "uniform"
)

// Validate reports settings the loop cannot run with.
func (s Settings) Validate() error {
	_, err := harness.ParseMode(s.Mode)
	switch {
	case err != nil:
		return err
	case s.Steps < 0:
		return fmt.Errorf("trainer: %d steps: want 0 or more", s.Steps)
	case s.TasksPerStep < 1:
		return fmt.Errorf("trainer: %d tasks per step: want at least 1", s.TasksPerStep)
	case s.Group < 2:
		return fmt.Errorf("trainer: group of %d: GRPO needs at least 2 episodes per task", s.Group)
	case s.MaxTurns < 0 || s.MaxTurnTokens < 0 || s.MaxContext < 0 || s.WallSeconds < 0:
		return errors.New("trainer: negative episode limits")
	case !(s.LR > 0) || s.LR > 1:
		return fmt.Errorf("trainer: learning rate %v: want in (0, 1]", s.LR)
	case s.Sampler != "" && s.Sampler != SamplerFrontier && s.Sampler != SamplerUniform:
		return fmt.Errorf("trainer: sampler %q: want %q or %q", s.Sampler, SamplerFrontier, SamplerUniform)
	case s.EvalTasks < 0 || s.EvalEvery < 0 || s.EvalTasks > 0 && s.EvalK < 1:
		return fmt.Errorf("trainer: evaluation of %d tasks × %d episodes every %d steps: want tasks and steps ≥ 0 and at least 1 episode", s.EvalTasks, s.EvalK, s.EvalEvery)
	case s.CheckpointEvery < 0:
		return fmt.Errorf("trainer: checkpoint every %d steps: want 0 or more", s.CheckpointEvery)
	case s.TrainLayers < 0:
		return fmt.Errorf("trainer: %d trained layers: want 0 (all) or more", s.TrainLayers)
	case s.BudgetSeconds < 0 || math.IsNaN(s.BudgetSeconds) || math.IsInf(s.BudgetSeconds, 0):
		return fmt.Errorf("trainer: budget of %v seconds: want a finite number ≥ 0", s.BudgetSeconds)
	case s.MaxStaleness < 0:
		return fmt.Errorf("trainer: max staleness %d: want 0 (synchronous steps) or more", s.MaxStaleness)
	case s.StartFrom != "" && s.EvalTasks == 0:
		return fmt.Errorf("trainer: start from run %s: a run that evaluates nothing (eval tasks 0) has no start point to read back", s.StartFrom)
	}
	return s.validateWarmStart()
}

// Encode is the settings as stored in a run record.
func (s Settings) Encode() string {
	b, _ := json.MarshalIndent(s, "", "  ")
	return string(b)
}

// DecodeSettings reads the settings of a run record.
func DecodeSettings(run *records.Run) (Settings, error) {
	var s Settings
	if run.GetConfigYaml() == "" {
		return s, fmt.Errorf("trainer: run %s has no training settings (it was not a training run)", run.GetId())
	}
	if err := json.Unmarshal([]byte(run.GetConfigYaml()), &s); err != nil {
		return s, fmt.Errorf("trainer: run %s: settings: %w", run.GetId(), err)
	}
	return s, nil
}

// Config is what the loop needs.
type Config struct {
	Root *actor.RootContext
	// Node is the remoting address of the node whose named actors
	// (frontier, sampler, rollout, learner host) the loop uses.
	Node string
	// Sandboxes make the episodes' workspaces; Tokenizer renders prompts
	// (the Sampler's model's).
	Sandboxes rollout.Sandboxes
	Tokenizer *tokenizer.Tokenizer
	// Policy plays the episodes; nil is the node's Sampler (a
	// sampler.Client), which is what training means. Tests substitute a
	// policy whose rewards they control.
	Policy policy.Policy
	// HeldOut is the held-out set the run is evaluated on (tasks of
	// environments it never trains on; see actors/evaluate); nil: no
	// evaluation points.
	HeldOut []*records.Task
	// Parallel bounds the episodes running at once (default 8).
	Parallel int
	// Progress receives a line per phase of every step.
	Progress io.Writer
	Logger   *slog.Logger
	// Runs is the node's store of run records, where the run's record is
	// written after every step.
	Runs persistence.RunStore
	// Stored, when set, is called with the run after each write of its
	// record (Runs.Stored).
	Stored func(*records.Run)
}

// Trainer runs the loop of one run.
type Trainer struct {
	cfg      Config
	frontier *actor.PID
	sampler  *actor.PID
	store    *rollout.ActorStore
	runs     *Runs
	runner   *rollout.Runner
	learner  *actor.PID // the run's Learner, once opened
	// weights is what the node's Sampler's products read (its status at
	// open): every held-out point records it, and a start point read back
	// from another run must have been played on the same.
	weights string
	clock   clock
	// attempt is the record's MetricAttempts for this process: episodes
	// of a step replayed after a crash get seeds of their own.
	attempt int
	// evalSeconds mirrors the record's MetricEvalSeconds (float64 bits)
	// for the producer of asynchronous steps, which must not read the record.
	evalSeconds atomic.Uint64
	printMu     sync.Mutex
	// infraSteps counts the steps in a row, up to the current one, whose
	// every episode failed in the infrastructure (MaxInfraSteps of them
	// stop the run).
	infraSteps int
}

// MaxInfraSteps is how many steps in a row may have every episode fail in
// the infrastructure (containerd gone, an image deleted, a sandbox that
// cannot start) before the run stops with the first failure's cause: such
// steps carry no reward at all, and a run that went on would spend its
// steps, and report a solve rate, on nothing.
const MaxInfraSteps = 3

// New returns a Trainer for the node at cfg.Node.
func New(cfg Config) (*Trainer, error) {
	if cfg.Root == nil || cfg.Node == "" || cfg.Sandboxes == nil || cfg.Tokenizer == nil || cfg.Runs == nil {
		return nil, errors.New("trainer: a Trainer needs an actor root, a node address, Sandboxes and a Tokenizer")
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 8
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Trainer{
		cfg:      cfg,
		frontier: actor.NewPID(cfg.Node, frontier.ActorName),
		sampler:  actor.NewPID(cfg.Node, sampler.ActorName),
		store:    &rollout.ActorStore{Root: cfg.Root, PID: actor.NewPID(cfg.Node, rollout.ActorName), Timeout: 5 * time.Minute},
		runs:     &Runs{Store: cfg.Runs, Stored: cfg.Stored},
	}
	policy := cfg.Policy
	if policy == nil {
		policy = &sampler.Client{Root: cfg.Root, PID: t.sampler}
	}
	runner, err := rollout.New(rollout.Config{
		Policy:    policy,
		Tokenizer: cfg.Tokenizer, Sandboxes: cfg.Sandboxes, Trajectories: t.store,
		MaxEpisodes: cfg.Parallel, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	t.runner = runner
	return t, nil
}

// Runs is the node's run records, kept by its learner host.
func (t *Trainer) Runs() *Runs { return t.runs }

// Keys of the run record's metrics the loop keeps (running totals over the
// run, and the newest values of the rest).
const (
	MetricSteps           = "train_steps"
	MetricTasks           = "train_tasks" // task groups played (a task may recur across steps)
	MetricEpisodes        = "train_episodes"
	MetricSolved          = "train_solved"
	MetricInfra           = "train_infrastructure_failures"
	MetricGroups          = "train_groups"
	MetricEffective       = "train_effective_groups"
	MetricOutcomes        = "train_outcomes_recorded"
	MetricLoss            = "train_loss" // of the newest applied update
	MetricUpdates         = "train_updates"
	MetricNoSignal        = "train_steps_without_signal"
	MetricPolicyVersion   = "policy_version"
	MetricLearnerStep     = "learner_step"
	MetricPolicyTokens    = "train_policy_tokens"
	MetricSecondsBatch    = "seconds_batch" // asking the frontier, waiting for synthesized tasks included
	MetricSecondsRollouts = "seconds_rollouts"
	MetricSecondsReport   = "seconds_report"
	MetricSecondsLearning = "seconds_learning"
	MetricSecondsSwap     = "seconds_swap"
	// Inside the rollouts: the training episodes' own seconds, summed over
	// episodes (which run side by side, so they add up to more than
	// seconds_rollouts): waiting for the policy's tokens, and the sandbox
	// (getting and preparing it, the agent's tools, grading), and of the
	// latter the grading alone.
	MetricEpisodeGeneration = "episode_seconds_generation"
	MetricEpisodeSandbox    = "episode_seconds_sandbox"
	MetricEpisodeGrading    = "episode_seconds_grading"
	// A step point's own wall seconds of rollouts and of learning (the run
	// record keeps the totals, seconds_rollouts and seconds_learning).
	PointSecondsRollouts = "step_seconds_rollouts"
	PointSecondsLearning = "step_seconds_learning"
	// MetricAttempts counts the processes that trained the run (Train
	// calls); a step replayed after a crash seeds its episodes with it.
	MetricAttempts = "train_attempts"
	// Staleness of the groups handed to the Learner: groups dropped for
	// being more than Settings.MaxStaleness versions old, the oldest
	// staleness seen, and episodes whose turns span more than one version.
	MetricStaleDropped   = "train_stale_groups_dropped"
	MetricMaxStaleness   = "train_max_staleness_seen"
	MetricMixedEpisodes  = "train_mixed_version_episodes"
	MetricOutcomesRepeat = "train_outcome_reports_repeated" // steps replayed after a crash whose outcomes the frontier had
)

// Summary is what a run has done so far.
type Summary struct {
	RunID                        string
	Steps, TotalSteps            int
	Tasks, Episodes, Solved      int
	Infra, Groups, Effective     int
	Updates, NoSignal            int
	Loss                         float64
	HaveLoss                     bool
	PolicyVersion, LearnerStep   int64
	SecondsBatch, SecondsRollout float64
	SecondsReport, SecondsLearn  float64
	SecondsSwap                  float64
}

// SolveRate is solved over graded (non-infrastructure) episodes.
func (s Summary) SolveRate() float64 {
	n := s.Episodes - s.Infra
	if n <= 0 {
		return 0
	}
	return float64(s.Solved) / float64(n)
}

// SummaryOf reads a run record's totals.
func SummaryOf(run *records.Run, steps int) Summary {
	m := run.GetMetrics()
	loss, ok := m[MetricLoss]
	return Summary{
		RunID: run.GetId(), Steps: int(run.GetStep()), TotalSteps: steps,
		Tasks: int(m[MetricTasks]), Episodes: int(m[MetricEpisodes]), Solved: int(m[MetricSolved]), Infra: int(m[MetricInfra]),
		Groups: int(m[MetricGroups]), Effective: int(m[MetricEffective]), Updates: int(m[MetricUpdates]), NoSignal: int(m[MetricNoSignal]),
		Loss: loss, HaveLoss: ok, PolicyVersion: int64(m[MetricPolicyVersion]), LearnerStep: int64(m[MetricLearnerStep]),
		SecondsBatch: m[MetricSecondsBatch], SecondsRollout: m[MetricSecondsRollouts], SecondsReport: m[MetricSecondsReport],
		SecondsLearn: m[MetricSecondsLearning], SecondsSwap: m[MetricSecondsSwap],
	}
}

func (t *Trainer) printf(format string, args ...any) {
	t.printMu.Lock()
	defer t.printMu.Unlock()
	fmt.Fprintf(t.cfg.Progress, format+"\n", args...)
}

// ask sends msg to pid and waits, turning a Failure into an error.
func (t *Trainer) ask(pid *actor.PID, msg any, timeout time.Duration) (any, error) {
	res, err := t.cfg.Root.RequestFuture(pid, msg, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("%s did not answer %T: %w", pid.GetId(), msg, err)
	}
	if f, ok := res.(*rtmsg.Failure); ok {
		return nil, fmt.Errorf("%s: %s", pid.GetId(), f.GetMessage())
	}
	return res, nil
}

// Train runs the run's steps after run.Step, up to s.Steps, updating and
// storing run (its Step and Metrics) after every step. run must be stored
// already; Train leaves its Status to the caller. It returns the run's
// summary, also when it fails part-way.
func (t *Trainer) Train(ctx context.Context, run *records.Run, s Settings) (Summary, error) {
	if err := s.Validate(); err != nil {
		return SummaryOf(run, s.Steps), err
	}
	if run.Metrics == nil {
		run.Metrics = map[string]float64{}
	}
	run.Metrics[MetricAttempts]++ // stored by open
	t.attempt = int(run.Metrics[MetricAttempts])
	open := t.open
	if measuresOnly(run, s) {
		open = t.openSampler
	}
	maxContext, err := open(ctx, run, s)
	if err != nil {
		return SummaryOf(run, s.Steps), err
	}
	lim := harness.Limits{MaxTurns: s.MaxTurns, MaxTurnTokens: s.MaxTurnTokens, MaxContext: s.MaxContext,
		WallTime: time.Duration(s.WallSeconds * float64(time.Second))}
	if lim.MaxContext == 0 {
		lim.MaxContext = harness.DefaultLimits.MaxContext
	}
	if maxContext > 0 && lim.MaxContext > maxContext {
		lim.MaxContext = maxContext
	}
	t.clock.reset(run)
	if run.GetStep() == 0 {
		if err := t.record(ctx, run, s, lim, PhaseStart); err != nil {
			return SummaryOf(run, s.Steps), err
		}
	}
	if err := t.warmStart(ctx, run, s, lim); err != nil {
		return SummaryOf(run, s.Steps), fmt.Errorf("warm start: %w", err)
	}
	// A run killed between its warm start and this point measures it on
	// resume (record skips a point the curve has).
	if s.WarmStartEpochs > 0 && run.GetStep() == 0 {
		if err := t.record(ctx, run, s, lim, PhaseWarmStart); err != nil {
			return SummaryOf(run, s.Steps), err
		}
	}
	if s.MaxStaleness > 0 {
		if err := t.pipeline(ctx, run, s, lim); err != nil {
			return SummaryOf(run, s.Steps), err
		}
	} else {
		for step := int(run.GetStep()) + 1; step <= s.Steps; step++ {
			if err := ctx.Err(); err != nil {
				return SummaryOf(run, s.Steps), err
			}
			t.clock.tick(run)
			if BudgetSpent(run, s) {
				break
			}
			p, err := t.produce(ctx, run.GetId(), s, lim, step, int64(run.Metrics[MetricPolicyVersion]))
			if err == nil {
				err = t.consume(ctx, run, s, lim, p)
			}
			if err != nil {
				return SummaryOf(run, s.Steps), fmt.Errorf("step %d: %w", step, err)
			}
		}
	}
	if s.Steps > 0 && BudgetSpent(run, s) && !Finished(run, s) {
		t.printf("budget: %s of training spent (budget %s, held-out evaluation excluded) after step %d of at most %d: the run ends here",
			seconds(TrainSeconds(run)), seconds(s.BudgetSeconds), run.GetStep(), s.Steps)
		run.Metrics[MetricBudgetSpent] = 1
		if err := t.runs.Put(ctx, run); err != nil {
			return SummaryOf(run, s.Steps), err
		}
	}
	if Finished(run, s) {
		if err := t.record(ctx, run, s, lim, PhaseEnd); err != nil {
			return SummaryOf(run, s.Steps), err
		}
	}
	// The run's end writes the full training state (once the weights have
	// moved), so that a later resume starts exactly here whatever
	// CheckpointEvery is.
	if t.learner != nil && run.GetMetrics()[MetricUpdates] > 0 {
		res, err := t.ask(t.learner, &messages.LearnerCheckpointRequest{}, 30*time.Minute)
		if err != nil {
			return SummaryOf(run, s.Steps), fmt.Errorf("final checkpoint: %w", err)
		}
		c := res.(*messages.LearnerCheckpointed)
		t.printf("learner: full checkpoint of %s at step %d (policy v%d)", c.GetRunId(), c.GetStep(), c.GetPolicyVersion())
	}
	return SummaryOf(run, s.Steps), nil
}

// open opens the run's Learner, moves the Sampler to the newest published
// version, and reconciles the record with the Learner's state after a
// crash. It returns the Sampler's context length. Versions reach the
// Sampler only by the Trainer's swap: the Learner announces nothing.
func (t *Trainer) open(ctx context.Context, run *records.Run, s Settings) (int, error) {
	start := time.Now()
	t.printf("learner: opening run %s (model %s, lr %g)", run.GetId(), orDefault(s.Model, "the store's default"), s.LR)
	res, err := t.ask(actor.NewPID(t.cfg.Node, HostName), &messages.LearnerOpen{RunId: run.GetId(), Model: s.Model, Lr: s.LR,
		CheckpointEvery: int32(s.CheckpointEvery), Seed: s.Seed, TrainLayers: int32(s.TrainLayers)}, 30*time.Minute)
	if err != nil {
		return 0, err
	}
	opened := res.(*messages.LearnerOpened)
	t.learner = actor.NewPID(opened.GetAddress(), opened.GetId())
	st := opened.GetStatus()
	resumed := st.GetLastCheckpointStep() >= 0
	t.printf("learner: %s on %s at step %d, policy v%d (resumed from a checkpoint: %v) in %.1fs",
		st.GetModel().GetArchitecture(), st.GetBackend(), st.GetStep(), st.GetPolicyVersion(), resumed, time.Since(start).Seconds())

	res, err = t.ask(t.sampler, &messages.SamplerStatusRequest{}, 30*time.Minute)
	if err != nil {
		return 0, err
	}
	ss := res.(*messages.SamplerStatus)
	t.weights = ss.GetWeights()
	if !sameModel(ss.GetConfig(), st.GetModel()) {
		return 0, fmt.Errorf("the node's Sampler serves %s (%v) but the Learner trains %v: train the model the node serves",
			ss.GetModel(), ss.GetConfig(), st.GetModel())
	}
	switch pub := st.GetPublishedStep(); {
	case ss.GetPolicyVersion() > max(pub, 0):
		return 0, fmt.Errorf("the node's Sampler serves policy v%d, newer than run %s's newest (v%d): it holds another run's weights; restart the node",
			ss.GetPolicyVersion(), run.GetId(), max(pub, 0))
	case pub > ss.GetPolicyVersion():
		if err := t.swap(run.GetId(), pub, pub); err != nil {
			return 0, err
		}
	}

	// Reconcile the record with the Learner after a crash.
	recorded := int64(run.GetMetrics()[MetricLearnerStep])
	switch {
	case st.GetStep() > recorded && run.GetStep() < int64(s.Steps) && !warmStartPending(run, s):
		// The last step's update reached a checkpoint but the process died
		// before the record: count that step as done.
		t.printf("run %s: the Learner is at step %d, the record at %d: step %d's update landed before the crash; counting it as done",
			run.GetId(), st.GetStep(), recorded, run.GetStep()+1)
		run.Step++
		run.Metrics[MetricSteps] = float64(run.GetStep())
	case st.GetStep() < recorded:
		t.printf("run %s: the Learner resumed at step %d, the record says %d: the updates after its newest checkpoint were lost with the process (their publications remain)",
			run.GetId(), st.GetStep(), recorded)
	}
	run.Metrics[MetricLearnerStep] = float64(st.GetStep())
	run.Metrics[MetricPolicyVersion] = float64(st.GetPolicyVersion())
	run.UpdatedUnixNano = time.Now().UnixNano()
	if err := t.runs.Put(ctx, run); err != nil {
		return 0, err
	}
	return int(ss.GetContextLength()), nil
}

// measuresOnly says whether a run only measures its start point: no
// steps and no warm start, now or before (a run that trained and is
// resumed with --steps 0 opens its Learner, which knows its versions), so
// nothing a Learner holds is used.
func measuresOnly(run *records.Run, s Settings) bool {
	m := run.GetMetrics()
	return s.Steps == 0 && s.WarmStartEpochs <= 0 && run.GetStep() == 0 && m[MetricUpdates] == 0 && m[MetricPolicyVersion] == 0 &&
		m[MetricWarmStartDone] == 0
}

// openSampler is open for a run that only measures its start point: the
// Learner (the model's float32 weights, and its optimizer state once it
// trains) is not opened, and the Sampler must serve the run's model as
// published, policy v0. It returns the Sampler's context length.
func (t *Trainer) openSampler(ctx context.Context, run *records.Run, s Settings) (int, error) {
	res, err := t.ask(t.sampler, &messages.SamplerStatusRequest{}, 30*time.Minute)
	if err != nil {
		return 0, err
	}
	ss := res.(*messages.SamplerStatus)
	t.weights = ss.GetWeights()
	if v := ss.GetPolicyVersion(); v != 0 {
		return 0, fmt.Errorf("the node's Sampler serves policy v%d of an earlier run; a run of no steps measures the model as published (v0): restart the node", v)
	}
	if err := sameSource(ss.GetModel(), s.Model); err != nil {
		return 0, err
	}
	t.printf("sampler: serves %s, policy v0 (%s weights); a run of no steps measures its start point only: the Learner is not opened",
		ss.GetModel(), orDefault(t.weights, "unknown"))
	run.UpdatedUnixNano = time.Now().UnixNano()
	if err := t.runs.Put(ctx, run); err != nil {
		return 0, err
	}
	return int(ss.GetContextLength()), nil
}

// sameSource checks that the Sampler's model file (served) is the one the
// run names (a name in the model store, or a path; empty: the store's
// default), resolved as the Learner host resolves it.
func sameSource(served, name string) error {
	if name == "" {
		name = modelstore.Default
	}
	store, err := modelstore.Open("")
	if err != nil {
		return err
	}
	want, err := store.Resolve(name)
	if err != nil {
		return fmt.Errorf("the run's model: %w", err)
	}
	// The same file or directory by any path (relative, a symlink, a
	// linked store directory).
	a, errA := os.Stat(served)
	b, errB := os.Stat(want)
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		return fmt.Errorf("the node's Sampler serves %s but the run names %s (%s): measure the model the node serves", served, name, want)
	}
	return nil
}

func sameModel(a, b *records.ModelConfig) bool {
	return a.GetArchitecture() == b.GetArchitecture() && a.GetHiddenSize() == b.GetHiddenSize() && a.GetLayers() == b.GetLayers() &&
		a.GetVocabSize() == b.GetVocabSize() && a.GetHeads() == b.GetHeads() && a.GetKvHeads() == b.GetKvHeads() &&
		a.GetIntermediateSize() == b.GetIntermediateSize()
}

// swap moves the Sampler to a published version and waits until it
// generates with it.
func (t *Trainer) swap(runID string, step, version int64) error {
	start := time.Now()
	res, err := t.ask(t.sampler, &messages.WeightsPublished{RunId: runID, Step: step, PolicyVersion: version}, 30*time.Minute)
	if err != nil {
		return fmt.Errorf("sampler: applying v%d: %w", version, err)
	}
	applied := res.(*messages.WeightsApplied)
	if applied.GetPolicyVersion() < version {
		return fmt.Errorf("sampler: asked for v%d, serves v%d", version, applied.GetPolicyVersion())
	}
	t.printf("sampler: now serves policy v%d of run %s (swap %.1fs)", applied.GetPolicyVersion(), runID, time.Since(start).Seconds())
	return nil
}

// prepared is one step's batch and rollouts, ready for the Learner.
type prepared struct {
	step  int
	tasks []*records.Task
	// version is the policy version the batch was asked at, the oldest its
	// episodes may use.
	version                   int64
	results                   []*rollout.Result
	batchSeconds, rollSeconds float64
}

// stepSeed seeds step's batch; the step's episodes take it too, mixed
// with the process's attempt after the first, so that a step replayed
// after a crash never reuses a stored trajectory's id.
func stepSeed(s Settings, step, attempt int) (batch, episodes uint64) {
	batch = s.Seed ^ uint64(step)*0x9e3779b97f4a7c15
	episodes = batch
	if attempt > 1 {
		episodes ^= uint64(attempt) * 0xbf58476d1ce4e5b9
	}
	return batch, episodes
}

// produce asks the frontier for step's batch at policy version (waiting
// for the synthesizer when the pool is empty) and plays G episodes of
// every task, concurrently, with episodes of at least that version.
func (t *Trainer) produce(ctx context.Context, runID string, s Settings, lim harness.Limits, step int, version int64) (*prepared, error) {
	tag := fmt.Sprintf("step %d/%d", step, s.Steps)
	seed, epSeed := stepSeed(s, step, t.attempt)

	// 1. A batch from the frontier.
	start := time.Now()
	tasks, err := t.batch(ctx, tag, runID, s.TasksPerStep, version, seed, s.Mode, s.Sampler == SamplerUniform)
	if err != nil {
		return nil, err
	}
	p := &prepared{step: step, tasks: tasks, version: version, batchSeconds: time.Since(start).Seconds()}
	ids := make([]string, len(tasks))
	for i, task := range tasks {
		ids[i] = task.GetId()
	}
	from := "from the frontier"
	if s.Sampler == SamplerUniform {
		from = "drawn uniformly from the pool"
	}
	t.printf("%s: batch of %d task(s) %s at policy v%d in %.1fs: %s", tag, len(tasks), from, version, p.batchSeconds, strings.Join(ids, " "))

	// 2. G episodes of every task, concurrently.
	start = time.Now()
	t.printf("%s: rollouts: %d task(s) × %d episodes, %s mode, temperature 1, at most %d tokens a turn", tag, len(tasks), s.Group, s.Mode, lim.MaxTurnTokens)
	if p.results, err = t.rollouts(ctx, tag, runID, tasks, s, lim, version, epSeed, nil); err != nil {
		return nil, err
	}
	p.rollSeconds = time.Since(start).Seconds()
	return p, nil
}

// consume hands a prepared step to the Learner and records it: outcomes
// to the frontier, the staleness filter, one GRPO step, the Sampler's
// swap, the record.
func (t *Trainer) consume(ctx context.Context, run *records.Run, s Settings, lim harness.Limits, p *prepared) error {
	m := run.Metrics
	step, tasks, results := p.step, p.tasks, p.results
	tag := fmt.Sprintf("step %d/%d", step, s.Steps)
	rollSeconds := p.rollSeconds
	var (
		outcomes                                []*messages.EpisodeOutcome
		groups                                  []*messages.TrajectoryGroup
		episodes, solved, infra, effectv, mixed int
		genSecs, sandboxSecs, gradeSecs         float64
	)
	for _, r := range results {
		g := &messages.TrajectoryGroup{TaskId: r.TaskID}
		rewards := map[float64]bool{}
		for _, e := range r.Episodes {
			episodes++
			res := e.Result
			genSecs += res.GenerationSeconds
			sandboxSecs += e.SetupSeconds + res.SandboxSeconds
			gradeSecs += res.GradeSeconds
			outcomes = append(outcomes, &messages.EpisodeOutcome{TaskId: r.TaskID, PolicyVersion: res.PolicyVersion, Reward: res.Reward, SandboxFailure: e.Infra, Mode: s.Mode})
			if e.Infra {
				infra++
				continue
			}
			if res.Grade != nil && res.Grade.Resolved {
				solved++
			}
			rewards[res.Reward] = true
			tr := res.Trajectory(e.TrajectoryID, run.GetId(), r.TaskID)
			if mixedVersions(tr) {
				mixed++
			}
			g.Trajectories = append(g.Trajectories, tr)
		}
		if len(rewards) > 1 {
			effectv++
		}
		if len(g.Trajectories) >= 2 {
			groups = append(groups, g)
		}
	}
	t.printf("%s: rollouts done in %.1fs: %d/%d solved, %d infrastructure failure(s), %d of %d group(s) with mixed rewards",
		tag, rollSeconds, solved, episodes-infra, infra, effectv, len(results))
	if episodes > 0 && infra == episodes {
		t.infraSteps++
		if t.infraSteps >= MaxInfraSteps {
			return fmt.Errorf("%s: every episode of the last %d steps failed in the infrastructure (the first of this step: %s); "+
				"the run stops here, before recording the step: fix the cause and resume it with --run %s", tag, t.infraSteps, firstInfra(results), run.GetId())
		}
	} else {
		t.infraSteps = 0
	}

	// 3. Outcomes to the frontier, once per step (a step replayed after a
	// crash whose outcomes were recorded is not counted again).
	start := time.Now()
	res, err := t.ask(t.frontier, &messages.OutcomesReport{Outcomes: outcomes, Run: run.GetId(), Step: int64(step)}, 5*time.Minute)
	if err != nil {
		return fmt.Errorf("reporting outcomes: %w", err)
	}
	ack := res.(*messages.OutcomesAck)
	recorded := ack.GetRecorded()
	if ack.GetDuplicate() {
		m[MetricOutcomesRepeat]++
		t.printf("%s: the frontier had recorded %d outcome(s) of this step before the crash; this attempt's %d are not counted again", tag, recorded, len(outcomes))
	} else {
		t.printf("%s: frontier recorded %d of %d outcome(s)", tag, recorded, len(outcomes))
	}
	// The pool after these outcomes, for the step's point: by band and by
	// hint level. Without an answer the point has no pool figures; the
	// step goes on.
	var pool *messages.FrontierStateReply
	if res, err := t.ask(t.frontier, &messages.FrontierStateRequest{Run: run.GetId()}, time.Minute); err != nil {
		t.printf("%s: the frontier's pool: %v (the step's point records no pool)", tag, err)
	} else {
		pool = res.(*messages.FrontierStateReply)
	}
	reportSeconds := time.Since(start).Seconds()

	// 4. Staleness: the Learner trains at the run's policy version; a
	// group more than MaxStaleness versions older is dropped, counted.
	version := int64(m[MetricPolicyVersion])
	st := filterStale(groups, version, s.MaxStaleness)
	for _, d := range st.Dropped {
		v, _ := groupVersion(d)
		t.printf("%s: group of task %s from policy v%d is %d version(s) behind v%d (max %d): dropped, not trained on",
			tag, d.GetTaskId(), v, version-v, version, s.MaxStaleness)
	}
	if s.MaxStaleness > 0 && len(st.Kept) > 0 {
		t.printf("%s: %d group(s) at staleness %v (policy v%d; at most %d), %d dropped", tag, len(st.Kept), st.Ages, version, s.MaxStaleness, len(st.Dropped))
	}
	groups = st.Kept

	// 5. One GRPO step.
	start = time.Now()
	var ls *messages.LearnerStep
	switch {
	case len(groups) == 0 && len(st.Dropped) > 0:
		t.printf("%s: learner: every group was dropped as stale; nothing to learn from", tag)
	case len(groups) == 0:
		t.printf("%s: learner: no group with two graded episodes; nothing to learn from", tag)
	default:
		res, err := t.ask(t.learner, &messages.LearnerTrainBatch{BatchId: fmt.Sprintf("%s/step-%d", run.GetId(), step), Groups: groups}, 2*time.Hour)
		if err != nil {
			return fmt.Errorf("learner: %w", err)
		}
		ls = res.(*messages.LearnerStep)
		switch ls.GetSkipped() {
		case "":
			t.printf("%s: learner step %d → policy v%d: loss %+.5f, grad norm %.3f, lr %g, %d group(s) used, %d skipped, %d policy tokens, clip fraction %.3f, |Δ log-prob| sampler−policy mean %.4f max %.3f, %.1fs",
				tag, ls.GetStep(), ls.GetPolicyVersion(), ls.GetLoss(), ls.GetGradNorm(), ls.GetLr(), ls.GetGroupsUsed(), ls.GetGroupsSkipped(),
				ls.GetPolicyTokens(), ls.GetClipFraction(), ls.GetMeanAbsLogRatio(), ls.GetMaxAbsLogRatio(), ls.GetSeconds())
		default:
			t.printf("%s: learner: update skipped (%s; %d group(s) with equal rewards; |Δ log-prob| sampler−policy mean %.4f max %.3f), policy stays v%d",
				tag, ls.GetSkipped(), ls.GetGroupsSkipped(), ls.GetMeanAbsLogRatio(), ls.GetMaxAbsLogRatio(), ls.GetPolicyVersion())
		}
	}
	learnSeconds := time.Since(start).Seconds()

	// 6. The Sampler moves to the published version.
	start = time.Now()
	if ls != nil && ls.GetPublishedStep() >= 0 {
		if err := t.swap(run.GetId(), ls.GetPublishedStep(), ls.GetPolicyVersion()); err != nil {
			return err
		}
	}
	swapSeconds := time.Since(start).Seconds()

	// 7. The record.
	run.Step = int64(step)
	m[MetricSteps] = float64(step)
	m[MetricTasks] += float64(len(tasks))
	m[MetricEpisodes] += float64(episodes)
	m[MetricSolved] += float64(solved)
	m[MetricInfra] += float64(infra)
	m[MetricGroups] += float64(len(results))
	m[MetricEffective] += float64(effectv)
	m[MetricOutcomes] += float64(recorded)
	m[MetricSecondsBatch] += p.batchSeconds
	m[MetricSecondsRollouts] += rollSeconds
	m[MetricSecondsReport] += reportSeconds
	m[MetricSecondsLearning] += learnSeconds
	m[MetricSecondsSwap] += swapSeconds
	m[MetricEpisodeGeneration] += genSecs
	m[MetricEpisodeSandbox] += sandboxSecs
	m[MetricEpisodeGrading] += gradeSecs
	m[MetricStaleDropped] += float64(len(st.Dropped))
	m[MetricMaxStaleness] = max(m[MetricMaxStaleness], float64(st.Max))
	m[MetricMixedEpisodes] += float64(mixed)
	if ls != nil {
		m[MetricPolicyVersion] = float64(ls.GetPolicyVersion())
		m[MetricLearnerStep] = float64(ls.GetStep())
		if ls.GetSkipped() == "" {
			m[MetricUpdates]++
			m[MetricLoss] = ls.GetLoss()
			m[MetricPolicyTokens] += float64(ls.GetPolicyTokens())
		} else {
			m[MetricNoSignal]++
		}
	} else {
		m[MetricNoSignal]++
	}
	sm := map[string]float64{"solve_rate": 0, "effective_fraction": 0,
		PointStaleDropped: float64(len(st.Dropped)), PointMaxStaleness: float64(st.Max)}
	if n := episodes - infra; n > 0 {
		sm["solve_rate"] = float64(solved) / float64(n)
	}
	if len(results) > 0 {
		sm["effective_fraction"] = float64(effectv) / float64(len(results))
	}
	// Where the step's time went, charted per step: the rollouts' and the
	// Learner's wall seconds, and the episodes' own generation and sandbox
	// seconds (summed over the step's episodes).
	sm[PointSecondsRollouts], sm[PointSecondsLearning] = rollSeconds, learnSeconds
	sm[MetricEpisodeGeneration], sm[MetricEpisodeSandbox] = genSecs, sandboxSecs
	LearnerPointMetrics(sm, ls)
	PoolPointMetrics(sm, pool)
	for _, task := range tasks {
		sm[fmt.Sprintf("%s%d", batchHint, task.GetDifficulty().GetHintLevel())] += 1 / float64(len(tasks))
	}
	if err := t.point(ctx, run, s, lim, PhaseStep, false, sm); err != nil {
		return err
	}
	t.clock.tick(run)
	run.UpdatedUnixNano = time.Now().UnixNano()
	if err := t.runs.Put(ctx, run); err != nil {
		return fmt.Errorf("recording the step: %w", err)
	}
	// The held-out evaluation comes after the step is recorded: a run
	// killed during it loses that point, never the step.
	if s.EvalEvery > 0 && step%s.EvalEvery == 0 && step < s.Steps && !BudgetSpent(run, s) {
		if err := t.record(ctx, run, s, lim, PhaseStep); err != nil {
			return err
		}
	}
	t.evalSeconds.Store(math.Float64bits(m[MetricEvalSeconds]))
	return nil
}

// batch asks the run's frontier estimator for n tasks; while the pool is
// empty it waits for the tasks the frontier asks the synthesizer for. mode
// tells the frontier the harness mode the batch is played in.
func (t *Trainer) batch(ctx context.Context, tag, runID string, n int, version int64, seed uint64, mode string, uniform bool) ([]*records.Task, error) {
	const poll, patience = 10 * time.Second, 30 * time.Minute
	deadline := time.Now().Add(patience)
	for {
		res, err := t.ask(t.frontier, &messages.BatchRequest{Tasks: int32(n), PolicyVersion: version, Seed: seed, Mode: mode, Run: runID, Uniform: uniform}, 5*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("frontier: %w", err)
		}
		if tasks := res.(*messages.TaskBatch).GetTasks(); len(tasks) > 0 {
			return tasks, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("frontier: no task to train on after %s (frognano frontier shows the pool and its synthesis requests)", patience)
		}
		t.printf("%s: the frontier has no task to offer; waiting for the synthesizer", tag)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}

// rollouts plays every task's group concurrently and returns the results
// in task order. A task the node cannot run (its environment or image is
// gone) fails the step.
func (t *Trainer) rollouts(ctx context.Context, tag, runID string, tasks []*records.Task, s Settings, lim harness.Limits, version int64, seed uint64, reuse []string) ([]*rollout.Result, error) {
	mode, _ := harness.ParseMode(s.Mode)
	results := make([]*rollout.Result, len(tasks))
	errs := make([]error, len(tasks))
	total := len(tasks) * s.Group
	var (
		mu   sync.Mutex
		done int
		wg   sync.WaitGroup
	)
	for i, task := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := rollout.Request{Task: task, Group: s.Group, Mode: mode, Limits: lim, Sampling: sample.Params{Temperature: 1},
				PolicyVersion: version, Seed: seed, RunID: runID, Reuse: reuse}
			results[i], errs[i] = t.runner.Run(ctx, req, func(e *rollout.Episode) {
				mu.Lock()
				done++
				n := done
				mu.Unlock()
				r := e.Result
				again := ""
				if e.Reused {
					again = " (read back: played before the run was interrupted)"
					if from, _, ok := strings.Cut(e.TrajectoryID, "/"); ok && from != strings.SplitN(runID, "/", 2)[0] {
						again = " (read back from run " + from + ")"
					}
				}
				t.printf("%s:   episode %d/%d %s #%d: %s, reward %g, %d policy tokens, v%d, %.1fs%s", tag, n, total, task.GetId(), e.Index,
					endingOf(e), r.Reward, r.PolicyTokens(), r.PolicyVersion, e.WallSeconds, again)
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("rollouts of task %s: %w", tasks[i].GetId(), err)
		}
	}
	return results, nil
}

func endingOf(e *rollout.Episode) string {
	s := string(e.Result.Ending)
	if e.Infra {
		s += " (infrastructure, twice)"
	}
	return s
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// firstInfra describes the first infrastructure failure among results:
// its ending and detail.
func firstInfra(results []*rollout.Result) string {
	for _, r := range results {
		for _, e := range r.Episodes {
			if e.Infra && e.Result != nil {
				return fmt.Sprintf("%s: %s", e.Result.Ending, e.Result.Detail)
			}
		}
	}
	return "no detail"
}
