package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

func TestLifecycle(t *testing.T) {
	rt, img := needRuntime(t)
	ctx := context.Background()
	for _, storage := range []Storage{StorageTmpfs, StorageSnapshot} {
		t.Run(map[Storage]string{StorageTmpfs: "tmpfs", StorageSnapshot: "snapshot"}[storage], func(t *testing.T) {
			sb, err := rt.Create(ctx, img, Options{Storage: storage, Labels: map[string]string{"test": t.Name()}})
			if err != nil {
				t.Fatal(err)
			}
			res := run(t, sb, "echo hello; echo oops >&2; id -u; pwd; hostname; exit 3")
			if res.ExitCode != 3 || string(res.Stdout) != "hello\n0\n/repo\nsandbox\n" || string(res.Stderr) != "oops\n" {
				t.Fatalf("%+v", res)
			}
			if res := run(t, sb, "cat /proc/1/cmdline | tr '\\0' ' '"); !strings.Contains(string(res.Stdout), initMountPoint) && rt.agent != "" {
				t.Fatalf("pid 1 is %q, want the static init", res.Stdout)
			}
			id := sb.ID()
			if err := sb.Destroy(ctx); err != nil {
				t.Fatal(err)
			}
			if err := sb.Destroy(ctx); err != nil {
				t.Fatalf("second destroy: %v", err)
			}
			// Nothing of the sandbox may be left: container, lease, snapshot.
			cctx := rt.ctx(ctx)
			if _, err := rt.client.LoadContainer(cctx, id); !errdefs.IsNotFound(err) {
				t.Fatalf("container %s still there: %v", id, err)
			}
			ls, err := rt.client.LeasesService().List(cctx, "id=="+id)
			if err != nil || len(ls) != 0 {
				t.Fatalf("lease %s still there: %v %v", id, ls, err)
			}
			if _, err := rt.client.SnapshotService(rt.cfg.Snapshotter).Stat(cctx, id); !errdefs.IsNotFound(err) {
				t.Fatalf("snapshot %s still there: %v", id, err)
			}
			if _, err := sb.Exec(ctx, ExecRequest{Argv: []string{"true"}}); !errors.Is(err, ErrSandboxDead) {
				t.Fatalf("exec after destroy: %v, want ErrSandboxDead", err)
			}
		})
	}
}

func TestExec(t *testing.T) {
	eachExecPath(t, Options{Env: []string{"FROM_OPTIONS=1"}}, testExec)
}

