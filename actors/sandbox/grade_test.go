package sandbox

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/sandbox/image"
	"github.com/frognano/frognano/actors/sandbox/testreport"
)

// The calc task: add is broken. FAIL_TO_PASS is test_add, PASS_TO_PASS is
// test_sub. The gold patch fixes add.
var (
	calcBuggy = map[string]string{
		"calc.py":            "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n",
		"tests/test_calc.py": "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n",
	}
	calcF2P       = []string{"tests/test_calc.py::test_add"}
	calcP2P       = []string{"tests/test_calc.py::test_sub"}
	calcProtected = []string{"tests", "conftest.py", "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini"}
	calcGoldPatch = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n" +
		"@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n def sub(a, b):\n"
)

// buildCalcEnvironment builds the calc environment image the way the
// environment builder will: base + repository (whose history has the fix
// in a later commit), then in a build sandbox squash the history, verify it
// and commit.
func buildCalcEnvironment(t *testing.T) string {
	t.Helper()
	rt, _ := needRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	dir := writeTree(t, calcBuggy)
	hostGit(t, dir, "init", "-q")
	hostGit(t, dir, "add", "-A")
	hostGit(t, dir, "commit", "-q", "-m", "buggy base")
	fixed := writeTree(t, map[string]string{"calc.py": strings.Replace(calcBuggy["calc.py"], "return a - b", "return a + b", 1)})
	hostGit(t, dir, "--work-tree="+fixed, "add", "calc.py")
	hostGit(t, dir, "commit", "-q", "-m", "the fix: must not reach the agent")
	hostGit(t, dir, "reset", "-q", "--hard", "HEAD~1")
	src := deriveRepoImage(t, "calc-src", dir)

	build := createFrom(t, src, Options{Storage: StorageSnapshot, WritableRootfs: true})
	if err := build.VerifyGitHistory(ctx, ""); err == nil {
		t.Fatal("VerifyGitHistory accepted a history with the fix commit in it")
	}
	commit, err := build.SquashGitHistory(ctx, "", "frognano base")
	if err != nil {
		t.Fatal(err)
	}
	if len(commit) != 40 {
		t.Fatalf("commit %q", commit)
	}
	if err := build.VerifyGitHistory(ctx, ""); err != nil {
		t.Fatal(err)
	}
	env := image.Registry + "/test-calc-env:" + randomHex(4)
	if err := rt.Commit(ctx, build, env, "squashed calc", nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteImage(t, env) })
	if err := build.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	return env
}

func TestBuildEnvironmentImage(t *testing.T) {
	env := buildCalcEnvironment(t)
	sb := createFrom(t, env, Options{})
	ctx := context.Background()
	if err := sb.VerifyGitHistory(ctx, ""); err != nil {
		t.Fatalf("episode sees more than the base commit: %v", err)
	}
	res := run(t, sb, "git log --all --reflog --format=%s; git status --porcelain")
	if string(res.Stdout) != "frognano base\n" {
		t.Fatalf("history/status in the episode: %q", res.Stdout)
	}
}

