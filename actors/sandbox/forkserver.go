package sandbox

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/frognano/frognano/actors/sandbox/testreport"
)

// PytestServer runs pytest in forks of a Python process that imported
// pytest, its dependencies, its plugins and frognano's plugin once, exactly
// as RunTests' bootstrap does (with the repository off sys.path): each fork
// runs the rest of the bootstrap (pytestMain) on the repository as it is
// then, with the same arguments, the same results stream and the same
// checks. Python's start and pytest's imports (about 0.12 s of a small
// run's 0.2 s) are paid once per server instead of once per run. It has
// two uses (PytestUse):
//
//   - Grading (PytestGrading, harness.NewWorkspace): started before the
//     episode, it serves one request at grading time, so the import is paid
//     while the policy generates; the run kills it and whatever the tests
//     left (RunTests).
//   - Validation (PytestValidation, the Synthesizer): it serves requests
//     until it is closed or its sandbox goes, four per candidate, each fork
//     with a CPU-time limit (Run), and the forks keep bytecode.
//
// Both uses get every protection below (validation's forks leave out two
// things of the bootstrap, for a measured reason: see PytestValidation).
// The server may live through an agent's episode in the same sandbox, so
// it is built to be out of the agent's reach:
//
//   - It is non-dumpable (prctl PR_SET_DUMPABLE 0), and sandboxes lack
//     CAP_SYS_PTRACE: the agent cannot ptrace it, read or write its memory
//     or open its file descriptors through /proc.
//   - It holds a 256-bit key K, read from its stdin at start-up (no file,
//     argument or variable), and serves requests authenticated under K on
//     an abstract Unix socket (nothing in the file system to replace); each
//     request has a fresh nonce, and one seen before is refused. A fork's
//     results stream is authenticated under a key derived from K and the
//     request's nonce, and the exit status the server reports under
//     another: a process the agent left listening cannot answer for it.
//   - It ignores the catchable signals, and before forking it checks that
//     its resource limits, CPU affinity, priority and environment are what
//     they were at start-up (another process of the same user can change
//     some of them): if not it refuses and exits, and the caller runs the
//     tests the usual way. The host sends it SIGCONT and resets its
//     priority before every request.
//   - PrepareForGrading's KillAll spares it (by host pid and start time),
//     and kills everything else; after a grading run the server and
//     whatever the tests left are killed, as RunTests' KillOrphans does,
//     and after a validation run whatever the tests left (KillOrphans).
//   - The fork makes itself what a fresh bootstrap would be: modules the
//     server imported beyond the bootstrap's (the socket, ctypes…) are
//     dropped from sys.modules, import caches are cleared, signal
//     dispositions and dumpability restored, fds 0–2 as the bootstrap has
//     them (stdin and stdout on /dev/null, the stream on its own fd).
//   - It refuses to start when a module of the repository was imported
//     with pytest (the environment is pytest or one of its dependencies,
//     installed editable): its forks would run that module as it was when
//     the server started, not as the run finds it.
//
// Every failure of the server (it did not start, is gone, refused, sent no
// or an unauthentic exit status) is an error wrapping ErrServer: the
// caller then runs RunTests, the full run, so the fast path can delay a
// result but never decide one the full run would not. See
// docs/grading-speed.md.
type PytestServer struct {
	sb      *Sandbox
	spec    TestSpec
	use     PytestUse
	key     []byte
	name    string
	hostPid int
	start   uint64
	closed  bool
}

// PytestUse is what a PytestServer is for.
type PytestUse int

