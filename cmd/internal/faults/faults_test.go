//go:build linux

// Package faults is the fault-injection suite (DESIGN.md's fault-injection
// tests), in the style of etcd's robustness tests: real binaries built with
// -tags failpoints, three nodes in separate network namespaces on one
// machine, a real training run (SmolLM2-135M on a small local Python
// project), and one fault per scenario injected at a seeded random point.
// After each scenario the checkers open the run's store and the private
// containerd and check what must hold whatever happened.
//
// TestFailpointSmoke runs everywhere (it needs no model, no containerd, no
// root). The scenarios need root (ip netns), containerd, the model, and
// FROGNANO_FAULTS=1; FROGNANO_FAULTS_SCENARIOS=a,b picks some,
// FROGNANO_FAULTS_SEED fixes the seed (printed otherwise),
// FROGNANO_FAULTS_RUNS plays each scenario that many times,
// FROGNANO_FAULTS_RESULTS names a file each run appends its row to and
// FROGNANO_FAULTS_LOGS a directory for every attempt's whole output.
package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/frontier"
	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/persistence"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "faults-bin-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-tags", "failpoints", "-ldflags", "-extldflags=-Wl,-z,lazy", "-o", dir+"/",
		"github.com/frognano/frognano/cmd/frognano", "github.com/frognano/frognano/cmd/frognano-node")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries with -tags failpoints:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestFailpointSmoke: the binaries built with -tags failpoints obey
// FROGNANO_FAILPOINTS. A `frognano run` (verified digest work, no training)
// armed to SIGKILL itself at its second run-record write dies by SIGKILL
// after saying so, and the store it leaves opens, passes the consistency
// check and holds the first write (the run, still "running"); a malformed
// value fails the run with one clear error instead of running without the
// fault; unarmed, the same binary finishes the run.
func TestFailpointSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes; skipped with -short")
	}
	data := t.TempDir()
	out, err := frognano(t, "store/run-put=kill@2", "run", "--data-dir", data, "--log-level", "warn", "--jobs", "4", "--rounds", "100", "--env=", "--run", "smoke")
	var ee *exec.ExitError
	if !asExit(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("want death by SIGKILL, got %v:\n%s", err, out)
	}
	if !strings.Contains(out, "failpoint store/run-put: kill (hit 2)") {
		t.Fatalf("the process did not say which failpoint fired:\n%s", out)
	}
	db, err := persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CheckConsistency(context.Background()); err != nil {
		t.Errorf("consistency after the kill: %v", err)
	}
	run, err := db.Runs().Get(context.Background(), "smoke")
	db.Close()
	if err != nil || run.Status != "running" {
		t.Fatalf("the acknowledged first write: %v, %v", run, err)
	}

	out, err = frognano(t, "store/run-put=explode", "run", "--data-dir", t.TempDir(), "--log-level", "warn", "--jobs", "4", "--rounds", "100", "--env=")
	if err == nil || !strings.Contains(out, "unknown action") {
		t.Fatalf("a malformed FROGNANO_FAILPOINTS: %v\n%s", err, out)
	}
	out, err = frognano(t, "", "run", "--data-dir", t.TempDir(), "--log-level", "warn", "--jobs", "4", "--rounds", "100", "--env=")
	if err != nil || !strings.Contains(out, "4 jobs verified") {
		t.Fatalf("unarmed: %v\n%s", err, out)
	}
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// frognano runs the CLI with failpoints fp and returns its combined output.
func frognano(t *testing.T, fp string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "frognano"), args...)
	cmd.Env = append(os.Environ(), "FROGNANO_FAILPOINTS="+fp)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// --- the cluster -----------------------------------------------------------

const (
	nsPrefix  = "fnf-"
	bridge    = "fnf-br"
	subnet    = "10.231.7."
	namespace = "frognano-faults" // the containerd namespace of every node
	steps     = 3
)

// netNode is one of the three nodes: a network namespace, its veth and address.
type netNode struct {
	name string // a, b, c
	ns   string
	veth string // the root side
	ip   string
}

func (n netNode) http() string   { return n.ip + ":7070" }
func (n netNode) remote() string { return n.ip + ":7071" }

// proc is a running process with its output captured.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	lines  chan string
	exited chan struct{}
	err    error
}

func (p *proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func start(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{lines: make(chan string, 4096), exited: make(chan struct{})}
	p.cmd = exec.Command(name, args...)
	p.cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(pr)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			p.mu.Lock()
			p.out.WriteString(s.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- s.Text():
			default:
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		pw.Close()
		close(p.exited)
	}()
	return p
}

func (p *proc) kill() {
	if p == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *proc) stop(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("did not stop within %v of SIGTERM", timeout)
	}
}

