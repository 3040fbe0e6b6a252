package synth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/frognano/frognano/actors/environment"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
	"github.com/frognano/frognano/actors/synth/mutate"
	_ "github.com/frognano/frognano/actors/synth/mutate/golang" // registers Go
	_ "github.com/frognano/frognano/actors/synth/mutate/python" // registers Python
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Errors of a synthesis request, for errors.Is.
var (
	// ErrBadRequest is a request that cannot be served as asked (an unknown
	// operator, a negative count).
	ErrBadRequest = errors.New("bad synthesis request")
	// ErrNoPassingTests means the environment's baseline passes no test, so
	// no bug can turn a passing test into a failing one.
	ErrNoPassingTests = errors.New("the environment has no passing test at baseline")
)

// Generator is recorded in every task's provenance.
const Generator = "procedural/v1"

// Config is what a Synthesizer needs.
type Config struct {
	Sandboxes Sandboxes
	// Tasks receives every validated task as soon as it is validated, so a
	// crash loses at most the candidates in flight. Nil: tasks are only
	// returned.
	Tasks persistence.TaskStore
	// Coverage keeps coverage maps across runs; nil measures every run.
	Coverage persistence.CoverageStore
	// Statements writes problem statements (default TemplateWriter{}).
	Statements StatementWriter
	// Workers is the number of sandboxes validating at once (default: the
	// number of CPUs; each sandbox gets one CPU, and a test run keeps it
	// busy).
	Workers int
	// NoForkServer runs every pytest validation run as a new process
	// (sandbox.RunTests) instead of a fork of a process that imported
	// pytest once (see sandbox.PytestServer).
	NoForkServer bool
	Logger       *slog.Logger
}

// Synthesizer turns an environment into validated bug-fix tasks. It is safe
// for concurrent use, but runs share the machine's cores: the actor runs
// one at a time.
type Synthesizer struct {
	cfg Config
}

