package evaluate

// A hostile client of /v1/evals, over a real node's HTTP server: every
// test here is a defect found so (or a pin on what held), named for what
// the client tried.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/kernels/modelstore"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

// attackJob is a valid job whose one instance names an environment no node
// registers: it is accepted, and fails at once ("no task to evaluate")
// without a model or a sandbox. over replaces fields (nil removes one).
func attackJob(over map[string]any) string {
	j := map[string]any{"model": "smollm2-135m", "mode": "patch", "k": 1, "hint_level": -1, "parallel": 1, "batch": 1,
		"max_turns": 1, "max_turn_tokens": 8, "max_context": 64, "wall_seconds": 5, "top_p": 1,
		"instances": []map[string]any{{"instance_id": "i1", "environment": "nowhere", "problem_statement": "p", "FAIL_TO_PASS": []string{"t"}}}}
	for k, v := range over {
		if v == nil {
			delete(j, k)
		} else {
			j[k] = v
		}
	}
	b, err := json.Marshal(j)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// instances are n instances of environment env, with distinct ids.
func instances(n int, env string) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = map[string]any{"instance_id": fmt.Sprintf("inst-%05d", i), "environment": env, "problem_statement": "fix it", "FAIL_TO_PASS": []string{"t::a"}}
	}
	return out
}

// waitAccepted waits until no evaluation runs, submitting body until it
// is accepted.
func waitAccepted(t *testing.T, base, body string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, resp := call(t, http.MethodPost, base+EvalsPath, body)
		if code == http.StatusAccepted {
			var sub Submitted
			if err := json.Unmarshal([]byte(resp), &sub); err != nil {
				t.Fatal(err)
			}
			return sub.ID
		}
		if code != http.StatusConflict && code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("submit: %d %s", code, resp)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a node's log, read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// loggedNode is evalNode whose node and service log, at debug level, to
// the returned buffer.
func loggedNode(t *testing.T, dataDir string, d Deps) (*node.Node, string, *syncBuffer) {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = dataDir
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Log.Level = "debug"
	d.DataDir = dataDir
	buf := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d.Logger = logger
	svc := NewService(d)
	envs := node.NamedActor{Name: environment.ActorName, Props: func(n *node.Node) *actor.Props {
		return environment.Props(environment.Config{Store: n.DB().Environments(), Runtime: d.Runtime, Logger: logger})
	}}
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: logger, Actors: []node.NamedActor{envs, svc.Actor()}, Handlers: svc.Handlers()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	return n, "http://" + n.HTTPAddr(), buf
}

// TestAttackIDs: an id that would escape DATA_DIR/evals, be cut short by
// the file system, or print as something else in a listing (a newline
// that forges a log line, a terminal escape, a right-to-left override) is
// refused; the refusal does not echo a huge id; a printable unicode id
// works end to end; nothing is written outside DATA_DIR/evals/ID.
func TestAttackIDs(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "data")
	n, base := evalNode(t, dir, Deps{Runtime: noContainerd})
	for _, id := range []string{
		".", "..", "../x", "..\\x", "a/b", "a\\b", "/abs", "a\x00b", "a b", "a\nevaluation x done", "\x1b[31mred",
		"x\u202eexe.txt", "\u200b", strings.Repeat("a", MaxIDBytes+1), strings.Repeat("é", MaxIDBytes/2+1), strings.Repeat("x", 1<<20),
	} {
		code, body := call(t, http.MethodPost, base+EvalsPath, attackJob(map[string]any{"id": id}))
		if code != http.StatusBadRequest || !strings.Contains(body, "--run") {
			t.Errorf("id %.40q: %d %.200s, want 400 naming --run", id, code, body)
		}
		if len(body) > 1000 {
			t.Errorf("id of %d bytes: the refusal is %d bytes long", len(id), len(body))
		}
	}
	if all, err := n.DB().Evaluations().List(context.Background()); err != nil || len(all) != 0 {
		t.Fatalf("refused ids were recorded: %d %v", len(all), err)
	}
	for _, id := range []string{"評価-1", strings.Repeat("a", MaxIDBytes), "a..b", "run:1~%"} {
		got := waitAccepted(t, base, attackJob(map[string]any{"id": id}))
		if got != id {
			t.Fatalf("accepted %q as %q", id, got)
		}
		log, e := waitEnded(t, base, url.PathEscape(id))
		if e.GetId() != id || e.GetStatus() != StatusFailed || !strings.Contains(log, "no task to evaluate") {
			t.Errorf("%q: %v\n%s", id, e, log)
		}
	}
	// Only DATA_DIR/evals/ID/log among what the evaluations wrote.
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if d != nil && !d.IsDir() && !strings.HasPrefix(rel, "db"+string(filepath.Separator)) && filepath.Base(filepath.Dir(filepath.Dir(p))) != "evals" {
			t.Errorf("a file outside DATA_DIR/evals/ID: %s", p)
		}
		return nil
	})
}

