// Package e2e tests the real binaries: frognano-node daemons and the frognano
// CLI as separate processes on loopback, built exactly as the Makefile builds
// them (with lazy binding, so they start without the NVIDIA driver).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/frognano/frognano/persistence"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "frognano-e2e-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-ldflags", "-extldflags=-Wl,-z,lazy", "-o", dir+"/",
		"github.com/frognano/frognano/cmd/frognano", "github.com/frognano/frognano/cmd/frognano-node")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// daemon is a running frognano-node process with its log captured.
type daemon struct {
	cmd    *exec.Cmd
	http   string
	remote string
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	err    error
}

func (d *daemon) Log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

func startDaemon(t *testing.T, dataDir string, args ...string) *daemon {
	t.Helper()
	return launchDaemon(t, nil, freeAddr(t), freeAddr(t), dataDir, args...)
}

// launchDaemon starts frognano-node on the given addresses, its command
// line after prefix (ip netns exec NS: a network namespace of its own).
func launchDaemon(t *testing.T, prefix []string, httpAddr, remoteAddr, dataDir string, args ...string) *daemon {
	t.Helper()
	d := &daemon{http: httpAddr, remote: remoteAddr, exited: make(chan struct{})}
	all := append([]string{"--data-dir", dataDir, "--http-addr", d.http, "--remote-addr", d.remote}, args...)
	argv := append(append(slices.Clone(prefix), filepath.Join(binDir, "frognano-node")), all...)
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Env = append(os.Environ(), "FROGNANO_CLUSTER_HEARTBEAT=200ms", "FROGNANO_CLUSTER_FAILURE_TIMEOUT=2s")
	pr, pw := io.Pipe()
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(pr)
		for s.Scan() {
			d.mu.Lock()
			d.log.WriteString(s.Text() + "\n")
			d.mu.Unlock()
		}
	}()
	go func() {
		d.err = d.cmd.Wait()
		pw.Close()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.exited
		if t.Failed() {
			t.Logf("log of node %s:\n%s", d.http, d.Log())
		}
	})
	return d
}

// stop sends SIGTERM and waits for a clean exit (status 0).
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("node did not stop within 30s of SIGTERM")
	}
	if d.err != nil {
		t.Fatalf("node exited with %v after SIGTERM", d.err)
	}
}

func (d *daemon) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			t.Fatalf("node exited before it was ready: %v\n%s", d.err, d.Log())
		default:
		}
		resp, err := http.Get("http://" + d.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("node %s not ready in time:\n%s", d.http, d.Log())
}

