package sandboxworker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/containerd/containerd/namespaces"

	"github.com/frognano/frognano/actors/environment"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is one real environment (a tiny Python project) shared by the tests.
var fixture struct {
	once sync.Once
	rt   *sandbox.Runtime
	envs persistence.EnvironmentStore
	env  *records.Environment
	err  error
}

func setup(t *testing.T) (*sandbox.Runtime, persistence.EnvironmentStore, *records.Environment) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs containerd; skipped with -short")
	}
	fixture.once.Do(func() {
		ctx := context.Background()
		rt, err := sandbox.New(ctx, sandbox.Config{Logger: quiet})
		if err != nil {
			fixture.err = err
			return
		}
		dir, _ := os.MkdirTemp("", "frognano-worker-test-")
		defer os.RemoveAll(dir)
		files := map[string]string{
			"setup.py":           "from setuptools import setup\nsetup(name='calc', version='0.1', packages=['calc'])\n",
			"calc/__init__.py":   "def add(a, b):\n    return a + b\n",
			"tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n\ndef test_zero():\n    assert add(0, 0) == 0\n",
		}
		for name, body := range files {
			p := filepath.Join(dir, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte(body), 0o644)
		}
		store := persistence.NewMemory().Environments()
		b := &environment.Builder{Runtime: rt, Store: store}
		env, err := b.Add(ctx, environment.Source{Kind: environment.Local, Ref: dir}, environment.AddOptions{Name: "worker-test-calc"})
		fixture.rt, fixture.envs, fixture.env, fixture.err = rt, store, env, err
	})
	if errors.Is(fixture.err, sandbox.ErrContainerdNotRunning) {
		t.Skipf("containerd is not running: %v", fixture.err)
	}
	if fixture.err != nil {
		t.Fatal(fixture.err)
	}
	return fixture.rt, fixture.envs, fixture.env
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.env != nil {
		b := &environment.Builder{Runtime: fixture.rt, Store: fixture.envs}
		b.Remove(context.Background(), fixture.env.Name)
	}
	os.Exit(code)
}

func spawn(t *testing.T, rt *sandbox.Runtime, envs persistence.EnvironmentStore) (*actor.ActorSystem, *actor.PID) {
	t.Helper()
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	t.Cleanup(sys.Shutdown)
	pid := sys.Root.Spawn(Props(Config{
		Runtime:      func(context.Context) (*sandbox.Runtime, error) { return rt, nil },
		Environments: envs,
		Logger:       quiet,
	}))
	return sys, pid
}

func ask(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, req any) any {
	t.Helper()
	res, err := sys.Root.RequestFuture(pid, req, 2*time.Minute).Result()
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	return res
}

func TestWorkerDrivesARealSandbox(t *testing.T) {
	rt, envs, env := setup(t)
	sys, pid := spawn(t, rt, envs)

	if r := ask(t, sys, pid, &messages.SandboxExec{Argv: []string{"true"}}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Fatalf("exec before create answered %v", r)
	}
	created, ok := ask(t, sys, pid, &messages.SandboxCreate{Environment: env.Name}).(*messages.SandboxCreated)
	if !ok || created.SandboxId == "" {
		t.Fatalf("create answered %v", created)
	}

	res := ask(t, sys, pid, &messages.SandboxExec{Argv: []string{"sh", "-c", "echo hi; echo err >&2; exit 3"}, TimeoutSeconds: 30})
	if r, ok := res.(*messages.SandboxExecResult); !ok || r.ExitCode != 3 || string(r.Stdout) != "hi\n" || string(r.Stderr) != "err\n" {
		t.Fatalf("exec answered %v", res)
	}
	res = ask(t, sys, pid, &messages.SandboxExec{Argv: []string{"sleep", "60"}, TimeoutSeconds: 1})
	if r, ok := res.(*messages.SandboxExecResult); !ok || !r.TimedOut {
		t.Fatalf("exec past its timeout answered %v", res)
	}
	res = ask(t, sys, pid, &messages.SandboxExec{Argv: []string{"sh", "-c", "yes | head -c 100000"}, OutputLimitBytes: 1000})
	if r, ok := res.(*messages.SandboxExecResult); !ok || !r.Truncated || len(r.Stdout) > 1000 {
		t.Fatalf("exec over its output cap answered %v", res)
	}

	if _, ok := ask(t, sys, pid, &messages.SandboxWriteFile{Path: "notes/a.txt", Content: []byte("x")}).(*messages.SandboxOK); !ok {
		t.Fatal("write failed")
	}
	if f, ok := ask(t, sys, pid, &messages.SandboxReadFile{Path: "notes/a.txt"}).(*messages.SandboxFile); !ok || string(f.Content) != "x" {
		t.Fatalf("read answered %v", f)
	}
	if r := ask(t, sys, pid, &messages.SandboxReadFile{Path: "no/such/file"}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_FILE_ERROR) {
		t.Fatalf("read of a missing file answered %v", r)
	}
	if l, ok := ask(t, sys, pid, &messages.SandboxListFiles{Path: ".", Glob: "*.py"}).(*messages.SandboxFileList); !ok || !contains(l.Paths, "calc/__init__.py") {
		t.Fatalf("list answered %v", l)
	}

	// A bug, the tests see it, the fix (a patch) makes them pass again.
	bug := "--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n"
	if _, ok := ask(t, sys, pid, &messages.SandboxApplyPatch{Patch: bug}).(*messages.SandboxOK); !ok {
		t.Fatal("patch failed")
	}
	if r := ask(t, sys, pid, &messages.SandboxApplyPatch{Patch: bug}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_PATCH_FAILED) {
		t.Fatalf("re-applying a patch answered %v", r)
	}
	tr, ok := ask(t, sys, pid, &messages.SandboxRunTests{Tests: []string{"tests/test_calc.py::test_add", "tests/test_calc.py::test_zero"}}).(*messages.SandboxTestsResult)
	if !ok {
		t.Fatal("run tests failed")
	}
	got := map[string]records.TestStatus{}
	for _, r := range tr.Report.Results {
		got[r.Name] = r.Status
	}
	if got["tests/test_calc.py::test_add"] != records.TestStatus_TEST_STATUS_FAIL || got["tests/test_calc.py::test_zero"] != records.TestStatus_TEST_STATUS_PASS {
		t.Fatalf("tests after the bug: %v", got)
	}

	if d, ok := ask(t, sys, pid, &messages.SandboxDestroy{}).(*messages.SandboxDestroyed); !ok || d.SandboxId != created.SandboxId {
		t.Fatalf("destroy answered %v", d)
	}
	waitGone(t, rt, created.SandboxId)
}

