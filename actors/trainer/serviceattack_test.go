package trainer

// Probes of the run service's HTTP API as an attacker and a careless user
// would call it, on the real HTTP server of a real node.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/diag"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

const attackSettings = `"settings": {"steps": 1, "tasks_per_step": 1, "group": 2, "mode": "patch", "lr": 1e-5}`

// attackNode is serviceNode with a token, HTTP limits and Deps of the test's
// choosing.
func attackNode(t *testing.T, token string, lim node.HTTPLimits, deps func(*Deps)) (*node.Node, string, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Node.APIToken = token
	cfg.Log.Level = "warn"
	d := Deps{DataDir: cfg.Node.DataDir}
	if deps != nil {
		deps(&d)
	}
	svc := NewService(d, false)
	host := node.NamedActor{Name: HostName, Props: func(n *node.Node) *actor.Props {
		return HostProps(HostConfig{Checkpoints: n.DB().Checkpoints()})
	}}
	n, err := node.Start(context.Background(), cfg, diag.NodeOptions(node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Actors: []node.NamedActor{host, svc.Actor()}, Handlers: svc.Handlers(), HTTP: lim}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	return n, "http://" + n.HTTPAddr(), cfg.Node.DataDir
}

func digestJob(id string, jobs int, rounds int64) string {
	return fmt.Sprintf(`{"run_id": %q, "jobs": %d, "rounds": %d, "parallel": 1, "envs": [], %s}`, id, jobs, rounds, attackSettings)
}

func recordOf(t *testing.T, n *node.Node, id string) (*records.Run, error) {
	t.Helper()
	return n.DB().Runs().Get(context.Background(), id)
}

// waitLog waits until run id's log holds want.
func waitLog(t *testing.T, base, id, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, body := call(t, http.MethodGet, base+RunsPath+"/"+id+"/logs", ""); strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s's log never said %q", id, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitInactive(t *testing.T, base, id string, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	u := base + RunsPath + "/" + url.PathEscape(id)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.Header.Get(ActiveHeader) == "false" {
				return true
			}
			if resp.StatusCode == http.StatusNotFound { // no record: is its actor alive?
				if resp, err := http.Get(u + "/logs"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusNotFound {
						return true
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// TestAttackStopDuringTheClusterCheckIsHonoured: a client stops a run while
// its digest jobs (the cluster check) run. The doc promises the work is
// cancelled and the record says "stopped"; the run must end within seconds
// and not be recorded "done".
func TestAttackStopDuringTheClusterCheckIsHonoured(t *testing.T) {
	n, base, _ := attackNode(t, "", node.HTTPLimits{}, nil)
	if code, body := call(t, http.MethodPost, base+RunsPath, digestJob("slow", 1, 1<<27)); code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, body)
	}
	waitLog(t, base, "slow", "cluster:")
	if code, body := call(t, http.MethodPost, base+RunsPath+"/slow/stop", ""); code != http.StatusAccepted {
		t.Fatalf("stop: %d %s", code, body)
	}
	stopped := time.Now()
	ended := waitInactive(t, base, "slow", 3*time.Second)
	if !ended {
		t.Errorf("the run still ran 3s after a stop answered 202 (its digest ignores the run's context)")
		waitInactive(t, base, "slow", 2*time.Minute)
		t.Logf("it ended %v after the stop", time.Since(stopped).Round(time.Second))
	}
	r, err := recordOf(t, n, "slow")
	if err != nil || r.GetStatus() != "stopped" {
		t.Errorf("a run a client stopped is recorded %q (%v), want stopped; error %q", r.GetStatus(), err, r.GetError())
	}
}

// TestAttackNodeStopDoesNotWaitForTheClusterCheck: a node told to stop
// (SIGTERM) while its run's digest jobs run must stop in seconds, leaving
// the record "running" for its next start.
func TestAttackNodeStopDoesNotWaitForTheClusterCheck(t *testing.T) {
	n, base, _ := attackNode(t, "", node.HTTPLimits{}, nil)
	if code, body := call(t, http.MethodPost, base+RunsPath, digestJob("sigterm", 1, 1<<27)); code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, body)
	}
	waitLog(t, base, "sigterm", "cluster:")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n.Stop(ctx)
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("node.Stop took %v with a run in its cluster check (a SIGTERMed node hangs until the digest jobs end)", took.Round(time.Second))
	}
}