func (d *daemon) waitLog(t *testing.T, substr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(d.Log(), substr) {
		if time.Now().After(deadline) {
			t.Fatalf("node log never said %q:\n%s", substr, d.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cli runs the frognano CLI and returns its combined output and exit code.
func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return cliIn(t, nil, args...)
}

// cliIn is cli with the command line after prefix (ip netns exec NS).
func cliIn(t *testing.T, prefix []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(append(slices.Clone(prefix), filepath.Join(binDir, "frognano")), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("frognano %v: %v", args, err)
	}
	return string(out), code
}

func TestNodeStartsAndStopsWithoutNvidiaDriver(t *testing.T) {
	if out, err := os.ReadFile("/proc/driver/nvidia/version"); err == nil && len(out) > 0 {
		t.Skip("this machine has a loaded NVIDIA driver; the test proves a start without one")
	}
	d := startDaemon(t, t.TempDir())
	d.waitReady(t)

	out, code := cli(t, "--node", d.http, "node", "info")
	if code != 0 || !strings.Contains(out, `"gpuError"`) || !strings.Contains(out, `"cores"`) {
		t.Fatalf("node info (exit %d):\n%s", code, out)
	}
	resp, err := http.Get("http://" + d.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte("frognano_node_gpus 0")) {
		t.Errorf("/metrics lacks frognano_node_gpus 0")
	}

	// Graceful shutdown on SIGTERM: exit status 0 and the store closed.
	d.stop(t)
	if !strings.Contains(d.Log(), "node stopped") {
		t.Errorf("no 'node stopped' in the log")
	}
}

// TestRemoteSpawnAndFailover starts two daemons, spawns the diag kind by name
// on the second from the first, spreads work onto it, SIGKILLs it mid-way and
// checks that the first node's supervisor notices and reruns the lost work on
// itself, with every answer verified.
func TestRemoteSpawnAndFailover(t *testing.T) {
	a := startDaemon(t, t.TempDir())
	a.waitReady(t)
	b := startDaemon(t, t.TempDir(), "--seeds", a.http)
	b.waitReady(t)
	a.waitLog(t, "member joined", 10*time.Second)

	out, code := cli(t, "--node", a.http, "cluster", "members")
	if code != 0 || !strings.Contains(out, a.remote) || !strings.Contains(out, b.remote) {
		t.Fatalf("cluster members (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "--node", a.http, "cluster", "spawn", "diag", "--member", b.remote)
	if code != 0 || !strings.Contains(out, "spawned diag as "+b.remote) {
		t.Fatalf("spawn diag on the other node (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "--node", a.http, "cluster", "spawn", "sandbox-worker", "--member", b.remote)
	if code != 0 || !strings.Contains(out, "spawned sandbox-worker as "+b.remote) {
		t.Fatalf("spawn sandbox-worker on the other node (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "--node", a.http, "cluster", "spawn", "no-such-kind")
	if code == 0 || !strings.Contains(out, `unknown actor kind "no-such-kind"`) {
		t.Fatalf("spawn of an unknown kind (exit %d):\n%s", code, out)
	}

	// ~40 jobs of ~0.1-0.2s each, all placed on b first.
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, code := cli(t, "--node", a.http, "diag", "digest", "--jobs", "40", "--rounds", "2000000", "--prefer-remote")
		done <- result{out, code}
	}()
	a.waitLog(t, "worker spawned", 20*time.Second)
	time.Sleep(700 * time.Millisecond) // let b finish some jobs
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("digest jobs did not finish after the node was killed")
	}
	if r.code != 0 || !strings.Contains(r.out, "0 wrong or failed") {
		t.Fatalf("digest after failover (exit %d):\n%s", r.code, r.out)
	}
	if !strings.Contains(r.out, a.remote) {
		t.Fatalf("no job ran on the surviving node:\n%s", r.out)
	}
	if strings.Contains(r.out, " 0 retried") {
		t.Fatalf("no job was retried after the kill:\n%s", r.out)
	}
	a.waitLog(t, "worker lost; retrying its jobs on surviving members", 10*time.Second)
	a.waitLog(t, "member gone", 10*time.Second)
	if !strings.Contains(a.Log(), "reason=AddressTerminated") {
		t.Errorf("the supervisor did not see the node's address terminate")
	}
}

func TestBadInputGivesOneClearError(t *testing.T) {
	t.Run("malformed config", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "bad.yaml")
		os.WriteFile(cfg, []byte("node:\n  http_adr: 127.0.0.1:1\n"), 0o644)
		data := filepath.Join(t.TempDir(), "data")
		out, code := runNode(t, "--config", cfg, "--data-dir", data)
		if code == 0 || !strings.Contains(out, "bad.yaml") || !strings.Contains(out, "http_adr") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if _, err := os.Stat(data); err == nil {
			t.Errorf("a rejected config created the data dir")
		}
	})
	t.Run("second node on a taken port", func(t *testing.T) {
		a := startDaemon(t, t.TempDir())
		a.waitReady(t)
		out, code := runNode(t, "--data-dir", t.TempDir(), "--http-addr", a.http, "--remote-addr", freeAddr(t))
		if code == 0 || !strings.Contains(out, "address already in use") || !strings.Contains(out, a.http) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("locked data dir", func(t *testing.T) {
		dir := t.TempDir()
		a := startDaemon(t, dir)
		a.waitReady(t)
		out, code := runNode(t, "--data-dir", dir, "--http-addr", freeAddr(t), "--remote-addr", freeAddr(t))
		if code == 0 || !strings.Contains(out, "in use by another process") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		resp, err := http.Get("http://" + a.http + "/readyz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("first node unhealthy after the refused second start: %v", err)
		}
		resp.Body.Close()
	})
	t.Run("corrupt data dir", func(t *testing.T) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "db"), 0o755)
		os.WriteFile(filepath.Join(dir, "db", "MANIFEST"), []byte("garbage"), 0o644)
		os.WriteFile(filepath.Join(dir, "db", "000001.vlog"), []byte("more garbage"), 0o644)
		out, code := runNode(t, "--data-dir", dir, "--http-addr", freeAddr(t), "--remote-addr", freeAddr(t))
		if code == 0 || !strings.Contains(out, "corrupt") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "db", "MANIFEST")); string(b) != "garbage" {
			t.Errorf("MANIFEST changed by a refused start")
		}
	})
	t.Run("no node at address", func(t *testing.T) {
		out, code := cli(t, "--node", freeAddr(t), "node", "info")
		if code == 0 || !strings.Contains(out, "no frognano node answers") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}

func runNode(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "frognano-node"), args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// TestRunRecordsInTheStore runs the README's main job on an embedded node and
// checks the run it recorded survives in Badger.
func TestRunRecordsInTheStore(t *testing.T) {
	data := t.TempDir()
	out, code := cli(t, "run", "--data-dir", data, "--jobs", "8", "--rounds", "1000", "--env=")
	if code != 0 || !strings.Contains(out, "8 jobs verified") {
		t.Fatalf("frognano run (exit %d):\n%s", code, out)
	}
	oneRunDone(t, data, 8)
}

// oneRunDone checks that the store in data holds one run, done, that
// verified jobs jobs.
func oneRunDone(t *testing.T, data string, jobs float64) {
	t.Helper()
	db, err := persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	runs, err := db.Runs().List(context.Background())
	if err != nil || len(runs) != 1 || runs[0].Status != "done" || runs[0].Metrics["jobs"] != jobs {
		t.Fatalf("runs in the store: %v, %v", runs, err)
	}
}

// TestRunOnARunningNode runs the main job against a running daemon, named
// the way the daemon prints its address (an http:// URL), and finds the run
// in the daemon's store after it stops.
func TestRunOnARunningNode(t *testing.T) {
	data := t.TempDir()
	d := startDaemon(t, data)
	d.waitReady(t)
	out, code := cli(t, "--node", "http://"+d.http+"/", "run", "--jobs", "8", "--rounds", "1000", "--env=")
	if code != 0 || !strings.Contains(out, "8 jobs verified") || !strings.Contains(out, "node at http://"+d.http) {
		t.Fatalf("frognano --node http://%s/ run (exit %d):\n%s", d.http, code, out)
	}
	for _, bad := range []string{"ftp://" + d.http, "http://" + d.http + "/v1/node"} {
		if out, code := cli(t, "--node", bad, "node", "info"); code == 0 || !strings.Contains(out, "want HOST:PORT") {
			t.Errorf("--node %s (exit %d):\n%s", bad, code, out)
		}
	}
	d.stop(t)
	oneRunDone(t, data, 8)
}

// TestEnvCommands registers a small local Python project through the CLI,
// lists, shows and removes it.
func TestEnvCommands(t *testing.T) {
	if _, err := os.Stat("/run/containerd/containerd.sock"); err != nil {
		t.Skip("containerd is not running (scripts/setup-containerd.sh starts it)")
	}
	proj := filepath.Join(t.TempDir(), "calc")
	for name, body := range map[string]string{
		"setup.py":           "from setuptools import setup\nsetup(name='calc', version='0.1', packages=['calc'])\n",
		"calc/__init__.py":   "def add(a, b):\n    return a + b\n",
		"tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(proj, name)), 0o755)
		os.WriteFile(filepath.Join(proj, name), []byte(body), 0o644)
	}
	data := t.TempDir()
	out, code := cli(t, "env", "add", proj, "--name", "e2e-calc", "--min-tests", "1", "--data-dir", data, "--log-level", "warn")
	if code != 0 || !strings.Contains(out, "registered e2e-calc: python, 1 tests at baseline (1 pass)") {
		t.Fatalf("env add (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "env", "ls", "--data-dir", data, "--log-level", "warn")
	if code != 0 || !strings.Contains(out, "e2e-calc") {
		t.Fatalf("env ls (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "env", "show", "e2e-calc", "--data-dir", data, "--log-level", "warn")
	if code != 0 || !strings.Contains(out, `"tests/test_calc.py::test_add"`) || !strings.Contains(out, `"baseCommit"`) {
		t.Fatalf("env show (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "env", "add", proj, "--name", "e2e-calc", "--min-tests", "1", "--data-dir", data, "--log-level", "warn")
	if code == 0 || !strings.Contains(out, "already exists") {
		t.Fatalf("second env add (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "env", "rm", "e2e-calc", "--data-dir", data, "--log-level", "warn")
	if code != 0 {
		t.Fatalf("env rm (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "env", "show", "e2e-calc", "--data-dir", data, "--log-level", "warn")
	if code == 0 || !strings.Contains(out, "not found") {
		t.Fatalf("env show after rm (exit %d):\n%s", code, out)
	}
}