func TestStoppingTheWorkerDestroysItsSandbox(t *testing.T) {
	rt, envs, env := setup(t)
	sys, pid := spawn(t, rt, envs)
	created := ask(t, sys, pid, &messages.SandboxCreate{Image: env.Image}).(*messages.SandboxCreated)
	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	waitGone(t, rt, created.SandboxId)
}

// TestWorkerPreparesAndGradesAnEpisode: the worker applies a task's bug
// and hides it from git, grades the untouched bug 0, grades a fix 1 even
// when the agent also rewrote the protected tests (they are restored from
// the image), and refuses requests out of order.
func TestWorkerPreparesAndGradesAnEpisode(t *testing.T) {
	rt, envs, env := setup(t)
	sys, pid := spawn(t, rt, envs)
	task := &records.Task{
		Id: "calc-sub", Environment: env.Name,
		BugPatch:       "--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n",
		FailToPass:     []string{"tests/test_calc.py::test_add"},
		PassToPass:     []string{"tests/test_calc.py::test_zero"},
		ProtectedFiles: []string{"tests/test_calc.py"},
	}
	if r := ask(t, sys, pid, &messages.SandboxGrade{}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Fatalf("grade before create answered %v", r)
	}
	ask(t, sys, pid, &messages.SandboxCreate{Environment: env.Name})
	if f, ok := ask(t, sys, pid, &messages.SandboxGrade{}).(*rtmsg.Failure); !ok || f.GetCode() != rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST || !strings.Contains(f.Message, "SandboxPrepareEpisode") {
		t.Fatalf("grade before prepare answered %v", f)
	}
	noF2P := &records.Task{Id: "x", Environment: env.Name}
	if r := ask(t, sys, pid, &messages.SandboxPrepareEpisode{Task: noF2P}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Fatalf("prepare of a task without FAIL_TO_PASS answered %v", r)
	}
	ready, ok := ask(t, sys, pid, &messages.SandboxPrepareEpisode{Task: task}).(*messages.SandboxEpisodeReady)
	if !ok || ready.SandboxId == "" {
		t.Fatalf("prepare answered %v", ready)
	}
	if r := ask(t, sys, pid, &messages.SandboxPrepareEpisode{Task: task}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Fatalf("a second prepare answered %v", r)
	}
	// The bug is in the tree, and git shows one commit and no change.
	if f := ask(t, sys, pid, &messages.SandboxReadFile{Path: "calc/__init__.py"}).(*messages.SandboxFile); !strings.Contains(string(f.Content), "a - b") {
		t.Fatalf("the bug is not applied: %q", f.Content)
	}
	res := ask(t, sys, pid, &messages.SandboxExec{Argv: []string{"sh", "-c", "git log --oneline | wc -l; git status --porcelain"}, TimeoutSeconds: 30}).(*messages.SandboxExecResult)
	if strings.TrimSpace(string(res.Stdout)) != "1" {
		t.Fatalf("git after prepare: %q %q", res.Stdout, res.Stderr)
	}

	g, ok := ask(t, sys, pid, &messages.SandboxGrade{}).(*messages.SandboxGraded)
	if !ok || g.Resolved || g.Reward != 0 || g.Reason == "" || g.Report == nil || !g.Report.Valid {
		t.Fatalf("grade of the bug: %v", g)
	}
	// The fix, and a cheat on the tests that grading undoes.
	ask(t, sys, pid, &messages.SandboxWriteFile{Path: "calc/__init__.py", Content: []byte("def add(a, b):\n    return a + b\n")})
	ask(t, sys, pid, &messages.SandboxWriteFile{Path: "tests/test_calc.py", Content: []byte("def test_add():\n    assert False\n")})
	g, ok = ask(t, sys, pid, &messages.SandboxGrade{}).(*messages.SandboxGraded)
	if !ok || !g.Resolved || g.Reward != 1 || g.Reason != "" || len(g.Report.Results) != 2 {
		t.Fatalf("grade of the fix: %v", g)
	}

	// A worker created from a bare image has no test command for an episode.
	bareSys, bare := spawn(t, rt, envs)
	ask(t, bareSys, bare, &messages.SandboxCreate{Image: env.Image})
	if r := ask(t, bareSys, bare, &messages.SandboxPrepareEpisode{Task: task}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Fatalf("prepare in a sandbox without an environment answered %v", r)
	}
	// A bug patch that does not apply.
	otherSys, other := spawn(t, rt, envs)
	ask(t, otherSys, other, &messages.SandboxCreate{Environment: env.Name})
	bad := &records.Task{Id: "bad", Environment: env.Name, FailToPass: task.FailToPass, BugPatch: strings.ReplaceAll(task.BugPatch, "a + b", "a * b")}
	if r := ask(t, otherSys, other, &messages.SandboxPrepareEpisode{Task: bad}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_PATCH_FAILED) {
		t.Fatalf("prepare with a bug patch that does not apply answered %v", r)
	}
}

