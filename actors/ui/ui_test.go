package ui_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/evaluate"
	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/actors/ui"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPagesShowTheStoredRecords reads every page of a node holding a real
// run's records and checks each shows what the store holds.
func TestPagesShowTheStoredRecords(t *testing.T) {
	f := startNode(t, 3)
	q := url.QueryEscape
	eval := f.trajs[0]
	warm := f.trajs[2]
	cases := []struct {
		path string
		want []string
	}{
		{"", []string{realRun, "running", "3 / "}},
		{"run?id=" + q(realRun), []string{realRun, "hint 3 pass@1", "all pass@1", "trajectories?run=" + q(realRun) + "&amp;eval=start-0", "trajectories?run=" + q(realRun) + "&amp;version=0", `id="time-split"`, "warm start demos", "held-out evaluation",
			`id="episode-time-split"`, "<td>held-out evaluation</td><td>372.0</td>", "<td>generation (waiting for the policy)</td><td>996.0</td><td>92.7%</td>", "<td>sandbox: grading</td><td>60.0</td>"}},
		{"trajectories?run=" + q(realRun) + "&eval=start-0", []string{eval.GetId()[len(eval.GetRunId())+1:][:10], ">2<"}},
		{"trajectories?run=" + q(realRun) + "&version=0", []string{"played at policy v0", ">1<"}},
		{"trajectory?id=" + q(warm.GetId()), []string{warm.GetTermination(), `href="/ui/run?id=` + realRun + `"`, "184 pass · 16 skip", `class="diff"`, `<span class="add">+    return getattr(self, _assertCountEqual)(*args, **kwargs)`, `<span class="del">-    return getattr(_assertCountEqual, self)`}},
		{"tasks", []string{f.tasks[0].GetId(), f.env.GetName()}},
		{"tasks?env=" + q(f.env.GetName()) + "&hint=" + q("99"), []string{`id="ntasks">0<`}},
		{"task?id=" + q(f.tasks[0].GetId()), []string{"FAIL_TO_PASS", f.tasks[0].GetFailToPass()[0], `<span class="del">`, `<span class="add">`}},
		{"cluster", []string{f.env.GetName(), f.node.Address(), "(this node)", "Load 1 min", `<td class="memavail">`, " GiB</td>"}},
		{"frontier", []string{"synth-1", "effective fraction 0.417", f.tasks[0].GetId(), `<table id="bands">`, `<tr data-band="frontier"`,
			fmt.Sprintf(`<th data-level="%d">`, f.tasks[0].GetDifficulty().GetHintLevel())}},
	}
	for _, c := range cases {
		code, body := get(t, f.url("%s", c.path))
		if code != http.StatusOK {
			t.Errorf("/ui/%s: %d\n%s", c.path, code, body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("/ui/%s does not show %q", c.path, w)
			}
		}
	}
	for _, path := range []string{"run?id=nope", "trajectory?id=nope", "task?id=nope"} {
		if code, _ := get(t, f.url("%s", path)); code != http.StatusNotFound {
			t.Errorf("/ui/%s: %d, want 404", path, code)
		}
	}
	if code, body := get(t, f.url("static/uPlot.iife.min.js")); code != http.StatusOK || !strings.Contains(body, "uPlot") {
		t.Errorf("the embedded chart library: %d", code)
	}
}

// TestRunEventsStreamNewAndRewrittenPoints listens to a run's event stream
// while the run gains a point and then has that point rewritten (a step's
// held-out scores fill in after it was recorded).
func TestRunEventsStreamNewAndRewrittenPoints(t *testing.T) {
	f := startNode(t, 2)
	have := len(f.run.GetCurve())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.url("run/events?id=%s&have=%d", url.QueryEscape(realRun), have), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	events := make(chan [2]string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var name string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				events <- [2]string{name, line[len("data: "):]}
			}
		}
		close(events)
	}()
	next := func(want string) ui.Point {
		t.Helper()
		for {
			select {
			case e, ok := <-events:
				if !ok {
					t.Fatalf("stream ended before a %s event", want)
				}
				if e[0] != want {
					continue
				}
				var p ui.Point
				if want == "point" {
					if err := json.Unmarshal([]byte(e[1]), &p); err != nil {
						t.Fatal(err)
					}
				}
				return p
			case <-ctx.Done():
				t.Fatalf("no %s event", want)
			}
		}
	}
	next("status") // the stream's first state
	added := f.appendPoint(t)
	p := next("point")
	if p.Index != have || p.Step != added.GetStep() || p.Metrics["solve_rate"] != 0.875 {
		t.Fatalf("new point: %+v", p)
	}
	run, _ := f.node.DB().Runs().Get(context.Background(), realRun)
	run.Curve[have].HeldOut = append(run.Curve[have].HeldOut, f.run.GetCurve()[0].GetHeldOut()...)
	if err := f.node.DB().Runs().Put(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	before := len(p.HeldOut)
	p = next("point")
	if p.Index != have || len(p.HeldOut) != before+len(f.run.GetCurve()[0].GetHeldOut()) {
		t.Fatalf("rewritten point: %+v", p)
	}
}

