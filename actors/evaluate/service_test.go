package evaluate

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

// evalNode starts a node with the environments actor and the evaluation
// service over the real HTTP API; runtime is its containerd connection.
func evalNode(t *testing.T, dataDir string, d Deps) (*node.Node, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = dataDir
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Log.Level = "warn"
	d.DataDir = dataDir
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := NewService(d)
	envs := node.NamedActor{Name: environment.ActorName, Props: func(n *node.Node) *actor.Props {
		return environment.Props(environment.Config{Store: n.DB().Environments(), Runtime: d.Runtime, Logger: quiet})
	}}
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: quiet, Actors: []node.NamedActor{envs, svc.Actor()}, Handlers: svc.Handlers()})
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

func record(t *testing.T, base, id string) *records.Evaluation {
	t.Helper()
	code, body := call(t, http.MethodGet, base+EvalsPath+"/"+id, "")
	if code != http.StatusOK {
		t.Fatalf("get %s: %d %s", id, code, body)
	}
	e := &records.Evaluation{}
	if err := protojson.Unmarshal([]byte(body), e); err != nil {
		t.Fatal(err)
	}
	return e
}

// waitEnded follows id's log to its end and returns the log and record.
func waitEnded(t *testing.T, base, id string) (string, *records.Evaluation) {
	t.Helper()
	code, log := call(t, http.MethodGet, base+EvalsPath+"/"+id+"/logs?follow=true", "")
	if code != http.StatusOK {
		t.Fatalf("logs %s: %d %s", id, code, log)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		e := record(t, base, id)
		if e.GetStatus() != StatusRunning {
			return log, e
		}
		if time.Now().After(deadline) {
			t.Fatalf("evaluation %s still running: %v", id, e)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func noContainerd(context.Context) (*sandbox.Runtime, error) {
	return nil, errors.New("no containerd in this test")
}

// TestServiceRefusesBadJobs: every malformed or out-of-range job is a 400
// that says what is wrong, and nothing is recorded; unknown ids are 404s.
func TestServiceRefusesBadJobs(t *testing.T) {
	n, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: noContainerd})
	ok := `"model": "smollm2-135m", "mode": "patch", "k": 2, "hint_level": -1, "parallel": 1, "batch": 1, "max_turns": 1, "max_turn_tokens": 8, "max_context": 64, "wall_seconds": 5, "top_p": 1`
	for _, c := range []struct{ body, want string }{
		{`{`, "not an evaluation job"},
		{`{"held_out": true, "nonsense": 1, ` + ok + `}`, "unknown field"},
		{`{` + ok + `}`, "give one of --env ENV, --tasks FILE and --held-out"},
		{`{"held_out": true, "envs": ["x"], ` + ok + `}`, "give one of"},
		{`{"held_out": true, ` + strings.Replace(ok, `"k": 2`, `"k": 0`, 1) + `}`, "-k must be at least 1"},
		{`{"held_out": true, ` + strings.Replace(ok, `"mode": "patch"`, `"mode": "chat"`, 1) + `}`, "--mode"},
		{`{"held_out": true, ` + strings.Replace(ok, `"hint_level": -1`, `"hint_level": 9`, 1) + `}`, "--hint-level 9"},
		{`{"held_out": true, "id": "../../etc", ` + ok + `}`, "must not contain a NUL or a slash"},
		{`{"held_out": true, "id": ".hidden", ` + ok + `}`, "nor start with a dot"},
		{`{"held_out": true, ` + strings.Replace(ok, `"model": "smollm2-135m"`, `"model": "http://127.0.0.1:1"`, 1) + `}`, "needs --served-model"},
		{`{"held_out": true, {"x":1}}`, "not an evaluation job"},
	} {
		code, body := call(t, http.MethodPost, base+EvalsPath, c.body)
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("submit %s: %d %s, want 400 with %q", c.body, code, body, c.want)
		}
	}
	if all, err := n.DB().Evaluations().List(context.Background()); err != nil || len(all) != 0 {
		t.Errorf("refused jobs were recorded: %v %v", all, err)
	}
	for _, p := range []string{"/nope", "/nope/logs"} {
		if code, body := call(t, http.MethodGet, base+EvalsPath+p, ""); code != http.StatusNotFound {
			t.Errorf("GET %s: %d %s, want 404", p, code, body)
		}
	}
	if code, body := call(t, http.MethodPost, base+EvalsPath+"/nope/stop", ""); code != http.StatusConflict || !strings.Contains(body, "not running") {
		t.Errorf("stop nothing: %d %s", code, body)
	}
	if code, body := call(t, http.MethodGet, base+EvalsPath, ""); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("list: %d %s", code, body)
	}
}

