package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/evaluate"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/nodeask"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// Job is a training run as a client hands it to a node (POST /v1/runs):
// the loop's settings and the work before the loop. The node keeps it in
// the run's record (Run.job_json), so that a node that restarts resumes
// the run with what it was given.
type Job struct {
	// RunID names the run: a recorded run of that id is resumed, else a
	// new one starts under it ("": run-<UTC time>).
	RunID    string   `json:"run_id,omitempty"`
	Settings Settings `json:"settings"`
	// Override names the settings that replace a resumed run's recorded
	// ones: "steps", "budget", "max_staleness" (the others are the run's).
	Override []string `json:"override,omitempty"`
	// Envs are the environment sources the run trains on, registered
	// first where the node lacks them (empty: no synthesis, no training).
	Envs []string `json:"envs"`
	// Tasks validated tasks are synthesized from each environment at each
	// of HintLevels before training (0: none; a resumed run that did this
	// does not repeat it).
	Tasks      int32 `json:"tasks"`
	HintLevels []int `json:"hint_levels"`
	// Jobs digest jobs of Rounds rounds check the cluster first, spread
	// over its members by remote spawning.
	Jobs   int   `json:"jobs"`
	Rounds int64 `json:"rounds"`
	// Parallel episodes (sandboxes) run at once.
	Parallel int `json:"parallel"`
	// TensorBoard, when set, names a directory on the node where the run's
	// points are appended to an event file as they are recorded: a
	// relative name, under DATA_DIR/runs/ID/tensorboard/ (any directory
	// only for a node in the client's own process, Deps.AnyPath).
	TensorBoard string `json:"tensorboard,omitempty"`
}

// Check refuses a job that cannot start: bad settings, a held-out
// repository to train on, negative counts.
func (j *Job) Check() error {
	switch {
	case j.Jobs < 1 || j.Jobs > 1e5 || j.Rounds < 0 || j.Rounds > diag.MaxRounds:
		return fmt.Errorf("the cluster check takes 1 to 100000 jobs of 0 to %d rounds (got %d of %d)", diag.MaxRounds, j.Jobs, j.Rounds)
	case j.Tasks < 0 || j.Tasks > 1e4:
		return fmt.Errorf("tasks: 0 to 10000 per environment and hint level (got %d)", j.Tasks)
	case j.Parallel <= 0 || j.Parallel > 1024:
		return fmt.Errorf("parallel must be 1 to 1024 (got %d)", j.Parallel)
	case len(j.Envs) > 64 || len(j.HintLevels) > synth.MaxHintLevel+1:
		return fmt.Errorf("at most 64 environments and %d hint levels", synth.MaxHintLevel+1)
	case len(j.RunID) > 128 || strings.ContainsAny(j.RunID, "/\\\x00") || j.RunID == "." || j.RunID == "..":
		return fmt.Errorf("run id %q: at most 128 characters, no slash", j.RunID)
	}
	for _, o := range j.Override {
		if o != "steps" && o != "budget" && o != "max_staleness" {
			return fmt.Errorf("override %q: only steps, budget and max_staleness replace a resumed run's settings", o)
		}
	}
	for _, h := range j.HintLevels {
		if h < 0 || h > synth.MaxHintLevel {
			return fmt.Errorf("hint level %d: want 0 to %d", h, synth.MaxHintLevel)
		}
	}
	for _, source := range j.Envs {
		if _, err := environment.ParseSource(source); err != nil {
			return err
		}
		if evaluate.HeldOutSource(source) {
			return fmt.Errorf("environment %s is a held-out repository (%s): no run may train on any version of it", source, strings.Join(evaluate.HeldOutSources, ", "))
		}
	}
	return nil
}

// prepareNew completes and checks the settings of a new run: the seed
// from now when unset, the warm start's environments (default: the run's),
// then Settings.Validate.
func (j *Job) prepareNew(now time.Time) error {
	s := &j.Settings
	if s.Seed == 0 {
		s.Seed = uint64(now.UnixNano())
	}
	if s.WarmStartEpochs > 0 && s.WarmStartEnvs == "" && len(j.Envs) > 0 {
		var names []string
		for _, source := range j.Envs {
			src, err := environment.ParseSource(source)
			if err != nil {
				return err
			}
			names = append(names, environment.DefaultName(src)) // the run's training environments
		}
		s.WarmStartEnvs = strings.Join(names, ",")
	}
	return s.Validate()
}