const (
	// PytestGrading serves one request (RunTests), read as a grading run
	// is (testreport.NewPytestStream); the run then kills the server and
	// everything else in the sandbox but its init.
	PytestGrading PytestUse = iota
	// PytestValidation serves requests until closed (Run, with a CPU-time
	// limit per run). The forks write bytecode, above all pytest's
	// rewritten test modules (the tests do not change during validation,
	// and rewriting a large test module costs more than running a test),
	// and PYTHONDONTWRITEBYTECODE is dropped from their environment: the
	// caller drops the bytecode of every file it changes. Whatever a run
	// left running is killed after it. Runs are read as validation reads
	// them (testreport.NewPytestValidationStream); a run the CPU limit
	// killed is timed out, with exit code -1.
	//
	// Two things of RunTests' bootstrap are left out of validation's forks,
	// as validation's own server left them out, for a measured reason (six's
	// whole suite, 200 tests, in one sandbox): the plugin's guard
	// (_frognano_guard, run by the stream's sink before every line), which
	// cost about 0.6 CPU-s per run when this was decided (0.83–1.0 against
	// 0.26–0.32 CPU-s) and, since it resolves what it watches once, costs
	// 0.01–0.12 (docs/grading-speed.md); and the interpreter's teardown (the
	// fork ends with os._exit once pytest.main returns and the stream is
	// sent), 0.04–0.08 CPU-s per run: 0.20–0.22 against 0.26–0.32 for the
	// suite, 0.07 against 0.10–0.14 for one test. The code under test is
	// then a mutation frognano made, not an agent's.
	PytestValidation
)

// pytestServerScript is the server: the bootstrap's imports, the serving
// loop, and in the fork the bootstrap's end (pytestMain). Its arguments:
// the repository, the socket's name, and 0 (serve once) or 1 (serve until
// killed, forks keep bytecode).
var pytestServerScript = `import os, sys, importlib
_frognano_key = bytearray.fromhex(sys.stdin.buffer.read(64).decode("ascii"))
_n = os.open(os.devnull, os.O_RDONLY)
os.dup2(_n, 0)
os.close(_n)
` + pytestImports + `
_frognano_base = set(sys.modules)


def _frognano_serve(key, name, many):
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if isinstance(f, str) and os.path.realpath(f).startswith(_repo + os.sep):
            sys.stderr.write("a module of the repository is imported with pytest: %s\n" % f)
            sys.exit(3)
    import ctypes, hashlib, hmac, json, resource, signal, socket, time
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")
    sigs = [getattr(signal, s) for s in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM",
                                         "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGVTALRM", "SIGPROF", "SIGPIPE", "SIGXCPU",
                                         "SIGXFSZ", "SIGWINCH", "SIGURG", "SIGCHLD") if hasattr(signal, s)]
    saved = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        if s != signal.SIGCHLD:
            signal.signal(s, signal.SIG_IGN)
    rl = [getattr(resource, r) for r in dir(resource) if r.startswith("RLIMIT_")]

    def state():
        return ([resource.getrlimit(r) for r in rl], os.sched_getaffinity(0), os.getpriority(os.PRIO_PROCESS, 0), dict(os.environ))
    before = state()
    sha = hashlib.sha256
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(16)
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        msg = os.read(r, 64)
        os.write(1, msg)
        os._exit(0 if msg else 1)
    os.close(r)
    os.setsid()
    n = os.open(os.devnull, os.O_RDWR)
    os.dup2(n, 1)
    os.dup2(n, 2)
    os.close(n)
    os.write(w, b"ready %d\n" % os.getpid())
    os.close(w)
    seen = set()
    while True:
        conn, _ = srv.accept()
        try:
            conn.settimeout(10)
            line = conn.makefile("rb").readline(1 << 20)
            mac, _, body = line.strip().partition(b" ")
            want = hmac.new(key, b"request " + body, sha).hexdigest().encode()
            if not hmac.compare_digest(mac, want):
                raise ValueError("not authentic")
            req = json.loads(body)
            nonce = bytes.fromhex(req["nonce"])
            if len(nonce) < 16 or nonce in seen:
                raise ValueError("replayed")
            seen.add(nonce)
            cpu = int(req.get("cpu", 0))
            conn.settimeout(None)
        except Exception:
            conn.close()
            continue
        exitkey = hmac.new(key, b"exit " + nonce, sha).digest()

        def answer(text, last):
            try:
                conn.sendall(("E %s %s\n" % (text, hmac.new(exitkey, text.encode(), sha).hexdigest())).encode())
            except OSError:
                pass
            conn.close()
            if last:
                os._exit(0)
        if state() != before:
            answer("refused", True)
        pid = os.fork()
        if pid == 0:
            srv.close()
            os.setsid()
            libc.prctl(4, 1, 0, 0, 0)
            for s, h in saved.items():
                signal.signal(s, h)
            if cpu > 0:
                resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            if many:
                os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
                sys.dont_write_bytecode = False
            runkey = hmac.new(key, b"stream " + nonce, sha).digest()
            for i in range(len(key)):
                key[i] = 0
            fd = os.dup(conn.fileno())
            conn.close()
            os.dup2(2, 1)
            os.chdir(req["cwd"])
            return runkey, fd, req["args"]
        deadline = time.monotonic() + float(req["timeout"])
        timed_out = False
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
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        if cpu > 0 and os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
            timed_out = True  # the CPU limit: an infinite loop, most likely
        code = 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        answer("%d %d" % (code, int(timed_out)), not many)


_frognano_many = sys.argv[3] == "1"
_frognano_key, _frognano_fd, _frognano_args = _frognano_serve(_frognano_key, sys.argv[2], _frognano_many)
_frognano_exit = sys.exit
_frognano_guarded = not _frognano_many
if _frognano_many:
    # Validation: no guard on pytest's reporting machinery (see
    # PytestValidation), and no interpreter teardown.
    _frognano_exit = os._exit
sys.argv[2:] = _frognano_args
for _m in set(sys.modules) - _frognano_base:
    del sys.modules[_m]
importlib.invalidate_caches()
sys.path_importer_cache.clear()
del _frognano_base, _frognano_serve, _frognano_args, _frognano_many, _m
` + pytestMain