// TestWorkerCreateFailures: an unknown environment and a missing image
// answer their own codes, which the rollout turns into its task errors.
func TestWorkerCreateFailures(t *testing.T) {
	rt, envs, _ := setup(t)
	sys, pid := spawn(t, rt, envs)
	if r := ask(t, sys, pid, &messages.SandboxCreate{Environment: "no-such-env"}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_NO_ENVIRONMENT) {
		t.Fatalf("create from an unknown environment answered %v", r)
	}
	if f, ok := ask(t, sys, pid, &messages.SandboxCreate{Image: "frognano.local/env/removed:0"}).(*rtmsg.Failure); !ok || f.GetCode() != rtmsg.FailureCode_FAILURE_CODE_IMAGE_GONE ||
		!strings.Contains(f.Message, "not in containerd namespace "+rt.Namespace()) {
		t.Fatalf("create from a missing image answered %v", f)
	}
}

// TestBrokenSandboxAnswersSandboxBroken: when the container dies under the
// worker, the episode's requests, grading included, answer sandbox_broken.
func TestBrokenSandboxAnswersSandboxBroken(t *testing.T) {
	rt, envs, env := setup(t)
	sys, pid := spawn(t, rt, envs)
	created := ask(t, sys, pid, &messages.SandboxCreate{Environment: env.Name}).(*messages.SandboxCreated)
	ask(t, sys, pid, &messages.SandboxPrepareEpisode{Task: &records.Task{Id: "t", Environment: env.Name, FailToPass: []string{"tests/test_calc.py::test_add"}}})
	killContainer(t, rt, created.SandboxId)
	for _, req := range []any{&messages.SandboxGrade{}, &messages.SandboxExec{Argv: []string{"true"}}} {
		if r := ask(t, sys, pid, req); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_SANDBOX_BROKEN) {
			t.Fatalf("%T in a dead sandbox answered %v", req, r)
		}
	}
}

// killContainer kills the sandbox's init from outside, as the OOM killer
// would.
func killContainer(t *testing.T, rt *sandbox.Runtime, id string) {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), rt.Namespace())
	cs, err := rt.Client().Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if !strings.Contains(c.ID(), id) {
			continue
		}
		task, err := c.Task(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		exit, err := task.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := task.Kill(ctx, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		select {
		case <-exit:
		case <-time.After(30 * time.Second):
			t.Fatalf("sandbox %s did not die", id)
		}
		return
	}
	t.Fatalf("no container of sandbox %s", id)
}

func waitGone(t *testing.T, rt *sandbox.Runtime, id string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cs, err := rt.Client().Containers(namespaces.WithNamespace(ctx, rt.Namespace()))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range cs {
			if strings.Contains(c.ID(), id) {
				found = true
			}
		}
		if !found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("container of sandbox %s still exists", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