// TestServeNodeTakesModelNamesOnly: a node that serves others (AnyPath
// false) refuses a model, tokenizer or model store named by a path on it.
func TestServeNodeTakesModelNamesOnly(t *testing.T) {
	_, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: noContainerd})
	ok := `"mode": "patch", "k": 1, "hint_level": -1, "parallel": 1, "batch": 1, "max_turns": 1, "max_turn_tokens": 8, "max_context": 64, "wall_seconds": 5, "top_p": 1, "held_out": true`
	for _, extra := range []string{
		`"model": "/etc/passwd"`,
		`"model": "../models/x.gguf"`,
		`"model": "x.gguf"`,
		`"model": "smollm2-135m", "models": "/tmp"`,
		`"model": "http://127.0.0.1:1", "served_model": "m", "tokenizer": "/etc/shadow"`,
	} {
		code, body := call(t, http.MethodPost, base+EvalsPath, `{`+extra+`, `+ok+`}`)
		if code != http.StatusBadRequest || !strings.Contains(body, "this node") {
			t.Errorf("submit %s: %d %s, want 400", extra, code, body)
		}
	}
}

// defaultTokenizer is the default model's tokenizer; the test is skipped
// without it.
func defaultTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	store, err := modelstore.Open("")
	if err != nil {
		t.Skip(err)
	}
	tok, err := store.Tokenizer(modelstore.Default)
	if err != nil {
		t.Skipf("no %s in the model store (frognano model pull): %v", modelstore.Default, err)
	}
	return tok
}

// untouchable is a policy no episode of these tests may reach.
type untouchable struct{ t *testing.T }

func (u untouchable) Generate(context.Context, policy.GenerateRequest) (policy.GenerateResult, error) {
	u.t.Error("the policy was asked to generate")
	return policy.GenerateResult{}, errors.New("not here")
}