// TestAttackLogPaths: the log's path is built from the URL's id, which
// ServeMux decodes (%2F is a slash, %2e a dot): an id that is not one the
// service could have accepted is refused before the file system is
// touched, even where the store holds a record under it; offsets that do
// not parse are 400s, one past the end an empty log; an id that never
// existed is a 404 at once, followed or not.
func TestAttackLogPaths(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	n, base := evalNode(t, dir, Deps{Runtime: noContainerd})
	secret := filepath.Join(dir, "runs", "r1", "log") // a training run's log
	if err := os.MkdirAll(filepath.Dir(secret), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("TRAINING-RUN-SECRET\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A record under an id no submission can give (an older node's, a
	// store written by hand): the store is no gate for paths.
	if err := n.DB().Evaluations().Put(context.Background(), &records.Evaluation{Id: "../runs/r1", Status: StatusDone}); err != nil {
		t.Logf("the store refuses the planted id: %v", err)
	}
	for _, p := range []string{"..%2Fruns%2Fr1", "%2e%2e%2Fruns%2Fr1", "..%2F..%2F..%2F..%2Fetc%2Fpasswd", "%2e%2e", "a%5C..%5C..%5Cruns%5Cr1"} {
		for _, q := range []string{"", "?follow=true"} {
			code, body := call(t, http.MethodGet, base+EvalsPath+"/"+p+"/logs"+q, "")
			if code != http.StatusBadRequest && code != http.StatusNotFound || strings.Contains(body, "SECRET") || strings.Contains(body, "root:") {
				t.Errorf("logs of %s%s: %d %.200s", p, q, code, body)
			}
		}
	}

	id := waitAccepted(t, base, attackJob(map[string]any{"id": "ev-log"}))
	log, _ := waitEnded(t, base, id)
	size := len(log)
	for _, c := range []struct {
		query string
		code  int
		want  string
	}{
		{"offset=-1", http.StatusBadRequest, "offset"},
		{"offset=abc", http.StatusBadRequest, "offset"},
		{"offset=9223372036854775808", http.StatusBadRequest, "offset"},
		{"offset=1e3", http.StatusBadRequest, "offset"},
		{"follow=yes", http.StatusBadRequest, "follow"},
		{"offset=" + strconv.Itoa(size), http.StatusOK, ""},
		{"offset=9223372036854775807&follow=true", http.StatusOK, ""},
		{"offset=" + strconv.Itoa(size-5) + "&follow=true", http.StatusOK, log[size-5:]},
	} {
		start := time.Now()
		code, body := call(t, http.MethodGet, base+EvalsPath+"/"+id+"/logs?"+c.query, "")
		if code != c.code || (c.code == http.StatusOK && body != c.want) || (c.code != http.StatusOK && !strings.Contains(body, c.want)) {
			t.Errorf("logs?%s: %d %q, want %d %q", c.query, code, body, c.code, c.want)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("logs?%s of an ended evaluation took %v", c.query, time.Since(start))
		}
	}
	// Ids no evaluation can have are answered short, not echoed (a URL
	// takes an id of 60 KB).
	long := strings.Repeat("a", 60000)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/" + long}, {http.MethodGet, "/" + long + "/logs"}, {http.MethodPost, "/" + long + "/stop"},
		{http.MethodGet, "/a%0Ab"}, {http.MethodPost, "/a%0Ab/stop"},
	} {
		if code, body := call(t, c.method, base+EvalsPath+c.path, ""); code != http.StatusBadRequest || len(body) > 1000 {
			t.Errorf("%s %.30s: %d, %d bytes, want a short 400", c.method, c.path, code, len(body))
		}
	}
	for _, q := range []string{"", "?follow=true", "?offset=99999999&follow=true"} {
		start := time.Now()
		if code, body := call(t, http.MethodGet, base+EvalsPath+"/never-was/logs"+q, ""); code != http.StatusNotFound || time.Since(start) > 5*time.Second {
			t.Errorf("logs of an id that never existed%s: %d %s after %v", q, code, body, time.Since(start))
		}
	}
}

// TestAttackAbsurdNumbers: settings that would exhaust the node (k of a
// billion episodes per task, a million sandboxes or sequences at once, a
// context of a trillion tokens, a wall time of centuries or one that
// rounds to nothing) are 400s naming the flag; so are the duplicates and
// holes a client could send that no --tasks file passes; the bounds
// themselves are taken.
func TestAttackAbsurdNumbers(t *testing.T) {
	_, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: noContainerd})
	many := make([]string, MaxEnvs+1)
	for i := range many {
		many[i] = fmt.Sprintf("env-%d", i)
	}
	for _, c := range []struct {
		name string
		over map[string]any
		want string
	}{
		{"k 1e9", map[string]any{"k": 1_000_000_000}, "-k 1000000000"},
		{"k past the bound", map[string]any{"k": MaxK + 1}, "-k"},
		{"k negative", map[string]any{"k": -5}, "-k"},
		{"parallel 1e6", map[string]any{"parallel": 1_000_000}, "--parallel"},
		{"batch 1e6", map[string]any{"batch": 1_000_000}, "--batch"},
		{"batch past the bound", map[string]any{"batch": MaxBatch + 1}, "--batch"},
		{"max turns 1e9", map[string]any{"max_turns": 1_000_000_000}, "--max-turns"},
		{"turn tokens near MaxInt", map[string]any{"max_turn_tokens": int64(1) << 62}, "--max-turn-tokens"},
		{"context 1e12", map[string]any{"max_context": 1_000_000_000_000}, "--max-context"},
		{"wall time of centuries", map[string]any{"wall_seconds": 1e300}, "--wall-time"},
		{"wall time past a day", map[string]any{"wall_seconds": MaxWallSeconds + 1}, "--wall-time"},
		{"wall time of a picosecond", map[string]any{"wall_seconds": 1e-12}, "--wall-time"},
		{"wall time negative", map[string]any{"wall_seconds": -1}, "--wall-time"},
		{"too many environments", map[string]any{"instances": nil, "envs": many}, "--env"},
		{"an environment twice", map[string]any{"instances": nil, "envs": []string{"a", "a"}}, "--env"},
		{"an empty environment", map[string]any{"instances": nil, "envs": []string{""}}, "--env"},
		{"too many instances", map[string]any{"instances": instances(MaxInstances+1, "nowhere")}, "--tasks"},
		{"an instance twice", map[string]any{"instances": append(instances(2, "nowhere"), instances(1, "nowhere")...)}, `inst-00000\" twice`},
		{"an instance without id", map[string]any{"instances": []map[string]any{{"environment": "e", "problem_statement": "p", "FAIL_TO_PASS": []string{"t"}}}}, "no instance_id"},
		{"an instance without tests", map[string]any{"instances": []map[string]any{{"instance_id": "i", "problem_statement": "p"}}}, "FAIL_TO_PASS"},
		{"an instance without statement", map[string]any{"instances": []map[string]any{{"instance_id": "i", "problem_statement": " ", "FAIL_TO_PASS": []string{"t"}}}}, "problem_statement"},
	} {
		code, body := call(t, http.MethodPost, base+EvalsPath, attackJob(c.over))
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %.300s, want 400 with %q", c.name, code, body, c.want)
		}
	}
	// Numbers JSON cannot carry into the job are refused by the decoder.
	for _, raw := range []string{`"k": 1e100`, `"wall_seconds": NaN`, `"wall_seconds": Infinity`, `"temperature": 1e39`, `"k": 99999999999999999999`} {
		body := "{" + raw + ", " + strings.TrimPrefix(attackJob(map[string]any{"k": nil, "wall_seconds": nil}), "{")
		if code, resp := call(t, http.MethodPost, base+EvalsPath, body); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", raw, code, resp)
		}
	}
	// Every bound at once is a job the node takes.
	at := map[string]any{"id": "ev-bounds", "k": MaxK, "parallel": MaxParallel, "batch": MaxBatch, "max_turns": MaxTurns, "max_turn_tokens": MaxTokens,
		"max_context": MaxTokens, "wall_seconds": MaxWallSeconds, "instances": instances(MaxInstances, "nowhere")}
	if id := waitAccepted(t, base, attackJob(at)); id != "ev-bounds" {
		t.Fatal(id)
	}
	if _, e := waitEnded(t, base, "ev-bounds"); e.GetStatus() != StatusFailed || !strings.Contains(e.GetError(), "no task to evaluate") {
		t.Errorf("the job at the bounds: %v", e.GetError())
	}
	short := map[string]any{"id": "ev-short", "wall_seconds": MinWallSeconds}
	waitAccepted(t, base, attackJob(short))
	waitEnded(t, base, "ev-short")
}