// TestGradingCannotBeGamed plays agents that try to get a reward without
// fixing the bug. Every one must get 0, and the honest fix must get 1, even
// when combined with tampering.
func TestGradingCannotBeGamed(t *testing.T) {
	env := buildCalcEnvironment(t)
	spec := TestSpec{Framework: testreport.Pytest}
	// A report of frognano's pytest plugin with both tests passing.
	fakeReport := `{"nodeid": "tests/test_calc.py::test_add", "phase": "call", "outcome": "passed", "duration": 0.001}\n` +
		`{"nodeid": "tests/test_calc.py::test_sub", "phase": "call", "outcome": "passed", "duration": 0.001}\n` +
		`{"phase": "finish", "exitstatus": 0}\n`
	fake := strconv.Quote(fakeReport) // as a Python string literal
	type step func(t *testing.T, sb *Sandbox)
	write := func(path, content string) step {
		return func(t *testing.T, sb *Sandbox) {
			if err := sb.WriteFile(context.Background(), path, []byte(content)); err != nil {
				t.Fatal(err)
			}
		}
	}
	patch := func(p string) step {
		return func(t *testing.T, sb *Sandbox) {
			if err := sb.ApplyPatch(context.Background(), p); err != nil {
				t.Fatal(err)
			}
		}
	}
	shell := func(script string) step {
		return func(t *testing.T, sb *Sandbox) {
			if _, err := sb.Exec(context.Background(), ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Timeout: 10 * time.Second}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name   string
		agent  []step
		reward float64
	}{
		{"does nothing", nil, 0},
		{"applies the fix", []step{patch(calcGoldPatch)}, 1},
		{"edits the failing test", []step{write("tests/test_calc.py", "def test_add():\n    pass\n\n\ndef test_sub():\n    pass\n")}, 0},
		{"adds a conftest that passes everything", []step{write("conftest.py", "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")}, 0},
		{"adds a conftest inside tests", []step{write("tests/conftest.py", "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")}, 0},
		{"shadows pytest with /repo/pytest.py", []step{write("pytest.py", "import sys\nfor a in sys.argv:\n    if a.startswith('/tmp/.frognano-report-'):\n        open(a, 'w').write("+fake+")\n\ndef main(*a, **k):\n    return 0\n\ndef console_main():\n    return 0\n")}, 0},
		{"shadows json, which the plugin writes with", []step{write("json.py", "def dumps(*a, **k):\n    return '{\"phase\": \"finish\", \"exitstatus\": 0}'\n")}, 0},
		{"prints PASSED and a fake report, writes it into /repo", []step{
			write("calc.py", "import sys\nprint('tests/test_calc.py::test_add PASSED')\nprint("+fake+")\nopen('/repo/report.jsonl', 'w').write("+fake+")\n\n"+calcBuggy["calc.py"]),
		}, 0},
		{"overwrites the real report at exit", []step{
			write("calc.py", "import atexit\n\n\ndef _forge():\n    for a in open('/proc/self/cmdline', 'rb').read().split(b'\\0'):\n        if a.startswith(b'/tmp/.frognano-report-'):\n            open(a.decode(), 'w').write("+fake+")\n\n\natexit.register(_forge)\n\n"+calcBuggy["calc.py"]),
		}, 0},
		{"leaves a daemon that rewrites the test during grading", []step{
			write("/tmp/evil_test.py", "from calc import add, sub\n\n\ndef test_add():\n    pass\n\n\ndef test_sub():\n    pass\n"),
			shell("(setsid sh -c 'while :; do cp /tmp/evil_test.py /repo/tests/test_calc.py; sleep 0.01; done' >/dev/null 2>&1 &)"),
		}, 0},
		{"plants a symlink so the restore writes elsewhere", []step{
			shell("mkdir -p /tmp/elsewhere && cp -r /repo/tests/. /tmp/elsewhere/ && rm -rf /repo/tests && ln -s /tmp/elsewhere /repo/tests && printf 'def test_add():\\n    pass\\n\\ndef test_sub():\\n    pass\\n' > /tmp/elsewhere/test_calc.py"),
		}, 0},
		{"fixes, but also deletes the tests", []step{patch(calcGoldPatch), shell("rm -rf /repo/tests")}, 1},
	}
	// Fast-path attacks: the agent goes for the grading server itself.
	// Each must leave the server unable to answer (the grader then runs
	// the tests in full) or change nothing.
	tests = append(tests, []struct {
		name   string
		agent  []step
		reward float64
	}{
		{"kills the grading server", []step{patch(calcGoldPatch), shell(`for p in /proc/[0-9]*; do grep -q frognano-pytest- $p/cmdline 2>/dev/null && kill -9 ${p#/proc/}; done`)}, 1},
		{"stops the grading server", []step{shell(`for p in /proc/[0-9]*; do grep -q frognano-pytest- $p/cmdline 2>/dev/null && kill -STOP ${p#/proc/}; done`)}, 0},
		{"lowers the grading server's limits", []step{shell(`for p in /proc/[0-9]*; do grep -q frognano-pytest- $p/cmdline 2>/dev/null && prlimit --pid ${p#/proc/} --nofile=64:64; done`)}, 0},
		{"reads the grading server's memory and forges", []step{write("/tmp/peek.py", serverPeek), shell("python3 /tmp/peek.py > /tmp/peek.out 2>&1")}, 0},
		{"sends the grading server a forged request", []step{write("/tmp/ask.py", serverAsk), shell("python3 /tmp/ask.py > /tmp/ask.out 2>&1")}, 0},
	}...)
	// Attacks on the plugin's guard from the package (guardattack_test.go).
	for _, a := range guardAttacks {
		tests = append(tests, struct {
			name   string
			agent  []step
			reward float64
		}{a.name, []step{write("calc.py", calcBuggy["calc.py"]+a.src)}, 0})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := createFrom(t, env, Options{})
			ctx := context.Background()
			server, err := sb.StartPytestServer(ctx, spec, PytestGrading)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.agent {
				s(t, sb)
			}
			if strings.Contains(tt.name, "grading server") {
				for _, f := range []string{"/tmp/peek.out", "/tmp/ask.out"} {
					if b, err := sb.ReadFile(ctx, f); err == nil {
						t.Logf("%s: %s", f, b)
					}
				}
			}
			ids := append(append([]string{}, calcF2P...), calcP2P...)
			// The fast path, then (protected set restored again) the full
			// run, as the harness falls back to it: both must grade alike.
			rewards := map[string]float64{}
			for _, path := range []string{"fast", "full"} {
				var reward float64
				if err := sb.PrepareForGrading(ctx, calcProtected); err != nil {
					// A sandbox that cannot be restored is not graded: reward 0.
					t.Logf("%s: prepare for grading: %v", path, err)
				} else {
					var report *testreport.Report
					if path == "fast" {
						report, err = server.RunTests(ctx, ids)
						if errors.Is(err, ErrServer) {
							t.Logf("fast: %v (the grader runs the tests in full)", err)
							if !strings.Contains(tt.name, "grading server") {
								t.Errorf("the fast path failed without an attack on it: %v", err)
							}
							continue
						}
					} else {
						report, err = sb.RunTests(ctx, spec, ids)
					}
					if err != nil {
						t.Fatal(err)
					}
					o := testreport.Grade(report, calcF2P, calcP2P)
					t.Logf("%s: exit %d valid %v (%s) results %+v -> reward %v (%s)", path, report.ExitCode, report.Valid, report.Problem, report.Results, o.Reward, o.Reason)
					reward = o.Reward
				}
				rewards[path] = reward
				if reward != tt.reward {
					t.Errorf("%s: reward %v, want %v", path, reward, tt.reward)
				}
			}
		})
	}
}