// New returns a Synthesizer.
func New(cfg Config) *Synthesizer {
	if cfg.Statements == nil {
		cfg.Statements = TemplateWriter{}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.NumCPU()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Synthesizer{cfg: cfg}
}

// Request is one synthesis run.
type Request struct {
	// Count is how many validated tasks to make.
	Count int
	// Operators restricts the mutation operators (default: all of the
	// language's).
	Operators []string
	// Bugs planted per task: 1 (default) or, for multi-bug tasks, 2 or more.
	Bugs int
	// Seed makes the run reproducible; 0 picks one from the clock.
	Seed uint64
	// HintLevel of the problem statements (HintTests … HintSource).
	HintLevel int
	// FullSuiteScreening screens every candidate with the whole suite
	// instead of its covering tests: the benchmark's baseline.
	FullSuiteScreening bool
	// DryRun neither stores tasks nor skips bugs already stored.
	DryRun bool
	// MaxCandidates stops the run after this many candidates were handed
	// to workers (0: no limit); two runs with the same seed and budget judge
	// the same candidates.
	MaxCandidates int
}

// Progress is a snapshot of a run, reported after every verdict.
type Progress struct {
	Stage      string
	Target     int
	Generated  int // candidates proposed by the mutator after targeting
	Candidates int // candidates that reached a verdict
	Validated  int
	Rejected   map[string]int
}

// Result is a finished run.
type Result struct {
	Progress
	Tasks           []*records.Task
	Seed            uint64
	Wall            time.Duration
	CPUSeconds      float64 // sandbox cgroups plus this process
	CoverageSeconds float64 // 0 when the coverage map came from the store
	TestRuns        int
}

// Proto is the result as the actor sends it.
func (r *Result) Proto() *messages.SynthesizeResult {
	out := &messages.SynthesizeResult{Progress: r.Progress.Proto(), Seed: r.Seed, WallSeconds: r.Wall.Seconds(),
		CpuSeconds: r.CPUSeconds, CoverageSeconds: r.CoverageSeconds, TestRuns: int32(r.TestRuns)}
	for _, t := range r.Tasks {
		out.TaskIds = append(out.TaskIds, t.GetId())
	}
	return out
}

// Proto is the progress as the actor sends it.
func (p Progress) Proto() *messages.SynthesizeProgress {
	out := &messages.SynthesizeProgress{Stage: p.Stage, Target: int32(p.Target), Generated: int32(p.Generated),
		Candidates: int32(p.Candidates), Validated: int32(p.Validated), Rejected: map[string]int32{}}
	for k, v := range p.Rejected {
		out.Rejected[k] = int32(v)
	}
	return out
}

// run is the state of one Synthesize call shared by its workers.
type run struct {
	s        *Synthesizer
	env      *records.Environment
	req      Request
	lang     mutate.Language
	spec     sandbox.TestSpec
	passing  map[string]bool
	duration map[string]float64 // baseline seconds per test
	order    map[string]int     // position in the baseline run
	module   string             // Go module path
	onProg   func(Progress)

	mu       sync.Mutex
	res      *Result
	seen     map[string]bool
	stop     func()
	testSrcs map[string]string
	started  int // candidates handed to workers (only feed touches it)
}

// Synthesize makes up to req.Count validated tasks of env. It returns the
// tasks made (also stored unless DryRun) and the count of every rejection,
// including when it stops early: a result with fewer tasks than asked is
// not an error. progress, when set, is called after every verdict.
//
// The pipeline: coverage map (stored per image) → candidates on covered
// lines of non-test files, each with the tests that execute its lines →
// per candidate, in a reused sandbox reset between candidates: apply the
// bug, run its covering tests (screening; stop at the first failure), then
// the whole suite (every baseline-passing test fails or passes, ≥1 fails),
// rerun the failing ones (they must fail again), apply the gold patch on
// top and run them once more (they must pass) → problem statement, features,
// store.
func (s *Synthesizer) Synthesize(ctx context.Context, env *records.Environment, req Request, progress func(Progress)) (*Result, error) {
	start := time.Now()
	cpu0 := 0.0
	if req.Seed == 0 {
		req.Seed = uint64(time.Now().UnixNano())
	}
	if req.Bugs <= 0 {
		req.Bugs = 1
	}
	res := &Result{Progress: Progress{Stage: "starting", Target: req.Count, Rejected: map[string]int{}}, Seed: req.Seed}
	defer func() {
		res.Wall = time.Since(start)
		if cpu0 > 0 {
			res.CPUSeconds = s.cpuSeconds() - cpu0
		}
	}()
	switch {
	case req.Count < 1:
		return res, fmt.Errorf("%w: count %d, want at least 1", ErrBadRequest, req.Count)
	case req.HintLevel < 0 || req.HintLevel > MaxHintLevel:
		return res, fmt.Errorf("%w: hint level %d, want %d to %d", ErrBadRequest, req.HintLevel, HintTests, MaxHintLevel)
	case env == nil:
		return res, fmt.Errorf("%w: no environment", ErrBadRequest)
	}
	r := &run{s: s, env: env, req: req, lang: mutate.Language(env.GetLanguage()), spec: environment.Spec(env), passing: baselinePassing(env),
		duration: map[string]float64{}, order: map[string]int{}, onProg: progress, res: res, seen: map[string]bool{}, testSrcs: map[string]string{}}
	for i, t := range env.GetBaseline().GetResults() {
		r.duration[t.GetName()] = t.GetDurationSeconds()
		r.order[t.GetName()] = i
	}
	if len(r.passing) == 0 {
		res.Rejected[ReasonNoPassingTests]++
		return res, fmt.Errorf("%w: %s (%d results)", ErrNoPassingTests, env.GetName(), len(env.GetBaseline().GetResults()))
	}
	ops, notApplicable, err := checkOperators(r.lang, req.Operators)
	if err != nil {
		return res, err
	}
	if notApplicable > 0 {
		res.Rejected[ReasonOperatorNotApplicable] += notApplicable
	}
	if len(ops) == 0 {
		res.Stage = "done"
		return res, nil
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.stop = func() { cancel(errEnough) }
	workers := make([]*worker, s.cfg.Workers)
	for i := range workers {
		workers[i] = &worker{r: r, id: i}
	}
	defer func() {
		for _, w := range workers {
			w.destroy()
		}
	}()

	// The first worker's sandbox measures coverage (when it is not stored)
	// and reads the sources.
	w0 := workers[0]
	if err := w0.prepare(ctx); err != nil {
		return res, err
	}
	cov, err := r.coverage(ctx, w0)
	if err != nil {
		return res, err
	}
	// CPU is counted from here: the coverage map is made once per image,
	// and its time is reported apart (CoverageSeconds).
	cpu0 = s.cpuSeconds()
	r.progress("reading sources")
	files, err := r.readSources(ctx, w0, cov)
	if err != nil {
		return res, err
	}
	r.progress("generating candidates")
	cands := generate(files, cov, r.lang, ops, req.Seed, res.Rejected)
	if !req.DryRun && s.cfg.Tasks != nil {
		if cands, err = r.dropStored(ctx, cands); err != nil {
			return res, err
		}
	}
	r.mu.Lock()
	res.Generated = len(cands)
	r.mu.Unlock()

	if req.Bugs == 1 {
		r.progress("validating")
		r.validateAll(ctx, workers, cands, false)
	} else {
		r.progress("screening single bugs")
		pool := r.screenPool(ctx, workers, cands, max(4*req.Count*req.Bugs, 8))
		combos := combine(pool, req.Bugs, 4*req.Count, req.Seed, cov, res.Rejected)
		r.mu.Lock()
		res.Generated += len(combos)
		r.mu.Unlock()
		r.progress("validating multi-bug candidates")
		r.validateAll(ctx, workers, combos, false)
	}
	r.progress("done")
	if err := context.Cause(ctx); err != nil && !errors.Is(err, errEnough) {
		return res, err
	}
	return res, nil
}

// errEnough cancels a run's workers once it has what it was asked for.
var errEnough = errors.New("synthesis target reached")

func (r *run) progress(stage string) {
	r.mu.Lock()
	if stage != "" {
		r.res.Stage = stage
	}
	p := r.res.Progress
	p.Rejected = maps.Clone(p.Rejected)
	r.mu.Unlock()
	if r.onProg != nil {
		r.onProg(p)
	}
}

// cpuSeconds is this process's CPU time plus the sandboxes'.
func (s *Synthesizer) cpuSeconds() float64 {
	var ru syscall.Rusage
	total := 0.0
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		total = float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
	}
	if m, ok := s.cfg.Sandboxes.(CPUMeter); ok {
		total += m.CPUSeconds()
	}
	return total
}

// coverage returns the stored map of the environment's image, or measures
// and stores it.
func (r *run) coverage(ctx context.Context, w *worker) (*Coverage, error) {
	store := r.s.cfg.Coverage
	if store != nil {
		m, err := store.Get(ctx, r.env.GetName())
		switch {
		case err == nil && m.GetImage() == r.env.GetImage():
			return CoverageFromProto(m), nil
		case err != nil && !errors.Is(err, persistence.ErrNotFound):
			return nil, err
		}
	}
	r.progress("measuring coverage")
	w.dirty = true
	cov, err := MeasureCoverage(ctx, w.sb, r.env)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.res.CoverageSeconds = cov.Seconds
	r.mu.Unlock()
	if store != nil {
		if err := store.Put(ctx, cov.Proto(r.env.GetName())); err != nil {
			return nil, err
		}
	}
	r.s.cfg.Logger.Info("coverage measured", "environment", r.env.GetName(), "files", len(cov.Files), "tests", len(cov.Tests), "seconds", cov.Seconds)
	return cov, nil
}

// readSources reads the covered source files of the run's language.
func (r *run) readSources(ctx context.Context, w *worker, cov *Coverage) (map[string][]byte, error) {
	repo := r.env.GetRepoDir()
	if r.lang == mutate.Go {
		gomod, err := w.sb.ReadFile(ctx, repo+"/go.mod")
		if err != nil {
			return nil, err
		}
		r.module = modulePath(gomod)
	}
	files := map[string][]byte{}
	for _, p := range cov.SourceFiles() {
		if lang, ok := mutate.Detect(p); !ok || lang != r.lang {
			continue
		}
		src, err := w.sb.ReadFile(ctx, repo+"/"+p)
		if err != nil {
			r.s.cfg.Logger.Warn("covered file not readable", "path", p, "err", err)
			continue
		}
		files[p] = src
	}
	return files, nil
}

// dropStored removes candidates whose bug is already a task of the
// environment.
func (r *run) dropStored(ctx context.Context, cands []candidate) ([]candidate, error) {
	stored, err := r.s.cfg.Tasks.List(ctx, persistence.TaskFilter{Environment: r.env.GetName()})
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for _, t := range stored {
		keys[mutate.PatchKey(t.GetBugPatch())] = true
	}
	out := cands[:0]
	for _, c := range cands {
		if keys[c.Key] {
			r.res.Rejected[ReasonDuplicateStored]++
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// budgetLeft says whether the run still needs tasks.
func (r *run) budgetLeft() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.res.Validated < r.req.Count
}

// feed runs do over cands with every worker until cands run out, the
// context ends, more returns false or MaxCandidates candidates were started
// (counted over the whole run, so that two runs with the same seed and
// budget judge exactly the same candidates).
func (r *run) feed(ctx context.Context, workers []*worker, cands []candidate, more func() bool, do func(*worker, candidate)) {
	ch := make(chan candidate)
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range ch {
				do(w, c)
			}
		}()
	}
	for _, c := range cands {
		if ctx.Err() != nil || !more() || (r.req.MaxCandidates > 0 && r.started >= r.req.MaxCandidates) {
			break
		}
		select {
		case ch <- c:
			r.started++
		case <-ctx.Done():
		}
	}
	close(ch)
	wg.Wait()
}

// validateAll validates candidates until the run has its count.
func (r *run) validateAll(ctx context.Context, workers []*worker, cands []candidate, screenOnly bool) {
	r.feed(ctx, workers, cands, r.budgetLeft, func(w *worker, c candidate) {
		if !r.budgetLeft() {
			return
		}
		var o outcome
		if !answerHintOK(r.req.HintLevel, c.Gold, buggyOf(c)) {
			o.reason = ReasonNoSearchHint // decided before any test runs
		} else if o = w.validate(ctx, c, screenOnly); o.canceled {
			return
		}
		var task *records.Task
		if o.reason == "" {
			task, o.reason = r.assemble(ctx, w, c, o)
		}
		r.mu.Lock()
		r.res.Candidates++
		r.res.TestRuns += o.runs
		w.tried++
		switch {
		case o.reason != "":
			r.res.Rejected[o.reason]++
		case r.res.Validated >= r.req.Count:
			task = nil // another worker got there first
		case r.seen[c.Key]:
			r.res.Rejected[mutate.ReasonDuplicate]++
			task = nil
		default:
			r.seen[c.Key] = true
			task.Validation.CandidatesTried = int32(w.tried)
			w.tried = 0
			r.res.Validated++
			r.res.Tasks = append(r.res.Tasks, task)
			if r.res.Validated >= r.req.Count {
				r.stop()
			}
		}
		r.mu.Unlock()
		if task != nil && !r.req.DryRun && r.s.cfg.Tasks != nil {
			if err := r.s.cfg.Tasks.Put(context.WithoutCancel(ctx), task); err != nil {
				r.s.cfg.Logger.Error("store validated task", "task", task.GetId(), "err", err)
			}
		}
		r.progress("")
	})
}

// screenPool screens single-bug candidates (covering tests only) and
// returns those that fail at least one test, stopping at want of them.
func (r *run) screenPool(ctx context.Context, workers []*worker, cands []candidate, want int) []candidate {
	var pool []candidate
	more := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(pool) < want
	}
	r.feed(ctx, workers, cands, more, func(w *worker, c candidate) {
		o := w.validate(ctx, c, true)
		if o.canceled {
			return
		}
		r.mu.Lock()
		r.res.Candidates++
		r.res.TestRuns += o.runs
		if o.reason != "" {
			r.res.Rejected[o.reason]++
		} else {
			pool = append(pool, c)
		}
		r.mu.Unlock()
		r.progress("")
	})
	// Workers finish in any order; the pool order must not depend on it.
	sort.Slice(pool, func(i, j int) bool { return pool[i].Key < pool[j].Key })
	return pool
}