// TestServiceRecordsAnEvaluationWhoseEpisodesAllFailed: an evaluation of a
// registered environment on a node that has no sandbox workers runs, every
// episode is an infrastructure failure, and the evaluation is recorded
// failed with the first failure's reason (not done with an empty table);
// its API key is not stored; its id is not reused.
func TestServiceRecordsAnEvaluationWhoseEpisodesAllFailed(t *testing.T) {
	tok := defaultTokenizer(t)
	n, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: noContainerd, Policy: untouchable{t}, Tokenizer: tok})
	if err := n.DB().Environments().Put(context.Background(), &records.Environment{Name: "envx", Image: "frognano.local/env/envx:1", RepoDir: "/repo"}); err != nil {
		t.Fatal(err)
	}
	inst := `{"instance_id": "inst-1", "environment": "envx", "problem_statement": "fix it", "FAIL_TO_PASS": ["t::a"], "patch": "", "bug_patch": ""},
		{"instance_id": "inst-2", "environment": "elsewhere", "image_name": "img:2", "problem_statement": "fix it", "FAIL_TO_PASS": ["t::b"]}`
	job := `{"id": "ev-1", "api_key": "sk-secret-123", "model": "smollm2-135m", "instances": [` + inst + `], "mode": "patch", "k": 2, "hint_level": -1, "parallel": 2, "batch": 1,
		"max_turns": 1, "max_turn_tokens": 8, "max_context": 256, "wall_seconds": 5, "top_p": 1, "seed": 3}`
	code, body := call(t, http.MethodPost, base+EvalsPath, job)
	if code != http.StatusAccepted || !strings.Contains(body, `"id":"ev-1"`) {
		t.Fatalf("submit: %d %s", code, body)
	}
	log, e := waitEnded(t, base, "ev-1")
	if e.GetStatus() != StatusFailed || !strings.Contains(e.GetError(), "every episode failed in the infrastructure: all 2 of them") {
		t.Fatalf("record: %v", e)
	}
	for _, want := range []string{"skipped inst-2: no registered environment", "evaluating smollm2-135m on 1 tasks × 2 episodes (patch mode, run ev-1, seed 3)", "2/2 episodes, 0 solved", "evaluation ev-1 failed"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if e.GetEpisodesDone() != 2 || e.GetEpisodesTotal() != 2 || e.GetReportJson() == "" {
		t.Errorf("progress or report not recorded: %v", e)
	}
	var rep Report
	if err := json.Unmarshal([]byte(e.GetReportJson()), &rep); err != nil || rep.Episodes != 2 || len(rep.Skipped) != 1 {
		t.Errorf("report: %+v %v", rep, err)
	}
	if strings.Contains(e.GetJobJson(), "sk-secret") || !strings.Contains(e.GetJobJson(), `"instance_id":"inst-1"`) {
		t.Errorf("stored job: %s", e.GetJobJson())
	}
	if code, body := call(t, http.MethodPost, base+EvalsPath, job); code != http.StatusConflict || !strings.Contains(body, "exists already") {
		t.Errorf("the same id again: %d %s", code, body)
	}
	trajs, err := n.DB().Trajectories().ListByRun(context.Background(), "ev-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d trajectories stored", len(trajs))
}

// TestServiceStopsAndRefusesASecond: while an evaluation waits on a
// containerd that does not answer, a second is refused (one at a time),
// and a stop ends the first, recorded stopped.
func TestServiceStopsAndRefusesASecond(t *testing.T) {
	hang := func(ctx context.Context) (*sandbox.Runtime, error) { <-ctx.Done(); return nil, ctx.Err() }
	n, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: hang, Policy: untouchable{t}})
	if err := n.DB().Environments().Put(context.Background(), &records.Environment{Name: "envx", Image: "frognano.local/env/envx:1", RepoDir: "/repo"}); err != nil {
		t.Fatal(err)
	}
	job := func(id string) string {
		return `{"id": "` + id + `", "model": "smollm2-135m", "instances": [{"instance_id": "i", "environment": "envx", "problem_statement": "p", "FAIL_TO_PASS": ["t"]}],
			"mode": "patch", "k": 1, "hint_level": -1, "parallel": 1, "batch": 1, "max_turns": 1, "max_turn_tokens": 8, "max_context": 64, "wall_seconds": 5, "top_p": 1}`
	}
	if code, body := call(t, http.MethodPost, base+EvalsPath, job("ev-a")); code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, body)
	}
	if code, body := call(t, http.MethodPost, base+EvalsPath, job("ev-b")); code != http.StatusConflict || !strings.Contains(body, "one at a time") {
		t.Errorf("a second evaluation: %d %s", code, body)
	}
	if code, body := call(t, http.MethodGet, base+EvalsPath, ""); code != http.StatusOK || !strings.Contains(body, `"id":"ev-a","status":"running","active":true`) {
		t.Errorf("list: %d %s", code, body)
	}
	if code, body := call(t, http.MethodPost, base+EvalsPath+"/ev-a/stop", ""); code != http.StatusAccepted {
		t.Fatalf("stop: %d %s", code, body)
	}
	_, e := waitEnded(t, base, "ev-a")
	if e.GetStatus() != StatusStopped {
		t.Errorf("after stop: %v", e)
	}
	if _, err := n.DB().Evaluations().Get(context.Background(), "ev-b"); !errors.Is(err, persistence.ErrNotFound) {
		t.Errorf("the refused evaluation was recorded: %v", err)
	}
}