func testExec(t *testing.T, sb *Sandbox) {
	ctx := context.Background()
	tests := []struct {
		name  string
		req   ExecRequest
		check func(t *testing.T, res ExecResult)
	}{
		{"exit code", ExecRequest{Argv: []string{"sh", "-c", "exit 42"}}, func(t *testing.T, res ExecResult) {
			if res.ExitCode != 42 || res.TimedOut || res.Truncated {
				t.Fatalf("%+v", res)
			}
		}},
		{"workdir and env", ExecRequest{Argv: []string{"sh", "-c", "pwd; echo $FROM_OPTIONS$FROM_REQUEST"}, Workdir: "/usr", Env: []string{"FROM_REQUEST=2"}}, func(t *testing.T, res ExecResult) {
			if string(res.Stdout) != "/usr\n12\n" {
				t.Fatalf("%q", res.Stdout)
			}
		}},
		{"stdin", ExecRequest{Argv: []string{"sh", "-c", "wc -c; cat >/dev/null"}, Stdin: bytes.NewReader(bytes.Repeat([]byte("x"), 300000))}, func(t *testing.T, res ExecResult) {
			if strings.TrimSpace(string(res.Stdout)) != "300000" {
				t.Fatalf("%q %q", res.Stdout, res.Stderr)
			}
		}},
		{"stdin larger than an agent frame", ExecRequest{Argv: []string{"wc", "-c"}, Stdin: bytes.NewReader(bytes.Repeat([]byte("y"), agentStdinLimit+12345))}, func(t *testing.T, res ExecResult) {
			if strings.TrimSpace(string(res.Stdout)) != strconv.Itoa(agentStdinLimit+12345) {
				t.Fatalf("%q %q", res.Stdout, res.Stderr)
			}
		}},
		{"commands start with default signal dispositions", ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$; echo survived"}}, func(t *testing.T, res ExecResult) {
			if res.ExitCode != 128+15 || len(res.Stdout) != 0 {
				t.Fatalf("%+v", res)
			}
		}},
		{"output cap", ExecRequest{Argv: []string{"sh", "-c", "head -c 1000000 /dev/zero; head -c 10 /dev/zero >&2"}, OutputLimit: 1000}, func(t *testing.T, res ExecResult) {
			if len(res.Stdout) != 1000 || len(res.Stderr) != 10 || !res.Truncated || res.ExitCode != 0 {
				t.Fatalf("stdout %d stderr %d truncated %v exit %d", len(res.Stdout), len(res.Stderr), res.Truncated, res.ExitCode)
			}
		}},
		{"endless output is drained", ExecRequest{Argv: []string{"sh", "-c", "yes | head -c 100000000; echo done >&2"}, OutputLimit: 100}, func(t *testing.T, res ExecResult) {
			if res.ExitCode != 0 || string(res.Stderr) != "done\n" || !res.Truncated {
				t.Fatalf("%+v", res)
			}
		}},
		{"timeout kills the tree", ExecRequest{Argv: []string{"sh", "-c", "sleep 100 & sleep 100 & (setsid sleep 100 &); echo started; wait"}, Timeout: time.Second}, func(t *testing.T, res ExecResult) {
			if !res.TimedOut || string(res.Stdout) != "started\n" || res.Duration > 10*time.Second {
				t.Fatalf("%+v", res)
			}
			// Nothing of the timed-out command may survive, not even what
			// it daemonised with setsid.
			if out := run(t, sb, "ps -eo pid=,comm= 2>/dev/null || ls /proc | grep -E '^[0-9]+$'"); strings.Contains(string(out.Stdout), "sleep") {
				t.Fatalf("left behind: %s", out.Stdout)
			}
		}},
		{"no such command", ExecRequest{Argv: []string{"/no/such/binary"}}, func(t *testing.T, res ExecResult) {
			if res.ExitCode != 127 || len(res.Stderr) == 0 {
				t.Fatalf("%+v", res)
			}
		}},
		{"background child does not hold exec open", ExecRequest{Argv: []string{"sh", "-c", "sleep 30 & echo bye"}, Timeout: 20 * time.Second}, func(t *testing.T, res ExecResult) {
			if res.ExitCode != 0 || res.TimedOut || string(res.Stdout) != "bye\n" || res.Duration > 5*time.Second {
				t.Fatalf("%+v", res)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			res, err := sb.Exec(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("took %v", time.Since(start))
			}
			tt.check(t, res)
		})
	}
}

func TestExecContextCancel(t *testing.T) {
	eachExecPath(t, Options{}, testExecContextCancel)
}