// TaskID is a task's id: the environment and a hash of the bug, so the
// same bug in the same environment is the same task.
func TaskID(env, bugKey string) string {
	sum := sha256.Sum256([]byte(env + "\x00" + bugKey))
	return env + "." + hex.EncodeToString(sum[:8])
}

// assemble turns a validated candidate into a task: statement, features.
func (r *run) assemble(ctx context.Context, w *worker, c candidate, o outcome) (*records.Task, string) {
	env := r.env
	byFile, buggy := bugEdits(c)
	in := StatementInput{Repo: repoName(env), Language: env.GetLanguage(), HintLevel: r.req.HintLevel, PassToPass: len(o.p2p), BugPatch: c.Patch}
	msgs := map[string]string{}
	for _, res := range o.full.Results {
		if failed(res.Status) && msgs[res.ID] == "" {
			msgs[res.ID] = res.Message
		}
	}
	for _, id := range o.f2p {
		in.Failing = append(in.Failing, FailingTest{ID: id, Message: msgs[id]})
	}
	var sites []bugSite
	for _, mu := range c.Mutations {
		loc := Location{Path: mu.File.Path, Function: mu.Site.Func.Name}
		if r.lang == mutate.Go {
			loc.Module = goPackage(r.module, mu.File.Path)
		} else {
			loc.Module = pythonModule(mu.File.Path)
		}
		loc.StartLine, loc.Source = buggySource(mu, byFile[mu.File], buggy[mu.File.Path])
		loc.Lines = mutationLines(mu, byFile[mu.File])
		in.Locations = append(in.Locations, loc)
		sites = append(sites, bugSite{path: loc.Path, module: loc.Module, function: loc.Function})
	}
	stmt, err := r.s.cfg.Statements.WriteStatement(ctx, in)
	if err != nil || Leaks(stmt, c.Gold, buggy) {
		// Error output can quote source; the bare template cannot leak.
		stmt, err = TemplateWriter{NoMessages: true}.WriteStatement(ctx, in)
		if err != nil || Leaks(stmt, c.Gold, buggy) {
			return nil, ReasonStatementLeak
		}
	}
	dist := 2
	for i, id := range o.f2p {
		if i == 20 || dist == 0 {
			break
		}
		ts := r.testSource(ctx, w, id)
		for _, b := range sites {
			dist = min(dist, distance(ts, b, env.GetLanguage()))
		}
	}
	ops := c.Features.Operators
	return &records.Task{
		Id:               TaskID(env.GetName(), c.Key),
		Environment:      env.GetName(),
		Language:         env.GetLanguage(),
		BugPatch:         c.Patch,
		GoldPatch:        c.Gold,
		ProblemStatement: stmt,
		FailToPass:       o.f2p,
		PassToPass:       o.p2p,
		TestCommand:      testCommand(env),
		ProtectedFiles:   environment.Protected(env),
		Difficulty: &records.DifficultyFeatures{
			Operators:    ops,
			Edits:        int32(c.Features.Edits),
			Files:        int32(len(c.Features.Files)),
			LinesTouched: int32(c.Features.LinesTouched),
			FailingTests: int32(len(o.f2p)),
			HintLevel:    int32(r.req.HintLevel),
			TestDistance: int32(dist),
			Mode:         "agent",
		},
		Provenance:      &records.Provenance{Operator: strings.Join(ops, "+"), Seed: r.req.Seed, Generator: Generator},
		Validation:      &records.ValidationStats{Runs: int32(o.runs), Seconds: o.seconds},
		Image:           env.GetImage(),
		CreatedUnixNano: time.Now().UnixNano(),
	}, ""
}