func (j *Job) overrides(name string) bool {
	for _, o := range j.Override {
		if o == name {
			return true
		}
	}
	return false
}

// Errors a run's context is cancelled with.
var (
	// ErrStopped: a client stopped the run (POST /v1/runs/ID/stop); it is
	// recorded "stopped" and resumes only when asked.
	ErrStopped = errors.New("stopped by a client")
	// ErrNodeStopping: the node is shutting down; the run stays "running"
	// in its record and the node resumes it when it starts again.
	ErrNodeStopping = errors.New("the node is stopping")
)

// Deps are what a run needs of the node it runs on.
type Deps struct {
	Node *node.Node
	// Runtime is the node's containerd connection (episodes, warm start).
	Runtime func(context.Context) (*sandbox.Runtime, error)
	// DataDir is the node's data directory (runs/ID/ holds a run's log
	// and curve).
	DataDir string
	// TensorBoard opens a run's event file in dir and returns what appends
	// its new points after each write of its record (actors/ui; nil: the
	// job's tensorboard is refused).
	TensorBoard func(dir string, run *records.Run, warn io.Writer) (func(*records.Run), error)
	// AnyPath: the node lives in its client's process (the CLI's embedded
	// node), so a job's tensorboard may name any directory; a node that
	// serves others takes only names under the run's directory.
	AnyPath bool
	// Policy replaces the node's Sampler (tests); nil is the Sampler.
	Policy policy.Policy
	Logger *slog.Logger
}

func (d *Deps) pid(name string) *actor.PID { return actor.NewPID(d.Node.Address(), name) }

func (d *Deps) root() *actor.RootContext { return d.Node.System().Root }

func (d *Deps) runs() *Runs { return &Runs{Store: d.Node.DB().Runs()} }

// ask sends req to pid and waits for the reply (nodeask.Asker.AskPID).
func (d *Deps) ask(ctx context.Context, pid *actor.PID, req any, timeout time.Duration) (any, error) {
	return d.asker().AskPID(ctx, pid, req, timeout)
}

func (d *Deps) asker() nodeask.Asker { return nodeask.Asker{Node: d.Node} }

// resumeSettings are a resumed run's settings: its record's, with what the
// job overrides (--steps, --budget, --max-staleness). A budget raised above
// the training time a run has spent reopens a run its old budget ended (its
// end point stays in the curve; a new one is evaluated where it ends now).
// The record keeps the settings the run now runs with.
func resumeSettings(run *records.Run, job *Job) (Settings, error) {
	stored, err := DecodeSettings(run)
	if err != nil {
		return stored, err
	}
	s, was := job.Settings, stored
	if job.overrides("steps") {
		stored.Steps = s.Steps
	}
	if job.overrides("budget") {
		stored.BudgetSeconds = s.BudgetSeconds
	}
	if job.overrides("max_staleness") {
		stored.MaxStaleness = s.MaxStaleness // nothing is in flight between two processes
	}
	if stored.Steps == was.Steps && stored.BudgetSeconds == was.BudgetSeconds && stored.MaxStaleness == was.MaxStaleness {
		return stored, nil // the record stays as written
	}
	if err := stored.Validate(); err != nil {
		return stored, fmt.Errorf("resuming run %s: %w", run.GetId(), err)
	}
	if run.GetMetrics()[MetricBudgetSpent] > 0 && (stored.BudgetSeconds == 0 || TrainSeconds(run) < stored.BudgetSeconds) {
		delete(run.Metrics, MetricBudgetSpent)
	}
	run.ConfigYaml = stored.Encode()
	return stored, nil
}