// TestAttackModelNames: a served node (AnyPath false) takes a model store
// name or a server's URL; a URL is not a way around that where the node
// reads it as a path (a tokenizer "http://x/../../etc/passwd" was taken
// as a path relative to the node's working directory), an uppercase
// scheme is a URL (not a path), and a URL that carries a credential is
// refused without echoing it (it would be stored with the job and printed
// in the log).
func TestAttackModelNames(t *testing.T) {
	_, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: noContainerd})
	server := map[string]any{"model": "http://127.0.0.1:1/v1", "served_model": "m"}
	with := func(over map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range server {
			out[k] = v
		}
		for k, v := range over {
			out[k] = v
		}
		return out
	}
	for _, c := range []struct {
		over map[string]any
		want string
	}{
		{map[string]any{"model": "./x"}, "this node"},
		{map[string]any{"model": ".."}, "this node"},
		{map[string]any{"model": "~/x"}, "this node"},
		{map[string]any{"model": "smollm2-135m/../../etc"}, "this node"},
		{map[string]any{"model": `C:\models\x`}, "this node"},
		{map[string]any{"model": `..\x`}, "this node"},
		{map[string]any{"model": "x.gguf"}, "this node"},
		{map[string]any{"model": "file:///etc/passwd"}, "this node"},
		{map[string]any{"tokenizer": "/etc/passwd"}, "this node"},
		{with(map[string]any{"tokenizer": "http://x/../../etc/passwd"}), "--tokenizer"},
		{with(map[string]any{"tokenizer": "HTTPS://x/y"}), "--tokenizer"},
		{with(map[string]any{"model": "http://user:sk-in-url-123@127.0.0.1:1/v1"}), "OPENAI_API_KEY"},
		{with(map[string]any{"model": "https://:sk-in-url-123@h"}), "OPENAI_API_KEY"},
		{with(map[string]any{"model": "https://sk-in-url-123@h"}), "OPENAI_API_KEY"},
		{with(map[string]any{"model": "http://"}), "--model"},
		{with(map[string]any{"model": "http:///v1"}), "--model"},
		{with(map[string]any{"model": "http://h/v1?key=sk-in-url-123"}), "--model"},
		{with(map[string]any{"model": "http://h/v1#x"}), "--model"},
		{with(map[string]any{"model": "http://[::1"}), "--model"},
		{with(map[string]any{"models": "/tmp"}), "--models"},
	} {
		code, body := call(t, http.MethodPost, base+EvalsPath, attackJob(c.over))
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) || strings.Contains(body, "sk-in-url") {
			t.Errorf("%v: %d %s, want 400 with %q", c.over, code, body, c.want)
		}
	}
	for i, over := range []map[string]any{
		with(map[string]any{"model": "HTTP://127.0.0.1:1/v1"}),
		with(map[string]any{"model": "hTtPs://127.0.0.1:1"}),
		{"model": "~"}, // a store name: the store directory's "~", no home
		{"model": "qwen:0.5b"},
	} {
		over["id"] = fmt.Sprintf("ev-name-%d", i)
		id := waitAccepted(t, base, attackJob(over))
		waitEnded(t, base, id)
	}
}

