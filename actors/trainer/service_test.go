package trainer

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

// serviceNode starts a node with the run service and a learner host that
// keeps run records (no model: these runs train nothing).
func serviceNode(t *testing.T) (*node.Node, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Log.Level = "warn"
	svc := NewService(Deps{DataDir: cfg.Node.DataDir}, false)
	host := node.NamedActor{Name: HostName, Props: func(n *node.Node) *actor.Props {
		return HostProps(HostConfig{Checkpoints: n.DB().Checkpoints()})
	}}
	n, err := node.Start(context.Background(), cfg, diag.NodeOptions(node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Actors: []node.NamedActor{host, svc.Actor()}, Handlers: svc.Handlers()}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	return n, "http://" + n.HTTPAddr()
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServiceRunsAJobToItsEnd submits a run that only checks the cluster
// (no environment: nothing to train) through the real HTTP API: it runs in
// the node, its log and record say it is done, and a resume runs it again
// from its stored job.
func TestServiceRunsAJobToItsEnd(t *testing.T) {
	_, base := serviceNode(t)
	code, body := call(t, http.MethodPost, base+RunsPath, `{"run_id": "svc-a", "jobs": 3, "rounds": 10, "parallel": 1, "envs": [],
		"settings": {"steps": 1, "tasks_per_step": 1, "group": 2, "mode": "patch", "lr": 1e-5}}`)
	if code != http.StatusAccepted || !strings.Contains(body, `"id":"svc-a"`) {
		t.Fatalf("submit: %d %s", code, body)
	}
	code, body = call(t, http.MethodGet, base+RunsPath+"/svc-a/logs?follow=true", "")
	if code != http.StatusOK || !strings.Contains(body, "run svc-a done: 3 jobs verified") {
		t.Fatalf("logs: %d %s", code, body)
	}
	waitStatus(t, base, "svc-a", "done")
	if code, body := call(t, http.MethodPost, base+RunsPath+"/svc-a/stop", ""); code != http.StatusConflict || !strings.Contains(body, "not running") {
		t.Errorf("stop a done run: %d %s", code, body)
	}
	code, body = call(t, http.MethodPost, base+RunsPath+"/svc-a/resume", "")
	if code != http.StatusAccepted || !strings.Contains(body, `"resumed":true`) {
		t.Fatalf("resume: %d %s", code, body)
	}
	code, body = followFrom(t, base, "svc-a", body)
	if code != http.StatusOK || !strings.HasPrefix(body, "resuming run svc-a (done)") || strings.Count(body, "done: 3 jobs") != 1 {
		t.Fatalf("logs of the resumed run from its offset: %d %s", code, body)
	}
	code, body = call(t, http.MethodGet, base+RunsPath, "")
	if code != http.StatusOK || !strings.Contains(body, `"id":"svc-a","status":"done"`) {
		t.Fatalf("list: %d %s", code, body)
	}
}

// TestResubmittedRunKeepsItsWork: a run submitted again under its id (what
// frognano run --run ID does, with the command line's defaults) keeps its
// recorded environments, synthesis and cluster check, and says so.
func TestResubmittedRunKeepsItsWork(t *testing.T) {
	_, base := serviceNode(t)
	job := func(jobs int) string {
		return `{"run_id": "svc-k", "jobs": ` + itoa(int64(jobs)) + `, "rounds": 10, "parallel": 1, "envs": [],
		"settings": {"steps": 1, "tasks_per_step": 1, "group": 2, "mode": "patch", "lr": 1e-5}}`
	}
	if code, body := call(t, http.MethodPost, base+RunsPath, job(3)); code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, body)
	}
	waitStatus(t, base, "svc-k", "done")
	code, body := call(t, http.MethodPost, base+RunsPath, job(7))
	if code != http.StatusAccepted || !strings.Contains(body, `"resumed":true`) {
		t.Fatalf("submit again: %d %s", code, body)
	}
	code, body = followFrom(t, base, "svc-k", body)
	if code != http.StatusOK || !strings.Contains(body, "keeps its own environments [], 0 task(s)") || !strings.Contains(body, "done: 3 jobs verified") {
		t.Fatalf("the resubmitted run did not keep its 3-job cluster check: %d %s", code, body)
	}
	waitStatus(t, base, "svc-k", "done")
	// An override the run cannot take is refused before anything starts.
	bad := strings.Replace(job(3), `"steps": 1`, `"steps": -1`, 1)
	bad = strings.Replace(bad, `"envs": []`, `"envs": [], "override": ["steps"]`, 1)
	if code, body := call(t, http.MethodPost, base+RunsPath, bad); code != http.StatusBadRequest || !strings.Contains(body, "steps") {
		t.Fatalf("resubmitted with steps -1: %d %s", code, body)
	}
}

