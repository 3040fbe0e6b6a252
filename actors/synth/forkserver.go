package synth

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
)

// pytestServer runs pytest in forks of a Python process that imported
// pytest once, in the sandbox. Importing pytest and its plugins is most of
// the cost of a small run (about 0.12 s of 0.2 s), and validation runs
// pytest four times per candidate; a fork starts in milliseconds. The forks
// also keep bytecode (pytest's rewritten test modules above all) and print
// native tracebacks (the report reads pytest's failure messages, which stay
// the same): together these cut six's validation CPU about threefold
// (`frognano synth bench --env six-1.16.0`: 55 to 17 CPU-s for 60 candidates).
//
// It serves validation only, where the code under test is the
// environment's own repository with a mutation frognano made. Episodes and
// grading use sandbox.RunTests, whose runner the agent cannot replace.
// Results are the same: the child sets up sys.path, argv and the
// environment as RunTests' bootstrap does and runs pytest.main with the
// same options and frognano's report plugin (testreport.PytestPlugin), so
// tests have the same node ids; the report is read from the plugin's file,
// never from pytest's output. A repository module that pytest itself imports (the environment
// is pytest, or one of its dependencies) would be stale in the forks, so
// the server refuses to start then and RunTests is used.
type pytestServer struct {
	sb     Sandbox
	python string
	repo   string
	env    []string
	failed bool // could not start: use RunTests
	up     bool
}

const forkDir = "/tmp/.frognano-pytest"

var forkServer = `import importlib, json, os, resource, signal, socket, sys, time
import pytest
` + testreport.PytestPlugin + `
try:
    from _pytest.config import default_plugins as _plugins
except ImportError:
    _plugins = ()
for _p in _plugins:
    try:
        importlib.import_module("_pytest." + _p)
    except Exception:
        pass
sock_path, repo = sys.argv[1], sys.argv[2]
for _m in list(sys.modules.values()):
    _f = getattr(_m, "__file__", None) or ""
    if _f.startswith(repo + "/"):
        print("a module of the repository is imported by pytest itself:", _f, file=sys.stderr)
        sys.exit(3)
srv = socket.socket(socket.AF_UNIX)
srv.bind(sock_path)
srv.listen(4)
while True:
    conn, _ = srv.accept()
    try:
        req = json.loads(conn.makefile("rb").readline())
    except Exception:
        conn.close()
        continue
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            srv.close()
            conn.close()
            os.setsid()
            cpu = req.get("cpu_seconds", 0)
            if cpu > 0:
                resource.setrlimit(resource.RLIMIT_CPU, (int(cpu), int(cpu) + 1))
            fd = os.open(os.devnull, os.O_RDWR)
            for i in (0, 1, 2):
                os.dup2(fd, i)
            os.chdir(req["cwd"])
            os.environ.update(req["env"])
            # Cache bytecode, above all pytest's rewritten test modules: the
            # tests never change during validation, and rewriting a large
            # test module costs more than running a test. The worker drops
            # the bytecode of every file it patches (dropBytecode).
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            sys.dont_write_bytecode = False
            sys.path[:0] = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            os.mkdir(req["report_dir"], 0o700)
            report = FrognanoReport(os.path.join(req["report_dir"], req["report_file"]))
            sys.argv = ["pytest"] + req["args"]
            code = int(pytest.main(req["args"], plugins=[report]))
        finally:
            os._exit(code)
    deadline = time.monotonic() + req["timeout"]
    timed_out, status = False, 0
    while True:
        wpid, status = os.waitpid(pid, os.WNOHANG)
        if wpid:
            break
        if time.monotonic() > deadline:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.003)
    try:
        os.killpg(pid, signal.SIGKILL)  # whatever the tests left running
    except OSError:
        pass
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        timed_out = True  # the CPU limit: an infinite loop, most likely
    code = -1 if timed_out else os.waitstatus_to_exitcode(status)
    if code < 0 and not timed_out:
        code = 128 - code
    try:
        conn.sendall((json.dumps({"code": code, "timed_out": timed_out}) + "\n").encode())
    finally:
        conn.close()
`

