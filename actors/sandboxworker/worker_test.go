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
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/containerd/containerd/namespaces"

	"github.com/frognano/frognano/actors/environment"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is one real environment (a tiny Python project) shared by the tests.
var fixture struct {
	once sync.Once
	rt   *sandbox.Runtime
	envs persistence.EnvironmentStore
	env  *messages.Environment
	err  error
}

func setup(t *testing.T) (*sandbox.Runtime, persistence.EnvironmentStore, *messages.Environment) {
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

	if f, ok := ask(t, sys, pid, &messages.SandboxExec{Argv: []string{"true"}}).(*messages.Failure); !ok || f.Code != "bad_request" {
		t.Fatalf("exec before create answered %v", f)
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
	if f, ok := ask(t, sys, pid, &messages.SandboxReadFile{Path: "no/such/file"}).(*messages.Failure); !ok || f.Code != "file_error" {
		t.Fatalf("read of a missing file answered %v", f)
	}
	if l, ok := ask(t, sys, pid, &messages.SandboxListFiles{Path: ".", Glob: "*.py"}).(*messages.SandboxFileList); !ok || !contains(l.Paths, "calc/__init__.py") {
		t.Fatalf("list answered %v", l)
	}

	// A bug, the tests see it, the fix (a patch) makes them pass again.
	bug := "--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n"
	if _, ok := ask(t, sys, pid, &messages.SandboxApplyPatch{Patch: bug}).(*messages.SandboxOK); !ok {
		t.Fatal("patch failed")
	}
	if f, ok := ask(t, sys, pid, &messages.SandboxApplyPatch{Patch: bug}).(*messages.Failure); !ok || f.Code != "patch_failed" {
		t.Fatalf("re-applying a patch answered %v", f)
	}
	tr, ok := ask(t, sys, pid, &messages.SandboxRunTests{Tests: []string{"tests/test_calc.py::test_add", "tests/test_calc.py::test_zero"}}).(*messages.SandboxTestsResult)
	if !ok {
		t.Fatal("run tests failed")
	}
	got := map[string]messages.TestStatus{}
	for _, r := range tr.Report.Results {
		got[r.Name] = r.Status
	}
	if got["tests/test_calc.py::test_add"] != messages.TestStatus_TEST_STATUS_FAIL || got["tests/test_calc.py::test_zero"] != messages.TestStatus_TEST_STATUS_PASS {
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