// TestAttackJobsTheNodeCannotRunAreRefusedAtSubmit: the API promises 400 for
// a job that cannot start; jobs and rounds the node's manager refuses must
// not be answered 202 and then recorded failed.
func TestAttackJobsTheNodeCannotRunAreRefusedAtSubmit(t *testing.T) {
	n, base, _ := attackNode(t, "", node.HTTPLimits{}, nil)
	for _, tc := range []struct {
		id     string
		jobs   int
		rounds int64
	}{
		{"zero-jobs", 0, 10},                // the manager wants jobs in [1, 100000]
		{"too-many-rounds", 1, 300_000_000}, // diag.MaxRounds is 1<<28; Job.Check allows 1e9
	} {
		code, body := call(t, http.MethodPost, base+RunsPath, digestJob(tc.id, tc.jobs, tc.rounds))
		if code == http.StatusBadRequest {
			continue
		}
		if code != http.StatusAccepted {
			t.Errorf("%s: %d %s", tc.id, code, body)
			continue
		}
		waitInactive(t, base, tc.id, 30*time.Second)
		r, _ := recordOf(t, n, tc.id)
		t.Errorf("%s (jobs %d, rounds %d): answered 202, then the run ended %q: %s", tc.id, tc.jobs, tc.rounds, r.GetStatus(), r.GetError())
	}
}

