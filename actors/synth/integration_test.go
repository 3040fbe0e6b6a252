package synth

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
	"github.com/frognano/frognano/actors/synth/mutate"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// The environments of the integration tests: two PyPI sdists with their
// tests and one Go module, each built once per test binary.
func sixEnv(t *testing.T) *records.Environment { return testEnv(t, "synth-six", "six==1.16.0") }
func inflectionEnv(t *testing.T) *records.Environment {
	return testEnv(t, "synth-inflection", "inflection==0.5.1")
}
func uuidEnv(t *testing.T) *records.Environment {
	return testEnv(t, "synth-uuid", "github.com/google/uuid@v1.6.0")
}

// mixinEnv is a local package whose unittest classes inherit their tests
// from a mixin in tests/__init__.py (../environment/testdata/mixin).
func mixinEnv(t *testing.T) *records.Environment {
	dir, err := filepath.Abs(filepath.Join("..", "environment", "testdata", "mixin"))
	if err != nil {
		t.Fatal(err)
	}
	return testEnv(t, "synth-mixin", dir)
}

// verifyTask checks a task without the synthesizer's code: in a fresh
// sandbox of the environment image, the bug patch makes every FAIL_TO_PASS
// test fail, and the gold patch on top makes the task grade as resolved
// (FAIL_TO_PASS and PASS_TO_PASS all passing), through sandbox.RunTests as
// a grader runs them.
func verifyTask(t *testing.T, env *records.Environment, task *records.Task) {
	t.Helper()
	ctx := context.Background()
	rt := needRuntime(t)
	sb, err := rt.Create(ctx, env.Image, sandbox.Options{RepoDir: env.RepoDir})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	spec := environment.Spec(env)
	spec.Timeout = 3 * time.Minute
	// RunTests' isolated interpreter ignores PYTHONDONTWRITEBYTECODE; a
	// same-size edit within one mtime second would run stale bytecode.
	dropPyc := func() {
		if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "find . -name __pycache__ -prune -exec rm -rf {} +"}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sb.ApplyPatch(ctx, task.BugPatch); err != nil {
		t.Fatalf("%s: bug patch: %v", task.Id, err)
	}
	dropPyc()
	rep, err := sb.RunTests(ctx, spec, task.FailToPass)
	if err != nil {
		t.Fatal(err)
	}
	st := statuses(rep)
	for _, id := range task.FailToPass {
		if !failed(st[id]) {
			t.Errorf("%s: with the bug, FAIL_TO_PASS %s is %v (report valid %v: %s)", task.Id, id, st[id], rep.Valid, rep.Problem)
		}
	}
	if err := sb.ApplyPatch(ctx, task.GoldPatch); err != nil {
		t.Fatalf("%s: gold patch: %v", task.Id, err)
	}
	dropPyc()
	// Bug then gold restores the base commit (bytecode aside: some sdists
	// ship __pycache__, and dropPyc removed it).
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"git", "status", "--porcelain", "--untracked-files=no"}})
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(res.Stdout)) {
		if !strings.HasSuffix(strings.TrimSpace(line), ".pyc") {
			t.Errorf("%s: bug + gold does not restore the base commit: %q", task.Id, line)
		}
	}
	rep, err = sb.RunTests(ctx, spec, harness.GradingTests(task)) // as episodes are graded
	if err != nil {
		t.Fatal(err)
	}
	if o := testreport.Grade(rep, task.FailToPass, task.PassToPass); !o.Resolved {
		t.Errorf("%s: with the gold patch the task does not grade as resolved: %s (failing %v, missing %v)", task.Id, o.Reason, o.Failing, o.Missing)
	}
}