// followFrom follows run id's log from the offset a submit or resume
// answered (its body).
func followFrom(t *testing.T, base, id, submitted string) (int, string) {
	t.Helper()
	var sub struct {
		LogOffset int64 `json:"log_offset"`
	}
	if err := json.Unmarshal([]byte(submitted), &sub); err != nil {
		t.Fatalf("submit answer %q: %v", submitted, err)
	}
	return call(t, http.MethodGet, base+RunsPath+"/"+id+"/logs?follow=true&offset="+itoa(sub.LogOffset), "")
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func waitStatus(t *testing.T, base, id, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := call(t, http.MethodGet, base+RunsPath+"/"+id, "")
		if code == http.StatusOK && strings.Contains(body, `"status":"`+want+`"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s never %s: %d %s", id, want, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServiceRefusesBadJobs: what a hostile or mistaken client sends gets
// one clear error and starts nothing.
func TestServiceRefusesBadJobs(t *testing.T) {
	n, base := serviceNode(t)
	settings := `"settings": {"steps": 1, "tasks_per_step": 1, "group": 2, "mode": "patch", "lr": 1e-5}`
	for _, tc := range []struct {
		name, body string
		status     int
		says       string
	}{
		{"not JSON", `{`, http.StatusBadRequest, "not a run job"},
		{"unknown field", `{"parallel": 1, "cmd": "rm -rf /"}`, http.StatusBadRequest, "unknown field"},
		{"no parallel", `{"jobs": 1, ` + settings + `}`, http.StatusBadRequest, "parallel"},
		{"a slash in the id", `{"run_id": "../x", "jobs": 1, "parallel": 1, ` + settings + `}`, http.StatusBadRequest, "no slash"},
		{"a held-out environment", `{"envs": ["isodate==0.6.1"], "jobs": 1, "parallel": 1, ` + settings + `}`, http.StatusBadRequest, "held-out repository"},
		{"a group of one", `{"jobs": 1, "parallel": 1, "settings": {"steps": 1, "tasks_per_step": 1, "group": 1, "mode": "patch", "lr": 1e-5}}`, http.StatusBadRequest, "group"},
		{"too many jobs", `{"parallel": 1, "jobs": 1000000000, ` + settings + `}`, http.StatusBadRequest, "1 to 100000 jobs"},
		{"a bad override", `{"jobs": 1, "parallel": 1, "override": ["seed"], ` + settings + `}`, http.StatusBadRequest, "override"},
		{"a directory off the node's", `{"jobs": 1, "parallel": 1, "tensorboard": "/etc/cron.d", ` + settings + `}`, http.StatusBadRequest, "relative name"},
		{"two values", `{"jobs": 1, "parallel": 1, ` + settings + `} {"run_id": "x"}`, http.StatusBadRequest, "more than one"},
	} {
		code, body := call(t, http.MethodPost, base+RunsPath, tc.body)
		if code != tc.status || !strings.Contains(strings.ToLower(body), strings.ToLower(tc.says)) {
			t.Errorf("%s: %d %s", tc.name, code, body)
		}
	}
	if runs, err := n.DB().Runs().List(context.Background()); err != nil || len(runs) != 0 {
		t.Errorf("bad jobs left runs: %v %v", runs, err)
	}
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/nope"}, {http.MethodGet, "/nope/logs"}, {http.MethodPost, "/nope/resume"},
	} {
		if code, body := call(t, tc.method, base+RunsPath+tc.path, ""); code != http.StatusNotFound || !strings.Contains(body, "not found") {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, code, body)
		}
	}
	if code, body := call(t, http.MethodGet, base+RunsPath+"/nope/logs?offset=-1", ""); code != http.StatusNotFound {
		t.Errorf("logs of an unknown run, bad offset: %d %s", code, body)
	}
}