func testExecContextCancel(t *testing.T, sb *Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := sb.Exec(ctx, ExecRequest{Argv: []string{"sleep", "60"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	if res := run(t, sb, "echo alive"); string(res.Stdout) != "alive\n" {
		t.Fatalf("sandbox unusable after a cancelled exec: %+v", res)
	}
}

func TestFiles(t *testing.T) {
	sb := newSandbox(t, Options{})
	ctx := context.Background()
	files := map[string]string{
		"pkg/a.py":          "print('a')\n",
		"pkg/sub/b.py":      "print('b')\n",
		"README.md":         "# hi\n",
		"/repo/deep/x/y.go": "package x\n",
	}
	for p, c := range files {
		if err := sb.WriteFile(ctx, p, []byte(c)); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	got, err := sb.ReadFile(ctx, "/repo/pkg/sub/b.py")
	if err != nil || string(got) != "print('b')\n" {
		t.Fatalf("read: %q %v", got, err)
	}
	binary := []byte{0, 1, 2, 255, '\n', 0}
	if err := sb.WriteFile(ctx, "bin.dat", binary); err != nil {
		t.Fatal(err)
	}
	if got, err := sb.ReadFile(ctx, "bin.dat"); err != nil || !bytes.Equal(got, binary) {
		t.Fatalf("binary round trip: %v %v", got, err)
	}
	if _, err := sb.ReadFile(ctx, "nope.txt"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := sb.ReadFile(ctx, "pkg"); !errors.Is(err, ErrIsDirectory) {
		t.Fatalf("directory: %v", err)
	}
	if err := sb.WriteFile(ctx, "/etc/evil", []byte("x")); err == nil {
		t.Fatal("wrote outside the writable directories")
	}

	lists := []struct {
		dir, glob string
		want      []string
	}{
		{"/repo", "*.py", []string{"pkg/a.py", "pkg/sub/b.py"}},
		{"/repo", "pkg/*.py", []string{"pkg/a.py"}},
		{"/repo", "**/b.py", []string{"pkg/sub/b.py"}},
		{"/repo", "deep/**", []string{"deep/x/y.go"}},
		{"pkg", "", []string{"a.py", "sub/b.py"}},
	}
	for _, l := range lists {
		got, err := sb.ListFiles(ctx, l.dir, l.glob)
		if err != nil || !slices.Equal(got, l.want) {
			t.Errorf("ListFiles(%q, %q) = %v, %v; want %v", l.dir, l.glob, got, err, l.want)
		}
	}
	if _, err := sb.ListFiles(ctx, "/nope", ""); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("list missing dir: %v", err)
	}
}

func TestApplyPatch(t *testing.T) {
	sb := newSandbox(t, Options{})
	ctx := context.Background()
	if err := sb.WriteFile(ctx, "calc.py", []byte("def add(a, b):\n    return a - b\n")); err != nil {
		t.Fatal(err)
	}
	patch := `diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1 @@
+hello
`
	if err := sb.ApplyPatch(ctx, patch); err != nil {
		t.Fatal(err)
	}
	if got, _ := sb.ReadFile(ctx, "calc.py"); string(got) != "def add(a, b):\n    return a + b\n" {
		t.Fatalf("calc.py = %q", got)
	}
	// Applying again fails, atomically, with git's explanation.
	err := sb.ApplyPatch(ctx, patch)
	var pe *PatchError
	if !errors.As(err, &pe) || pe.Output == "" {
		t.Fatalf("reapplied patch: %v", err)
	}
	if got, _ := sb.ReadFile(ctx, "new.txt"); string(got) != "hello\n" {
		t.Fatalf("new.txt = %q", got)
	}
}

// TestInitSurvivesSignals: PID 1 must outlive anything sent to it from
// inside, or an agent could end a failing episode as a "sandbox failure"
// that the reward statistics leave out. It must also reap orphans.
func TestInitSurvivesSignals(t *testing.T) {
	eachExecPath(t, Options{}, func(t *testing.T, sb *Sandbox) {
		for _, sig := range []string{"TERM", "INT", "HUP", "QUIT", "USR1", "USR2", "ABRT", "SEGV", "BUS", "FPE", "ILL", "TRAP", "SYS", "PIPE", "ALRM", "XCPU", "PWR", "STOP", "TSTP", "KILL", "RTMIN", "RTMAX"} {
			res := run(t, sb, "kill -s "+sig+" 1; sleep 0.05; echo sent")
			if string(res.Stdout) != "sent\n" || !sb.Alive() {
				t.Fatalf("after SIG%s to PID 1: alive=%v %+v", sig, sb.Alive(), res)
			}
		}
		// Orphans (here: the children of short-lived shells) are reaped.
		run(t, sb, "for i in 1 2 3 4 5; do sh -c 'sleep 0.1 & exit 0'; done; sleep 0.5")
		res := run(t, sb, "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l")
		if strings.TrimSpace(string(res.Stdout)) != "0" {
			t.Fatalf("zombies left: %s", res.Stdout)
		}
	})
}