// checkTask checks a task's record: lists, features, provenance, a
// statement at its hint level that does not leak the fix.
func checkTask(t *testing.T, env *records.Environment, task *records.Task, hint int, bugs int) {
	t.Helper()
	d := task.Difficulty
	switch {
	case task.Environment != env.Name || task.Image != env.Image || task.Language != env.Language:
		t.Errorf("%s: environment fields %q %q %q", task.Id, task.Environment, task.Image, task.Language)
	case len(task.FailToPass) == 0 || len(task.PassToPass) == 0:
		t.Errorf("%s: F2P %d P2P %d", task.Id, len(task.FailToPass), len(task.PassToPass))
	case len(task.FailToPass)+len(task.PassToPass) != len(baselinePassing(env)):
		t.Errorf("%s: F2P+P2P = %d, baseline passing %d", task.Id, len(task.FailToPass)+len(task.PassToPass), len(baselinePassing(env)))
	case d == nil || len(d.Operators) != bugs || d.Edits < 1 || d.Files < 1 || d.LinesTouched < 1 || int(d.FailingTests) != len(task.FailToPass) ||
		int(d.HintLevel) != hint || d.TestDistance < 0 || d.TestDistance > 2 || d.Mode != "agent":
		t.Errorf("%s: difficulty %v", task.Id, d)
	case task.Provenance.GetGenerator() != Generator || task.Provenance.GetOperator() != strings.Join(d.Operators, "+"):
		t.Errorf("%s: provenance %v", task.Id, task.Provenance)
	case task.Validation.GetRuns() < 3 || task.Validation.GetCandidatesTried() < 1:
		t.Errorf("%s: validation %v", task.Id, task.Validation)
	case task.Id != TaskID(env.Name, keyOf(task)):
		t.Errorf("%s: id is not the content hash of its bug", task.Id)
	case !slices.Equal(task.ProtectedFiles, environment.Protected(env)) || !containsAll(task.ProtectedFiles, env.TestFiles):
		t.Errorf("%s: protected files %v: want the environment's protected set (its test files among them)", task.Id, task.ProtectedFiles)
	}
	if !strings.Contains(task.ProblemStatement, task.FailToPass[0]) {
		t.Errorf("%s: statement does not name the failing test:\n%s", task.Id, task.ProblemStatement)
	}
	if hint >= HintLocation != strings.Contains(task.ProblemStatement, "Since the last change") {
		t.Errorf("%s: statement at hint level %d:\n%s", task.Id, hint, task.ProblemStatement)
	}
	if hint >= HintSource && !strings.Contains(task.ProblemStatement, "This is the current code of") {
		t.Errorf("%s: statement at hint level 2 shows no source:\n%s", task.Id, task.ProblemStatement)
	}
	// No line the gold patch restores may be quoted, unless the buggy code
	// around the bug (the bug patch's context and added lines) has it too.
	var buggyNear []string
	for line := range strings.Lines(task.BugPatch) {
		if (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "+")) && !strings.HasPrefix(line, "+++") {
			buggyNear = append(buggyNear, line[1:])
		}
	}
	for line := range strings.Lines(task.GoldPatch) {
		fix := strings.TrimSpace(strings.TrimPrefix(line, "+"))
		if !strings.HasPrefix(line, "+") || strings.HasPrefix(line, "+++") || len(fix) < 12 || !strings.Contains(task.ProblemStatement, fix) {
			continue
		}
		if !slices.ContainsFunc(buggyNear, func(b string) bool { return strings.Contains(b, fix) }) {
			t.Errorf("%s: statement quotes the fix %q:\n%s", task.Id, fix, task.ProblemStatement)
		}
	}
}

func keyOf(task *records.Task) string { return mutate.PatchKey(task.BugPatch) }