// forkClient sends one request and prints the answer line followed by the
// plugin's report, then removes the report's directory: one command per run.
const forkClient = `import shutil, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
sys.stdout.buffer.write(s.makefile("rb").readline())
try:
    with open(sys.argv[3] + "/" + sys.argv[4], "rb") as f:
        sys.stdout.buffer.write(f.read())
except OSError:
    pass
shutil.rmtree(sys.argv[3], ignore_errors=True)
`

// start launches the server in the background and waits for its socket.
func (p *pytestServer) start(ctx context.Context) error {
	for name, body := range map[string]string{"server.py": forkServer, "client.py": forkClient} {
		if err := p.sb.WriteFile(ctx, forkDir+"/"+name, []byte(body)); err != nil {
			return err
		}
	}
	script := `cd / && rm -f ` + forkDir + `/sock && (nohup "$1" -I ` + forkDir + `/server.py ` + forkDir + `/sock "$2" >` + forkDir + `/log 2>&1 &)
for i in $(seq 200); do [ -S ` + forkDir + `/sock ] && exit 0; sleep 0.05; done
cat ` + forkDir + `/log >&2; exit 1`
	res, err := p.sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script, "sh", p.python, p.repo}, Workdir: "/", Timeout: 30 * time.Second, Env: p.env})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("pytest fork server did not start: %s", strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

// run is RunTests for pytest through the server. ok is false when the
// server is not available and the caller must use RunTests.
//
// cpu, when positive, is a CPU-time limit for the run (RLIMIT_CPU in the
// forked child): unlike the wall-clock timeout it does not stretch when
// the machine is busy, so it can be tight, and an infinite loop planted by
// a mutation costs seconds instead of the whole timeout.
func (p *pytestServer) run(ctx context.Context, spec sandbox.TestSpec, tests []string, cpu time.Duration) (r *testreport.Report, ok bool, err error) {
	if p.failed {
		return nil, false, nil
	}
	if !p.up {
		if err := p.start(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, false, ctx.Err()
			}
			p.failed = true
			return nil, false, nil
		}
		p.up = true
	}
	dir := spec.Dir
	if dir == "" {
		dir = p.repo
	}
	var rnd [12]byte
	rand.Read(rnd[:])
	report := forkDir + "/r-" + hex.EncodeToString(rnd[:])
	// Native tracebacks: the report's messages are the same, and a
	// mutation that recurses without end costs milliseconds per failing
	// test instead of a tenth of a second or more for pytest's own.
	args := append(sandbox.PytestArgs(dir), "--tb=native")
	args = append(args, spec.Args...)
	if len(tests) > 0 {
		args = append(append(args, "--"), tests...)
	}
	envm := map[string]string{}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		envm[k] = v
	}
	req, err := json.Marshal(map[string]any{"cwd": dir, "env": envm, "args": args, "report_dir": report, "report_file": sandbox.PytestReportFile, "timeout": spec.Timeout.Seconds(), "cpu_seconds": math.Ceil(cpu.Seconds())})
	if err != nil {
		return nil, false, err
	}
	start := time.Now()
	res, err := p.sb.Exec(ctx, sandbox.ExecRequest{
		Argv:    []string{p.python, "-I", "-S", forkDir + "/client.py", forkDir + "/sock", string(req), report, sandbox.PytestReportFile},
		Workdir: "/", Timeout: spec.Timeout + 30*time.Second, OutputLimit: 64 << 20,
	})
	if err != nil {
		return nil, true, err
	}
	line, events, _ := bytes.Cut(res.Stdout, []byte("\n"))
	var ans struct {
		Code     int  `json:"code"`
		TimedOut bool `json:"timed_out"`
	}
	if res.ExitCode != 0 || json.Unmarshal(line, &ans) != nil {
		// The server died (OOM, a test that killed its process group's
		// parent): restart it next time, and run this one the usual way.
		p.up = false
		return nil, false, nil
	}
	if len(bytes.TrimSpace(events)) == 0 {
		events = nil
	}
	return testreport.NewPytestReport(events, ans.Code, ans.TimedOut, time.Since(start)), true, nil
}