// TestExportWritesEveryPoint reads the csv and jsonl exports back.
func TestExportWritesEveryPoint(t *testing.T) {
	f := startNode(t, 4)
	code, body := get(t, f.url("run/export?id=%s&format=csv", url.QueryEscape(realRun)))
	if code != http.StatusOK {
		t.Fatalf("csv: %d %s", code, body)
	}
	rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+len(f.run.GetCurve()) {
		t.Fatalf("%d csv rows for %d points", len(rows), len(f.run.GetCurve()))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, h := range []string{"phase", "step", "solve_rate", "loss", "batch_hint_3", "pass1_all",
		"clip_fraction", "pool_too_hard", "pool_frontier", "pool_too_easy", "pool_retired_hopeless", "pool_retired_mastered",
		"pool_hint_1_frontier", "pool_hint_3_too_hard", "pool_hint_4_too_easy"} {
		if _, ok := col[h]; !ok {
			t.Fatalf("csv header %v lacks %s", rows[0], h)
		}
	}
	// Step 2's share of clipped or masked tokens and its pool, by band and
	// by hint level (poolAt); the start point has neither.
	for h, want := range map[string]float64{"clip_fraction": 0.04, "log_ratio_mean": 0.02, "log_ratio_max": 0.6, "pool_too_hard": 10, "pool_frontier": 6, "pool_too_easy": 1,
		"pool_hint_1_too_hard": 6, "pool_hint_1_frontier": 2, "pool_hint_1_too_easy": 0, "pool_hint_4_too_easy": 1} {
		if got, err := strconv.ParseFloat(rows[3][col[h]], 64); err != nil || math.Abs(got-want) > 1e-12 {
			t.Errorf("step 2 %s: %q, want %v", h, rows[3][col[h]], want)
		}
		if rows[1][col[h]] != "" {
			t.Errorf("start point %s: %q, want empty", h, rows[1][col[h]])
		}
	}
	if got := rows[1][col["phase"]]; got != "start" || rows[1][col["pass1_all"]] == "" || rows[1][col["loss"]] != "" {
		t.Errorf("start row: %v", rows[1])
	}
	if got, _ := strconv.ParseFloat(rows[3][col["solve_rate"]], 64); math.Abs(got-0.3) > 1e-12 {
		t.Errorf("step 2 solve rate %v, want 0.3", got)
	}

	code, body = get(t, f.url("run/export?id=%s&format=jsonl", url.QueryEscape(realRun)))
	if code != http.StatusOK {
		t.Fatalf("jsonl: %d", code)
	}
	lines := bytes.Split(bytes.TrimSpace([]byte(body)), []byte("\n"))
	if len(lines) != len(f.run.GetCurve()) {
		t.Fatalf("%d jsonl lines for %d points", len(lines), len(f.run.GetCurve()))
	}
	var last struct {
		Run string `json:"run"`
		ui.Point
	}
	if err := json.Unmarshal(lines[len(lines)-1], &last); err != nil || last.Run != realRun || last.Step != 4 || math.Abs(last.Metrics["grad_norm"]-1.1) > 1e-12 ||
		math.Abs(last.Metrics["clip_fraction"]-0.08) > 1e-12 || last.Metrics["pool_frontier"] != 8 || last.Metrics["pool_hint_3_frontier"] != 2 {
		t.Errorf("last jsonl line %s: %+v %v", lines[len(lines)-1], last, err)
	}
	if code, _ := get(t, f.url("run/export?id=%s&format=xml", url.QueryEscape(realRun))); code != http.StatusBadRequest {
		t.Errorf("format xml: %d", code)
	}
}

// TestHeldOutTaskPage: held-out episodes name tasks of the committed
// held-out set, which the store does not hold; their task links must
// open (they answered 404 on a real run's held-out episodes).
func TestHeldOutTaskPage(t *testing.T) {
	f := startNode(t, 1)
	ins, err := evaluate.HeldOutInstances()
	if err != nil {
		t.Fatal(err)
	}
	in := ins[0]
	code, body := get(t, f.url("task?id=%s", url.QueryEscape(in.InstanceID)))
	if code != http.StatusOK {
		t.Fatalf("held-out task %s: HTTP %d\n%s", in.InstanceID, code, body)
	}
	for _, want := range []string{`id="held-out"`, html.EscapeString(in.FailToPass[0]), `<span class="add">`, in.Environment} {
		if !strings.Contains(body, want) {
			t.Errorf("held-out task page lacks %q", want)
		}
	}
	if code, _ := get(t, f.url("task?id=%s", "no-such-task")); code != http.StatusNotFound {
		t.Errorf("a task neither stored nor held out: HTTP %d, want 404", code)
	}
}

// TestTasksShowTheRunsEstimator: a training run's frontier estimator is
// named after the run; the task list and a task page must show its
// posteriors, not only the default estimator's (on a real run every row
// read "-").
func TestTasksShowTheRunsEstimator(t *testing.T) {
	f := startNode(t, 1)
	task := f.tasks[0]
	state := &records.FrontierState{PolicyVersion: 2, ActiveUnixNano: time.Now().UnixNano(), Mode: "patch"}
	stats := []*records.TaskStats{{TaskId: task.GetId(), Alpha: 3, Beta: 74, Attempts: 77, Successes: 3, PolicyVersion: 2}}
	if err := f.node.DB().Frontier().Commit(context.Background(), realRun, state, stats); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, f.url("tasks"))
	if !strings.Contains(body, "<td>77</td><td>3</td><td>0.039</td>") || !strings.Contains(body, `id="estimator">`+realRun+"<") {
		t.Errorf("the task list does not show the run's posterior (77 attempts, 3 solved, mean 0.039):\n%s", body)
	}
	_, body = get(t, f.url("task?id=%s", url.QueryEscape(task.GetId())))
	if !strings.Contains(body, "3 solved of 77") {
		t.Errorf("the task page does not show the run's posterior")
	}
	// ?frontier= picks another estimator; the frontier page opens on the
	// latest one too.
	_, body = get(t, f.url("tasks?frontier=%s", persistence.DefaultFrontier))
	if strings.Contains(body, "<td>77</td>") {
		t.Errorf("?frontier=default still shows the run's posterior")
	}
	_, body = get(t, f.url("frontier"))
	if !strings.Contains(body, "Frontier <span class=\"small\">"+realRun+"</span>") {
		t.Errorf("the frontier page does not open on the latest estimator")
	}
}