// keepWork gives a resumed run the work before its loop that its record
// keeps (environments, synthesis, the cluster check), not the client's: a
// run is resumed with --run ID and whatever flags, defaults included, the
// command line had, and those must not add tasks of other environments or
// hint levels to its pool. A run recorded before jobs were kept keeps the
// client's.
func keepWork(run *records.Run, job *Job, out io.Writer) {
	if run.GetJobJson() == "" {
		return
	}
	stored, err := storedJob(run)
	if err != nil {
		fmt.Fprintf(out, "warning: %v: the run takes the environments and synthesis given now\n", err)
		return
	}
	if !slices.Equal(stored.Envs, job.Envs) || stored.Tasks != job.Tasks || !slices.Equal(stored.HintLevels, job.HintLevels) ||
		stored.Jobs != job.Jobs || stored.Rounds != job.Rounds {
		fmt.Fprintf(out, "the run keeps its own environments %v, %d task(s) per hint level %v and cluster check (%d jobs of %d rounds); those given now are not used\n",
			stored.Envs, stored.Tasks, stored.HintLevels, stored.Jobs, stored.Rounds)
	}
	job.Envs, job.Tasks, job.HintLevels, job.Jobs, job.Rounds = stored.Envs, stored.Tasks, stored.HintLevels, stored.Jobs, stored.Rounds
}

