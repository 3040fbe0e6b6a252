package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// writeArith writes a small Python project a mutation can break, named
// name (the environment's default name).
func writeArith(t *testing.T, name string) string {
	t.Helper()
	proj := filepath.Join(t.TempDir(), name)
	for file, body := range map[string]string{
		"setup.py":          "from setuptools import setup\nsetup(name='arith', version='0.1', packages=['arith'])\n",
		"arith/__init__.py": "def add(a, b):\n    return a + b\n\n\ndef subtract(a, b):\n    return a - b\n\n\ndef maximum(a, b):\n    if a > b:\n        return a\n    return b\n",
		"tests/test_arith.py": "from arith import add, subtract, maximum\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n" +
			"def test_subtract():\n    assert subtract(5, 3) == 2\n\n\ndef test_maximum():\n    assert maximum(2, 7) == 7\n    assert maximum(9, 1) == 9\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(proj, file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proj, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proj
}

// followUntil runs the CLI (after prefix) and reads its output until a
// line starting with last, then interrupts it as a user's Ctrl-C would and
// returns what it printed.
func followUntil(t *testing.T, prefix []string, last string, args ...string) string {
	t.Helper()
	argv := append(append(slices.Clone(prefix), filepath.Join(binDir, "frognano")), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), last) {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	go io.Copy(io.Discard, stdout)
	cmd.Wait()
	return out.String()
}

// storedRun reads run id from the store in data (the node must be stopped).
func storedRun(t *testing.T, data, id string) *records.Run {
	t.Helper()
	db, err := persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	run, err := db.Runs().Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// TestRunLivesInTheNode submits a training run to a frognano-node daemon
// and leaves: the CLI only talks to the node's HTTP API. A follower
// (runs logs -f) is interrupted while the run trains and the run goes on;
// the daemon is SIGTERMed mid-run, keeps the run recorded as running, and
// resumes it by itself when it starts again; runs stop stops it (recorded
// stopped), and frognano run --run ID resumes it to its end.
func TestRunLivesInTheNode(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an environment image and trains; skipped with -short")
	}
	if _, err := os.Stat("/run/containerd/containerd.sock"); err != nil {
		t.Skip("containerd is not running (scripts/setup-containerd.sh starts it)")
	}
	if os.Getenv("FROGNANO_TEST_GGUF") == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: the run trains the model store's smollm2-135m")
	}
	proj := writeArith(t, "e2earith")
	data := t.TempDir()
	const id = "e2e-run"
	d := startDaemon(t, data, "--log-level", "info")
	d.waitReady(t)
	node := "http://" + d.http
	train := []string{"--env", proj, "--tasks", "2", "--tasks-per-step", "1", "--group", "2", "--max-turn-tokens", "24",
		"--parallel", "2", "--run", id, "--seed", "7", "--max-staleness", "0", "--jobs", "2", "--rounds", "10"}

	out, code := cli(t, append([]string{"--node", node, "run", "--steps", "200", "--detach"}, train...)...)
	if code != 0 || !strings.Contains(out, "run "+id+" started on the node") {
		t.Fatalf("run --detach (exit %d):\n%s", code, out)
	}
	if out, code := cli(t, append([]string{"--node", node, "run", "--steps", "2", "--detach"}, train...)...); code == 0 || !strings.Contains(out, "already running") {
		t.Errorf("a second submission of a running run (exit %d):\n%s", code, out)
	}

	// A follower that leaves while the run trains.
	followed := followUntil(t, nil, "step 2/200: frontier recorded", "--node", node, "runs", "logs", id, "-f")
	if !strings.Contains(followed, "environment e2earith: python") || !strings.Contains(followed, "step 1/200: learner:") {
		t.Fatalf("the follower saw:\n%s\nnode log:\n%s", followed, d.Log())
	}
	out, code = cli(t, "--node", node, "runs", "ls")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "running") || !strings.Contains(out, "true") {
		t.Fatalf("runs ls after the follower left (exit %d):\n%s", code, out)
	}

	// The node stops mid-run: the run stays running in its record.
	d.stop(t)
	before := storedRun(t, data, id)
	if before.GetStatus() != "running" || before.GetStep() < 2 || before.GetJobJson() == "" {
		t.Fatalf("after SIGTERM the record says %s at step %d (job %q)", before.GetStatus(), before.GetStep(), before.GetJobJson())
	}

	// It starts again and resumes the run by itself.
	d2 := startDaemon(t, data, "--log-level", "info")
	d2.waitReady(t)
	node = "http://" + d2.http
	// The node answers only once its run service has resumed the run
	// (node.NamedActor.Ready): the first listing already shows it running.
	if out, code := cli(t, "--node", node, "runs", "ls"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "true") {
		t.Fatalf("runs ls the moment the restarted node answers (exit %d):\n%s", code, out)
	}
	d2.waitLog(t, "resuming an unfinished run", 30*time.Second)
	out, code = cli(t, "--node", node, "runs", "logs", id)
	if code != 0 || !strings.Contains(out, "resuming run "+id+" (running) after step "+strconv.FormatInt(before.GetStep(), 10)) {
		t.Fatalf("runs logs after the restart (exit %d):\n%s", code, out)
	}

	// A client stops it; it is recorded stopped and no longer runs.
	out, code = cli(t, "--node", node, "runs", "stop", id)
	if code != 0 || !strings.Contains(out, "run "+id+" stopped after step") {
		t.Fatalf("runs stop (exit %d):\n%s\nnode log:\n%s", code, out, d2.Log())
	}
	out, code = cli(t, "--node", node, "runs", "stop", id)
	if code == 0 || !strings.Contains(out, "not running on this node") {
		t.Errorf("stopping a stopped run (exit %d):\n%s", code, out)
	}

	// run --run ID resumes it, shortened, and follows it to its end.
	resp, err := http.Get(node + "/v1/runs/" + id)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	out, code = cli(t, append([]string{"--node", node, "run", "--steps", "1"}, train...)...)
	if code != 0 || !strings.Contains(out, "resuming run "+id+" (stopped)") || !strings.Contains(out, "run "+id+" done") {
		t.Fatalf("run --run %s (exit %d):\n%s\nnode log:\n%s", id, code, out, d2.Log())
	}
	out, code = cli(t, "--node", node, "runs", "ls")
	if code != 0 || !strings.Contains(out, "done") || strings.Contains(out, "true") {
		t.Fatalf("runs ls at the end (exit %d):\n%s", code, out)
	}
	if out, code := cli(t, "--node", node, "env", "rm", "e2earith"); code != 0 {
		t.Logf("env rm (exit %d): %s", code, out)
	}
	d2.stop(t)
	if end := storedRun(t, data, id); end.GetStatus() != "done" {
		t.Fatalf("the record ends %s (%s)", end.GetStatus(), end.GetError())
	}
}