// waitLine waits for a line with prefix pre on p's output (or p's exit).
func (p *proc) waitLine(pre string, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, pre) {
				return true
			}
		case <-p.exited:
			return false
		case <-deadline:
			return false
		}
	}
}

// suite is the machine-wide set-up every scenario shares: the binaries, a
// private containerd (so that it can be restarted and its leftovers counted
// without touching anyone else's), three network namespaces on a bridge,
// mutual-TLS certificates and an API token.
type suite struct {
	t       *testing.T
	dir     string
	ctrdDir string
	sock    string
	ctrd    *proc
	nodes   []netNode
	certs   string
	token   string
	proj    string
	daemons map[string]*proc // b and c: frognano-node sandbox nodes
	rng     *rand.Rand
	seed    uint64
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func shQuiet(args ...string) { _ = exec.Command(args[0], args[1:]...).Run() }

func (s *suite) env() []string {
	return []string{
		"FROGNANO_CONTAINERD_ADDRESS=" + s.sock,
		"FROGNANO_CONTAINERD_NAMESPACE=" + namespace,
		"FROGNANO_NODE_API_TOKEN=" + s.token,
		"FROGNANO_REMOTE_TLS_CA=" + filepath.Join(s.certs, "node", "ca.crt"),
		"FROGNANO_REMOTE_TLS_CERT=" + filepath.Join(s.certs, "node", "node.crt"),
		"FROGNANO_REMOTE_TLS_KEY=" + filepath.Join(s.certs, "node", "node.key"),
		"FROGNANO_CLUSTER_HEARTBEAT=300ms",
		"FROGNANO_CLUSTER_FAILURE_TIMEOUT=3s",
	}
}

func newSuite(t *testing.T) *suite {
	if os.Getenv("FROGNANO_FAULTS") != "1" {
		t.Skip("the fault-injection scenarios run only with FROGNANO_FAULTS=1 (root, containerd, FROGNANO_TEST_GGUF; see docs/faults.md)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for ip netns")
	}
	if os.Getenv("FROGNANO_TEST_GGUF") == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset")
	}
	for _, tool := range []string{"ip", "tc", "containerd", "ctr", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FROGNANO_FAULTS_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (FROGNANO_FAULTS_SEED=%d reproduces the fault points)", seed, seed)
	dir, err := os.MkdirTemp("", "faults-")
	if err != nil {
		t.Fatal(err)
	}
	// The sandboxes' root is a remapped uid: containerd's state under
	// the suite's directory must be reachable for it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &suite{t: t, dir: dir, token: fmt.Sprintf("faults-token-%016x", seed), daemons: map[string]*proc{},
		rng: rand.New(rand.NewPCG(seed, 18)), seed: seed}
	t.Cleanup(s.teardown)
	s.startContainerd()
	s.network()
	s.makeCerts()
	s.proj = writeArith(t, dir, "faultarith")
	for _, n := range s.nodes[1:] {
		s.startDaemon(n)
	}
	for _, n := range s.nodes[1:] {
		s.register(n)
	}
	return s
}

func (s *suite) teardown() {
	for _, d := range s.daemons {
		d.kill()
	}
	for _, n := range s.nodes {
		shQuiet("ip", "netns", "del", n.ns)
		shQuiet("ip", "link", "del", n.veth)
	}
	shQuiet("ip", "link", "del", bridge)
	if s.ctrd != nil {
		// Whatever the scenarios left (the checkers have counted it) goes
		// before containerd, so that no shim outlives the suite.
		s.purge()
		s.ctrd.kill()
	}
	if b, err := os.ReadFile("/proc/mounts"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 1 && (strings.HasPrefix(f[1], s.dir+"/") || strings.HasPrefix(f[1], "/run/frognano/"+namespace+"/")) {
				shQuiet("umount", "-l", f[1])
			}
		}
	}
	if os.Getenv("FROGNANO_FAULTS_KEEP") == "" {
		os.RemoveAll(s.dir)
	}
}