// buggySource is the source of the function holding mu, with the bug, and
// its first line; for a module-level bug, a few lines around it.
func buggySource(mu mutate.Mutation, rs []mutate.Replacement, buggy []byte) (int, string) {
	from, to := mu.Site.Func.StartLine, mu.Site.Func.EndLine
	if from <= 0 {
		from, to = max(1, mu.Site.Line-3), mu.Site.EndLine+3
	}
	delta := 0
	for _, r := range rs {
		if l := mu.File.Line(r.Start); l >= from && l <= to {
			delta += strings.Count(r.New, "\n") - strings.Count(r.Old, "\n")
		}
	}
	to += delta
	lines := strings.SplitAfter(string(buggy), "\n")
	if from > len(lines) {
		return from, ""
	}
	to = min(to, len(lines), from+79)
	return from, strings.Join(lines[from-1:to], "")
}

// testSource finds a test's function and its module's text, reading test
// files from the worker's sandbox (they are never mutated) once per run.
func (r *run) testSource(ctx context.Context, w *worker, id string) testSource {
	read := func(p string) string {
		r.mu.Lock()
		src, ok := r.testSrcs[p]
		r.mu.Unlock()
		if ok {
			return src
		}
		if w.sb != nil {
			if b, err := w.sb.ReadFile(ctx, r.env.GetRepoDir()+"/"+p); err == nil {
				src = string(b)
			}
		}
		r.mu.Lock()
		r.testSrcs[p] = src
		r.mu.Unlock()
		return src
	}
	if r.lang == mutate.Go {
		pkg, test, ok := testreport.SplitGoID(id)
		if !ok {
			return testSource{}
		}
		top, _, _ := strings.Cut(test, "/")
		dir := strings.TrimPrefix(strings.TrimPrefix(pkg, r.module), "/")
		if dir == "" {
			dir = "."
		}
		var all strings.Builder
		for _, f := range r.env.GetTestFiles() {
			if path.Dir(f) == dir {
				all.WriteString(read(f))
			}
		}
		return testSource{body: goTestBody(all.String(), top), imports: all.String(), pkgDir: dir}
	}
	file, rest, ok := strings.Cut(id, "::")
	if !ok {
		return testSource{}
	}
	parts := strings.Split(rest, "::")
	name, _, _ := strings.Cut(parts[len(parts)-1], "[")
	src := read(file)
	return testSource{body: pythonTestBody(src, name), imports: src}
}