// TestAttackIDOfATrainingRun: an evaluation's trajectories are stored
// under its id; an evaluation named as a training run would mix its
// episodes into the run's, so it is refused.
func TestAttackIDOfATrainingRun(t *testing.T) {
	n, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: noContainerd})
	if err := n.DB().Runs().Put(context.Background(), &records.Run{Id: "run-1", Status: "done"}); err != nil {
		t.Fatal(err)
	}
	if code, body := call(t, http.MethodPost, base+EvalsPath, attackJob(map[string]any{"id": "run-1"})); code != http.StatusConflict || !strings.Contains(body, "training run") {
		t.Errorf("an evaluation named run-1: %d %s", code, body)
	}
	if code, body := call(t, http.MethodGet, base+EvalsPath+"/run-1", ""); code != http.StatusNotFound {
		t.Errorf("the refused evaluation was recorded: %d %s", code, body)
	}
}

// TestAttackAPIKeyNeverShown: a job's api_key reaches nothing a client or
// the node's operator reads: the list, the record, the log, the node's
// own log, the files of its data directory.
func TestAttackAPIKeyNeverShown(t *testing.T) {
	store, err := modelstore.Open("")
	if err != nil {
		t.Skip(err)
	}
	if _, err := store.Tokenizer(modelstore.Default); err != nil {
		t.Skipf("no %s in the model store (frognano model pull): %v", modelstore.Default, err)
	}
	const key = "sk-attack-KEY-7f3a9c"
	var heard atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		heard.Add(1) // a server that echoes what it got
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error": {"message": "bad key %s"}}`, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	dir := filepath.Join(t.TempDir(), "data")
	n, base, nodeLog := loggedNode(t, dir, Deps{Runtime: noContainerd})
	if err := n.DB().Environments().Put(context.Background(), &records.Environment{Name: "envx", Image: "frognano.local/env/envx:1", RepoDir: "/repo"}); err != nil {
		t.Fatal(err)
	}
	job := attackJob(map[string]any{"id": "ev-key", "model": srv.URL, "served_model": "m", "api_key": key, "k": 2, "instances": instances(2, "envx")})
	if code, body := call(t, http.MethodPost, base+EvalsPath, job); code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, body)
	}
	log, e := waitEnded(t, base, "ev-key")
	_, list := call(t, http.MethodGet, base+EvalsPath, "")
	_, rec := call(t, http.MethodGet, base+EvalsPath+"/ev-key", "")
	for what, s := range map[string]string{"log": log, "list": list, "record": rec, "node log": nodeLog.String()} {
		if strings.Contains(s, key) || strings.Contains(s, "sk-attack") {
			t.Errorf("the api key is in the %s:\n%s", what, s)
		}
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(key)) {
				t.Errorf("the api key is in %s", p)
			}
		}
		return nil
	})
	t.Logf("status %s (%s); the server heard %d requests", e.GetStatus(), e.GetError(), heard.Load())
}