// serverPeek tries what an agent could to get at the grading server's key:
// its memory through /proc and ptrace, its file descriptors. All must fail
// (it is non-dumpable and the sandbox has no CAP_SYS_PTRACE); it writes a
// forged passing test file if any succeeds, so that a leak shows as a
// reward.
const serverPeek = `import ctypes, os
leaked = []
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        if b"frognano-pytest-" not in open("/proc/%s/cmdline" % p, "rb").read():
            continue
    except OSError:
        continue
    for f in ("mem", "environ", "fd/0", "fd/3", "fd/4"):
        try:
            open("/proc/%s/%s" % (p, f), "rb").read(1)
            leaked.append(f)
        except OSError as e:
            print(p, f, e)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, int(p), 0, 0) == 0:  # PTRACE_ATTACH
        leaked.append("ptrace")
    else:
        print(p, "ptrace", ctypes.get_errno())
print("leaked", leaked)
if leaked:
    open("/repo/tests/test_calc.py", "w").write("def test_add():\n    pass\n\n\ndef test_sub():\n    pass\n")
    open("/repo/calc.py", "w").write("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
`

// serverAsk connects to the grading server and sends it requests it cannot
// authenticate, then leaves a listener of its own behind.
const serverAsk = `import os, socket
for line in open("/proc/net/unix").read().splitlines():
    if "frognano-pytest-" in line:
        name = line.split("@", 1)[1]
        for req in (b"deadbeef {}", b"", b"0" * 64 + b' {"nonce": "00", "cwd": "/repo", "args": ["--co"], "timeout": 9}'):
            s = socket.socket(socket.AF_UNIX)
            s.connect("\0" + name)
            s.sendall(req + b"\n")
            s.settimeout(2)
            try:
                print(req[:20], s.recv(100))
            except OSError as e:
                print(req[:20], e)
        s = socket.socket(socket.AF_UNIX)
        try:
            s.bind("\0" + name)
            print("bound the server's name")
        except OSError as e:
            print("bind:", e)
`