// startContainerd starts (or restarts) the suite's own containerd daemon.
func (s *suite) startContainerd() {
	t := s.t
	if s.ctrdDir == "" {
		s.ctrdDir = filepath.Join(s.dir, "containerd")
		os.MkdirAll(s.ctrdDir, 0o755)
		s.sock = filepath.Join(s.ctrdDir, "containerd.sock")
		cfg := fmt.Sprintf("version = 2\nroot = %q\nstate = %q\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n",
			filepath.Join(s.ctrdDir, "root"), filepath.Join(s.ctrdDir, "state"), s.sock, s.sock+".ttrpc")
		if err := os.WriteFile(filepath.Join(s.ctrdDir, "config.toml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s.ctrd = start(t, nil, "containerd", "--config", filepath.Join(s.ctrdDir, "config.toml"))
	for i := 0; i < 300; i++ {
		if exec.Command("ctr", "-a", s.sock, "version").Run() == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("containerd did not come up:\n%s", s.ctrd.Output())
}

// network makes the bridge and a namespace per node, each with a veth pair.
func (s *suite) network() {
	t := s.t
	shQuiet("ip", "link", "del", bridge) // a previous, killed suite
	sh(t, "ip", "link", "add", bridge, "type", "bridge")
	sh(t, "ip", "addr", "add", subnet+"1/24", "dev", bridge)
	sh(t, "ip", "link", "set", bridge, "up")
	for i, name := range []string{"a", "b", "c"} {
		n := netNode{name: name, ns: nsPrefix + name, veth: nsPrefix + "v" + name, ip: subnet + strconv.Itoa(11+i)}
		shQuiet("ip", "netns", "del", n.ns)
		shQuiet("ip", "link", "del", n.veth)
		sh(t, "ip", "netns", "add", n.ns)
		sh(t, "ip", "link", "add", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
		sh(t, "ip", "link", "set", n.veth, "master", bridge)
		sh(t, "ip", "link", "set", n.veth, "up")
		sh(t, "ip", "netns", "exec", n.ns, "ip", "addr", "add", n.ip+"/24", "dev", "eth0")
		sh(t, "ip", "netns", "exec", n.ns, "ip", "link", "set", "eth0", "up")
		sh(t, "ip", "netns", "exec", n.ns, "ip", "link", "set", "lo", "up")
		s.nodes = append(s.nodes, n)
	}
}

func (s *suite) makeCerts() {
	t := s.t
	s.certs = filepath.Join(s.dir, "certs")
	fn := filepath.Join(binDir, "frognano")
	sh(t, fn, "cert", "ca", "--out", filepath.Join(s.certs, "ca"))
	sh(t, fn, "cert", "node", "--ca", filepath.Join(s.certs, "ca"), "--name", "faults", "--host",
		"127.0.0.1,"+s.nodes[0].ip+","+s.nodes[1].ip+","+s.nodes[2].ip, "--out", filepath.Join(s.certs, "node"))
}

// startDaemon starts a sandbox node (frognano-node) in n's namespace.
func (s *suite) startDaemon(n netNode) { s.startDaemonArmed(n, "") }

func (s *suite) startDaemonArmed(n netNode, failpoints string) {
	args := []string{"--net=/run/netns/" + n.ns, "--", filepath.Join(binDir, "frognano-node"), "--data-dir", filepath.Join(s.dir, "node-"+n.name),
		"--node-id", "node-" + n.name, "--http-addr", n.http(), "--remote-addr", n.remote(), "--log-level", "info"}
	if n.name != "b" {
		args = append(args, "--seeds", s.nodes[1].http())
	}
	s.daemons[n.name] = start(s.t, append(s.env(), "FROGNANO_FAILPOINTS="+failpoints), "nsenter", args...)
	s.waitReady(n)
}

func (s *suite) waitReady(n netNode) {
	for i := 0; i < 300; i++ {
		if resp, err := http.Get("http://" + n.http() + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-s.daemons[n.name].exited:
			s.t.Fatalf("node %s exited: %v\n%s", n.name, s.daemons[n.name].err, s.daemons[n.name].Output())
		default:
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.t.Fatalf("node %s not ready:\n%s", n.name, s.daemons[n.name].Output())
}

// cliIn runs the CLI in n's namespace against n's node.
func (s *suite) cliIn(n netNode, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + n.ns, "--", filepath.Join(binDir, "frognano"), "--node", n.http(), "--log-level", "warn"}, args...)...)
	cmd.Env = append(os.Environ(), s.env()...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// register registers the project on a sandbox node (its environments are
// its own store's; the image is shared through the one containerd).
func (s *suite) register(n netNode) {
	out, err := s.cliIn(n, "env", "add", s.proj, "--min-tests", "1")
	if err != nil && !strings.Contains(out, "already exists") {
		s.t.Fatalf("env add on node %s: %v\n%s", n.name, err, out)
	}
}

// writeArith is cmd/frognano's small Python project (run_test.go).
func writeArith(t *testing.T, dir, name string) string {
	proj := filepath.Join(dir, name)
	for file, body := range map[string]string{
		"setup.py": "from setuptools import setup\nsetup(name='arith', version='0.1', packages=['arith'])\n",
		"arith/__init__.py": "def add(a, b):\n    return a + b\n\n\ndef subtract(a, b):\n    return a - b\n\n\n" +
			"def maximum(a, b):\n    if a > b:\n        return a\n    return b\n",
		"tests/test_arith.py": "from arith import add, subtract, maximum\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n" +
			"def test_subtract():\n    assert subtract(5, 3) == 2\n\n\ndef test_maximum():\n    assert maximum(2, 7) == 7\n    assert maximum(9, 1) == 9\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(proj, file)), 0o755)
		if err := os.WriteFile(filepath.Join(proj, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proj
}

// --- a scenario --------------------------------------------------------------

// scenario is one fault in one real training run.
type scenario struct {
	name string
	// failpoints arms the run process (FROGNANO_FAILPOINTS).
	failpoints string
	// nodeFailpoints arms sandbox nodes b and c (restarted armed for the
	// scenario, unarmed after it).
	nodeFailpoints string
	// extra flags for the run.
	flags []string
	// smallDisk puts the run's data directory on a small filesystem.
	smallDisk bool
	// inject runs the fault while the run plays, from a seeded random
	// point, and returns what it did; nil: the failpoints are the fault.
	inject func(s *suite, r *runState) string
}

// runState is the run being faulted.
type runState struct {
	id    string
	data  string
	p     *proc
	outs  []string // output of every attempt
	fault []string // what was injected, for the table
}

func (s *suite) runArgs(r *runState, sc scenario, first bool) []string {
	a := s.nodes[0]
	args := []string{"--net=/run/netns/" + a.ns, "--", filepath.Join(binDir, "frognano"), "run", "--data-dir", r.data, "--log-level", "warn",
		"--node-id", "node-a", "--http-addr", a.http(), "--remote-addr", a.remote(), "--seeds", s.nodes[1].http(),
		"--jobs", "2", "--rounds", "10", "--env", s.proj, "--run", r.id}
	if first {
		args = append(args, "--tasks", "2", "--steps", strconv.Itoa(steps), "--tasks-per-step", "1", "--group", "2",
			"--max-turn-tokens", "16", "--parallel", "2", "--seed", strconv.FormatUint(s.seed%1000, 10))
		args = append(args, sc.flags...)
	}
	return args
}

// randomPoint waits for a seeded random moment of the run: the start of
// step k's rollouts (k drawn from 1..steps) plus a random delay up to
// maxDelay. It returns a description, or "" if the run ended first.
func (s *suite) randomPoint(r *runState, maxDelay time.Duration) string {
	k := 1 + s.rng.IntN(steps)
	d := time.Duration(s.rng.Int64N(int64(maxDelay)))
	if !r.p.waitLine(fmt.Sprintf("step %d/%d: rollouts:", k, steps), 30*time.Minute) {
		return ""
	}
	time.Sleep(d)
	return fmt.Sprintf("step %d's rollouts + %.1fs", k, d.Seconds())
}

func (s *suite) play(t *testing.T, sc scenario, i int) {
	r := &runState{id: fmt.Sprintf("faults-%s-%d", sc.name, i), data: filepath.Join(s.dir, fmt.Sprintf("run-%s-%d", sc.name, i))}
	if sc.smallDisk {
		r.data = s.smallDisk(t)
	}
	env := append(s.env(), "FROGNANO_FAILPOINTS="+sc.failpoints)
	if sc.failpoints != "" {
		r.fault = append(r.fault, "failpoints "+sc.failpoints+" in the run process")
	}
	if sc.nodeFailpoints != "" {
		r.fault = append(r.fault, "failpoints "+sc.nodeFailpoints+" in sandbox nodes b and c")
		s.rearm(sc.nodeFailpoints)
		defer s.rearm("")
	}
	start0 := time.Now()
	r.p = start(t, env, "nsenter", s.runArgs(r, sc, true)...)
	injected := make(chan string, 1)
	if sc.inject != nil {
		go func() { injected <- sc.inject(s, r) }()
	} else {
		injected <- ""
	}
	<-r.p.exited
	select {
	case what := <-injected:
		if what != "" {
			r.fault = append(r.fault, what)
		}
	case <-time.After(3 * time.Minute):
		t.Errorf("the fault injector did not finish")
	}
	r.outs = append(r.outs, r.p.Output())
	// A run that died is resumed, the way an operator would: the same
	// command with --run (at most twice; faults are not re-armed).
	for attempt := 0; attempt < 2 && r.p.err != nil; attempt++ {
		t.Logf("attempt %d ended with %v; resuming", attempt+1, r.p.err)
		r.p = start(t, s.env(), "nsenter", s.runArgs(r, sc, !runRecorded(r))...)
		<-r.p.exited
		r.outs = append(r.outs, r.p.Output())
	}
	for i, o := range r.outs {
		t.Logf("attempt %d output:\n%s", i+1, tail(o, 60))
		if dir := os.Getenv("FROGNANO_FAULTS_LOGS"); dir != "" {
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-attempt-%d.log", r.id, i+1)), []byte(o), 0o644)
		}
		// A crash of the process is part of what the fault did.
		for _, l := range strings.Split(o, "\n") {
			if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") || strings.HasPrefix(l, "frognano: ") {
				if len(l) > 300 {
					l = l[:300] + "…"
				}
				r.fault = append(r.fault, fmt.Sprintf("attempt %d: %s", i+1, l))
				break
			}
		}
	}
	problems := s.check(t, r)
	outcome := "pass"
	if len(problems) > 0 {
		outcome = "FAIL: " + strings.Join(problems, "; ")
		for _, p := range problems {
			t.Error(p)
		}
	}
	cell := func(x string) string { return strings.ReplaceAll(x, "|", "\\|") }
	row := fmt.Sprintf("| %s | seed %d | %s | %d attempt(s), %.0fs | %s |", sc.name, s.seed, cell(strings.Join(r.fault, "; ")), len(r.outs), time.Since(start0).Seconds(), cell(outcome))
	t.Log(row)
	if f := os.Getenv("FROGNANO_FAULTS_RESULTS"); f != "" {
		if fh, err := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintln(fh, row)
			fh.Close()
		}
	}
}

// rearm restarts sandbox nodes b and c with failpoints armed (or none).
func (s *suite) rearm(failpoints string) {
	for _, n := range s.nodes[1:] {
		if err := s.daemons[n.name].stop(30 * time.Second); err != nil {
			s.t.Logf("node %s: %v", n.name, err)
		}
		s.startDaemonArmed(n, failpoints)
	}
	time.Sleep(3 * time.Second) // membership settles
}

// runRecorded reports whether the run's store holds its record: a run
// killed before it was recorded is started again with all its flags.
func runRecorded(r *runState) bool {
	db, err := persistence.Open(filepath.Join(r.data, "db"))
	if err != nil {
		return true // the resume will say what is wrong
	}
	defer db.Close()
	_, err = db.Runs().Get(context.Background(), r.id)
	return err == nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// smallDisk mounts a 3 GiB ext4 loop filesystem (sparse) for a data dir.
func (s *suite) smallDisk(t *testing.T) string {
	img := filepath.Join(s.dir, "small.img")
	mnt := filepath.Join(s.dir, "small")
	os.MkdirAll(mnt, 0o755)
	sh(t, "truncate", "-s", "3G", img)
	sh(t, "mkfs.ext4", "-q", "-F", img)
	sh(t, "mount", "-o", "loop", img, mnt)
	return filepath.Join(mnt, "data")
}

// --- the checkers --------------------------------------------------------------

// check opens the run's store after the run and the containerd namespace
// once the cluster is idle, and returns every invariant that does not hold.
func (s *suite) check(t *testing.T, r *runState) []string {
	var problems []string
	bad := func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) }
	ctx := context.Background()
	last := r.outs[len(r.outs)-1]
	if r.p.err != nil {
		bad("the last attempt failed: %v", r.p.err)
	}

	db, err := persistence.Open(filepath.Join(r.data, "db"))
	if err != nil {
		bad("the run's store does not open: %v", err)
		return append(problems, s.leftovers()...)
	}
	defer db.Close()
	if err := db.CheckConsistency(ctx); err != nil {
		bad("store consistency: %v", err)
	}
	run, err := db.Runs().Get(ctx, r.id)
	if err != nil {
		bad("run record: %v", err)
		return append(problems, s.leftovers()...)
	}
	m := run.GetMetrics()
	// The run finishes its steps.
	if run.Status != "done" || run.Step != steps {
		bad("the run did not finish: status %q at step %d of %d", run.Status, run.Step, steps)
	}
	if !strings.Contains(last, "run "+r.id+" done") {
		bad("the last attempt did not say the run is done")
	}
	// Every acknowledged step is intact. The trainer records step k
	// before it reports step k+1's learner, and ends with its summary: a
	// step so acknowledged by one attempt is in the record the next attempt
	// resumes from and in the final one.
	acked := 0
	for i, o := range r.outs {
		if i > 0 {
			pre := "resuming run " + r.id + " ("
			var k int
			if j := strings.Index(o, pre); j < 0 {
				if acked > 0 {
					bad("attempt %d did not resume the run, but step %d was acknowledged before", i+1, acked)
				}
			} else if j2 := strings.Index(o[j:], ") after step "); j2 < 0 {
				bad("attempt %d: unreadable resume line", i+1)
			} else if _, err := fmt.Sscanf(o[j+j2+len(") after step "):], "%d", &k); err != nil || k < acked {
				bad("attempt %d resumed after step %d, but step %d was acknowledged before (%v)", i+1, k, acked, err)
			}
		}
		for k := 1; k <= steps; k++ {
			if strings.Contains(o, fmt.Sprintf("step %d/%d: learner", k+1, steps)) && k > acked {
				acked = k
			}
		}
		// The summary comes after the last step's record.
		if j := strings.Index(o, "training run "+r.id+": "); j >= 0 {
			var k int
			if _, err := fmt.Sscanf(o[j+len("training run "+r.id+": "):], "%d of", &k); err == nil && k > acked {
				acked = k
			}
		}
	}
	if int(run.Step) < acked {
		bad("step %d was acknowledged but the record is at step %d", acked, run.Step)
	}
	points := map[int64]int{}
	var versions []float64
	for _, p := range run.GetCurve() {
		if p.GetPhase() == trainer.PhaseStep {
			points[p.GetStep()]++
		}
		versions = append(versions, float64(p.GetPolicyVersion()))
	}
	for k := int64(1); k <= run.Step; k++ {
		if points[k] != 1 {
			bad("step %d has %d curve point(s), want 1", k, points[k])
		}
	}
	// Trajectories: every one the run counted is stored and decodes
	// (CheckConsistency read them all), and none is newer than the run's
	// policy.
	trajs, err := db.Trajectories().ListByRun(ctx, r.id)
	if err != nil {
		bad("trajectories: %v", err)
	}
	if float64(len(trajs)) < m[trainer.MetricEpisodes] {
		bad("%d trajectories stored, the run counted %v episodes", len(trajs), m[trainer.MetricEpisodes])
	}
	// An episode line is printed after its trajectory is stored: every
	// one printed by any attempt (killed ones too) is there.
	printed, published := 0, int64(0)
	for _, o := range r.outs {
		for _, l := range strings.Split(o, "\n") {
			if strings.Contains(l, "/"+strconv.Itoa(steps)+":   episode ") {
				printed++
			}
			// "learner step K → policy vV": published and checkpointed.
			if i := strings.Index(l, "→ policy v"); i >= 0 && strings.Contains(l, "learner step") {
				var v int64
				if _, err := fmt.Sscanf(l[i+len("→ policy v"):], "%d", &v); err == nil && v > published {
					published = v
				}
			}
		}
	}
	if len(trajs) < printed {
		bad("%d episodes were reported played, %d trajectories stored", printed, len(trajs))
	}
	if published > 0 {
		if c, err := db.Checkpoints().Latest(ctx, r.id); err != nil || c.GetPolicyVersion() < published {
			bad("policy v%d was acknowledged; the newest publication is %v (%v)", published, c.GetPolicyVersion(), err)
		}
	}
	for _, tr := range trajs {
		if tr.PolicyVersion > int64(m[trainer.MetricPolicyVersion]) {
			bad("trajectory %s of policy v%d, newer than the run's v%v", tr.Id, tr.PolicyVersion, m[trainer.MetricPolicyVersion])
		}
	}
	// No episode counted twice in the frontier's posteriors: the per-task
	// attempts sum to the outcomes recorded, which the run's record counts
	// exactly, and no more than the episodes played.
	st, err := db.Frontier().Get(ctx, r.id)
	if err != nil {
		bad("frontier state: %v", err)
	} else {
		stats, err := db.Frontier().Stats(ctx, r.id)
		if err != nil {
			bad("frontier stats: %v", err)
		}
		var attempts int64
		for _, ts := range stats {
			attempts += ts.GetAttempts()
		}
		rec := st.GetCounters()[frontier.CountRecorded]
		if attempts != rec || float64(rec) != m[trainer.MetricOutcomes] || float64(rec) > m[trainer.MetricEpisodes] {
			bad("frontier: per-task attempts %d, outcomes recorded %d, the run counts %v outcomes of %v episodes", attempts, rec, m[trainer.MetricOutcomes], m[trainer.MetricEpisodes])
		}
	}
	// Policy versions only increase: along the curve, and the checkpoints'
	// versions along their steps; the newest publication is the run's version.
	for i := 1; i < len(versions); i++ {
		if versions[i] < versions[i-1] {
			bad("policy version went back from v%v to v%v along the curve", versions[i-1], versions[i])
		}
	}
	for _, id := range []string{r.id, r.id + "/train"} {
		ss, err := db.Checkpoints().Steps(ctx, id)
		if err != nil {
			bad("checkpoints of %s: %v", id, err)
			continue
		}
		prev := int64(-1)
		for _, step := range ss {
			c, err := db.Checkpoints().Load(ctx, id, step)
			if err != nil {
				bad("checkpoint %s step %d: %v", id, step, err)
				continue
			}
			if c.GetPolicyVersion() < prev {
				bad("checkpoint %s step %d has policy v%d after v%d", id, step, c.GetPolicyVersion(), prev)
			}
			prev = c.GetPolicyVersion()
		}
		if id == r.id && prev >= 0 && float64(prev) != m[trainer.MetricPolicyVersion] {
			bad("newest publication v%d, the run says v%v", prev, m[trainer.MetricPolicyVersion])
		}
	}
	return append(problems, s.leftovers()...)
}

// leftovers waits up to two minutes for the cluster to be idle and
// reports the sandboxes' containers, leases and snapshots still in the
// suite's containerd namespace.
func (s *suite) leftovers() []string {
	var left []string
	for i := 0; i < 60; i++ {
		left = left[:0]
		for _, what := range [][]string{{"containers", "ls", "-q"}, {"leases", "ls", "-q"}, {"snapshots", "ls"}} {
			out, err := exec.Command("ctr", append([]string{"-a", s.sock, "-n", namespace}, what...)...).CombinedOutput()
			if err != nil {
				left = append(left, fmt.Sprintf("ctr %s: %v %s", what[0], err, out))
				continue
			}
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "fn-") {
					left = append(left, what[0]+" "+f[0])
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		time.Sleep(2 * time.Second)
	}
	s.purge()
	return []string{fmt.Sprintf("left once idle (2 minutes): %s", strings.Join(left, ", "))}
}

// purge removes what a failed scenario left (after the checker counted
// it), so that the next scenario starts from an empty namespace.
func (s *suite) purge() {
	ctr := func(args ...string) string {
		out, _ := exec.Command("ctr", append([]string{"-a", s.sock, "-n", namespace}, args...)...).Output()
		return string(out)
	}
	for _, id := range strings.Fields(ctr("containers", "ls", "-q")) {
		ctr("tasks", "kill", "-s", "SIGKILL", id)
		time.Sleep(500 * time.Millisecond)
		ctr("tasks", "rm", "-f", id)
		ctr("containers", "rm", id)
	}
	for _, id := range strings.Fields(ctr("leases", "ls", "-q")) {
		if strings.HasPrefix(id, "fn-") {
			ctr("leases", "rm", "--sync", id)
		}
	}
	for _, l := range strings.Split(ctr("snapshots", "ls"), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], "fn-") {
			ctr("snapshots", "rm", f[0])
		}
	}
}

// --- the scenarios ------------------------------------------------------------

// warmStart makes a run publish and checkpoint whatever the 135M model
// writes: one epoch on the synthesizer's verified gold fixes (whole fixes
// need more than 16 tokens a turn).
var warmStart = []string{"--warm-start-epochs", "1", "--max-turn-tokens", "400"}

func scenarios() []scenario {
	return []scenario{
		{name: "kill-run", inject: func(s *suite, r *runState) string {
			at := s.randomPoint(r, 2*time.Second) // an episode takes about 2s here
			if at == "" {
				return "SIGKILL of the run process: the run ended first"
			}
			r.p.kill()
			return "SIGKILL of the run process (node a: the run, its Learner and Sampler) at " + at
		}},
		{name: "kill-sandbox-node", inject: func(s *suite, r *runState) string {
			at := s.randomPoint(r, 2*time.Second)
			if at == "" {
				return "SIGKILL of sandbox node b: the run ended first"
			}
			s.daemons["b"].kill()
			time.Sleep(5 * time.Second)
			s.startDaemon(s.nodes[1])
			return "SIGKILL of sandbox node b at " + at + ", restarted 5s later"
		}},
		{name: "publish-kill", failpoints: "learner/publish=1*kill", flags: warmStart},
		{name: "checkpoint-error", failpoints: "learner/checkpoint=1*error", flags: warmStart},
		{name: "sampler-swap-error", failpoints: "sampler/swap=1*error", flags: warmStart},
		{name: "sandbox-create-error", failpoints: "sandbox/create=2*error@3"},
		{name: "sandbox-create-error-nodes", nodeFailpoints: "sandbox/create=1*error@2"},
		{name: "store-write-kill", failpoints: "store/trajectory-append=1*kill@3"},
		{name: "store-write-error", failpoints: "store/frontier-commit=1*error@2"},
		{name: "run-record-error", failpoints: "store/run-put=1*error@3"},
		{name: "containerd-restart", inject: func(s *suite, r *runState) string {
			at := s.randomPoint(r, 5*time.Second)
			if at == "" {
				return "containerd SIGKILLed: the run ended first"
			}
			s.ctrd.kill()
			time.Sleep(time.Second)
			s.startContainerd()
			return "containerd SIGKILLed at " + at + " and restarted 1s later"
		}},
		{name: "partition-sandbox-node", inject: func(s *suite, r *runState) string {
			at := s.randomPoint(r, 5*time.Second)
			if at == "" {
				return "partition: the run ended first"
			}
			sh(s.t, "ip", "link", "set", s.nodes[1].veth, "down")
			time.Sleep(20 * time.Second)
			sh(s.t, "ip", "link", "set", s.nodes[1].veth, "up")
			return "node b partitioned from a and c (its veth down) for 20s at " + at
		}},
		{name: "slow-link", inject: func(s *suite, r *runState) string {
			sh(s.t, "tc", "qdisc", "add", "dev", s.nodes[0].veth, "root", "tbf", "rate", "256kbit", "burst", "8kb", "latency", "400ms")
			<-r.p.exited
			shQuiet("tc", "qdisc", "del", "dev", s.nodes[0].veth, "root")
			return "node a's link throttled to 256 kbit/s (tbf; netem is not in this kernel) for the whole first attempt"
		}},
		{name: "lossy-link", inject: func(s *suite, r *runState) string {
			// netem is not in this kernel; iptables' statistic match is.
			// Node a's own traffic (its run to its node) stays on lo; what
			// crosses eth0 (to b and c) loses 10% each way.
			a := s.nodes[0]
			defer func() {
				shQuiet("ip", "netns", "exec", a.ns, "iptables", "-F", "INPUT")
				shQuiet("ip", "netns", "exec", a.ns, "iptables", "-F", "OUTPUT")
			}()
			for _, rule := range [][]string{{"INPUT", "-i"}, {"OUTPUT", "-o"}} {
				args := []string{"netns", "exec", a.ns, "iptables", "-A", rule[0], rule[1], "eth0", "-m", "statistic", "--mode", "random", "--probability", "0.1", "-j", "DROP"}
				if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
					s.t.Errorf("lossy-link: ip %s: %v %s", strings.Join(args, " "), err, out)
					<-r.p.exited
					return "lossy-link: the rules could not be set"
				}
			}
			<-r.p.exited
			// The rules' counters: how many packets were dropped.
			out, _ := exec.Command("ip", "netns", "exec", a.ns, "iptables", "-L", "-v", "-x", "-n").Output()
			dropped := 0
			for _, line := range strings.Split(string(out), "\n") {
				if f := strings.Fields(line); len(f) > 2 && f[2] == "DROP" {
					n, _ := strconv.Atoi(f[0])
					dropped += n
				}
			}
			if dropped == 0 {
				s.t.Errorf("lossy-link: no packet was dropped: the fault was not injected")
			}
			return fmt.Sprintf("10%% of node a's packets to and from b and c dropped at random each way (iptables statistic; netem is not in this kernel) for the whole first attempt: %d packets dropped", dropped)
		}},
		{name: "disk-full", smallDisk: true, inject: func(s *suite, r *runState) string {
			at := s.randomPoint(r, 5*time.Second)
			if at == "" {
				return "disk full: the run ended first"
			}
			filler := filepath.Join(filepath.Dir(r.data), "filler")
			_ = exec.Command("fallocate", "-l", "3G", filler).Run() // fills what it can
			_ = exec.Command("dd", "if=/dev/zero", "of="+filler+"2", "bs=1M").Run()
			time.Sleep(15 * time.Second)
			os.Remove(filler)
			os.Remove(filler + "2")
			return "the data directory's filesystem filled at " + at + ", freed 15s later"
		}},
	}
}

// TestScenarios plays each scenario once (FROGNANO_FAULTS_SCENARIOS picks).
func TestScenarios(t *testing.T) {
	s := newSuite(t)
	pick := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("FROGNANO_FAULTS_SCENARIOS"), ",") {
		if n != "" {
			pick[n] = true
		}
	}
	runs := 1
	if n, err := strconv.Atoi(os.Getenv("FROGNANO_FAULTS_RUNS")); err == nil && n > 0 {
		runs = n
	}
	for _, sc := range scenarios() {
		if len(pick) > 0 && !pick[sc.name] {
			continue
		}
		for i := range runs {
			t.Run(fmt.Sprintf("%s/%d", sc.name, i+1), func(t *testing.T) { s.play(t, sc, i+1) })
		}
	}
}