// hangingRuntime is a containerd that never answers: an evaluation of a
// registered environment waits on it until stopped.
func hangingRuntime(ctx context.Context) (*sandbox.Runtime, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestAttackSubmitRaces: of many concurrent submissions exactly one runs;
// a stop right after a submit, and a second stop, end it recorded
// stopped; a submission right after a stop is refused (409, not an error)
// until the stopped one has ended, and then taken.
func TestAttackSubmitRaces(t *testing.T) {
	n, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: hangingRuntime, Policy: untouchable{t}})
	if err := n.DB().Environments().Put(context.Background(), &records.Environment{Name: "envx", Image: "frognano.local/env/envx:1", RepoDir: "/repo"}); err != nil {
		t.Fatal(err)
	}
	hanging := func(id string) string { return attackJob(map[string]any{"id": id, "instances": instances(1, "envx")}) }
	const racers = 24
	codes := make([]int, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = call(t, http.MethodPost, base+EvalsPath, hanging(fmt.Sprintf("race-%02d", i)))
		}()
	}
	wg.Wait()
	var running string
	for i, c := range codes {
		switch c {
		case http.StatusAccepted:
			if running != "" {
				t.Errorf("two evaluations run: %s and race-%02d", running, i)
			}
			running = fmt.Sprintf("race-%02d", i)
		case http.StatusConflict, http.StatusServiceUnavailable:
		default:
			t.Errorf("race-%02d: %d", i, c)
		}
	}
	if running == "" {
		t.Fatalf("none of %d submissions ran: %v", racers, codes)
	}
	all, _ := n.DB().Evaluations().List(context.Background())
	if len(all) != 1 {
		t.Errorf("%d records of %d racing submissions", len(all), racers)
	}
	for range 2 {
		if code, body := call(t, http.MethodPost, base+EvalsPath+"/"+running+"/stop", ""); code != http.StatusAccepted && code != http.StatusConflict {
			t.Errorf("stop %s: %d %s", running, code, body)
		}
	}
	next := waitAccepted(t, base, hanging("after-stop"))
	if e := record(t, base, running); e.GetStatus() != StatusStopped {
		t.Errorf("%s after two stops: %v", running, e)
	}
	// Stopped the moment it is submitted.
	if code, body := call(t, http.MethodPost, base+EvalsPath+"/"+next+"/stop", ""); code != http.StatusAccepted {
		t.Fatalf("stop %s: %d %s", next, code, body)
	}
	if _, e := waitEnded(t, base, next); e.GetStatus() != StatusStopped {
		t.Errorf("%s stopped at once: %v", next, e)
	}
	if code, body := call(t, http.MethodPost, base+EvalsPath+"/"+next+"/stop", ""); code != http.StatusConflict {
		t.Errorf("stop of an ended evaluation: %d %s", code, body)
	}
}