// pytestClientScript relays one request to the server and its answer to
// stdout: the results stream, then the server's exit line ("E ...").
const pytestClientScript = `import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\0" + sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
out = sys.stdout.buffer
for line in s.makefile("rb"):
    out.write(line)
    if line.startswith(b"E "):
        break
out.flush()
`

// ErrServer wraps every failure of the fast path that is not the tests':
// the caller runs the tests the usual way.
var ErrServer = errors.New("pytest fork server")

// StartPytestServer starts a fork server of a pytest environment for use.
// For grading, call it on a fresh sandbox before the agent acts: what ran
// in the sandbox before the server read its key could have read it too.
func (s *Sandbox) StartPytestServer(ctx context.Context, spec TestSpec, use PytestUse) (*PytestServer, error) {
	if spec.Framework != testreport.Pytest {
		return nil, fmt.Errorf("%w: only pytest environments have one", ErrServer)
	}
	dir := spec.Dir
	if dir == "" {
		dir = s.opts.RepoDir
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	p := &PytestServer{sb: s, spec: spec, use: use, key: key, name: "frognano-pytest-" + randomHex(16)}
	many := "0"
	if use == PytestValidation {
		many = "1"
	}
	argv := append(pytestCommand(spec), "-I", "-c", pytestServerScript, s.opts.RepoDir, p.name, many)
	res, err := s.Exec(ctx, ExecRequest{
		Argv:    argv,
		Stdin:   strings.NewReader(hex.EncodeToString(key)),
		Timeout: 2 * time.Minute,
		Workdir: dir,
		Env:     spec.Env,
	})
	if err != nil {
		return nil, err
	}
	f := strings.Fields(string(res.Stdout))
	if res.ExitCode != 0 || len(f) != 2 || f[0] != "ready" {
		return nil, fmt.Errorf("%w did not start: exit %d: %s", ErrServer, res.ExitCode, clip(res.Stderr))
	}
	nspid, err := strconv.Atoi(f[1])
	if err != nil {
		return nil, fmt.Errorf("%w: answered %q", ErrServer, res.Stdout)
	}
	if p.hostPid, p.start, err = s.hostProcess(ctx, nspid); err != nil {
		return nil, err
	}
	// A command that kills its orphans (KillOrphans, here and in the
	// sandbox's agent) takes every process init adopted that started at or
	// after its own start less a clock tick (10 ms) for one it daemonised:
	// the server, adopted by init, would be killed by a command started
	// within a tick of it (the first validation run, an agent's first
	// tool call). Let the clock pass the server's start first.
	for uptimeTicks() <= p.start {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	s.mu.Lock()
	if s.spared == nil {
		s.spared = map[int]uint64{}
	}
	s.spared[p.hostPid] = p.start
	s.mu.Unlock()
	return p, nil
}

// pytestCommand is the interpreter that runs pytest (default python3).
func pytestCommand(spec TestSpec) []string {
	if len(spec.Command) == 0 {
		return []string{"python3"}
	}
	return slices.Clone(spec.Command)
}

// hostProcess finds the host pid and start time of the sandbox's process
// whose pid in the sandbox is nspid.
func (s *Sandbox) hostProcess(ctx context.Context, nspid int) (int, uint64, error) {
	pids, err := s.task.Pids(s.rt.ctx(ctx))
	if err != nil {
		return 0, 0, err
	}
	for _, pi := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pi.Pid))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 && f[len(f)-1] == strconv.Itoa(nspid) {
					st, err := procStat(int(pi.Pid))
					if err != nil || len(st) < 20 {
						return 0, 0, fmt.Errorf("%w: its process is gone", ErrServer)
					}
					start, _ := strconv.ParseUint(st[19], 10, 64)
					return int(pi.Pid), start, nil
				}
			}
		}
	}
	return 0, 0, fmt.Errorf("%w: no process %d in sandbox %s", ErrServer, nspid, s.id)
}