// TestRunsAPINeedsTheToken: with an API token every call of the run
// service needs it; the CLI sends the configured one.
func TestRunsAPINeedsTheToken(t *testing.T) {
	token := strings.Repeat("s3cret", 6)
	data := t.TempDir()
	d := startDaemon(t, data, "--config", writeTokenConfig(t, token))
	d.waitReady(t)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/runs"}, {http.MethodPost, "/v1/runs"}, {http.MethodGet, "/v1/runs/x/logs"}, {http.MethodPost, "/v1/runs/x/stop"},
		{http.MethodGet, "/v1/evals"}, {http.MethodPost, "/v1/evals"}, {http.MethodGet, "/v1/evals/x"}, {http.MethodGet, "/v1/evals/x/logs"}, {http.MethodPost, "/v1/evals/x/stop"},
	} {
		req, _ := http.NewRequest(c.method, "http://"+d.http+c.path, strings.NewReader(`{"envs": [], "parallel": 1}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without the token: %s", c.method, c.path, resp.Status)
		}
	}
	if out, code := cli(t, "--node", d.http, "runs", "ls"); code == 0 || !strings.Contains(out, "needs its API token") {
		t.Errorf("runs ls without the token (exit %d):\n%s", code, out)
	}
	out, code := cli(t, "--node", d.http, "--config", writeTokenConfig(t, token), "run", "--env=", "--jobs", "2", "--rounds", "10")
	if code != 0 || !strings.Contains(out, "2 jobs verified") {
		t.Fatalf("run with the token (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "--node", d.http, "--config", writeTokenConfig(t, token), "runs", "ls")
	if code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("runs ls with the token (exit %d):\n%s", code, out)
	}
	// The daemon serves others: an evaluation names models in its store,
	// never a file on it.
	out, code = cli(t, "--node", d.http, "--config", writeTokenConfig(t, token), "eval", "--held-out", "--model", "/etc/passwd")
	if code == 0 || !strings.Contains(out, "this node takes model store names") {
		t.Errorf("eval of a path on a daemon (exit %d):\n%s", code, out)
	}
	out, code = cli(t, "--node", d.http, "--config", writeTokenConfig(t, token), "evals", "ls")
	if code != 0 || !strings.Contains(out, "ID") || strings.Contains(out, "eval-") {
		t.Errorf("evals ls with the token (exit %d):\n%s", code, out)
	}
}

func writeTokenConfig(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "frognano.yaml")
	if err := os.WriteFile(p, []byte("node:\n  api_token: "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