// TestAsyncStepLinksToItsEpisodes: an asynchronous step trains on groups
// played up to max_staleness_seen versions before the previous point's
// version; its "training" link must list them (on a real run the last
// step's link listed none).
func TestAsyncStepLinksToItsEpisodes(t *testing.T) {
	f := startNode(t, 3)
	ctx := context.Background()
	run, err := f.node.DB().Runs().Get(ctx, realRun)
	if err != nil {
		t.Fatal(err)
	}
	n := len(run.GetCurve())
	prev := run.GetCurve()[n-1].GetPolicyVersion()
	p := stepPoint(n, prev+1)
	p.Metrics[trainer.PointMaxStaleness] = 1
	run.Curve = append(run.Curve, p)
	if err := f.node.DB().Runs().Put(ctx, run); err != nil {
		t.Fatal(err)
	}
	ep := proto.Clone(f.trajs[len(f.trajs)-1]).(*records.Trajectory)
	ep.Id, ep.PolicyVersion = realRun+"/async/"+ep.GetTaskId(), prev-1
	if err := f.node.DB().Trajectories().Append(ctx, ep); err != nil {
		t.Fatal(err)
	}
	_, body := get(t, f.url("run?id=%s", url.QueryEscape(realRun)))
	m := regexp.MustCompile(`<tr data-index="` + strconv.Itoa(n) + `">(?s:.*?)<a href="([^"]*)">training</a>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no training link for step %d", n)
	}
	link := html.UnescapeString(m[1])
	_, body = get(t, "http://"+f.node.HTTPAddr()+link)
	if !strings.Contains(body, `id="ntraj">1<`) || !strings.Contains(body, ep.GetId()[:20]) {
		t.Errorf("%s does not list the step's episode played at v%d:\n%s", link, prev-1, body)
	}
	if code, _ := get(t, f.url("trajectories?run=%s&version=1&min_version=2", url.QueryEscape(realRun))); code != http.StatusBadRequest {
		t.Errorf("min_version above version: HTTP %d, want 400", code)
	}
}