// repoName is how statements and exports name the repository.
func repoName(env *records.Environment) string {
	src := env.GetSource()
	switch env.GetSourceKind() {
	case "pypi":
		name, _, _ := strings.Cut(src, "==")
		return name
	case "gomod":
		mod, _, _ := strings.Cut(src, "@")
		return mod
	}
	return env.GetName()
}

// testCommand is the environment's test command as one line, for the task
// record (graders use environment.Spec).
func testCommand(env *records.Environment) string {
	spec := environment.Spec(env)
	var argv []string
	switch spec.Framework {
	case testreport.Pytest:
		argv = append(slices.Clone(spec.Command), "-m", "pytest")
		argv = append(argv, spec.Args...)
	case testreport.GoTest:
		argv = append(slices.Clone(spec.Command), "test")
		argv = append(argv, spec.Args...)
		argv = append(argv, "./...")
	}
	return strings.Join(argv, " ")
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// CoverageOf returns env's coverage map, measuring it in a sandbox of its
// own (and storing it) when the store has none for env's image.
func (s *Synthesizer) CoverageOf(ctx context.Context, env *records.Environment) (*Coverage, error) {
	r := &run{s: s, env: env, lang: mutate.Language(env.GetLanguage()), res: &Result{Progress: Progress{Rejected: map[string]int{}}}}
	w := &worker{r: r}
	defer w.destroy()
	if err := w.prepare(ctx); err != nil {
		return nil, err
	}
	return r.coverage(ctx, w)
}