// TestAttackRunFilesStayOnTheNodesDataDir: a job names directories and
// files on the node (tensorboard, plot). A client must not make the node
// write outside its data directory, nor relative to whatever directory the
// daemon happens to run in (frognano --node N run --tensorboard ./tb sends
// "./tb" as typed).
func TestAttackRunFilesStayOnTheNodesDataDir(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	_, base, dataDir := attackNode(t, "", node.HTTPLimits{}, func(d *Deps) {
		d.TensorBoard = func(dir string, run *records.Run, warn io.Writer) (func(*records.Run), error) {
			mu.Lock()
			asked = append(asked, dir)
			mu.Unlock()
			return func(*records.Run) {}, nil // the real one (actors/ui) MkdirAll(dir)s and creates its event file there
		}
	})
	outside := filepath.Join(os.TempDir(), "probe-attack-tb") // e.g. /etc/cron.d, ~/.ssh
	for i, field := range []string{
		`"tensorboard": ` + jsonString(outside),
		`"tensorboard": "relative/tb"`,
		`"tensorboard": "../../../../../../tmp/probe-attack-tb"`,
		`"plot": "/tmp/probe-attack-plot/authorized_keys"`, // PlotCurve writes the PNG at exactly this path
	} {
		id := fmt.Sprintf("files-%d", i)
		body := fmt.Sprintf(`{"run_id": %q, "jobs": 1, "rounds": 1, "parallel": 1, "envs": [], %s, %s}`, id, field, attackSettings)
		code, resp := call(t, http.MethodPost, base+RunsPath, body)
		if code == http.StatusAccepted && strings.Contains(field, `"relative/tb"`) {
			// A relative name is taken under the run's directory (checked below).
			waitInactive(t, base, id, 30*time.Second)
		} else if code == http.StatusAccepted {
			waitInactive(t, base, id, 30*time.Second)
			t.Errorf("{%s}: accepted (202), want 400: the node writes where the client says (data dir %s)", field, dataDir)
		} else if code != http.StatusBadRequest {
			t.Errorf("{%s}: %d %s", field, code, resp)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, dir := range asked {
		if abs, _ := filepath.Abs(dir); !filepath.IsAbs(dir) || !strings.HasPrefix(abs, dataDir+string(filepath.Separator)) {
			t.Errorf("the run service had a TensorBoard event file opened in %q (resolved %s), outside the data directory", dir, abs)
		}
	}
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestAttackStopRightAfterSubmitKeepsARecord: a client that stops a run the
// moment it is submitted (the stop answered 202) must find it recorded
// (stopped, resumable), not a run that never existed.
func TestAttackStopRightAfterSubmitKeepsARecord(t *testing.T) {
	n, base, dataDir := attackNode(t, "", node.HTTPLimits{}, nil)
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("race-%d", i)
		var wg sync.WaitGroup
		stopCode := make(chan int, 1)
		wg.Add(1)
		go func() { // stop as soon as the run's actor exists
			defer wg.Done()
			for k := 0; k < 2000; k++ {
				resp, err := http.Post(base+RunsPath+"/"+id+"/stop", "", nil)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					stopCode <- resp.StatusCode
					return
				}
			}
			stopCode <- 0
		}()
		code, body := call(t, http.MethodPost, base+RunsPath, digestJob(id, 1, 1000))
		wg.Wait()
		if code != http.StatusAccepted {
			t.Fatalf("submit %s: %d %s", id, code, body)
		}
		if <-stopCode != http.StatusAccepted {
			continue
		}
		if !waitInactive(t, base, id, 20*time.Second) {
			t.Fatalf("%s never ended", id)
		}
		r, err := recordOf(t, n, id)
		if err != nil {
			code, _ := call(t, http.MethodGet, base+RunsPath+"/"+id+"/logs", "")
			log, _ := os.ReadFile(logPath(dataDir, id))
			t.Errorf("%s: stopped (202) right after its submission, then no record at all (%v): GET /v1/runs/%s is 404, resume impossible, its log unreadable through the API (%d); on disk it says %q", id, err, id, code, log)
			return
		}
		_ = r
	}
}

// TestAttackHostileBodies: huge, endless and concatenated bodies.
func TestAttackHostileBodies(t *testing.T) {
	n, base, _ := attackNode(t, "", node.HTTPLimits{}, nil)
	// A declared length beyond the limit.
	if code, _ := call(t, http.MethodPost, base+RunsPath, `{"run_id": "`+strings.Repeat("a", 1<<17)+`"}`); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 128 KiB body with its length: %d, want 413", code)
	}
	// The same without a length (chunked): the limit still holds, 413.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"run_id": "`))
		for i := 0; i < 1<<7; i++ {
			pw.Write([]byte(strings.Repeat("a", 1<<10)))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, base+RunsPath, pr)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a 128 KiB chunked body: %d %s, want 413", resp.StatusCode, b)
	}
	// A job followed by a second JSON value: one body is one job.
	code, body := call(t, http.MethodPost, base+RunsPath, digestJob("first", 1, 1)+`{"run_id": "second", "tensorboard": "/etc"}`)
	if code != http.StatusBadRequest {
		t.Errorf("a body of two JSON values: %d %s, want 400", code, body)
		waitInactive(t, base, "first", 20*time.Second)
	}
	// Deep nesting must not crash the node.
	code, _ = call(t, http.MethodPost, base+RunsPath, strings.Repeat("[", 60000)+strings.Repeat("]", 60000))
	if code != http.StatusBadRequest && code != http.StatusRequestEntityTooLarge {
		t.Errorf("deep nesting: %d", code)
	}
	if _, err := n.DB().Runs().List(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestAttackPathTricksInRunIDs: escaped slashes and dots in the {id} of
// every path reach nothing outside DATA_DIR/runs/ID.
func TestAttackPathTricksInRunIDs(t *testing.T) {
	n, base, dataDir := attackNode(t, "", node.HTTPLimits{}, nil)
	// Files named log where a path trick would land.
	for _, p := range []string{filepath.Join(dataDir, "log"), filepath.Join(filepath.Dir(dataDir), "log"), filepath.Join(dataDir, "runs", "log")} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("SECRET\n"), 0o600)
	}
	tricks := []string{"..", "%2e%2e", "%2E%2E", "..%2F..", "..%2f..%2f..", "%2e%2e%2f%2e%2e", ".", "%2e", "x%2F..%2F..", "..%5C..", "%00", "a%00b", "%2F", "..%252F.."}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, id := range tricks {
		for _, tc := range []struct{ method, suffix string }{
			{http.MethodGet, ""}, {http.MethodGet, "/logs"}, {http.MethodGet, "/logs?follow=true"}, {http.MethodPost, "/stop"}, {http.MethodPost, "/resume"},
		} {
			req, err := http.NewRequest(tc.method, base+RunsPath+"/"+id+tc.suffix, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "SECRET") || resp.StatusCode/100 == 2 {
				t.Errorf("%s %s: %s %q", tc.method, RunsPath+"/"+id+tc.suffix, resp.Status, b)
			}
		}
	}
	// Submitted ids with dots and odd characters stay under runs/.
	for _, id := range []string{"...", " ..", ".. ", "a\nb", "..\u2215..", "%2e%2e"} {
		code, body := call(t, http.MethodPost, base+RunsPath, digestJob(id, 1, 1))
		if code == http.StatusAccepted {
			waitInactive(t, base, id, 20*time.Second)
			if _, err := os.Stat(logPath(dataDir, id)); err != nil {
				t.Errorf("run %q: its log is not at DATA_DIR/runs/ID/log: %v", id, err)
			}
			if rel, err := filepath.Rel(filepath.Join(dataDir, "runs"), logPath(dataDir, id)); err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.Dir(rel) != id {
				t.Errorf("run %q: its log %s escapes runs/", id, logPath(dataDir, id))
			}
		} else if code != http.StatusBadRequest {
			t.Errorf("run id %q: %d %s", id, code, body)
		}
	}
	for _, p := range []string{filepath.Join(dataDir, "log"), filepath.Join(dataDir, "runs", "log")} {
		if b, _ := os.ReadFile(p); string(b) != "SECRET\n" {
			t.Errorf("%s was written: %q", p, b)
		}
	}
	_ = n
}