// RunTests runs the tests as Sandbox.RunTests does, in a fork of a
// grading server: the same arguments, the same results stream and checks
// (testreport.NewPytestStream). It serves once; afterwards the server and
// whatever the run left are killed. An error wrapping ErrServer means the
// fast path could not say: run Sandbox.RunTests.
func (p *PytestServer) RunTests(ctx context.Context, tests []string) (*testreport.Report, error) {
	return p.Run(ctx, p.spec, tests, 0)
}

// Run runs the tests in a fork as Sandbox.RunTests(ctx, spec, tests)
// would. spec must have the server's interpreter and environment; its
// directory, arguments and timeout are this run's. cpu, when positive,
// limits the fork's CPU time (RLIMIT_CPU): unlike the wall-clock timeout it
// does not stretch when the machine is busy, so it can be tight, and an
// infinite loop costs seconds instead of the whole timeout. An error
// wrapping ErrServer means the server could not say (it is then closed):
// run Sandbox.RunTests.
func (p *PytestServer) Run(ctx context.Context, spec TestSpec, tests []string, cpu time.Duration) (*testreport.Report, error) {
	if p.closed {
		return nil, fmt.Errorf("%w: already used or closed", ErrServer)
	}
	if p.use == PytestGrading {
		p.closed = true
		defer p.Close(ctx)
	}
	r, err := p.run(ctx, spec, tests, cpu)
	if err != nil && errors.Is(err, ErrServer) && !p.closed {
		p.Close(ctx)
	}
	return r, err
}