// TestServiceResumesWhatItWasRunning: an evaluation the store says is
// running when the node starts (its node died mid-way) is resumed: the
// episodes it stored before are read back, not played again (the policy
// is never asked for them), the others are played, and the record ends
// done with every episode counted. An older record also left running is
// recorded stopped (one at a time), and so is one of a served model (URL),
// whose API key was never stored; one that ended stays as it was. Asked
// for, a stopped one resumes; others are refused.
func TestServiceResumesWhatItWasRunning(t *testing.T) {
	tok := defaultTokenizer(t)
	dir := filepath.Join(t.TempDir(), "data")
	db, err := persistence.Open(filepath.Join(dir, "db")) // the node's store
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(e *records.Evaluation) {
		t.Helper()
		if err := db.Evaluations().Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Environments().Put(ctx, &records.Environment{Name: "envx", Image: "frognano.local/env/envx:1", RepoDir: "/repo"}); err != nil {
		t.Fatal(err)
	}
	job := Job{ID: "ev-old", Model: "smollm2-135m", Mode: "patch", K: 2, Hint: -1, Seed: 3, TopP: 1, Parallel: 2, Batch: 1,
		MaxTurns: 1, MaxTurnTokens: 8, MaxContext: 256, WallSeconds: 5,
		Instances: []Instance{{InstanceID: "inst-1", Environment: "envx", ProblemStatement: "fix it", FailToPass: []string{"t::a"}},
			{InstanceID: "inst-2", Environment: "envx", ProblemStatement: "fix it", FailToPass: []string{"t::b"}}}}
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	put(&records.Evaluation{Id: "ev-old", Status: StatusRunning, EpisodesDone: 2, EpisodesTotal: 4, StartedUnixNano: 200, JobJson: string(b)})
	// Both episodes of inst-1 (task 0, group seed 3) finished, solved,
	// before the node died.
	for i := range 2 {
		seed := rollout.EpisodeSeed(3, "inst-1", i)
		tr := &records.Trajectory{Id: rollout.TrajectoryID("ev-old", "inst-1", seed), TaskId: "inst-1", RunId: "ev-old", Seed: seed,
			Termination: "patch_applied", Reward: 1, Report: &records.TestReport{}, TokenIds: []int32{1, 2, 3}, PolicyMask: []bool{false, true, true},
			GenerationSeconds: 4, SandboxSeconds: 1}
		if err := db.Trajectories().Append(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	older := job
	older.ID = "ev-older"
	b, _ = json.Marshal(older)
	put(&records.Evaluation{Id: "ev-older", Status: StatusRunning, EpisodesDone: 1, StartedUnixNano: 100, JobJson: string(b)})
	served := job
	served.ID, served.Model, served.ServedModel, served.Tokenizer = "ev-url", "http://127.0.0.1:1/v1", "m", "smollm2-135m"
	b, _ = json.Marshal(served)
	put(&records.Evaluation{Id: "ev-url", Status: StatusRunning, EpisodesDone: 5, StartedUnixNano: 300, JobJson: string(b)})
	put(&records.Evaluation{Id: "ev-done", Status: StatusDone})
	byPath := job
	byPath.ID, byPath.Model = "ev-path", "/tmp/some.gguf" // an embedded node's job, found by a serving node
	b, _ = json.Marshal(byPath)
	put(&records.Evaluation{Id: "ev-path", Status: StatusStopped, JobJson: string(b)})
	db.Close()

	_, base := evalNode(t, dir, Deps{Runtime: noContainerd, Policy: untouchable{t}, Tokenizer: tok, AutoResume: true})
	// Followed the moment the node answers: the node serves HTTP only
	// once the service has resumed the evaluation (node.NamedActor.Ready),
	// so the follower streams the whole log to its end (before: it could
	// find the evaluation not yet running and get nothing).
	_, log := call(t, http.MethodGet, base+EvalsPath+"/ev-old/logs?follow=true", "")
	_, e := waitEnded(t, base, "ev-old")
	if e.GetStatus() != StatusDone || e.GetEpisodesDone() != 4 || e.GetEpisodesTotal() != 4 || e.GetSolved() != 2 {
		t.Fatalf("the resumed evaluation: %v\n%s", e, log)
	}
	var rep Report
	if err := json.Unmarshal([]byte(e.GetReportJson()), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Resumed != 2 || rep.Episodes != 4 || len(rep.Tasks) != 2 || rep.Tasks[0].Passed != 2 || rep.Tasks[0].Samples != 2 || rep.Tasks[1].Infra != 2 {
		t.Errorf("report: resumed %d, episodes %d, tasks %+v", rep.Resumed, rep.Episodes, rep.Tasks)
	}
	for _, want := range []string{"resumed after the node restarted", "4/4 episodes, 2 solved", "evaluation ev-old done"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	var sum strings.Builder
	if err := rep.WriteSummary(&sum); err != nil || !strings.Contains(sum.String(), "2 of the episodes were played before the node restarted") {
		t.Errorf("summary (%v):\n%s", err, sum.String())
	}
	if e := record(t, base, "ev-url"); e.GetStatus() != StatusStopped || !strings.Contains(e.GetError(), "the node stopped while it ran (5 finished episodes stored): an evaluation of a served model (URL) is resumed only when asked") {
		t.Errorf("ev-url: %v", e)
	}
	if e := record(t, base, "ev-older"); e.GetStatus() != StatusStopped || !strings.Contains(e.GetError(), "another evaluation was resumed in its place") ||
		!strings.Contains(e.GetError(), "frognano evals resume ev-older") {
		t.Errorf("ev-older: %v", e)
	}
	if e := record(t, base, "ev-done"); e.GetStatus() != StatusDone {
		t.Errorf("ev-done: %v", e)
	}
	// Asked for: a stopped one resumes (nothing of it stored, so every
	// episode is played: here, infrastructure failures); others are refused.
	for _, c := range []struct {
		id, body string
		code     int
		want     string
	}{
		{"ev-done", "", http.StatusConflict, "only a stopped evaluation is resumed"},
		{"ev-path", "", http.StatusConflict, "its stored job"},
		{"ev-none", "", http.StatusNotFound, "ev-none"},
		{"bad%20id", "", http.StatusBadRequest, ""},
		{"ev-older", `{"api_key": 5}`, http.StatusBadRequest, "not a resume request"},
		{"ev-older", "", http.StatusAccepted, `"id":"ev-older"`},
	} {
		if code, body := call(t, http.MethodPost, base+EvalsPath+"/"+c.id+"/resume", c.body); code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("resume %s %q: %d %s", c.id, c.body, code, body)
		}
	}
	if _, e := waitEnded(t, base, "ev-older"); e.GetStatus() != StatusFailed || e.GetEpisodesDone() != 4 || !strings.Contains(e.GetError(), "every episode failed in the infrastructure") {
		t.Errorf("ev-older resumed: %v", e)
	}
}

// TestServiceEmbeddedStopsWhatItWasRunning: a node without AutoResume (the
// CLI's) records stopped what it was running, saying how to resume it.
func TestServiceEmbeddedStopsWhatItWasRunning(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	db, err := persistence.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Evaluations().Put(context.Background(), &records.Evaluation{Id: "ev-old", Status: StatusRunning, EpisodesDone: 7, JobJson: `{"id": "ev-old"}`}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, base := evalNode(t, dir, Deps{Runtime: noContainerd})
	deadline := time.Now().Add(10 * time.Second)
	for record(t, base, "ev-old").GetStatus() == StatusRunning && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if e := record(t, base, "ev-old"); e.GetStatus() != StatusStopped || e.GetError() != "the node stopped while it ran (7 finished episodes stored): frognano evals resume ev-old plays the rest" {
		t.Errorf("ev-old: %v", e)
	}
}