// TestAttackEveryPathNeedsTheToken: with node.api_token set, no path of
// the run service answers (or acts) without it, a wrong one, or a
// differently spelt one.
func TestAttackEveryPathNeedsTheToken(t *testing.T) {
	token := strings.Repeat("t", 40)
	n, base, _ := attackNode(t, token, node.HTTPLimits{}, nil)
	for _, auth := range []string{"", "Bearer ", "Bearer " + token[:39], "Bearer " + token + "t", "bearer " + token, "Basic " + token, token, "Bearer  " + token, "Bearer " + token + "\x00"} {
		for _, tc := range []struct{ method, path, body string }{
			{http.MethodPost, RunsPath, digestJob("tok", 1, 1)},
			{http.MethodGet, RunsPath, ""},
			{http.MethodGet, RunsPath + "/tok", ""},
			{http.MethodGet, RunsPath + "/tok/logs?follow=true", ""},
			{http.MethodPost, RunsPath + "/tok/stop", ""},
			{http.MethodPost, RunsPath + "/tok/resume", ""},
			{http.MethodGet, "//v1/runs", ""},
			{http.MethodGet, "/v1/runs/../v1/runs", ""},
			{http.MethodGet, "/healthz/../v1/runs", ""},
			{http.MethodPost, "/ui/login/../../v1/runs", digestJob("tok", 1, 1)},
		} {
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				continue // an Authorization with a NUL is refused by the client
			}
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := c.Do(req)
			if err != nil {
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with Authorization %q: %s %q", tc.method, tc.path, auth, resp.Status, b)
			}
		}
	}
	if runs, _ := n.DB().Runs().List(context.Background()); len(runs) != 0 {
		t.Errorf("calls without the token left runs: %v", runs)
	}
	// With it, it works.
	req, _ := http.NewRequest(http.MethodGet, base+RunsPath, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("with the token: %v %v", resp, err)
	}
}

