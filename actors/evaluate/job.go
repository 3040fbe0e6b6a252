package evaluate

// An evaluation as a job a node runs (the evaluation service, service.go):
// the tasks (stored ones of some environments, the held-out set, or
// instances a client sent), the policy (a model on the node's engine, or an
// OpenAI-compatible server), k episodes of each in sandboxes the node
// places, every trajectory stored under the evaluation's id, and the
// report: pass@1 and pass@k with intervals per difficulty bucket.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/nodeask"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/actors/sampler/openai"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/node"
)

// Job is one evaluation, as a client submits it (JSON). Exactly one of
// Envs, Instances and HeldOut names the tasks.
type Job struct {
	// ID is the evaluation's id and the run id its trajectories are stored
	// under (default eval-<time>).
	ID string `json:"id,omitempty"`
	// Model is a model store name, a .gguf or Hugging Face path (on the
	// node), or an OpenAI-compatible server's URL.
	Model string `json:"model"`
	// Models is the node's model store directory to resolve Model in
	// (empty: the default).
	Models string `json:"models,omitempty"`
	// ServedModel and Tokenizer go with a URL Model: the name the server
	// serves, and the model whose tokenizer renders prompts.
	ServedModel string `json:"served_model,omitempty"`
	Tokenizer   string `json:"tokenizer,omitempty"`
	// APIKey is sent to a URL Model as its bearer token. It is never
	// stored with the evaluation's record.
	APIKey string `json:"api_key,omitempty"`

	Envs      []string   `json:"envs,omitempty"`
	Instances []Instance `json:"instances,omitempty"`
	// InstancesFrom names where the instances came from (a file), for
	// messages.
	InstancesFrom string `json:"instances_from,omitempty"`
	HeldOut       bool   `json:"held_out,omitempty"`

	Mode  string `json:"mode"`
	K     int    `json:"k"`
	Hint  int    `json:"hint_level"` // -1: all
	Limit int    `json:"limit,omitempty"`
	Seed  uint64 `json:"seed,omitempty"` // 0: from the clock

	Temperature float32 `json:"temperature"`
	TopP        float32 `json:"top_p"`
	TopK        int     `json:"top_k,omitempty"`

	Parallel      int     `json:"parallel"`
	Batch         int     `json:"batch"`
	MaxTurns      int     `json:"max_turns"`
	MaxTurnTokens int     `json:"max_turn_tokens"`
	MaxContext    int     `json:"max_context"`
	WallSeconds   float64 `json:"wall_seconds"`

	// resume: the node restarted while the job ran, and its episodes
	// stored then are read back rather than played again.
	resume bool
}

// DefaultJob is a job with the defaults frognano eval shows.
func DefaultJob() Job {
	return Job{Model: modelstore.Default, Tokenizer: modelstore.Default, Mode: string(harness.ModeAgent), K: 8, Hint: -1,
		Temperature: 0.7, TopP: 0.95, Parallel: 16, Batch: 16,
		MaxTurns: harness.DefaultLimits.MaxTurns, MaxTurnTokens: harness.DefaultLimits.MaxTurnTokens,
		MaxContext: harness.DefaultLimits.MaxContext, WallSeconds: harness.DefaultLimits.WallTime.Seconds()}
}

// IsURL says whether model names an OpenAI-compatible server (a scheme is
// case-insensitive: "HTTP://" is a URL too, not a path).
func IsURL(model string) bool {
	m := strings.ToLower(model[:min(len(model), len("https://"))])
	return strings.HasPrefix(m, "http://") || strings.HasPrefix(m, "https://")
}

// Bounds of a job's settings: far past any evaluation worth running, short
// of what would exhaust the node that runs it. Every episode waiting to run
// is a goroutine, every one running a sandbox, every sequence of the
// engine's batch a KV cache of up to the context's length, and the record
// is rewritten as episodes end.
const (
	MaxK           = 1024      // -k
	MaxParallel    = 1024      // --parallel, as for training runs
	MaxBatch       = 256       // --batch
	MaxTurns       = 1000      // --max-turns
	MaxTokens      = 1 << 20   // --max-turn-tokens and --max-context
	MaxWallSeconds = 24 * 3600 // --wall-time
	MinWallSeconds = 1e-3
	MaxEnvs        = 64     // --env, as for training runs
	MaxInstances   = 100000 // --tasks
	MaxIDBytes     = 128    // --run, as for training runs
	maxQuotedInput = 80     // of a refused value in a message
)