// execute runs job on the node: the run's record (new or resumed), the
// cluster check, the environments, synthesis, the held-out set, then the
// loop (Train), printing what a user follows on out. The record's status
// says how it ended; a run whose context ended with ErrNodeStopping keeps
// "running", for the node's next start.
func execute(ctx context.Context, d *Deps, job Job, out io.Writer) (err error) {
	runs := d.runs()
	started := time.Now()
	// The record is opened and written whatever ctx says: a run stopped the
	// moment it was submitted is still a run, recorded stopped.
	record := context.WithoutCancel(ctx)
	run, resumed, err := OpenRun(record, runs, job.RunID, started)
	if err != nil {
		return err
	}
	s := job.Settings
	if resumed {
		stored, err := resumeSettings(run, &job)
		if err != nil {
			return err
		}
		s = stored
		fmt.Fprintf(out, "resuming run %s (%s) after step %d of %d\n", run.Id, run.Status, run.Step, s.Steps)
		keepWork(run, &job, out)
	} else {
		if err := job.prepareNew(started); err != nil {
			return err
		}
		s = job.Settings
		run.ConfigYaml = s.Encode()
	}
	job.RunID, job.Settings = run.Id, s
	if b, err := jobJSON(job); err == nil {
		run.JobJson = b
	}
	run.Status, run.Error = "running", ""
	run.UpdatedUnixNano = time.Now().UnixNano()
	if err := runs.Put(record, run); err != nil {
		return err
	}
	finish := func(status string, cause error) {
		if errors.Is(context.Cause(ctx), ErrNodeStopping) {
			return // the record keeps "running": the node's next start resumes it
		}
		run.Status, run.Error = status, ""
		if cause != nil {
			run.Error = cause.Error()
		}
		run.UpdatedUnixNano = time.Now().UnixNano()
		if err := runs.Put(record, run); err != nil {
			fmt.Fprintln(out, "warning: could not record run:", err)
		}
	}
	defer func() {
		switch {
		case ctx.Err() != nil: // stopped, even if what was under way ended well
			finish("stopped", context.Cause(ctx))
		case err == nil:
			finish("done", nil)
		default:
			finish("failed", err)
		}
	}()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var stored func(*records.Run)
	if job.TensorBoard != "" {
		if d.TensorBoard == nil {
			return fmt.Errorf("tensorboard: this node cannot write event files")
		}
		dir := job.TensorBoard
		if !d.AnyPath {
			if !filepath.IsLocal(dir) {
				return fmt.Errorf("tensorboard %q: a node takes a relative name, under its run's directory", dir)
			}
			dir = filepath.Join(d.DataDir, "runs", run.Id, "tensorboard", dir)
		}
		if stored, err = d.TensorBoard(dir, run, out); err != nil {
			return err
		}
		runs.Stored = stored
	}

	members := len(d.Node.Members())
	fmt.Fprintf(out, "cluster: %d member(s)\n", members)
	res, err := d.ask(ctx, d.Node.Manager(), &rtmsg.DigestBatchRequest{Jobs: int32(job.Jobs), Rounds: job.Rounds, PreferRemote: true, Seed: uint64(started.UnixNano())}, 30*time.Minute)
	if err != nil {
		return err
	}
	report := res.(*rtmsg.DigestBatchReport)
	perNode := map[string]int{}
	bad := 0
	for _, o := range report.Outcomes {
		if o.Error != "" || !bytes.Equal(o.Digest, diag.Digest(o.Data, job.Rounds)) {
			bad++
			continue
		}
		perNode[o.Node]++
	}
	for addr, k := range perNode {
		fmt.Fprintf(out, "  %-24s %d verified jobs\n", addr, k)
	}
	run.Metrics["members"] = float64(members)
	run.Metrics["jobs"] = float64(len(report.Outcomes))
	run.Metrics["jobs_failed"] = float64(bad)
	if report.Seconds > 0 {
		run.Metrics["jobs_per_second"] = float64(len(report.Outcomes)) / report.Seconds
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d jobs failed or answered wrongly", bad, len(report.Outcomes))
	}
	if len(job.Envs) > 0 {
		var envs []*records.Environment
		run.Metrics["env_baseline_tests"] = 0
		for _, source := range job.Envs {
			env, err := environment.Ensure(ctx, d, source, out)
			if err != nil {
				return err
			}
			// No run trains on a held-out repository, under any name (a
			// resumed run is checked again: settings predate checks).
			if err := checkTraining(ctx, d, env, s); err != nil {
				return err
			}
			run.Metrics["env_baseline_tests"] += float64(len(env.Baseline.GetResults()))
			fmt.Fprintf(out, "environment %s: %s, image %s, baseline %s\n", env.Name, env.Language, env.Image, environment.Summarize(env.Baseline))
			envs = append(envs, env)
		}
		_, synthesized := run.Metrics["tasks_synthesized"]
		if job.Tasks > 0 && !(resumed && synthesized) {
			for k, env := range envs {
				for i, hint := range job.HintLevels {
					synthStart := time.Now()
					req := &messages.SynthesizeRequest{Environment: env.Name, Count: job.Tasks, Bugs: 1,
						Seed: uint64(started.UnixNano()) + uint64(k*len(job.HintLevels)+i), Target: &records.DifficultyFeatures{HintLevel: int32(hint)}}
					r, err := d.asker().AskStagesPID(ctx, d.pid(synth.ActorName), req, 24*time.Hour, out, func(m any) bool { _, ok := m.(*messages.SynthesizeResult); return ok })
					if err != nil {
						return err
					}
					res := r.(*messages.SynthesizeResult)
					run.Metrics["tasks_synthesized"] += float64(len(res.TaskIds))
					run.Metrics["synth_candidates"] += float64(res.GetProgress().GetCandidates())
					run.Metrics["seconds_synth"] += time.Since(synthStart).Seconds()
					fmt.Fprintf(out, "synthesized %d validated tasks of %s at hint level %d from %d candidates in %.1fs (frognano tasks ls --env %s)\n",
						len(res.TaskIds), env.Name, hint, res.GetProgress().GetCandidates(), res.WallSeconds, env.Name)
				}
			}
		}
		var heldOut []*records.Task
		if s.EvalTasks > 0 {
			if heldOut, err = evaluate.HeldOutTasks(ctx, d, out); err != nil {
				return err
			}
			fmt.Fprintf(out, "held-out set: %d tasks of %s (never trained on); %d at hint levels %v evaluated × %d episodes at the start, after the warm start, every %d steps and at the end\n",
				len(heldOut), strings.Join(evaluate.HeldOutEnvironments, ", "), min(s.EvalTasks, len(heldOut)), s.EvalHints, s.EvalK, s.EvalEvery)
		}
		if err := runs.Put(ctx, run); err != nil {
			return err
		}
		if !Finished(run, s) && s.Steps > 0 || (s.WarmStartEpochs > 0 && run.Metrics[MetricWarmStartDone] == 0) || EvalPending(run, s) {
			sum, err := TrainOnNode(ctx, d, run, s, job.Parallel, out, heldOut, stored)
			WriteSummary(out, sum, run)
			writeRunPlot(d, out, run)
			if err != nil {
				return err
			}
		} else if s.Steps > 0 {
			WriteSummary(out, SummaryOf(run, s.Steps), run)
		}
	}
	fmt.Fprintf(out, "run %s done: %d jobs verified in %.2fs; recorded in the node's store\n", run.Id, len(report.Outcomes), report.Seconds)
	return nil
}