func TestSynthesizePythonSix(t *testing.T) {
	env := sixEnv(t)
	s, _, tasks, covStore := newSynth(t)
	ctx := context.Background()
	var progress []Progress
	res, err := s.Synthesize(ctx, env, Request{Count: 3, Seed: 1, HintLevel: HintTests}, func(p Progress) { progress = append(progress, p) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("six: %d tasks from %d candidates in %v, %.1f CPU-s, coverage %.1fs, rejected %s", len(res.Tasks), res.Candidates, res.Wall.Round(time.Millisecond), res.CPUSeconds, res.CoverageSeconds, FormatReasons(res.Rejected))
	if len(res.Tasks) != 3 || res.Validated != 3 {
		t.Fatalf("%d tasks, want 3 (rejected %v)", len(res.Tasks), res.Rejected)
	}
	if len(progress) < 4 || progress[len(progress)-1].Stage != "done" || progress[len(progress)-1].Validated != 3 {
		t.Errorf("progress: %d reports, last %+v", len(progress), progress[len(progress)-1])
	}
	if res.CoverageSeconds <= 0 || res.CPUSeconds <= 0 || res.TestRuns < 9 {
		t.Errorf("figures: coverage %.2fs, CPU %.2fs, %d test runs", res.CoverageSeconds, res.CPUSeconds, res.TestRuns)
	}
	for _, task := range res.Tasks {
		checkTask(t, env, task, HintTests, 1)
		verifyTask(t, env, task)
		if got, err := tasks.Get(ctx, task.Id); err != nil || got.BugPatch != task.BugPatch {
			t.Errorf("%s not stored: %v", task.Id, err)
		}
	}
	cm, err := covStore.Get(ctx, env.Name)
	if err != nil || cm.Image != env.Image || len(cm.Tests) < 100 || len(cm.Files) != 1 || cm.Files[0].Path != "six.py" {
		t.Fatalf("stored coverage map: %d tests, files %v, %v", len(cm.GetTests()), cm.GetFiles(), err)
	}

	// The same seed again: the coverage map comes from the store, and the
	// bugs already stored are skipped, not validated again.
	res2, err := s.Synthesize(ctx, env, Request{Count: 1, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res2.CoverageSeconds != 0 || res2.Rejected[ReasonDuplicateStored] != 3 || len(res2.Tasks) != 1 {
		t.Errorf("second run: coverage %.2fs, rejected %v, %d tasks", res2.CoverageSeconds, res2.Rejected, len(res2.Tasks))
	}
	for _, old := range res.Tasks {
		if res2.Tasks[0].Id == old.Id {
			t.Errorf("the second run validated %s again", old.Id)
		}
	}
	if n, _ := tasks.Count(ctx, persistence.TaskFilter{Environment: env.Name}); n != 4 {
		t.Errorf("%d tasks stored, want 4", n)
	}
}

func TestSynthesizePythonInflection(t *testing.T) {
	env := inflectionEnv(t)
	s, _, _, _ := newSynth(t)
	ctx := context.Background()
	res, err := s.Synthesize(ctx, env, Request{Count: 3, Seed: 2, HintLevel: HintSource}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("inflection: %d tasks from %d candidates in %v, %.1f CPU-s, rejected %s", len(res.Tasks), res.Candidates, res.Wall.Round(time.Millisecond), res.CPUSeconds, FormatReasons(res.Rejected))
	if len(res.Tasks) != 3 {
		t.Fatalf("%d tasks, want 3 (rejected %v)", len(res.Tasks), res.Rejected)
	}
	for _, task := range res.Tasks {
		checkTask(t, env, task, HintSource, 1)
		verifyTask(t, env, task)
	}

	t.Run("multi-bug", func(t *testing.T) {
		res, err := s.Synthesize(ctx, env, Request{Count: 1, Seed: 3, Bugs: 2, HintLevel: HintLocation}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tasks) != 1 {
			t.Fatalf("%d tasks, want 1 (rejected %v)", len(res.Tasks), res.Rejected)
		}
		task := res.Tasks[0]
		checkTask(t, env, task, HintLocation, 2)
		if strings.Count(task.BugPatch, "\n@@ ") < 2 {
			t.Errorf("a two-bug task with one hunk:\n%s", task.BugPatch)
		}
		verifyTask(t, env, task)
	})

	t.Run("operator without a site", func(t *testing.T) {
		// inflection has no try statement.
		res, err := s.Synthesize(ctx, env, Request{Count: 1, Seed: 1, Operators: []string{"unwrap_try"}}, nil)
		if err != nil || len(res.Tasks) != 0 || res.Rejected["no_site"] == 0 || res.Generated != 0 {
			t.Errorf("unwrap_try on inflection: %v, %d tasks, rejected %v", err, len(res.Tasks), res.Rejected)
		}
	})

	t.Run("benchmark", func(t *testing.T) {
		cov, full, err := Bench(ctx, s, env, 8, 5)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		WriteBench(&b, cov, full)
		t.Log("\n" + b.String())
		if cov.Candidates != 8 || full.Candidates != 8 || cov.CPU <= 0 || full.CPU <= 0 || cov.Tasks == 0 {
			t.Errorf("bench: %+v %+v", cov, full)
		}
	})
}

func TestSynthesizeGoUUID(t *testing.T) {
	env := uuidEnv(t)
	s, _, _, covStore := newSynth(t)
	ctx := context.Background()
	res, err := s.Synthesize(ctx, env, Request{Count: 3, Seed: 4, HintLevel: HintLocation}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("uuid: %d tasks from %d candidates in %v, %.1f CPU-s, coverage %.1fs, rejected %s", len(res.Tasks), res.Candidates, res.Wall.Round(time.Millisecond), res.CPUSeconds, res.CoverageSeconds, FormatReasons(res.Rejected))
	if len(res.Tasks) != 3 {
		t.Fatalf("%d tasks, want 3 (rejected %v)", len(res.Tasks), res.Rejected)
	}
	for _, task := range res.Tasks {
		checkTask(t, env, task, HintLocation, 1)
		if !strings.Contains(task.ProblemStatement, "package `github.com/google/uuid`") && !strings.Contains(task.ProblemStatement, "`github.com/google/uuid.") {
			t.Errorf("%s: statement does not name the package:\n%s", task.Id, task.ProblemStatement)
		}
		verifyTask(t, env, task)
	}
	cm, err := covStore.Get(ctx, env.Name)
	if err != nil || !strings.Contains(cm.Tool, "go test") || len(cm.Tests) < 20 {
		t.Errorf("go coverage map: %v tests, tool %q, %v", len(cm.GetTests()), cm.GetTool(), err)
	}
	for _, f := range cm.GetFiles() {
		if strings.HasSuffix(f.Path, "_test.go") || strings.Contains(f.Path, "/") && strings.HasPrefix(f.Path, "github.com") {
			t.Errorf("coverage map has %s", f.Path)
		}
	}

	t.Run("operator with no Go form", func(t *testing.T) {
		res, err := s.Synthesize(ctx, env, Request{Count: 1, Seed: 4, Operators: []string{"unwrap_try"}}, nil)
		if err != nil || len(res.Tasks) != 0 || res.Rejected[ReasonOperatorNotApplicable] != 1 {
			t.Errorf("unwrap_try on Go: %v, %d tasks, rejected %v", err, len(res.Tasks), res.Rejected)
		}
	})
}

// gradeWith grades task in a fresh sandbox of env's image after applying
// patches, the way an episode is graded: the task's grading tests through
// sandbox.RunTests, then testreport.Grade.
func gradeWith(t *testing.T, env *records.Environment, task *records.Task, patches ...string) testreport.Outcome {
	t.Helper()
	ctx := context.Background()
	sb, err := needRuntime(t).Create(ctx, env.Image, sandbox.Options{RepoDir: env.RepoDir})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	for _, p := range patches {
		if err := sb.ApplyPatch(ctx, p); err != nil {
			t.Fatalf("%s: %v", task.Id, err)
		}
	}
	return gradeSandbox(t, sb, env, task)
}

// gradeSandbox runs task's grading tests in sb, its bytecode dropped, and
// grades them as an episode is graded.
func gradeSandbox(t *testing.T, sb *sandbox.Sandbox, env *records.Environment, task *records.Task) testreport.Outcome {
	t.Helper()
	ctx := context.Background()
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "find . -name __pycache__ -prune -exec rm -rf {} +"}}); err != nil {
		t.Fatal(err)
	}
	spec := environment.Spec(env)
	spec.Timeout = 3 * time.Minute
	rep, err := sb.RunTests(ctx, spec, harness.GradingTests(task))
	if err != nil {
		t.Fatal(err)
	}
	return testreport.Grade(rep, task.FailToPass, task.PassToPass)
}

// TestSynthesizeInheritedTests synthesizes from a suite whose tests are
// inherited from a mixin in another module. Their ids used to be rebuilt
// from JUnit XML, naming files that do not exist: every candidate was
// rejected as tests_not_run and no task could have been graded.
func TestSynthesizeInheritedTests(t *testing.T) {
	env := mixinEnv(t)
	if !baselinePassing(env)["tests/test_calc.py::CalcTest::test_add"] {
		t.Fatalf("baseline does not name the inherited tests by node id: %v", env.Baseline.GetResults())
	}
	s, _, _, _ := newSynth(t)
	res, err := s.Synthesize(context.Background(), env, Request{Count: 2, Seed: 7, HintLevel: HintTests}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mixin: %d tasks from %d candidates, rejected %s", len(res.Tasks), res.Candidates, FormatReasons(res.Rejected))
	if len(res.Tasks) != 2 || res.Rejected[ReasonTestsNotRun] > 0 || res.Rejected[ReasonFlaky] > 0 {
		t.Fatalf("%d tasks, want 2 (rejected %v)", len(res.Tasks), res.Rejected)
	}
	for _, task := range res.Tasks {
		checkTask(t, env, task, HintTests, 1)
		verifyTask(t, env, task)
		if o := gradeWith(t, env, task, task.BugPatch); o.Reward != 0 {
			t.Errorf("%s: the bug itself grades %v", task.Id, o.Reward)
		}
		if o := gradeWith(t, env, task, task.BugPatch, task.GoldPatch); o.Reward != 1 {
			t.Errorf("%s: the gold patch grades %v: %s (failing %v, missing %v)", task.Id, o.Reward, o.Reason, o.Failing, o.Missing)
		}
	}
}

// TestForkServerMatchesRunTests runs the mixin suite through the fork
// server validation uses and through sandbox.RunTests, as graders do: the
// same node ids with the same verdicts, whole suite and named tests, with
// the code intact and broken.
func TestForkServerMatchesRunTests(t *testing.T) {
	env := mixinEnv(t)
	ctx := context.Background()
	sb, err := needRuntime(t).Create(ctx, env.Image, sandbox.Options{RepoDir: env.RepoDir})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	spec := environment.Spec(env)
	spec.Timeout = time.Minute
	p, err := sb.StartPytestServer(ctx, spec, sandbox.PytestValidation)
	if err != nil {
		t.Fatal(err)
	}
	verdicts := func(r *testreport.Report) map[string]testreport.Status {
		out := map[string]testreport.Status{}
		for _, res := range r.Results {
			out[res.ID] = res.Status
		}
		return out
	}
	named := []string{"tests/test_calc.py::CalcSubclassTest::test_sub", "tests/test_calc.py::CalcTest::test_add", "tests/test_calc.py::CalcSubclassTest::test_own"}
	for _, step := range []struct {
		name     string
		broken   bool
		failures int
	}{{"intact", false, 0}, {"sub broken", true, 1}} {
		if step.broken {
			src, err := sb.ReadFile(ctx, env.RepoDir+"/calc/__init__.py")
			if err != nil {
				t.Fatal(err)
			}
			if err := sb.WriteFile(ctx, env.RepoDir+"/calc/__init__.py", []byte(strings.Replace(string(src), "return a - b", "return a + b", 1))); err != nil {
				t.Fatal(err)
			}
			// The same size within the same second: bytecode the first
			// runs cached would look current (the worker drops it too).
			if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"rm", "-rf", env.RepoDir + "/calc/__pycache__"}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tests := range [][]string{nil, named} {
			forked, err := p.Run(ctx, forkSpec(spec), tests, 0)
			if err != nil {
				t.Fatalf("%s: fork server: %v", step.name, err)
			}
			direct, err := sb.RunTests(ctx, spec, tests)
			if err != nil {
				t.Fatal(err)
			}
			f, d := verdicts(forked), verdicts(direct)
			if !forked.Valid || !direct.Valid || forked.ExitCode != direct.ExitCode || !maps.Equal(f, d) {
				t.Fatalf("%s, %d tests named: fork server valid %v (%s) exit %d %v; RunTests valid %v (%s) exit %d %v", step.name, len(tests),
					forked.Valid, forked.Problem, forked.ExitCode, f, direct.Valid, direct.Problem, direct.ExitCode, d)
			}
			want := len(named)
			if tests == nil {
				want = len(env.Baseline.GetResults())
				if _, ok := f["tests/test_calc.py::CalcTest::test_mean"]; !ok {
					t.Errorf("%s: the whole suite does not name an inherited test by its node id: %v", step.name, f)
				}
			}
			fails := forked.Counts()[testreport.StatusFail]
			if len(f) != want || (tests == nil && fails != 2*step.failures) || (tests != nil && fails != step.failures) {
				t.Errorf("%s, %d tests named: %d results with %d failures: %v", step.name, len(tests), len(f), fails, f)
			}
		}
	}
}

// TestActor drives the synthesizer actor with messages, as a node does.
func TestActor(t *testing.T) {
	env := sixEnv(t)
	rt := needRuntime(t)
	envs := persistence.NewMemory()
	if err := envs.Environments().Put(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	system := actor.NewActorSystem()
	defer system.Shutdown()
	pid, err := system.Root.SpawnNamed(Props(ActorConfig{Environments: envs.Environments(), Tasks: envs.Tasks(), Coverage: persistence.NewMemoryCoverage(),
		Runtime: func(context.Context) (*sandbox.Runtime, error) { return rt, nil }, Logger: quietLogger()}), ActorName)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan any, 1)
	var progress []*messages.SynthesizeProgress
	system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			ctx.Request(pid, &messages.SynthesizeRequest{Environment: env.Name, Count: 2, Seed: 11, Target: &records.DifficultyFeatures{HintLevel: 1}})
		case *messages.SynthesizeProgress:
			progress = append(progress, m)
		case *messages.SynthesizeResult, *rtmsg.Failure:
			done <- m
		}
	}))
	var res *messages.SynthesizeResult
	select {
	case m := <-done:
		var ok bool
		if res, ok = m.(*messages.SynthesizeResult); !ok {
			t.Fatalf("reply %v", m)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("no SynthesizeResult")
	}
	if len(res.TaskIds) != 2 || res.Seed != 11 || res.Progress.GetValidated() != 2 || len(progress) == 0 || res.CpuSeconds <= 0 {
		t.Fatalf("result %v after %d progress reports", res, len(progress))
	}
	list, err := system.Root.RequestFuture(pid, &messages.TaskListRequest{Environment: env.Name}, 10*time.Second).Result()
	if err != nil || len(list.(*messages.TaskList).Tasks) != 2 {
		t.Fatalf("TaskList: %v %v", list, err)
	}
	got, err := system.Root.RequestFuture(pid, &messages.TaskGetRequest{Id: res.TaskIds[0]}, 10*time.Second).Result()
	if err != nil || got.(*messages.TaskGetReply).Task.GetId() != res.TaskIds[0] {
		t.Fatalf("TaskGet: %v %v", got, err)
	}
	for _, bad := range []*messages.SynthesizeRequest{{Environment: "no-such-env", Count: 1}, {Environment: env.Name, Count: 1, Operators: []string{"nope"}}} {
		r, err := system.Root.RequestFuture(pid, bad, time.Minute).Result()
		if err != nil {
			t.Fatal(err)
		}
		f, ok := r.(*rtmsg.Failure)
		if !ok || (bad.Environment == "no-such-env") != (f.GetCode() == rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND) {
			t.Errorf("request %v: reply %v", bad, r)
		}
	}
	r, _ := system.Root.RequestFuture(pid, &messages.TaskGetRequest{Id: "missing"}, 10*time.Second).Result()
	if !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND) {
		t.Errorf("TaskGet(missing) = %v", r)
	}
}