// TestAttackMethods: a method a path does not take is a 405 that changes
// nothing.
func TestAttackMethods(t *testing.T) {
	n, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: noContainerd})
	id := waitAccepted(t, base, attackJob(map[string]any{"id": "ev-m"}))
	waitEnded(t, base, id)
	for _, c := range []struct{ method, path string }{
		{http.MethodPut, ""}, {http.MethodDelete, ""}, {http.MethodPatch, ""},
		{http.MethodPost, "/ev-m"}, {http.MethodDelete, "/ev-m"}, {http.MethodPut, "/ev-m"},
		{http.MethodGet, "/ev-m/stop"}, {http.MethodDelete, "/ev-m/stop"},
		{http.MethodPost, "/ev-m/logs"}, {http.MethodDelete, "/ev-m/logs"},
	} {
		code, body := call(t, c.method, base+EvalsPath+c.path, attackJob(map[string]any{"id": "ev-other"}))
		if code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d %s, want 405", c.method, c.path, code, body)
		}
	}
	if all, _ := n.DB().Evaluations().List(context.Background()); len(all) != 1 || all[0].GetStatus() != StatusFailed {
		t.Errorf("the records after wrong methods: %v", all)
	}
}

// TestAttackBodies: a body past MaxJobBytes is a 413 (declared or not), a
// deeply nested or doubled one a 400; neither is recorded.
func TestAttackBodies(t *testing.T) {
	n, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: noContainerd})
	huge := attackJob(map[string]any{"instances_from": strings.Repeat("x", MaxJobBytes)})
	if code, _ := call(t, http.MethodPost, base+EvalsPath, huge); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a declared %d-byte body: %d, want 413", len(huge), code)
	}
	req, _ := http.NewRequest(http.MethodPost, base+EvalsPath, io.MultiReader(strings.NewReader(huge))) // no length: chunked
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Errorf("a chunked %d-byte body: %v", len(huge), err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a chunked %d-byte body: %d, want 413", len(huge), resp.StatusCode)
		}
	}
	deep := strings.Replace(attackJob(nil), `"p"`, `"p", "difficulty": `+strings.Repeat("[", 1<<20)+strings.Repeat("]", 1<<20), 1)
	for name, body := range map[string]string{"deep": deep, "two values": attackJob(nil) + attackJob(nil), "null": "null", "empty": ""} {
		if code, resp := call(t, http.MethodPost, base+EvalsPath, body); code != http.StatusBadRequest {
			t.Errorf("%s: %d %.200s, want 400", name, code, resp)
		}
	}
	if all, _ := n.DB().Evaluations().List(context.Background()); len(all) != 0 {
		t.Errorf("%d records of refused bodies", len(all))
	}
}