// Check refuses a job whose settings are out of range, with the flag's
// name in the message.
func (j *Job) Check() error {
	_, err := harness.ParseMode(j.Mode)
	switch {
	case err != nil:
		return fmt.Errorf("--mode: %w", err)
	case btoi(len(j.Envs) > 0)+btoi(len(j.Instances) > 0)+btoi(j.HeldOut) != 1:
		return errors.New("give one of --env ENV, --tasks FILE and --held-out")
	case j.Model == "":
		return errors.New("--model is empty")
	case IsURL(j.Model) && j.ServedModel == "":
		return errors.New("a URL --model needs --served-model, the name the server serves")
	case j.K < 1:
		return errors.New("-k must be at least 1")
	case j.Limit < 0:
		return errors.New("--limit must not be negative")
	case j.Hint < -1 || j.Hint > synth.MaxHintLevel:
		return fmt.Errorf("--hint-level %d: want -1 (all) or 0 to %d", j.Hint, synth.MaxHintLevel)
	case j.Parallel < 1 || j.Batch < 1:
		return errors.New("--parallel and --batch must be at least 1")
	case j.Temperature < 0 || j.TopP < 0 || j.TopP > 1 || j.TopK < 0:
		return errors.New("--temperature and --top-k must not be negative, --top-p must be in [0, 1]")
	case j.MaxTurns < 1 || j.MaxTurnTokens < 1 || j.MaxContext < 1 || !(j.WallSeconds > 0):
		return errors.New("--max-turns, --max-turn-tokens, --max-context and --wall-time must be positive")
	case j.K > MaxK:
		return fmt.Errorf("-k %d: at most %d episodes per task", j.K, MaxK)
	case j.Parallel > MaxParallel:
		return fmt.Errorf("--parallel %d: at most %d episodes at once", j.Parallel, MaxParallel)
	case j.Batch > MaxBatch:
		return fmt.Errorf("--batch %d: at most %d sequences in the engine's batch", j.Batch, MaxBatch)
	case j.MaxTurns > MaxTurns:
		return fmt.Errorf("--max-turns %d: at most %d", j.MaxTurns, MaxTurns)
	case j.MaxTurnTokens > MaxTokens || j.MaxContext > MaxTokens:
		return fmt.Errorf("--max-turn-tokens %d, --max-context %d: at most %d tokens each", j.MaxTurnTokens, j.MaxContext, MaxTokens)
	case j.WallSeconds < MinWallSeconds || j.WallSeconds > MaxWallSeconds:
		return fmt.Errorf("--wall-time %gs: want 1ms to 24h", j.WallSeconds)
	case len(j.Envs) > MaxEnvs:
		return fmt.Errorf("--env: %d environments, at most %d", len(j.Envs), MaxEnvs)
	case len(j.Instances) > MaxInstances:
		return fmt.Errorf("--tasks: %d instances, at most %d", len(j.Instances), MaxInstances)
	}
	if j.ID != "" { // "": the node names it
		if err := CheckID(j.ID); err != nil {
			return err
		}
	}
	if err := j.checkURLs(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, e := range j.Envs {
		if e == "" || seen[e] {
			return fmt.Errorf("--env %q: empty or given twice", clip(e))
		}
		seen[e] = true
	}
	clear(seen)
	for i, in := range j.Instances {
		// As ReadInstances reads them: a client may send what no file held.
		switch {
		case in.InstanceID == "":
			return fmt.Errorf("--tasks: instance %d has no instance_id", i+1)
		case seen[in.InstanceID]:
			return fmt.Errorf("--tasks: instance_id %q twice", clip(in.InstanceID))
		case len(in.FailToPass) == 0:
			return fmt.Errorf("--tasks: instance %s has no FAIL_TO_PASS tests", clip(in.InstanceID))
		case strings.TrimSpace(in.ProblemStatement) == "":
			return fmt.Errorf("--tasks: instance %s has no problem_statement", clip(in.InstanceID))
		}
		seen[in.InstanceID] = true
	}
	return nil
}

// CheckID refuses an evaluation id that could not name a directory under
// the node's data directory (DATA_DIR/evals/ID), or that would print as
// something else in a listing: at most MaxIDBytes of printable UTF-8, no
// space, slash, backslash or NUL, not starting with a dot.
func CheckID(id string) error {
	bad := id == "" || len(id) > MaxIDBytes || !utf8.ValidString(id) || strings.HasPrefix(id, ".") ||
		strings.IndexFunc(id, func(r rune) bool { return r == '/' || r == '\\' || r == ' ' || !unicode.IsPrint(r) }) >= 0
	if bad {
		return fmt.Errorf("--run %q: an id must not contain a NUL or a slash, nor start with a dot; it is 1 to %d bytes of printable characters without spaces or backslashes", clip(id), MaxIDBytes)
	}
	return nil
}

// checkURLs refuses a URL model the policy could not use as a server's
// base URL, or that carries a credential (the key goes in APIKey, which
// is never stored), and a URL tokenizer (it names a model in the store).
func (j *Job) checkURLs() error {
	if IsURL(j.Tokenizer) {
		return errors.New("--tokenizer names a model whose tokenizer renders prompts (a model store name), not a URL")
	}
	if !IsURL(j.Model) {
		return nil
	}
	u, err := url.Parse(j.Model)
	switch {
	case err != nil:
		return errors.New("--model: not a URL (want http[s]://host[:port][/path])")
	case u.User != nil:
		// (Not echoed, not even redacted: a user name may be the key.)
		return fmt.Errorf("--model %s://%s: give the server's key as OPENAI_API_KEY (api_key), not in the URL", u.Scheme, clip(u.Host))
	case u.Host == "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		// (Not echoed: a query may hold a key.)
		return fmt.Errorf("--model %s://%s%s…: want http[s]://host[:port][/path], without a query or fragment", u.Scheme, clip(u.Host), clip(u.Path))
	}
	return nil
}

// clip shortens a refused value for a message.
func clip(s string) string {
	if len(s) <= maxQuotedInput {
		return s
	}
	return s[:maxQuotedInput] + "…"
}

// checkNames refuses what a node that serves others does not open: a
// model or tokenizer named by a path on the node, another model store.
func (j *Job) checkNames() error {
	for _, name := range []string{j.Model, j.Tokenizer} {
		if name != "" && !IsURL(name) && (strings.ContainsAny(name, `/\`) || strings.HasSuffix(name, ".gguf") || strings.HasPrefix(name, ".")) {
			return fmt.Errorf("model %q: this node takes model store names (frognano model ls on the node) or a server URL, not paths", name)
		}
	}
	if j.Models != "" {
		return errors.New("--models: this node uses its own model store directory")
	}
	return nil
}

// Report is what an evaluation measured (frognano eval --json writes it).
type Report struct {
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
	// Resumed counts the episodes played before the node restarted and
	// read back from the store (the evaluation was resumed).
	Resumed int `json:"resumed_episodes,omitempty"`
}

// WriteSummary prints the report's table and totals.
func (r *Report) WriteSummary(out io.Writer) error {
	if err := rollout.WriteTable(out, r.Buckets, r.K); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d episodes in %.0fs: %.2f episodes/minute; time in episodes: %.0fs generating, %.0fs in sandboxes (%.0fs setup, %.0fs grading)\n",
		r.Episodes, r.WallSeconds, r.EpisodesPerMinute, r.GenerationSeconds, r.SandboxSeconds, r.SetupSeconds, r.GradeSeconds)
	fmt.Fprintf(out, "policy tokens %d (%.1f/s over the run)", r.PolicyTokens, float64(r.PolicyTokens)/max(r.WallSeconds, 1e-9))
	if r.EngineSteps > 0 {
		fmt.Fprintf(out, ", engine: %d steps, %d prompt tokens read", r.EngineSteps, r.EnginePrompt)
	}
	if r.Resumed > 0 {
		fmt.Fprintf(out, "\n%d of the episodes were played before the node restarted (resumed; their times are included)", r.Resumed)
	}
	_, err := fmt.Fprintf(out, "\nendings: %s\ntrajectories: frognano traj ls --run %s\n", rollout.FormatEndings(r.Endings), r.RunID)
	return err
}

// Deps is what an evaluation uses on its node.
type Deps struct {
	Node *node.Node
	// Runtime is the node's containerd connection.
	Runtime func(context.Context) (*sandbox.Runtime, error)
	// DataDir is the node's data directory (evals/ID/ holds a log).
	DataDir string
	// AnyPath: the node lives in its client's process (the CLI's embedded
	// node), so a job may name a model file or a model store directory;
	// a node that serves others takes model store names and URLs only.
	AnyPath bool
	// AutoResume: the node resumes, when it starts, the newest evaluation
	// it was running when it stopped or died (a daemon). Without it (the
	// CLI's embedded node) such evaluations are recorded stopped, for
	// frognano evals resume.
	AutoResume bool
	// Policy replaces the job's model (tests); nil opens Job.Model.
	Policy policy.Policy
	// Tokenizer goes with Policy.
	Tokenizer *tokenizer.Tokenizer
	Logger    *slog.Logger
}

// Progress is told each episode's end: episodes done, of total, solved.
type Progress func(done, total, solved int)

// ErrNoEpisodes ends an evaluation whose every episode failed in the
// infrastructure: there is nothing to report.
var ErrNoEpisodes = errors.New("every episode failed in the infrastructure")

// Execute runs job on the node, printing progress on out and telling
// progress each episode's end, and returns the report. job.ID and
// job.Seed must be set.
func Execute(ctx context.Context, d *Deps, job Job, out io.Writer, progress Progress) (*Report, error) {
	mode, err := harness.ParseMode(job.Mode)
	if err != nil {
		return nil, err
	}
	ask := nodeask.Asker{Node: d.Node}
	tasks, testPatches, skipped, err := jobTasks(ctx, ask, job, out)
	if err != nil {
		return nil, err
	}
	n := d.Node
	root := n.System().Root
	cw := &rollout.ClusterWorkers{Root: root, Manager: n.Manager(), Members: n.MemberInfos}
	sbs := &rollout.Workers{Root: root, Spawn: cw.Spawn, Environments: n.DB().Environments(), Runtime: d.Runtime, TestPatches: testPatches, Logger: d.Logger}
	defer sbs.Close()
	// Instances run only where their image exists; a stored task whose
	// image is gone is an error that names it.
	var runnable []*records.Task
	for _, t := range tasks {
		if err := sbs.Check(ctx, t); err != nil {
			if len(job.Instances) == 0 {
				return nil, err
			}
			skipped = append(skipped, map[string]string{"instance_id": t.Id, "reason": err.Error()})
			continue
		}
		runnable = append(runnable, t)
	}
	tasks = runnable
	for _, s := range skipped {
		fmt.Fprintf(out, "skipped %s: %s\n", s["instance_id"], s["reason"])
	}
	if len(tasks) == 0 {
		return nil, errors.New("no task to evaluate")
	}

	pol, err := OpenPolicy(d, job)
	if err != nil {
		return nil, err
	}
	defer pol.Close()
	lim := harness.Limits{MaxTurns: job.MaxTurns, MaxTurnTokens: job.MaxTurnTokens, MaxContext: job.MaxContext,
		WallTime: time.Duration(job.WallSeconds * float64(time.Second))}
	if pol.ctxLen > 0 && lim.MaxContext > pol.ctxLen {
		lim.MaxContext = pol.ctxLen
	}
	runner, err := rollout.New(rollout.Config{Policy: pol, Tokenizer: pol.tok, Sandboxes: sbs, Trajectories: n.DB().Trajectories(), MaxEpisodes: job.Parallel, Logger: d.Logger})
	if err != nil {
		return nil, err
	}
	samp := sample.Params{Temperature: job.Temperature, TopP: job.TopP, TopK: job.TopK}
	rep := &Report{Model: pol.name, Mode: string(mode), K: job.K, RunID: job.ID, Seed: job.Seed, Sampling: samp, Limits: lim,
		Started: time.Now(), Endings: map[string]int{}, Skipped: skipped}

	total := len(tasks) * job.K
	fmt.Fprintf(out, "evaluating %s on %d tasks × %d episodes (%s mode, run %s, seed %d)\n", pol.name, len(tasks), job.K, mode, job.ID, job.Seed)
	if job.resume {
		fmt.Fprintf(out, "resumed after the node restarted: the episodes it stored before are read back, not played again\n")
	}
	var (
		mu         sync.Mutex
		outcomes   = map[string]*rollout.TaskOutcome{}
		solved     int
		doneN      int
		firstInfra string
		errs       []error
		wg         sync.WaitGroup
	)
	for _, t := range tasks {
		outcomes[t.Id] = &rollout.TaskOutcome{TaskID: t.Id, Environment: t.Environment, HintLevel: int(t.GetDifficulty().GetHintLevel()), Mode: string(mode)}
	}
	start := time.Now()
	// Tasks start as slots free up, not all at once: each waiting episode
	// is a goroutine, and tasks × k of them can be millions. A few more
	// tasks than fill Parallel keep the slots busy past a group's stragglers.
	inFlight := make(chan struct{}, max(job.Parallel, 1)/max(job.K, 1)+2)
launch:
	for i, t := range tasks {
		select {
		case inFlight <- struct{}{}:
		case <-ctx.Done():
			break launch
		}
		wg.Add(1)
		go func() {
			defer func() { <-inFlight }()
			defer wg.Done()
			req := rollout.Request{Task: t, Group: job.K, Mode: mode, Limits: lim, Sampling: samp, Seed: job.Seed + uint64(i), RunID: job.ID}
			if job.resume {
				req.Reuse = []string{job.ID}
			}
			_, err := runner.Run(ctx, req,
				func(ep *rollout.Episode) {
					mu.Lock()
					defer mu.Unlock()
					outcomes[t.Id].Add(ep)
					if ep.Reused {
						rep.Resumed++
					}
					r := ep.Result
					rep.Endings[string(r.Ending)]++
					rep.GenerationSeconds += r.GenerationSeconds
					rep.SandboxSeconds += r.SandboxSeconds + ep.SetupSeconds
					rep.SetupSeconds += ep.SetupSeconds
					rep.GradeSeconds += r.GradeSeconds
					rep.PolicyTokens += int64(r.PolicyTokens())
					if ep.Infra && firstInfra == "" {
						firstInfra = fmt.Sprintf("%s: %s", r.Ending, r.Detail)
					}
					if r.Reward >= 1 {
						solved++
					}
					doneN++
					if progress != nil {
						progress(doneN, total, solved)
					}
					if doneN%max(1, total/20) == 0 || doneN == total {
						fmt.Fprintf(out, "%d/%d episodes, %d solved, %.0fs\n", doneN, total, solved, time.Since(start).Seconds())
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
	rep.WallSeconds = time.Since(start).Seconds()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	for _, t := range tasks {
		o := outcomes[t.Id]
		o.Finish(job.K)
		rep.Tasks = append(rep.Tasks, o)
		rep.Episodes += o.Samples + o.Infra
	}
	if rep.WallSeconds > 0 {
		// The episodes played here: a resumed evaluation's read-back ones
		// took no time of this wall.
		rep.EpisodesPerMinute = float64(rep.Episodes-rep.Resumed) / rep.WallSeconds * 60
	}
	if pol.engine != nil {
		st := pol.engine.Stats()
		rep.EngineSteps, rep.EnginePrompt = st.Steps, st.PromptTokens
	}
	rep.Buckets = rollout.Buckets(rep.Tasks, job.K, job.Seed)
	if len(errs) > 0 {
		return rep, fmt.Errorf("%d tasks failed: %w", len(errs), errors.Join(errs...))
	}
	samples := 0
	for _, o := range rep.Tasks {
		samples += o.Samples
	}
	if samples == 0 {
		return rep, fmt.Errorf("%w: all %d of them (the first: %s)", ErrNoEpisodes, rep.Episodes, firstInfra)
	}
	return rep, nil
}

// Policy is the policy an evaluation runs, and what it reports.
type Policy struct {
	policy.Policy
	tok     *tokenizer.Tokenizer
	ctxLen  int
	engine  *sampler.Engine
	name    string
	closeFn func()
}

// Close releases the policy's engine, if it has one.
func (p *Policy) Close() { p.closeFn() }

// OpenPolicy opens job's policy: d.Policy, an OpenAI-compatible server,
// or a model on frognano's engine. Close it with its closeFn.
func OpenPolicy(d *Deps, job Job) (*Policy, error) {
	if d.Policy != nil {
		return &Policy{Policy: d.Policy, tok: d.Tokenizer, name: job.Model, closeFn: func() {}}, nil
	}
	if !d.AnyPath {
		if err := job.checkNames(); err != nil {
			return nil, err
		}
	}
	if IsURL(job.Model) {
		tok, err := loadTokenizer(job.Models, job.Tokenizer)
		if err != nil {
			return nil, err
		}
		return &Policy{Policy: &openai.External{BaseURL: job.Model, Model: job.ServedModel, APIKey: job.APIKey}, tok: tok, name: job.ServedModel + " at " + job.Model, closeFn: func() {}}, nil
	}
	store, err := modelstore.Open(job.Models)
	if err != nil {
		return nil, err
	}
	path, err := store.Resolve(job.Model)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(path, model.Options{})
	if err != nil {
		return nil, err
	}
	e, err := sampler.New(sampler.Config{Model: m, MaxSequences: job.Batch})
	if err != nil {
		return nil, err
	}
	return &Policy{Policy: e, tok: m.Tokenizer, ctxLen: e.ContextLength(), engine: e, name: job.Model, closeFn: func() { e.Close() }}, nil
}

// loadTokenizer reads the tokenizer of a model in the store at models
// without its weights.
func loadTokenizer(models, name string) (*tokenizer.Tokenizer, error) {
	if name == "" {
		name = modelstore.Default
	}
	store, err := modelstore.Open(models)
	if err != nil {
		return nil, err
	}
	return store.Tokenizer(name)
}

// jobTasks loads the tasks to evaluate and registers nothing but the
// held-out environments (when missing).
func jobTasks(ctx context.Context, ask nodeask.Asker, job Job, out io.Writer) ([]*records.Task, map[string]string, []map[string]string, error) {
	var (
		tasks       []*records.Task
		skipped     []map[string]string
		testPatches = map[string]string{}
	)
	switch {
	case job.HeldOut:
		held, err := HeldOutTasks(ctx, ask, out)
		if err != nil {
			return nil, nil, nil, err
		}
		tasks = held
	case len(job.Envs) > 0:
		for _, name := range job.Envs {
			if _, err := ask.Ask(ctx, environment.ActorName, &messages.EnvGetRequest{Name: name}, time.Minute); err != nil {
				return nil, nil, nil, fmt.Errorf("--env %s: %w", name, err)
			}
			res, err := ask.Ask(ctx, synth.ActorName, &messages.TaskListRequest{Environment: name}, 5*time.Minute)
			if err != nil {
				return nil, nil, nil, err
			}
			list := res.(*messages.TaskList).Tasks
			if len(list) == 0 {
				return nil, nil, nil, fmt.Errorf("environment %s has no tasks: make some with frognano synth --env %s", name, name)
			}
			tasks = append(tasks, list...)
		}
	default:
		all, err := ask.Ask(ctx, environment.ActorName, &messages.EnvListRequest{}, time.Minute)
		if err != nil {
			return nil, nil, nil, err
		}
		byName, byImage := map[string]*records.Environment{}, map[string]*records.Environment{}
		for _, e := range all.(*messages.EnvList).Environments {
			byImage[e.Image] = e
			byName[e.Name] = e
		}
		for _, r := range job.Instances {
			e := byName[r.Environment]
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
	var kept []*records.Task
	for _, t := range tasks {
		if job.Hint >= 0 && int(t.GetDifficulty().GetHintLevel()) != job.Hint {
			continue
		}
		kept = append(kept, t)
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].Id < kept[j].Id })
	if job.Limit > 0 && len(kept) > job.Limit {
		kept = kept[:job.Limit]
	}
	if len(kept) == 0 && len(tasks) > 0 {
		return nil, nil, skipped, fmt.Errorf("none of the %d tasks is at hint level %d", len(tasks), job.Hint)
	}
	return kept, testPatches, skipped, nil
}

// logPath is an evaluation's log on the node, DATA_DIR/evals/ID/log.
func logPath(dataDir, id string) string { return filepath.Join(dataDir, "evals", id, "log") }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