// TestAttackConcurrentSubmitsStartOneRun: many clients submit at once;
// exactly one run starts, the others are 409, and nothing is left half
// started.
func TestAttackConcurrentSubmitsStartOneRun(t *testing.T) {
	n, base, _ := attackNode(t, "", node.HTTPLimits{}, nil)
	var wg sync.WaitGroup
	codes := make(chan int, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("c-%d", i%4) // some the same id
			resp, err := http.Post(base+RunsPath, "application/json", strings.NewReader(digestJob(id, 1, 1<<22)))
			if err != nil {
				codes <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	accepted := 0
	for c := range codes {
		switch c {
		case http.StatusAccepted:
			accepted++
		case http.StatusConflict:
		default:
			t.Errorf("a concurrent submit answered %d", c)
		}
	}
	if accepted != 1 {
		t.Errorf("%d of 40 concurrent submits accepted, want 1", accepted)
	}
	for i := 0; i < 4; i++ {
		waitInactive(t, base, fmt.Sprintf("c-%d", i), 60*time.Second)
	}
	runs, _ := n.DB().Runs().List(context.Background())
	if len(runs) != 1 || runs[0].GetStatus() != "done" {
		for _, r := range runs {
			t.Errorf("run %s %s %s", r.GetId(), r.GetStatus(), r.GetError())
		}
		t.Errorf("%d runs recorded, want 1 done", len(runs))
	}
}

// TestAttackAFollowerThatNeverReads: a client follows a running run's log
// and never reads; the node must cut it after its write limit, closing
// the log file and ending the handler, not hold them as long as the run.
func TestAttackAFollowerThatNeverReads(t *testing.T) {
	n, base, dataDir := attackNode(t, "", node.HTTPLimits{Write: time.Second}, nil)
	_ = n
	// A long log already there (the run appends to it), so that the
	// connection's buffers fill.
	p := logPath(dataDir, "deaf")
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.WriteFile(p, []byte(strings.Repeat("x", 63)+"\n"), 0o644)
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	line := []byte(strings.Repeat("y", 1023) + "\n")
	for i := 0; i < 32<<10; i++ { // 32 MiB
		f.Write(line)
	}
	f.Close()
	if code, body := call(t, http.MethodPost, base+RunsPath, digestJob("deaf", 1, 1<<26)); code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, body)
	}
	var conns []net.Conn
	for i := 0; i < 8; i++ {
		c, err := net.Dial("tcp", n.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(c, "GET %s/deaf/logs?follow=true HTTP/1.1\r\nHost: x\r\n\r\n", RunsPath)
		conns = append(conns, c)
	}
	time.Sleep(500 * time.Millisecond)
	openLogs := func() int {
		k := 0
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && l == p {
				k++
			}
		}
		return k
	}
	t.Logf("log handles open while 8 followers do not read: %d", openLogs())
	deadline := time.Now().Add(6 * time.Second)
	for openLogs() > 1 && time.Now().Before(deadline) { // the run's own handle
		time.Sleep(100 * time.Millisecond)
	}
	if k := openLogs(); k > 1 {
		t.Errorf("%d handles of the log still open 6s after followers stopped reading (write limit 1s)", k)
	}
	// The connection was cut: reading now ends well before 32 MiB.
	conns[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.Copy(io.Discard, bufio.NewReader(conns[0]))
	if got >= 32<<20 {
		t.Errorf("a follower that stopped reading still got the whole log (%d bytes)", got)
	}
}

// TestAttackARunCannotTakeAnEvaluationsID: an evaluation's trajectories are
// stored under its id, so a run of that id would mix its episodes with
// them: refused (the evaluation service refuses the reverse).
func TestAttackARunCannotTakeAnEvaluationsID(t *testing.T) {
	n, base, _ := attackNode(t, "", node.HTTPLimits{}, nil)
	if err := n.DB().Evaluations().Put(context.Background(), &records.Evaluation{Id: "eval-1", Status: "done"}); err != nil {
		t.Fatal(err)
	}
	code, body := call(t, http.MethodPost, base+RunsPath, digestJob("eval-1", 1, 10))
	if code != http.StatusConflict || !strings.Contains(body, "an evaluation has this id") {
		t.Fatalf("a run with an evaluation's id: %d %s", code, body)
	}
	if _, err := n.DB().Runs().Get(context.Background(), "eval-1"); err == nil {
		t.Error("the refused run was recorded")
	}
}