// TestAttackConcurrentHugeBodies: a node reads maxReading submissions at
// once (each up to MaxJobBytes, several times that decoded): another waits
// readingWait, then is refused with 503 before its body is read, rather
// than every slow sender's body held in memory at once;
// while an evaluation runs, a submission is refused before its body is
// read, and the client still hears why.
func TestAttackConcurrentHugeBodies(t *testing.T) {
	n, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: hangingRuntime, Policy: untouchable{t}})
	var stalls []*io.PipeWriter
	done := make(chan int, maxReading)
	for range maxReading {
		pr, pw := io.Pipe()
		stalls = append(stalls, pw)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, base+EvalsPath, pr)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- -1
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		pw.Write([]byte(`{"instances_from": "`)) // and no more, for now
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := call(t, http.MethodPost, base+EvalsPath, "{")
		if code == http.StatusServiceUnavailable {
			break
		}
		if code != http.StatusBadRequest || time.Now().After(deadline) {
			t.Fatalf("a submission past %d being read: %d %s", maxReading, code, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, pw := range stalls {
		pw.Close()
	}
	for range maxReading {
		if code := <-done; code != http.StatusBadRequest {
			t.Errorf("a cut body: %d, want 400", code)
		}
	}
	if code, body := call(t, http.MethodPost, base+EvalsPath, "{"); code != http.StatusBadRequest {
		t.Errorf("after the readers left: %d %s", code, body)
	}

	if err := n.DB().Environments().Put(context.Background(), &records.Environment{Name: "envx", Image: "frognano.local/env/envx:1", RepoDir: "/repo"}); err != nil {
		t.Fatal(err)
	}
	running := waitAccepted(t, base, attackJob(map[string]any{"id": "ev-run", "instances": instances(1, "envx")}))
	big := attackJob(map[string]any{"id": "ev-big", "instances_from": strings.Repeat("y", 16<<20)})
	if code, body := call(t, http.MethodPost, base+EvalsPath, big); code != http.StatusConflict || !strings.Contains(body, "one at a time") {
		t.Errorf("a big submission while %s runs: %d %.200s", running, code, body)
	}
	call(t, http.MethodPost, base+EvalsPath+"/"+running+"/stop", "")
	waitEnded(t, base, running)
}

// TestAttackManyEpisodesAtOnce: tasks × k episodes waiting for a slot were
// each a goroutine, all started at once (k 1024 of 100000 instances: 10^8
// of them); tasks now start as slots free, so a wide evaluation holds
// about parallel + 2k of them, and still reports every episode.
func TestAttackManyEpisodesAtOnce(t *testing.T) {
	tok := defaultTokenizer(t)
	n, base := evalNode(t, filepath.Join(t.TempDir(), "data"), Deps{Runtime: noContainerd, Policy: untouchable{t}, Tokenizer: tok})
	if err := n.DB().Environments().Put(context.Background(), &records.Environment{Name: "envx", Image: "frognano.local/env/envx:1", RepoDir: "/repo"}); err != nil {
		t.Fatal(err)
	}
	const tasks, k = 40, 16
	before := runtime.NumGoroutine()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				if g := int64(runtime.NumGoroutine()); g > peak.Load() {
					peak.Store(g)
				}
			}
		}
	}()
	id := waitAccepted(t, base, attackJob(map[string]any{"id": "ev-wide", "k": k, "parallel": 1, "instances": instances(tasks, "envx")}))
	_, e := waitEnded(t, base, id)
	close(stop)
	<-sampled
	if grew := peak.Load() - int64(before); grew > tasks*k/2 {
		t.Errorf("%d goroutines more at the peak of %d tasks × %d episodes with 1 at a time", grew, tasks, k)
	}
	if e.GetEpisodesDone() != tasks*k || e.GetEpisodesTotal() != tasks*k || e.GetStatus() != StatusFailed {
		t.Errorf("record: %d/%d %s %s", e.GetEpisodesDone(), e.GetEpisodesTotal(), e.GetStatus(), e.GetError())
	}
}
