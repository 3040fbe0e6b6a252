package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/actors/trainer"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
)

// runCmd is the main job: it submits a run to a node (embedded, or the one
// at --node) through the node's HTTP API and follows its log; the node's
// run service (actors/trainer) does the work: the cluster check, the
// environments, synthesis, then the training loop, the record after every
// step. --run resumes a stopped or killed one.
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
	var detach bool
	s := trainer.Settings{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the main job: cluster check, the default environment, task synthesis, then RL training steps",
		Long: `run hands a training run to a node and follows it: the node at --node, or an
embedded node started in this process (joining a cluster through --seeds if
given). The run lives in the node (its run service): it spreads --jobs
verified digest jobs over every cluster member by remote spawning, makes sure
the environments --env (default six==1.16.0, a PyPI sdist) are registered,
building their images and baselines the first time, synthesizes --tasks
validated bug-fix tasks from each, and then trains for --steps steps, its
record kept in the node's Badger store after every step. This command prints
the run's log as the node writes it (frognano runs logs ID -f does the same
from anywhere). With --node, --detach returns once the node has the run, and
an interrupt only stops following: the run goes on (frognano runs stop ID
stops it). With an embedded node an interrupt stops the run (recorded
stopped: --run ID resumes it), since the node ends with the command.

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
its length, and a --budget above the training time it has spent reopens a
run its budget ended, whose next end point is then evaluated; its
environments, synthesis and cluster check stay the run's, whatever --env,
--tasks and --hint-levels say), and a frognano-node that stopped or died mid-run resumes it by
itself when it starts again: the Learner reopens from its newest checkpoint, the Sampler
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
			s.BudgetSeconds = budget.Seconds()
			job := trainer.Job{RunID: runID, Settings: s, Envs: envSources, Tasks: tasks, HintLevels: hints,
				Jobs: jobs, Rounds: rounds, Parallel: parallel}
			for flag, name := range map[string]string{"steps": "steps", "budget": "budget", "max-staleness": "max_staleness"} {
				if cmd.Flags().Changed(flag) {
					job.Override = append(job.Override, name)
				}
			}
			if tbDir != "" {
				if a.nodeAddr == "" {
					abs, err := filepath.Abs(tbDir)
					if err != nil {
						return err
					}
					tbDir = abs
				}
				job.TensorBoard = tbDir
			}
			if err := job.Check(); err != nil {
				return err
			}
			if detach && a.nodeAddr == "" {
				return fmt.Errorf("--detach needs --node: an embedded node ends with this command")
			}
			// An embedded node's Sampler serves the model the run trains,
			// unless the configuration names one (policy.model); a
			// running node serves its own, which must be the same.
			embed := a.embedDefaults(cmd)
			p, err := a.openAPI(cmd, func(cfg *config.Config) {
				embed(cfg)
				if cfg.Policy.Model == "" {
					cfg.Policy.Model = s.Model
				}
			})
			if err != nil {
				return err
			}
			defer p.close()
			out := cmd.OutOrStdout()
			if p.embedded != nil {
				info := p.embedded.embedded.Info()
				caps := info.Capabilities
				fmt.Fprintf(out, "node %s  remote %s  http %s\n", info.Id, info.Address, info.HttpAddress)
				fmt.Fprintf(out, "capabilities: %d cores, %.1f GiB, containerd %v, %d GPU(s)", caps.Cores, float64(caps.MemoryBytes)/(1<<30), caps.Containerd, len(caps.Gpus))
				if caps.GpuError != "" {
					fmt.Fprintf(out, " (%s)", caps.GpuError)
				}
				fmt.Fprintln(out)
			} else {
				fmt.Fprintf(out, "node at %s\n", p.base)
			}
			// The call itself must outlive an interrupt: the node owns the run.
			sub, err := p.submit(context.WithoutCancel(cmd.Context()), job)
			if err != nil {
				return err
			}
			verb := "started"
			if sub.Resumed {
				verb = "resumed"
			}
			fmt.Fprintf(out, "run %s %s on the node (frognano runs logs %s -f follows it; frognano runs stop %s stops it)\n", sub.ID, verb, sub.ID, sub.ID)
			if detach {
				return nil
			}
			return followRun(cmd.Context(), p, sub.ID, sub.LogOffset, out, cmd.ErrOrStderr(), plotPath)
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
	fl.StringVar(&tbDir, "tensorboard", "", "append the run's curve points to a TensorBoard event file in this directory as they are recorded (tensorboard --logdir DIR); with --node, a name under the run's directory on the node (DATA_DIR/runs/ID/tensorboard/NAME)")
	fl.BoolVar(&detach, "detach", false, "with --node: submit the run and return; frognano runs logs ID -f follows it")
	fl.IntSliceVar(&hints, "hint-levels", []int{synth.HintLocation}, "hint levels of the --tasks tasks synthesized before training (--tasks at each)")
	fl.StringVar(&s.Sampler, "sampler", trainer.SamplerFrontier, "how each step's tasks are picked: frontier (the FrontierEstimator: learnability p(1-p), difficulty model) or uniform (uniformly from the same pool: the baseline arm)")
	fl.IntVar(&s.EvalTasks, "eval-tasks", 0, "held-out evaluation: tasks of the held-out set (environments never trained on) played at the start, after the warm start, every --eval-every steps and at the end (0: none)")
	fl.IntVar(&s.EvalK, "eval-k", 2, "held-out evaluation: episodes per task")
	fl.IntVar(&s.EvalEvery, "eval-every", 0, "held-out evaluation: every this many steps between start and end (0: only there)")
	fl.IntSliceVar(&s.EvalHints, "eval-hints", nil, "held-out evaluation: only tasks at these hint levels (default: all)")
	fl.StringVar(&s.StartFrom, "start-from", "", "held-out evaluation: read back the start point's episodes from another `RUN` of this store (same model, mode, episode limits and held-out selection) instead of playing them again; what it lacks is played")
	fl.IntVar(&s.WarmStartEpochs, "warm-start-epochs", 0, "warm start: epochs of supervised fine-tuning on verified gold-fix demonstrations of the training environment's tasks, before the first GRPO step (0: no warm start)")
	fl.IntVar(&s.WarmStartTasks, "warm-start-tasks", 32, "warm start: tasks whose gold fix is played and graded as a demonstration (0: all of the environment's)")
	fl.Float64Var(&s.WarmStartLR, "warm-start-lr", 3e-4, "warm start: AdamW peak learning rate of the SFT steps (short warm-up, cosine decay to a tenth)")
	fl.IntVar(&s.WarmStartBatch, "warm-start-batch", trainer.DefaultWarmStartBatch, "warm start: demonstrations per SFT step")
	fl.IntVar(&s.WarmStartHoldout, "warm-start-holdout", 0, "warm start: demonstrations kept out of training whose NLL is only measured, before and after")
	fl.StringVar(&s.WarmStartEnvs, "warm-start-envs", "", "warm start: training environments (names, comma-separated) whose tasks give demonstrations (default: --env's)")
	return cmd
}

// followRun prints run id's log from offset until the run ends, then
// returns its outcome. An interrupt stops the run of an embedded node (it
// is recorded stopped: --run ID resumes it) and only detaches from a
// remote node's, which goes on.
func followRun(ctx context.Context, p *api, id string, offset int64, out, errOut io.Writer, plotPath string) error {
	bg := context.WithoutCancel(ctx)
	off, err := p.follow(ctx, id, offset, true, out)
	if ctx.Err() != nil {
		if p.embedded == nil {
			fmt.Fprintf(errOut, "\ndetached from run %s, which goes on on the node: frognano --node %s runs logs %s -f follows it again, frognano runs stop %s stops it\n", id, p.base, id, id)
			return ctx.Err()
		}
		fmt.Fprintf(errOut, "\ninterrupted: stopping run %s (frognano run --run %s resumes it)\n", id, id)
		if _, err := p.runAction(bg, id, "stop"); err != nil {
			fmt.Fprintln(errOut, "warning:", err)
		}
		_, _ = p.follow(bg, id, off, true, out) // what it prints as it winds down
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	run, active, err := p.run(bg, id)
	if err != nil {
		if isStatus(err, http.StatusNotFound) {
			return fmt.Errorf("run %s ended before its record was written: its log above says why", id)
		}
		return err
	}
	if plotPath != "" && len(run.GetCurve()) > 0 {
		if err := trainer.PlotCurve(run, plotPath); err != nil {
			fmt.Fprintln(out, "no plot:", err)
		} else {
			fmt.Fprintf(out, "learning curve plotted: %s\n", plotPath)
		}
	}
	return outcome(run, active)
}

// writePlot draws a run's curve next to its record (or at path) and says
// where; a run without points draws nothing.
func writePlot(a *app, out io.Writer, run *records.Run, path string) {
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