// containsAll says whether every one of want is in have.
func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// weakEnv is a local package whose tests cannot tell some bugs from no code
// at all (testdata/weak: lines whose values are never used).
func weakEnv(t *testing.T) *records.Environment {
	dir, err := filepath.Abs(filepath.Join("testdata", "weak"))
	if err != nil {
		t.Fatal(err)
	}
	return testEnv(t, "synth-weak", dir)
}

// TestSynthesizeRejectsDeletableBugs: a candidate whose first SEARCH side,
// deleted, passes every test is rejected (deletion_passes), and the answer
// that deletes it grades 0 on every task stored, through the real grader.
func TestSynthesizeRejectsDeletableBugs(t *testing.T) {
	env := weakEnv(t)
	s, _, _, _ := newSynth(t)
	res, err := s.Synthesize(context.Background(), env, Request{Count: 3, Seed: 1, HintLevel: HintSearch}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("weak: %d tasks from %d candidates, rejected %s", len(res.Tasks), res.Candidates, FormatReasons(res.Rejected))
	if res.Rejected[ReasonDeletionPasses] == 0 {
		t.Errorf("no candidate rejected as %s (rejected %v)", ReasonDeletionPasses, res.Rejected)
	}
	for _, task := range res.Tasks {
		if o := gradeDeleted(t, env, task); o.Reward != 0 {
			t.Errorf("%s: deleting the SEARCH side grades %v", task.Id, o.Reward)
		}
	}
}

// gradeDeleted grades, as an episode is graded, the bug with its fix's
// first SEARCH side deleted.
func gradeDeleted(t *testing.T, env *records.Environment, task *records.Task) testreport.Outcome {
	t.Helper()
	ctx := context.Background()
	e, err := harness.SearchHint(task.GoldPatch)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := needRuntime(t).Create(ctx, env.Image, sandbox.Options{RepoDir: env.RepoDir})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if err := sb.ApplyPatch(ctx, task.BugPatch); err != nil {
		t.Fatal(err)
	}
	buggy, err := sb.ReadFile(ctx, env.RepoDir+"/"+e.Path)
	if err != nil {
		t.Fatal(err)
	}
	at := strings.Index(string(buggy), e.Search)
	if at < 0 {
		t.Fatalf("%s: the SEARCH side is not in the buggy file", task.Id)
	}
	del := mutate.UnifiedDiff(e.Path, buggy, []mutate.Replacement{{Start: at, End: at + len(e.Search), Old: e.Search}})
	if err := sb.ApplyPatch(ctx, del); err != nil {
		t.Fatalf("%s: %v", task.Id, err)
	}
	return gradeSandbox(t, sb, env, task)
}