// OpenRun returns the run record id names (resumed is true), or a new one
// (under id when given).
func OpenRun(ctx context.Context, runs *Runs, id string, now time.Time) (*records.Run, bool, error) {
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
	return &records.Run{Id: id, Status: "running", StartedUnixNano: now.UnixNano(), UpdatedUnixNano: now.UnixNano(),
		Metrics: map[string]float64{}}, false, nil
}

// TrainOnNode runs the loop's steps of run on d's node: every episode in
// its own SandboxWorker actor, spawned by kind on the cluster's members
// with containerd, with the Sampler's model's tokenizer. stored, when set,
// is called after each write of the run's record.
func TrainOnNode(ctx context.Context, d *Deps, run *records.Run, s Settings, parallel int, out io.Writer, heldOut []*records.Task, stored func(*records.Run)) (Summary, error) {
	fail := func(err error) (Summary, error) { return SummaryOf(run, s.Steps), err }
	name := s.Model
	if name == "" {
		name = modelstore.Default
	}
	store, err := modelstore.Open("")
	if err != nil {
		return fail(err)
	}
	tok, err := store.Tokenizer(name)
	if err != nil {
		return fail(err)
	}
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root, n := d.root(), d.Node
	cw := &rollout.ClusterWorkers{Root: root, Manager: n.Manager(), Members: n.MemberInfos}
	sbs := &rollout.Workers{Root: root, Spawn: cw.Spawn, Environments: n.DB().Environments(), Runtime: d.Runtime, Logger: log}
	defer sbs.Close()
	t, err := New(Config{Root: root, Node: n.Address(), Sandboxes: sbs, Tokenizer: tok, Runs: n.DB().Runs(),
		Policy: d.Policy, Parallel: parallel, Progress: out, Logger: log, HeldOut: heldOut, Stored: stored})
	if err != nil {
		return fail(err)
	}
	return t.Train(ctx, run, s)
}

// Ask implements environment.Asker on the node.
func (d *Deps) Ask(ctx context.Context, name string, req any, timeout time.Duration) (any, error) {
	return d.asker().Ask(ctx, name, req, timeout)
}

// AskStages implements environment.Asker on the node: each new stage is a
// line of out.
func (d *Deps) AskStages(ctx context.Context, name string, req any, timeout time.Duration, out io.Writer, done func(any) bool) (any, error) {
	return d.asker().AskStages(ctx, name, req, timeout, out, done)
}

// checkTraining refuses a run whose training environment or warm-start
// environments are held out.
func checkTraining(ctx context.Context, d *Deps, env *records.Environment, s Settings) error {
	if err := evaluate.CheckTraining(env.GetName(), env); err != nil {
		return err
	}
	for _, name := range strings.Split(s.WarmStartEnvs, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		var e *records.Environment
		if r, err := d.ask(ctx, d.pid(environment.ActorName), &messages.EnvGetRequest{Name: name}, time.Minute); err == nil {
			e = r.(*messages.EnvAddReply).GetEnvironment()
		}
		if err := evaluate.CheckTraining(name, e); err != nil {
			return fmt.Errorf("--warm-start-envs: %w", err)
		}
	}
	return nil
}

// writeRunPlot draws a run's curve at DATA_DIR/runs/ID/curve.png and says
// where; a run without points draws nothing.
func writeRunPlot(d *Deps, out io.Writer, run *records.Run) {
	if len(run.GetCurve()) == 0 {
		return
	}
	path := filepath.Join(d.DataDir, "runs", run.GetId(), "curve.png")
	if err := PlotCurve(run, path); err != nil {
		fmt.Fprintln(out, "no plot:", err)
		return
	}
	fmt.Fprintf(out, "learning curve plotted: %s\n", path)
}

// logPath is a run's log on the node, DATA_DIR/runs/ID/log: what execute
// prints, appended over the run's resumes, read by GET /v1/runs/ID/logs.
func logPath(dataDir, id string) string { return filepath.Join(dataDir, "runs", id, "log") }
