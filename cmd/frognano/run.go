package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/evaluate"
	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandboxworker"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/actors/ui"
	"github.com/frognano/frognano/cmd/internal/services"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/persistence"
	"github.com/frognano/frognano/runtime/config"
)

// runCmd is the main job: it brings up a node (embedded, joined to a
// cluster when --seeds is given, or the node at --node), spreads verified
// work over every member through remote spawning and supervision, makes
// sure the training environment is registered, synthesizes a first set of
// tasks, and then trains (actors/trainer): frontier batch, rollouts,
// outcomes, GRPO step, sampler swap, step after step. The run is recorded
// in the node's store, and --run resumes a killed one.
func runCmd(a *app) *cobra.Command {
	var jobs int
	var rounds int64
	var envSources []string
	var tasks int32
	var runID string
	var parallel int
	var hints []int
	var plotPath, tbDir string
	var budget time.Duration
	s := trainer.Settings{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the main job: cluster check, the default environment, task synthesis, then RL training steps",
		Long: `run starts an embedded node (joining a cluster through --seeds if given), or
uses the node at --node, records a run in the node's Badger store, spreads
--jobs verified digest jobs over every cluster member by remote spawning,
makes sure the environment --env (default six==1.16.0, a PyPI sdist) is
registered, building its image and baseline the first time, synthesizes
--tasks validated bug-fix tasks from it, and then trains for --steps steps.

A step asks the frontier (FrontierEstimator) for --tasks-per-step tasks at
the current policy version, plays --group episodes of each with the node's
Sampler at temperature 1 (--mode patch: one answer of search/replace edits;
agent: the tool loop), each in a fresh sandbox, graded and stored as a
trajectory; reports the outcomes to the frontier (which asks the synthesizer
for more tasks when its pool runs short); sends the groups to the run's
Learner for one GRPO step with AdamW; and, when the Learner published a new
policy version, moves the Sampler to it. A step whose groups all have equal
rewards carries no signal and changes no weights.

The run's settings, step and figures are kept in the store after every
step; the Learner checkpoints every --checkpoint-every steps and at the end.
A killed run resumes with --run ID (the same settings; --steps may raise
its length): the Learner reopens from its newest checkpoint, the Sampler
loads the newest published weights, and the loop continues after the last
recorded step.

Steps are asynchronous by default: the rollouts of later steps are played
while the Learner trains on the current one, and a group reaches the Learner
at most --max-staleness (3) policy versions after the version that sampled
it; an older one is dropped and counted, never trained on. --max-staleness 0
runs each step to its end before the next begins.

With --budget D the run trains for D rather than a number of steps: no step
starts once its wall time (summed over resumes, warm start included,
held-out evaluation excluded) has reached D, and the run ends there, its
end point evaluated; --steps is then an upper bound. Two runs given the same
budget (the frontier and the uniform arm) are compared at an equal cost.

With --warm-start-epochs N, the run first imitates the synthesizer's own
gold fixes: up to --warm-start-tasks tasks of the training environment are
each played once by a scripted policy that writes the task's gold fix in
the harness's exact format (--mode), in a real sandbox, graded by the real
grader; the episodes with reward 1 are the demonstrations. N epochs of
supervised steps (loss on the answer tokens only, --warm-start-lr) follow,
each publishing a policy version like a GRPO step; then the Sampler moves to
the newest version and GRPO begins. The record says when the stage is done:
a resumed run continues an unfinished stage and never repeats a finished
one.

With --tensorboard DIR, every point of the run's curve (each step's, each
held-out evaluation's) is appended to a TensorBoard event file in DIR as
soon as the record holds it; a resumed run appends what the file lacks,
never a point twice (frognano runs export --format tensorboard writes the
same file from the record at any time).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// An embedded node's Sampler serves the model the run trains,
			// unless the configuration names one (policy.model); a
			// running node serves its own, which must be the same.
			embed := a.embedDefaults(cmd)
			c, err := connect(cmd.Context(), a.nodeAddr, a.load, func(cfg *config.Config) {
				embed(cfg)
				if cfg.Policy.Model == "" {
					cfg.Policy.Model = s.Model
				}
			})
			if err != nil {
				return err
			}
			defer c.close()
			ctx := cmd.Context()
			n := c.embedded
			out := cmd.OutOrStdout()

			if n != nil {
				info := n.Info()
				caps := info.Capabilities
				fmt.Fprintf(out, "node %s  remote %s  http %s\n", info.Id, info.Address, info.HttpAddress)
				fmt.Fprintf(out, "capabilities: %d cores, %.1f GiB, containerd %v, %d GPU(s)", caps.Cores, float64(caps.MemoryBytes)/(1<<30), caps.Containerd, len(caps.Gpus))
				if caps.GpuError != "" {
					fmt.Fprintf(out, " (%s)", caps.GpuError)
				}
				fmt.Fprintln(out)
			} else {
				fmt.Fprintf(out, "node at %s (remote %s)\n", a.nodeAddr, c.manager.Address)
			}

			runs := &trainer.Runs{Root: c.system.Root, PID: c.pid(trainer.HostName)}
			started := time.Now()
			run, resumed, err := openRun(ctx, runs, runID, started)
			if err != nil {
				return err
			}
			if resumed {
				stored, err := trainer.DecodeSettings(run)
				if err != nil {
					return err
				}
				if cmd.Flags().Changed("steps") {
					stored.Steps = s.Steps
				}
				if cmd.Flags().Changed("budget") {
					stored.BudgetSeconds = budget.Seconds()
				}
				if cmd.Flags().Changed("max-staleness") {
					stored.MaxStaleness = s.MaxStaleness // nothing is in flight between two processes
				}
				s = stored
				fmt.Fprintf(out, "resuming run %s (%s) after step %d of %d\n", run.Id, run.Status, run.Step, s.Steps)
			} else {
				if s.Seed == 0 {
					s.Seed = uint64(started.UnixNano())
				}
				s.BudgetSeconds = budget.Seconds()
				if s.WarmStartEpochs > 0 && s.WarmStartEnvs == "" && len(envSources) > 0 {
					var names []string
					for _, source := range envSources {
						src, err := environment.ParseSource(source)
						if err != nil {
							return err
						}
						names = append(names, environment.DefaultName(src)) // the run's training environments
					}
					s.WarmStartEnvs = strings.Join(names, ",")
				}
				if err := s.Validate(); err != nil {
					return err
				}
				for _, source := range envSources {
					if evaluate.HeldOutSource(source) {
						return evaluate.CheckTraining(source, nil)
					}
				}
				run.ConfigYaml = s.Encode()
			}
			stored, err := tensorBoardLog(out, cmd.ErrOrStderr(), tbDir, run)
			if err != nil {
				return err
			}
			runs.Stored = stored
			run.Status = "running"
			run.UpdatedUnixNano = time.Now().UnixNano()
			if err := runs.Put(ctx, run); err != nil {
				return err
			}
			finish := func(status string) {
				run.Status = status
				run.UpdatedUnixNano = time.Now().UnixNano()
				if err := runs.Put(context.Background(), run); err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning: could not record run:", err)
				}
			}

			var members int
			if n != nil {
				members = len(n.Members())
				fmt.Fprintf(out, "cluster: %d member(s)\n", members)
			}
			res, err := c.ask(&messages.DigestBatchRequest{Jobs: int32(jobs), Rounds: rounds, PreferRemote: true, Seed: uint64(started.UnixNano())}, 30*time.Minute)
			if err != nil {
				finish("failed")
				return err
			}
			report := res.(*messages.DigestBatchReport)
			perNode := map[string]int{}
			bad := 0
			for _, o := range report.Outcomes {
				if o.Error != "" || !bytes.Equal(o.Digest, diag.Digest(o.Data, rounds)) {
					bad++
					continue
				}
				perNode[o.Node]++
			}
			for addr, k := range perNode {
				fmt.Fprintf(out, "  %-24s %d verified jobs\n", addr, k)
			}
			if n == nil {
				members = len(perNode)
			}
			run.Metrics["members"] = float64(members)
			run.Metrics["jobs"] = float64(len(report.Outcomes))
			run.Metrics["jobs_failed"] = float64(bad)
			run.Metrics["jobs_per_second"] = float64(len(report.Outcomes)) / report.Seconds
			if bad > 0 {
				finish("failed")
				return fmt.Errorf("%d of %d jobs failed or answered wrongly", bad, len(report.Outcomes))
			}
			if len(envSources) > 0 {
				var envs []*messages.Environment
				run.Metrics["env_baseline_tests"] = 0
				for _, source := range envSources {
					env, err := ensureEnvironment(c, source, cmd.ErrOrStderr())
					if err != nil {
						finish("failed")
						return err
					}
					// No run trains on a held-out repository, under any name
					// (a resumed run is checked again: settings predate checks).
					if err := checkTraining(c, env, s); err != nil {
						finish("failed")
						return err
					}
					run.Metrics["env_baseline_tests"] += float64(len(env.Baseline.GetResults()))
					fmt.Fprintf(out, "environment %s: %s, image %s, baseline %s\n", env.Name, env.Language, env.Image, summarize(env.Baseline))
					envs = append(envs, env)
				}
				_, synthesized := run.Metrics["tasks_synthesized"]
				if tasks > 0 && !(resumed && synthesized) {
					for k, env := range envs {
						for i, hint := range hints {
							synthStart := time.Now()
							res, err := c.synthesize(&messages.SynthesizeRequest{Environment: env.Name, Count: tasks, Bugs: 1,
								Seed: uint64(started.UnixNano()) + uint64(k*len(hints)+i), Target: &messages.DifficultyFeatures{HintLevel: int32(hint)}}, cmd.ErrOrStderr())
							if err != nil {
								finish("failed")
								return err
							}
							run.Metrics["tasks_synthesized"] += float64(len(res.TaskIds))
							run.Metrics["synth_candidates"] += float64(res.GetProgress().GetCandidates())
							run.Metrics["seconds_synth"] += time.Since(synthStart).Seconds()
							fmt.Fprintf(out, "synthesized %d validated tasks of %s at hint level %d from %d candidates in %.1fs (frognano tasks ls --env %s)\n",
								len(res.TaskIds), env.Name, hint, res.GetProgress().GetCandidates(), res.WallSeconds, env.Name)
						}
					}
				}
				var heldOut []*messages.Task
				if s.EvalTasks > 0 {
					if heldOut, err = heldOutTasks(c, cmd.ErrOrStderr()); err != nil {
						finish("failed")
						return err
					}
					fmt.Fprintf(out, "held-out set: %d tasks of %s (never trained on); %d at hint levels %v evaluated × %d episodes at the start, after the warm start, every %d steps and at the end\n",
						len(heldOut), strings.Join(evaluate.HeldOutEnvironments, ", "), min(s.EvalTasks, len(heldOut)), s.EvalHints, s.EvalK, s.EvalEvery)
				}
				if err := runs.Put(ctx, run); err != nil {
					return err
				}
				if !trainer.Finished(run, s) && s.Steps > 0 || (s.WarmStartEpochs > 0 && run.Metrics[trainer.MetricWarmStartDone] == 0) || trainer.EvalPending(run, s) {
					sum, err := train(ctx, a, c, run, s, parallel, out, nil, heldOut, stored)
					printSummary(out, sum, run)
					writePlot(a, out, run, plotPath)
					if err != nil {
						if ctx.Err() != nil {
							finish("stopped") // interrupted: --run resumes it
						} else {
							finish("failed")
						}
						return err
					}
				} else if s.Steps > 0 {
					printSummary(out, trainer.SummaryOf(run, s.Steps), run)
				}
			}
			finish("done")
			fmt.Fprintf(out, "run %s done: %d jobs verified in %.2fs; recorded in the node's store\n", run.Id, len(report.Outcomes), report.Seconds)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&jobs, "jobs", 32, "digest jobs to spread over the cluster")
	fl.Int64Var(&rounds, "rounds", 100000, "SHA-256 rounds per job")
	fl.StringSliceVar(&envSources, "env", []string{"six==1.16.0"}, "environment sources to make sure are registered and train on, comma-separated or repeated (empty: skip synthesis and training)")
	fl.Int32Var(&tasks, "tasks", 5, "validated tasks to synthesize from each --env environment at each --hint-levels level before training (0: none)")
	fl.StringVar(&runID, "run", "", "run id: resume this run if it is recorded, else start it under this id (default run-<time>)")
	fl.IntVar(&s.Steps, "steps", 1, "training steps of the run (0: none); with --budget, the most it takes")
	fl.DurationVar(&budget, "budget", 0, "training time of the run (e.g. 60m; 0: none): no step starts once the run's wall time, warm start included and held-out evaluation excluded, reaches it")
	fl.IntVar(&s.TasksPerStep, "tasks-per-step", 2, "tasks the frontier picks for each step")
	fl.IntVar(&s.Group, "group", 4, "episodes per task (GRPO's G, at least 2)")
	fl.StringVar(&s.Mode, "mode", "patch", "patch (one answer of search/replace edits) or agent (the tool loop)")
	fl.IntVar(&s.MaxTurnTokens, "max-turn-tokens", 256, "most tokens the policy writes in one turn")
	fl.IntVar(&s.MaxTurns, "max-turns", 8, "agent mode: most assistant turns of an episode")
	fl.IntVar(&s.MaxContext, "max-context", 4096, "most tokens of a whole episode (capped by the model's context)")
	fl.Float64Var(&s.WallSeconds, "wall-seconds", 600, "most seconds of one episode, grading excluded")
	fl.Float64Var(&s.LR, "lr", 1e-5, "AdamW learning rate")
	fl.IntVar(&s.TrainLayers, "train-layers", 0, "train only the model's top N decoder layers and its final norm, the embedding, output projection and lower layers frozen (0: every weight); about half a step's compute for a quarter of the layers, and memory a larger model needs on a CPU")
	fl.IntVar(&s.MaxStaleness, "max-staleness", 3, "asynchronous steps: later steps' rollouts are played while the Learner trains, and a group more than this many policy versions old is dropped and counted, never trained on (0: synchronous steps)")
	fl.IntVar(&s.CheckpointEvery, "checkpoint-every", 1, "full Learner checkpoint every this many updates (the run's end writes one too)")
	fl.Uint64Var(&s.Seed, "seed", 0, "seed of batches, episodes and the Learner (0: from the clock)")
	fl.StringVar(&s.Model, "model", "", "model the Learner trains (model store name or path; default the store's default, which the node's Sampler serves)")
	fl.IntVar(&parallel, "parallel", 8, "episodes (sandboxes) running at once")
	fl.StringVar(&plotPath, "plot", "", "write the learning curve as a PNG here (default DATA_DIR/runs/RUN/curve.png)")
	fl.StringVar(&tbDir, "tensorboard", "", "append the run's curve points to a TensorBoard event file in this directory as they are recorded (tensorboard --logdir DIR)")
	fl.IntSliceVar(&hints, "hint-levels", []int{synth.HintLocation}, "hint levels of the --tasks tasks synthesized before training (--tasks at each)")
	fl.StringVar(&s.Sampler, "sampler", trainer.SamplerFrontier, "how each step's tasks are picked: frontier (the FrontierEstimator: learnability p(1-p), difficulty model) or uniform (uniformly from the same pool: the baseline arm)")
	fl.IntVar(&s.EvalTasks, "eval-tasks", 0, "held-out evaluation: tasks of the held-out set (environments never trained on) played at the start, after the warm start, every --eval-every steps and at the end (0: none)")
	fl.IntVar(&s.EvalK, "eval-k", 2, "held-out evaluation: episodes per task")
	fl.IntVar(&s.EvalEvery, "eval-every", 0, "held-out evaluation: every this many steps between start and end (0: only there)")
	fl.IntSliceVar(&s.EvalHints, "eval-hints", nil, "held-out evaluation: only tasks at these hint levels (default: all)")
	fl.IntVar(&s.WarmStartEpochs, "warm-start-epochs", 0, "warm start: epochs of supervised fine-tuning on verified gold-fix demonstrations of the training environment's tasks, before the first GRPO step (0: no warm start)")
	fl.IntVar(&s.WarmStartTasks, "warm-start-tasks", 32, "warm start: tasks whose gold fix is played and graded as a demonstration (0: all of the environment's)")
	fl.Float64Var(&s.WarmStartLR, "warm-start-lr", 3e-4, "warm start: AdamW peak learning rate of the SFT steps (short warm-up, cosine decay to a tenth)")
	fl.IntVar(&s.WarmStartBatch, "warm-start-batch", trainer.DefaultWarmStartBatch, "warm start: demonstrations per SFT step")
	fl.IntVar(&s.WarmStartHoldout, "warm-start-holdout", 0, "warm start: demonstrations kept out of training whose NLL is only measured, before and after")
	fl.StringVar(&s.WarmStartEnvs, "warm-start-envs", "", "warm start: training environments (names, comma-separated) whose tasks give demonstrations (default: --env's)")
	return cmd
}

// openRun returns the run record id names (resumed is true), or a new one
// (under id when given).
func openRun(ctx context.Context, runs *trainer.Runs, id string, now time.Time) (*messages.Run, bool, error) {
	if id != "" {
		r, err := runs.Get(ctx, id)
		switch {
		case err == nil:
			if r.Metrics == nil {
				r.Metrics = map[string]float64{}
			}
			return r, true, nil
		case !errors.Is(err, persistence.ErrNotFound):
			return nil, false, err
		}
	} else {
		id = fmt.Sprintf("run-%s", now.UTC().Format("20060102-150405.000"))
	}
	return &messages.Run{Id: id, Status: "running", StartedUnixNano: now.UnixNano(), UpdatedUnixNano: now.UnixNano(),
		Metrics: map[string]float64{}}, false, nil
}

// tensorBoardLog opens run's TensorBoard event file in dir (nothing when
// dir is "") and returns the function that appends the record's new points
// after each write of it. A failed append is a warning, once: training
// goes on, and runs export --format tensorboard writes the file again.
func tensorBoardLog(out, errOut io.Writer, dir string, run *messages.Run) (func(*messages.Run), error) {
	if dir == "" {
		return nil, nil
	}
	tb, err := ui.OpenTensorBoardLog(dir, run)
	if err != nil {
		return nil, fmt.Errorf("--tensorboard %s: %w", dir, err)
	}
	fmt.Fprintf(out, "tensorboard: appending the run's points to %s as they are recorded (tensorboard --logdir %s)\n", tb.Path(), dir)
	var (
		mu     sync.Mutex
		warned bool
	)
	return func(r *messages.Run) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := tb.Append(r); err != nil && !warned {
			warned = true
			fmt.Fprintf(errOut, "warning: tensorboard events: %v (training goes on; frognano runs export %s --format tensorboard writes them from the record)\n", err, r.GetId())
		}
	}, nil
}

// train runs the loop's steps on the node c talks to. Episodes run in
// sandboxes of this machine's containerd (the embedded node's connection,
// or a new one), with the Sampler's model's tokenizer; policy nil is the
// node's Sampler. stored, when set, is called after each write of the
// run's record.
func train(ctx context.Context, a *app, c *client, run *messages.Run, s trainer.Settings, parallel int, out io.Writer, policy harness.Policy, heldOut []*messages.Task, stored func(*messages.Run)) (trainer.Summary, error) {
	fail := func(err error) (trainer.Summary, error) { return trainer.SummaryOf(run, s.Steps), err }
	tok, err := loadTokenizer("", orDefaultModel(s.Model))
	if err != nil {
		return fail(err)
	}
	var (
		rt   func(context.Context) (*sandbox.Runtime, error)
		envs persistence.EnvironmentStore
	)
	if c.embedded != nil {
		rt, envs = c.sandboxes.Runtime, c.embedded.DB().Environments()
	} else {
		cfg, err := a.load()
		if err != nil {
			return fail(err)
		}
		sbs := services.NewSandboxes(cfg, c.log)
		defer sbs.Close()
		if _, err := sbs.Runtime(ctx); err != nil {
			return fail(err)
		}
		rt = sbs.Runtime
		// The node's environments, copied here: episodes run on this
		// machine's containerd, which must hold their images.
		res, err := c.askActor(c.pid(environment.ActorName), &messages.EnvListRequest{}, time.Minute)
		if err != nil {
			return fail(err)
		}
		envs = persistence.NewMemory().Environments()
		for _, e := range res.(*messages.EnvList).GetEnvironments() {
			if err := envs.Put(ctx, e); err != nil {
				return fail(err)
			}
		}
	}
	// Every episode runs in its own SandboxWorker actor: spawned by kind on
	// the cluster's members with containerd when the node is embedded here,
	// in this process over this machine's containerd when it is remote.
	var spawn func(context.Context) (*actor.PID, error)
	if c.embedded != nil {
		cw := &rollout.ClusterWorkers{Root: c.system.Root, Manager: c.manager, Members: c.embedded.Members}
		spawn = cw.Spawn
	} else {
		spawn = rollout.LocalWorkers(c.system.Root, sandboxworker.Props(sandboxworker.Config{Runtime: rt, Environments: envs, Logger: c.log}))
	}
	sbs := &rollout.Workers{Root: c.system.Root, Spawn: spawn, Environments: envs, Runtime: rt, Logger: c.log}
	defer sbs.Close()
	t, err := trainer.New(trainer.Config{Root: c.system.Root, Node: c.manager.Address, Sandboxes: sbs, Tokenizer: tok,
		Policy: policy, Parallel: parallel, Progress: out, Logger: c.log, HeldOut: heldOut, Stored: stored})
	if err != nil {
		return fail(err)
	}
	return t.Train(ctx, run, s)
}

func orDefaultModel(name string) string {
	if name == "" {
		return modelstore.Default
	}
	return name
}

// printSummary writes the run's totals.
func printSummary(out io.Writer, s trainer.Summary, run *messages.Run) {
	loss := "none (no update yet)"
	if s.HaveLoss {
		loss = fmt.Sprintf("%+.5f", s.Loss)
	}
	fmt.Fprintf(out, "training run %s: %d of %d step(s): %d task group(s), %d episodes (%d infrastructure failures), solve rate %.3f (%d solved), %d of %d effective group(s)\n",
		s.RunID, s.Steps, s.TotalSteps, s.Tasks, s.Episodes, s.Infra, s.SolveRate(), s.Solved, s.Effective, s.Groups)
	fmt.Fprintf(out, "  learner: %d update(s), %d step(s) without signal, last loss %s, learner step %d, policy v%d\n",
		s.Updates, s.NoSignal, loss, s.LearnerStep, s.PolicyVersion)
	fmt.Fprintf(out, "  seconds: synth %.1f, frontier batches %.1f, rollouts %.1f, outcomes %.1f, learning %.1f, sampler swaps %.1f\n",
		run.GetMetrics()["seconds_synth"], s.SecondsBatch, s.SecondsRollout, s.SecondsReport, s.SecondsLearn, s.SecondsSwap)
	if st, err := trainer.DecodeSettings(run); err == nil && st.MaxStaleness > 0 {
		m := run.GetMetrics()
		fmt.Fprintf(out, "  asynchronous steps (max staleness %d): %d group(s) dropped as stale, the oldest trained on or dropped %d version(s) behind, %d episode(s) spanning versions\n",
			st.MaxStaleness, int(m[trainer.MetricStaleDropped]), int(m[trainer.MetricMaxStaleness]), int(m[trainer.MetricMixedEpisodes]))
	}
	if hasSteps(run) {
		fmt.Fprintln(out, "steps (the frontier's pool after each step's outcomes: too hard/frontier/too easy, retired, the frontier band by hint level; the share of policy tokens the trust region clipped or masked):")
		if err := trainer.WriteSteps(out, run, 20); err != nil {
			fmt.Fprintln(out, "  cannot print the steps:", err)
		}
	}
	if hasHeldOut(run) {
		fmt.Fprintln(out, "learning curve (held-out environments, never trained on):")
		if err := trainer.WriteCurve(out, run); err != nil {
			fmt.Fprintln(out, "  cannot print the curve:", err)
		}
	}
}

func hasSteps(run *messages.Run) bool {
	for _, p := range run.GetCurve() {
		if p.GetPhase() == trainer.PhaseStep {
			return true
		}
	}
	return false
}

func hasHeldOut(run *messages.Run) bool {
	for _, p := range run.GetCurve() {
		if len(p.GetHeldOut()) > 0 {
			return true
		}
	}
	return false
}

// ensureEnvironment returns the environment for source, registering it first
// when the node does not have it yet.
func ensureEnvironment(c *client, source string, progress io.Writer) (*messages.Environment, error) {
	src, err := environment.ParseSource(source)
	if err != nil {
		return nil, err
	}
	envs := c.pid(environment.ActorName)
	if res, err := c.askActor(envs, &messages.EnvGetRequest{Name: environment.DefaultName(src)}, time.Minute); err == nil {
		return res.(*messages.EnvAddReply).Environment, nil
	}
	res, err := c.askWithProgress(envs, &messages.EnvAddRequest{Source: source}, 2*time.Hour, progress)
	if err != nil {
		return nil, err
	}
	return res.(*messages.EnvAddReply).Environment, nil
}

// heldOutTasks registers the held-out environments where needed and
// returns the held-out set as their tasks.
func heldOutTasks(c *client, progress io.Writer) ([]*messages.Task, error) {
	envs := map[string]*messages.Environment{}
	for _, src := range evaluate.HeldOutSources {
		e, err := ensureEnvironment(c, src, progress)
		if err != nil {
			return nil, fmt.Errorf("held-out environment %s: %w", src, err)
		}
		envs[e.GetName()] = e
	}
	return evaluate.HeldOut(envs)
}

// writePlot draws a run's curve next to its record (or at path) and says
// where; a run without points draws nothing.
func writePlot(a *app, out io.Writer, run *messages.Run, path string) {
	if len(run.GetCurve()) == 0 {
		return
	}
	if path == "" {
		cfg, err := a.load()
		if err != nil {
			fmt.Fprintln(out, "no plot:", err)
			return
		}
		path = filepath.Join(cfg.Node.DataDir, "runs", run.GetId(), "curve.png")
	}
	if err := trainer.PlotCurve(run, path); err != nil {
		fmt.Fprintln(out, "no plot:", err)
		return
	}
	fmt.Fprintf(out, "learning curve plotted: %s\n", path)
}

// checkTraining refuses a run whose training environment or warm-start
// environments are held out.
func checkTraining(c *client, env *messages.Environment, s trainer.Settings) error {
	if err := evaluate.CheckTraining(env.GetName(), env); err != nil {
		return err
	}
	for _, name := range strings.Split(s.WarmStartEnvs, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		var e *messages.Environment
		if r, err := c.askActor(c.pid(environment.ActorName), &messages.EnvGetRequest{Name: name}, time.Minute); err == nil {
			e = r.(*messages.EnvAddReply).GetEnvironment()
		}
		if err := evaluate.CheckTraining(name, e); err != nil {
			return fmt.Errorf("--warm-start-envs: %w", err)
		}
	}
	return nil
}