func (p *PytestServer) run(ctx context.Context, spec TestSpec, tests []string, cpu time.Duration) (*testreport.Report, error) {
	if spec.Framework != testreport.Pytest || !slices.Equal(pytestCommand(spec), pytestCommand(p.spec)) || !slices.Equal(spec.Env, p.spec.Env) {
		return nil, fmt.Errorf("%w: started for another interpreter or environment", ErrServer)
	}
	if err := checkPytestIDs(tests); err != nil {
		return nil, err
	}
	dir := spec.Dir
	if dir == "" {
		dir = p.sb.opts.RepoDir
	}
	// The agent may have stopped it, or lowered its priority.
	st, err := procStat(p.hostPid)
	if err != nil || len(st) < 20 || st[19] != strconv.FormatUint(p.start, 10) {
		return nil, fmt.Errorf("%w: the server is gone", ErrServer)
	}
	_ = syscall.Kill(p.hostPid, syscall.SIGCONT)
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, p.hostPid, 0)
	timeout := deadline(spec.Timeout, DefaultTestsTimeout)
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	body, err := json.Marshal(map[string]any{"nonce": hex.EncodeToString(nonce), "cwd": dir,
		"args": pytestRunArgs(spec, dir, tests), "timeout": timeout.Seconds(), "cpu": int(math.Ceil(cpu.Seconds()))})
	if err != nil {
		return nil, err
	}
	req := hex.EncodeToString(mac(p.key, []byte("request "), body)) + " " + string(body)
	res, err := p.sb.Exec(ctx, ExecRequest{
		Argv:        append(pytestCommand(spec), "-I", "-S", "-c", pytestClientScript, p.name, req),
		Timeout:     timeout + 30*time.Second,
		OutputLimit: pytestStreamLimit,
		Workdir:     "/",
		Env:         spec.Env,
		// A grading server is killed after its run, with everything else.
		KillOrphans: p.use != PytestGrading,
	})
	if err != nil {
		return nil, err
	}
	out := res.Stdout
	i := bytes.LastIndex(out, []byte("\nE "))
	if i < 0 && bytes.HasPrefix(out, []byte("E ")) {
		i = -1
	} else if i < 0 {
		return nil, fmt.Errorf("%w: no exit status (client exit %d, %d bytes: %s)", ErrServer, res.ExitCode, len(out), clip(res.Stderr))
	}
	stream, exit := out[:i+1], strings.TrimSpace(string(out[i+1:]))
	f := strings.Fields(exit)
	if len(f) < 3 {
		return nil, fmt.Errorf("%w: exit line %q", ErrServer, exit)
	}
	text := strings.Join(f[1:len(f)-1], " ")
	got, _ := hex.DecodeString(f[len(f)-1])
	if !hmac.Equal(got, mac(mac(p.key, []byte("exit "), nonce), nil, []byte(text))) {
		return nil, fmt.Errorf("%w: the exit line is not the server's", ErrServer)
	}
	if text == "refused" {
		return nil, fmt.Errorf("%w: refused: its process was changed since it started", ErrServer)
	}
	if len(f) != 4 {
		return nil, fmt.Errorf("%w: exit line %q", ErrServer, exit)
	}
	code, err1 := strconv.Atoi(f[1])
	timedOut, err2 := strconv.ParseBool(f[2])
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: exit line %q", ErrServer, exit)
	}
	key := mac(p.key, []byte("stream "), nonce)
	var r *testreport.Report
	if p.use == PytestGrading {
		r = testreport.NewPytestStream(stream, key, code, timedOut, res.Duration)
	} else {
		if timedOut {
			code = -1
		}
		r = testreport.NewPytestValidationStream(stream, key, code, timedOut, res.Duration)
	}
	if res.Truncated && r.Valid {
		r.Valid, r.Problem = false, fmt.Sprintf("pytest's output passed %d bytes and was cut", pytestStreamLimit)
	}
	return r, nil
}

// Close kills the server (if it still runs) and everything else in the
// sandbox but its init.
func (p *PytestServer) Close(ctx context.Context) {
	p.closed = true
	p.sb.mu.Lock()
	delete(p.sb.spared, p.hostPid)
	p.sb.mu.Unlock()
	if p.sb.Alive() {
		p.sb.KillAll(ctx)
	}
}

func mac(key, prefix, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(prefix)
	h.Write(msg)
	return h.Sum(nil)
}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}
