package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/evaluate"
	"github.com/frognano/frognano/actors/gateway"
	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/actors/sampler/openai"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandboxworker"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/cmd/internal/services"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
)

type evalFlags struct {
	model, models, servedModel, tokenizer string
	envs                                  []string
	tasksFile                             string
	heldOut                               bool
	limit, k, hint, parallel, batch       int
	mode, jsonOut, runID                  string
	seed                                  uint64
	temperature, topP                     float32
	topK                                  int
	maxTurns, maxTurnTokens, maxContext   int
	wall                                  time.Duration
}

func evalCmd(a *app) *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval --model M (--env E[,E…] | --tasks FILE | --held-out) -k K",
		Short: "Measure a model's solve rate: pass@1 and pass@k with confidence intervals per difficulty bucket",
		Long: `eval runs k episodes of every task (in --mode agent: the tool loop; patch: one
answer of search/replace edits), each in a fresh sandbox owned by its own
SandboxWorker actor, grades them (the task's FAIL_TO_PASS and PASS_TO_PASS
tests after restoring the protected test files; reward 1 only if all
pass), stores every trajectory in the node's
store (frognano traj ls --run RUN) and prints pass@1 and pass@k per
difficulty bucket (mode and hint level), with 95% intervals from a bootstrap
over tasks. pass@k uses the unbiased estimator 1 − C(n−c,k)/C(n,k) over the n
episodes of a task that were not infrastructure failures (a sandbox that
died or a policy error, twice: such episodes are retried once, then left out).

--model is a model store name or a .gguf/Hugging Face path, run here on
frognano's engine with continuous batching across all episodes in flight,
or an OpenAI-compatible server's URL (http://HOST:PORT, with
--served-model and --tokenizer), driven with token-id prompts.

--env takes the tasks stored for one or more environments; --tasks reads SWE-bench or
SWE-smith style JSONL (as frognano tasks export writes) and runs the
instances whose environment is registered (by its name, or by an image
registered with frognano env add image:REF) and whose image exists locally;
the others are listed as skipped. --held-out runs the committed held-out set
(actors/evaluate: 48 tasks of four environments no run trains on, hint
levels 1, 3 and 4; --hint-level picks one), registering its environments the
first time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runEval(cmd, a, &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", modelstore.Default, "model store name, .gguf or Hugging Face path, or an OpenAI-compatible server URL (OPENAI_API_KEY, when set, is sent as its bearer token)")
	fl.StringVar(&f.models, "models", "", "model store directory (default: see frognano model ls)")
	fl.StringVar(&f.servedModel, "served-model", "", "with a URL --model: the model name the server serves")
	fl.StringVar(&f.tokenizer, "tokenizer", modelstore.Default, "with a URL --model: the model whose tokenizer renders prompts (store name, .gguf or Hugging Face directory)")
	fl.StringSliceVar(&f.envs, "env", nil, "evaluate the tasks stored for this environment (repeat or comma-separate for several)")
	fl.StringVar(&f.tasksFile, "tasks", "", "evaluate the instances of this JSONL file")
	fl.BoolVar(&f.heldOut, "held-out", false, "evaluate the held-out set (environments no run trains on; registered here when missing)")
	fl.IntVar(&f.limit, "limit", 0, "evaluate at most this many tasks (0: all)")
	fl.IntVarP(&f.k, "k", "k", 8, "episodes per task (and the k of pass@k)")
	fl.StringVar(&f.mode, "mode", "agent", "agent (tool loop) or patch (one answer of search/replace edits)")
	fl.IntVar(&f.hint, "hint-level", -1, "only tasks whose statements are at this hint level (-1: all)")
	fl.StringVar(&f.jsonOut, "json", "", "also write the report as JSON to this file")
	fl.StringVar(&f.runID, "run", "", "run id the trajectories are stored under (default eval-<time>)")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the episodes (0: from the clock; the report says which)")
	fl.Float32Var(&f.temperature, "temperature", 0.7, "sampling temperature (0: greedy, which makes the k episodes alike)")
	fl.Float32Var(&f.topP, "top-p", 0.95, "nucleus sampling mass (0 or 1: all)")
	fl.IntVar(&f.topK, "top-k", 0, "keep the K most likely tokens (0: all)")
	fl.IntVar(&f.parallel, "parallel", 16, "episodes (sandboxes) running at once")
	fl.IntVar(&f.batch, "batch", 16, "sequences the engine decodes in one batch")
	fl.IntVar(&f.maxTurns, "max-turns", harness.DefaultLimits.MaxTurns, "agent mode: most assistant turns")
	fl.IntVar(&f.maxTurnTokens, "max-turn-tokens", harness.DefaultLimits.MaxTurnTokens, "most tokens per turn")
	fl.IntVar(&f.maxContext, "max-context", harness.DefaultLimits.MaxContext, "most tokens of a whole episode (capped by the model's context)")
	fl.DurationVar(&f.wall, "wall-time", harness.DefaultLimits.WallTime, "most time of one episode, grading excluded")
	return cmd
}

func (f *evalFlags) validate() (harness.Mode, error) {
	mode, err := harness.ParseMode(f.mode)
	switch {
	case err != nil:
		return "", fmt.Errorf("--mode: %w", err)
	case btoi(len(f.envs) > 0)+btoi(f.tasksFile != "")+btoi(f.heldOut) != 1:
		return "", errors.New("give one of --env ENV, --tasks FILE and --held-out")
	case f.k < 1:
		return "", errors.New("-k must be at least 1")
	case f.limit < 0:
		return "", errors.New("--limit must not be negative")
	case f.hint < -1 || f.hint > synth.MaxHintLevel:
		return "", fmt.Errorf("--hint-level %d: want -1 (all) or 0 to %d", f.hint, synth.MaxHintLevel)
	case f.parallel < 1 || f.batch < 1:
		return "", errors.New("--parallel and --batch must be at least 1")
	case f.temperature < 0 || f.topP < 0 || f.topP > 1 || f.topK < 0:
		return "", errors.New("--temperature and --top-k must not be negative, --top-p must be in [0, 1]")
	case f.maxTurns < 1 || f.maxTurnTokens < 1 || f.maxContext < 1 || f.wall <= 0:
		return "", errors.New("--max-turns, --max-turn-tokens, --max-context and --wall-time must be positive")
	}
	return mode, nil
}

// evalPolicy is the policy an evaluation runs, and what it reports.
type evalPolicy struct {
	policy.Policy
	tok     *tokenizer.Tokenizer
	ctxLen  int
	engine  *sampler.Engine
	name    string
	closeFn func()
}

func openPolicy(f *evalFlags) (*evalPolicy, error) {
	if strings.HasPrefix(f.model, "http://") || strings.HasPrefix(f.model, "https://") {
		if f.servedModel == "" {
			return nil, errors.New("a URL --model needs --served-model, the name the server serves")
		}
		tok, err := loadTokenizer(f.models, f.tokenizer)
		if err != nil {
			return nil, err
		}
		// OPENAI_API_KEY, as other OpenAI clients read it, is sent as the
		// bearer token (a frognano node's node.api_token off loopback).
		return &evalPolicy{Policy: &openai.External{BaseURL: f.model, Model: f.servedModel, APIKey: os.Getenv("OPENAI_API_KEY")}, tok: tok, name: f.servedModel + " at " + f.model, closeFn: func() {}}, nil
	}
	store, err := modelstore.Open(f.models)
	if err != nil {
		return nil, err
	}
	path, err := store.Resolve(f.model)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(path, model.Options{})
	if err != nil {
		return nil, err
	}
	e, err := sampler.New(sampler.Config{Model: m, MaxSequences: f.batch})
	if err != nil {
		return nil, err
	}
	return &evalPolicy{Policy: e, tok: m.Tokenizer, ctxLen: e.ContextLength(), engine: e, name: f.model, closeFn: func() { e.Close() }}, nil
}

// loadTokenizer reads the tokenizer of a model in the store at models
// without its weights.
func loadTokenizer(models, name string) (*tokenizer.Tokenizer, error) {
	store, err := modelstore.Open(models)
	if err != nil {
		return nil, err
	}
	return store.Tokenizer(name)
}

// evalReport is the JSON report.
type evalReport struct {
	Model             string                 `json:"model"`
	Mode              string                 `json:"mode"`
	K                 int                    `json:"k"`
	RunID             string                 `json:"run_id"`
	Seed              uint64                 `json:"seed"`
	Sampling          sample.Params          `json:"sampling"`
	Limits            harness.Limits         `json:"limits"`
	Started           time.Time              `json:"started"`
	WallSeconds       float64                `json:"wall_seconds"`
	Episodes          int                    `json:"episodes"`
	EpisodesPerMinute float64                `json:"episodes_per_minute"`
	GenerationSeconds float64                `json:"generation_seconds"`
	SandboxSeconds    float64                `json:"sandbox_seconds"`
	SetupSeconds      float64                `json:"sandbox_setup_seconds"`
	GradeSeconds      float64                `json:"grade_seconds"`
	PolicyTokens      int64                  `json:"policy_tokens"`
	EngineSteps       int64                  `json:"engine_steps,omitempty"`
	EnginePrompt      int64                  `json:"engine_prompt_tokens,omitempty"`
	Endings           map[string]int         `json:"endings"`
	Buckets           []rollout.Bucket       `json:"buckets"`
	Tasks             []*rollout.TaskOutcome `json:"tasks"`
	Skipped           []map[string]string    `json:"skipped,omitempty"`
}

func runEval(cmd *cobra.Command, a *app, f *evalFlags) error {
	mode, err := f.validate()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	errw := cmd.ErrOrStderr()
	c, err := a.connect(cmd)
	if err != nil {
		return err
	}
	defer c.close()

	tasks, envs, testPatches, skipped, err := evalTasks(c, f)
	if err != nil {
		return err
	}

	rt, closeRT, err := evalRuntime(ctx, a, c)
	if err != nil {
		return err
	}
	defer closeRT()
	envStore := persistence.NewMemory().Environments()
	for _, e := range envs {
		if err := envStore.Put(ctx, e); err != nil {
			return err
		}
	}

	// Every episode runs in its own SandboxWorker actor, spawned here.
	sbs := &rollout.Workers{
		Root:         c.local().Root,
		Spawn:        rollout.LocalWorkers(c.local().Root, sandboxworker.Props(sandboxworker.Config{Runtime: rt, Environments: envStore, Logger: c.log})),
		Environments: envStore,
		Runtime:      rt,
		TestPatches:  testPatches,
		Logger:       c.log,
	}
	defer sbs.Close()
	// Instances from a file run only where their image exists; a stored
	// task whose image is gone is an error that names it.
	var runnable []*messages.Task
	for _, t := range tasks {
		if err := sbs.Check(ctx, t); err != nil {
			if f.tasksFile == "" {
				return err
			}
			skipped = append(skipped, map[string]string{"instance_id": t.Id, "reason": err.Error()})
			continue
		}
		runnable = append(runnable, t)
	}
	tasks = runnable
	for _, s := range skipped {
		fmt.Fprintf(errw, "skipped %s: %s\n", s["instance_id"], s["reason"])
	}
	if len(tasks) == 0 {
		return errors.New("no task to evaluate")
	}

	pol, err := openPolicy(f)
	if err != nil {
		return err
	}
	defer pol.closeFn()
	lim := harness.Limits{MaxTurns: f.maxTurns, MaxTurnTokens: f.maxTurnTokens, MaxContext: f.maxContext, WallTime: f.wall}
	if pol.ctxLen > 0 && lim.MaxContext > pol.ctxLen {
		lim.MaxContext = pol.ctxLen
	}
	store := &rollout.ActorStore{Ask: func(msg any, timeout time.Duration) (any, error) {
		res, err := c.call(ctx, rollout.ActorName, msg, timeout, nil)
		var f *gateway.FailureError
		if errors.As(err, &f) {
			return &messages.Failure{Code: f.Code, Message: f.Message}, nil
		}
		return res, err
	}}
	runner, err := rollout.New(rollout.Config{Policy: pol, Tokenizer: pol.tok, Sandboxes: sbs, Trajectories: store, MaxEpisodes: f.parallel, Logger: c.log})
	if err != nil {
		return err
	}
	if f.seed == 0 {
		f.seed = uint64(time.Now().UnixNano())
	}
	if f.runID == "" {
		f.runID = "eval-" + time.Now().UTC().Format("20060102-150405")
	}
	samp := sample.Params{Temperature: f.temperature, TopP: f.topP, TopK: f.topK}
	rep := &evalReport{Model: pol.name, Mode: string(mode), K: f.k, RunID: f.runID, Seed: f.seed, Sampling: samp, Limits: lim,
		Started: time.Now(), Endings: map[string]int{}, Skipped: skipped}

	total := int64(len(tasks) * f.k)
	tty := isTerminal(errw)
	bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(errw), progressbar.OptionSetDescription("episodes"),
		progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(true), progressbar.OptionSetVisibility(tty))
	fmt.Fprintf(errw, "evaluating %s on %d tasks × %d episodes (%s mode, run %s, seed %d)\n", pol.name, len(tasks), f.k, mode, f.runID, f.seed)
	var (
		mu       sync.Mutex
		outcomes = map[string]*rollout.TaskOutcome{}
		solved   int
		doneN    int
		errs     []error
		wg       sync.WaitGroup
	)
	for _, t := range tasks {
		outcomes[t.Id] = &rollout.TaskOutcome{TaskID: t.Id, Environment: t.Environment, HintLevel: int(t.GetDifficulty().GetHintLevel()), Mode: string(mode)}
	}
	start := time.Now()
	for i, t := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := runner.Run(ctx, rollout.Request{Task: t, Group: f.k, Mode: mode, Limits: lim, Sampling: samp, Seed: f.seed + uint64(i), RunID: f.runID},
				func(ep *rollout.Episode) {
					mu.Lock()
					defer mu.Unlock()
					outcomes[t.Id].Add(ep)
					r := ep.Result
					rep.Endings[string(r.Ending)]++
					rep.GenerationSeconds += r.GenerationSeconds
					rep.SandboxSeconds += r.SandboxSeconds + ep.SetupSeconds
					rep.SetupSeconds += ep.SetupSeconds
					rep.GradeSeconds += r.GradeSeconds
					rep.PolicyTokens += int64(r.PolicyTokens())
					if r.Reward >= 1 {
						solved++
					}
					doneN++
					_ = bar.Add(1)
					bar.Describe(fmt.Sprintf("solved %d", solved))
					if !tty && (doneN%max(1, int(total)/20) == 0 || doneN == int(total)) {
						fmt.Fprintf(errw, "%d/%d episodes, %d solved, %.0fs\n", doneN, total, solved, time.Since(start).Seconds())
					}
				})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	_ = bar.Finish()
	if tty {
		fmt.Fprintln(errw)
	}
	rep.WallSeconds = time.Since(start).Seconds()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for _, t := range tasks {
		o := outcomes[t.Id]
		o.Finish(f.k)
		rep.Tasks = append(rep.Tasks, o)
		rep.Episodes += o.Samples + o.Infra
	}
	if rep.WallSeconds > 0 {
		rep.EpisodesPerMinute = float64(rep.Episodes) / rep.WallSeconds * 60
	}
	if pol.engine != nil {
		st := pol.engine.Stats()
		rep.EngineSteps, rep.EnginePrompt = st.Steps, st.PromptTokens
	}
	rep.Buckets = rollout.Buckets(rep.Tasks, f.k, f.seed)
	out := cmd.OutOrStdout()
	if err := rollout.WriteTable(out, rep.Buckets, f.k); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d episodes in %.0fs: %.2f episodes/minute; time in episodes: %.0fs generating, %.0fs in sandboxes (%.0fs setup, %.0fs grading)\n",
		rep.Episodes, rep.WallSeconds, rep.EpisodesPerMinute, rep.GenerationSeconds, rep.SandboxSeconds, rep.SetupSeconds, rep.GradeSeconds)
	fmt.Fprintf(out, "policy tokens %d (%.1f/s over the run)", rep.PolicyTokens, float64(rep.PolicyTokens)/max(rep.WallSeconds, 1e-9))
	if rep.EngineSteps > 0 {
		fmt.Fprintf(out, ", engine: %d steps, %d prompt tokens read", rep.EngineSteps, rep.EnginePrompt)
	}
	fmt.Fprintf(out, "\nendings: %s\ntrajectories: frognano traj ls --run %s\n", rollout.FormatEndings(rep.Endings), f.runID)
	if f.jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d tasks failed: %w", len(errs), errors.Join(errs...))
	}
	return nil
}

// evalRuntime is containerd for the episodes: the embedded node's
// connection, or one of this process's own when the node is remote (the
// episodes run where the CLI runs).
func evalRuntime(ctx context.Context, a *app, c *client) (func(context.Context) (*sandbox.Runtime, error), func(), error) {
	if c.sandboxes != nil {
		return c.sandboxes.Runtime, func() {}, nil
	}
	cfg, err := a.load()
	if err != nil {
		return nil, nil, err
	}
	s := services.NewSandboxes(cfg, c.log)
	if _, err := s.Runtime(ctx); err != nil {
		return nil, nil, err
	}
	return s.Runtime, func() { s.Close() }, nil
}

// evalTasks loads the tasks to evaluate and the environments they need.
func evalTasks(c *client, f *evalFlags) ([]*messages.Task, []*messages.Environment, map[string]string, []map[string]string, error) {
	envs := map[string]*messages.Environment{}
	getEnv := func(name string) (*messages.Environment, error) {
		if e, ok := envs[name]; ok {
			return e, nil
		}
		r, err := c.askActor(c.pid(environment.ActorName), &messages.EnvGetRequest{Name: name}, time.Minute)
		if err != nil {
			return nil, err
		}
		e := r.(*messages.EnvAddReply).Environment
		envs[name] = e
		return e, nil
	}
	var (
		tasks       []*messages.Task
		skipped     []map[string]string
		testPatches = map[string]string{}
	)
	if f.heldOut {
		held, err := trainer.HeldOutTasks(context.Background(), c, io.Discard)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		for _, t := range held {
			if _, err := getEnv(t.GetEnvironment()); err != nil {
				return nil, nil, nil, nil, err
			}
		}
		tasks = held
	} else if len(f.envs) > 0 {
		for _, name := range f.envs {
			if _, err := getEnv(name); err != nil {
				return nil, nil, nil, nil, fmt.Errorf("--env %s: %w", name, err)
			}
			res, err := c.askActor(c.pid(synth.ActorName), &messages.TaskListRequest{Environment: name}, 5*time.Minute)
			if err != nil {
				return nil, nil, nil, nil, err
			}
			list := res.(*messages.TaskList).Tasks
			if len(list) == 0 {
				return nil, nil, nil, nil, fmt.Errorf("environment %s has no tasks: make some with frognano synth --env %s", name, name)
			}
			tasks = append(tasks, list...)
		}
	} else {
		recs, err := readInstances(f.tasksFile)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		all, err := c.askActor(c.pid(environment.ActorName), &messages.EnvListRequest{}, time.Minute)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		byImage := map[string]*messages.Environment{}
		for _, e := range all.(*messages.EnvList).Environments {
			byImage[e.Image] = e
			envs[e.Name] = e
		}
		for _, r := range recs {
			e := envs[r.Environment]
			if e == nil {
				e = byImage[r.ImageName]
			}
			if e == nil {
				skipped = append(skipped, map[string]string{"instance_id": r.InstanceID, "reason": fmt.Sprintf("no registered environment %q or with image %q (register the image: frognano env add image:%s --repo-dir /testbed)", r.Environment, r.ImageName, r.ImageName)})
				continue
			}
			tasks = append(tasks, r.Task(e))
			if r.TestPatch != "" {
				testPatches[r.InstanceID] = r.TestPatch
			}
		}
	}
	var kept []*messages.Task
	for _, t := range tasks {
		if f.hint >= 0 && int(t.GetDifficulty().GetHintLevel()) != f.hint {
			continue
		}
		kept = append(kept, t)
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].Id < kept[j].Id })
	if f.limit > 0 && len(kept) > f.limit {
		kept = kept[:f.limit]
	}
	if len(kept) == 0 && len(tasks) > 0 {
		return nil, nil, nil, skipped, fmt.Errorf("none of the %d tasks is at hint level %d", len(tasks), f.hint)
	}
	var out []*messages.Environment
	for _, e := range envs {
		out = append(out, e)
	}
	return kept, out, testPatches, skipped, nil
}

func readInstances(path string) ([]evaluate.Instance, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return evaluate.ReadInstances(fh, path)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
