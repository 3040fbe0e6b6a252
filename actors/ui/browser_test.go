package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/frognano/frognano/actors/diag"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// The browser tests drive a real headless Chromium (Debian's chromium
// package) against a real node. They skip only when no Chromium is
// installed.

func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FROGNANO_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium installed (apt-get install -y chromium); the dashboard's browser tests need one")
	return ""
}

// screenshotDir is where the tests leave their screenshots:
// $FROGNANO_UI_SCREENSHOTS, or a directory of the test's own.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("FROGNANO_UI_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// browser is one headless Chromium tab that records every console error,
// uncaught exception and error log entry (a failed resource load) of the
// pages it shows.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
	shots  string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // tests run as root in CI
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	b := &browser{ctx: ctx, shots: screenshotDir(t)}
	// Listen starts the browser: no timeout on this first call, or it
	// would stop the browser (chromedp.Run).
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				msg = "console: " + strings.Join(parts, " ")
			}
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError {
				msg = "log: " + e.Entry.Text + " " + e.Entry.URL
			}
		}
		if msg != "" {
			b.mu.Lock()
			b.errors = append(b.errors, msg)
			b.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("start Chromium (%s): %v", path, err)
	}
	return b
}

// do runs actions with a deadline.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func run[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// js evaluates a JavaScript expression in the page.
func js[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	return run(t, b, expr, chromedp.Evaluate[T](expr))
}

// visit loads a page and waits for sel; the page's console errors are
// counted from here.
func (b *browser) visit(t *testing.T, u, sel string) {
	t.Helper()
	b.mu.Lock()
	b.errors = nil
	b.mu.Unlock()
	b.do(t, "load "+u, chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS(sel)))
}

func (b *browser) noErrors(t *testing.T, page string) {
	t.Helper()
	// Errors are reported asynchronously: give late ones a moment.
	time.Sleep(300 * time.Millisecond)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("%s: %s", page, e)
	}
}

func (b *browser) screenshot(t *testing.T, name string) string {
	t.Helper()
	png := run(t, b, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
	return path
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func (b *browser) count(t *testing.T, sel string) int {
	t.Helper()
	return js[int](t, b, "document.querySelectorAll("+quote(sel)+").length")
}

// text is the rendered text of the first element sel matches ("" if none).
func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	return js[string](t, b, "(function(e){return e ? e.innerText : ''})(document.querySelector("+quote(sel)+"))")
}

func (b *browser) attr(t *testing.T, sel, name string) string {
	t.Helper()
	return js[string](t, b, "(function(e){return e ? (e.getAttribute("+quote(name)+") || '') : ''})(document.querySelector("+quote(sel)+"))")
}

// waitAttr polls until the attribute of the element sel equals want.
func (b *browser) waitAttr(t *testing.T, sel, name, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	got := ""
	for time.Now().Before(deadline) {
		if got = b.attr(t, sel, name); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s[%s] is %q, want %q", sel, name, got, want)
}

// TestBrowserRunPageDrawsStoredPointsAndLiveUpdates opens a real run's page
// in Chromium: it must draw every stored point in its charts, switch its
// x-axis to time, and draw a point appended to the store while it is open
// without a reload.
func TestBrowserRunPageDrawsStoredPointsAndLiveUpdates(t *testing.T) {
	b := newBrowser(t)
	f := startNode(t, 3)
	n := len(f.run.GetCurve())

	b.visit(t, f.base, "#runs")
	if got := b.count(t, "#runs tbody tr"); got != 1 {
		t.Errorf("runs list: %d rows, want 1", got)
	}
	b.noErrors(t, "runs list")
	b.screenshot(t, "runs")

	b.visit(t, f.url("run?id=%s", url.QueryEscape(realRun)), "#charts")
	b.waitAttr(t, "#charts", "data-points", fmt.Sprint(n))
	// held-out, solve rate, effective fraction, loss, grad norm, clipped
	// tokens, the pool (three), policy version and hint mix at least.
	if got := b.count(t, "#charts .chart canvas"); got < 11 {
		t.Errorf("%d charts drawn, want at least 11", got)
	}
	for _, id := range []string{"held_out", "solve_rate", "effective_fraction", "loss", "grad_norm", "clip_fraction",
		"pool_bands", "pool_hints", "pool_frontier_hints", "policy_version", "hint_mix", "episodes_per_minute", "step_time"} {
		if b.count(t, "#chart-"+id+" canvas") != 1 {
			t.Errorf("no %s chart", id)
		}
	}
	// Each chart plots every stored value: the held-out scores of both
	// evaluation points (three levels each), each step's solve rate.
	if got := b.attr(t, "#chart-held_out", "data-values"); got != "6" {
		t.Errorf("held-out chart plots %s values, want 6", got)
	}
	if got := b.attr(t, "#chart-solve_rate", "data-values"); got != "3" {
		t.Errorf("solve-rate chart plots %s values, want 3", got)
	}
	// The steps' share of tokens clipped or masked, and the pool after
	// each step: five bands, then three hint levels of the active pool and
	// of its frontier band, a value per step each.
	// Where each step's time went: four series (rollouts, learning,
	// generation, sandbox), a value per step each, in one chart.
	// The sampler's mismatch: mean and largest, one chart.
	for id, want := range map[string]string{"clip_fraction": "3", "log_ratio": "6", "pool_bands": "15", "pool_hints": "9", "pool_frontier_hints": "9", "step_time": "12"} {
		if got := b.attr(t, "#chart-"+id, "data-values"); got != want {
			t.Errorf("%s chart plots %q values, want %s", id, got, want)
		}
	}
	// ... and no chart of its own for each of the pool's counts.
	if got := b.count(t, `#chart-step_seconds_rollouts, #chart-episode_seconds_generation, #chart-log_ratio_mean, #chart-log_ratio_max`); got != 0 {
		t.Errorf("%d charts of single time parts, outside the step-time chart", got)
	}
	if got := b.count(t, `[id^="chart-pool_hint_"], #chart-pool_frontier, #chart-pool_too_hard`); got != 0 {
		t.Errorf("%d charts of single pool counts", got)
	}
	bandLegend := b.text(t, "#chart-pool_bands .u-legend")
	for _, want := range []string{"too hard", "frontier", "too easy", "retired hopeless", "retired mastered"} {
		if !strings.Contains(bandLegend, want) {
			t.Errorf("pool legend %q lacks %q", bandLegend, want)
		}
	}
	hintLegend := b.text(t, "#chart-pool_hints .u-legend")
	for _, want := range []string{"hint 1", "hint 3", "hint 4"} {
		if !strings.Contains(hintLegend, want) {
			t.Errorf("pool-by-hint legend %q lacks %q", hintLegend, want)
		}
	}
	// uPlot's legend lists each hint level of the stored held-out scores.
	legend := b.text(t, "#chart-held_out .u-legend")
	for _, want := range []string{"hint 3", "hint 4", "all"} {
		if !strings.Contains(legend, want) {
			t.Errorf("held-out legend %q lacks %q", legend, want)
		}
	}
	b.waitAttr(t, "#live", "class", "live on")
	b.noErrors(t, "run page")
	b.screenshot(t, "run")

	// Switch the x-axis to wall time: the charts are rebuilt over it.
	b.do(t, "x-axis", chromedp.SetValue(chromedp.CSS("#xaxis"), "wall_seconds"))
	js[bool](t, b, `document.getElementById("xaxis").dispatchEvent(new Event("change"))`)
	for _, id := range []string{"loss", "clip_fraction", "pool_bands", "pool_hints"} {
		if xLabel := b.text(t, "#chart-"+id); !strings.Contains(xLabel, "wall seconds") {
			t.Errorf("%s chart: x axis label %q after switching to wall time", id, xLabel)
		}
	}
	if got := b.attr(t, "#chart-pool_bands", "data-values"); got != "15" {
		t.Errorf("pool chart over wall time plots %s values, want 15", got)
	}

	// A step recorded while the page is open arrives over the event stream.
	added := f.appendPoint(t)
	b.waitAttr(t, "#charts", "data-points", fmt.Sprint(n+1))
	row := b.text(t, fmt.Sprintf(`#points tr[data-index="%d"]`, n))
	if !strings.Contains(row, fmt.Sprint(added.GetStep())) || !strings.Contains(row, "0.875") {
		t.Errorf("the new point's row reads %q", row)
	}
	if b.count(t, "#chart-solve_rate canvas") != 1 {
		t.Errorf("solve-rate chart gone after the update")
	}
	b.waitAttr(t, "#chart-solve_rate", "data-values", "4")
	b.waitAttr(t, "#chart-clip_fraction", "data-values", "4")
	b.waitAttr(t, "#chart-pool_frontier_hints", "data-values", "12")
	b.noErrors(t, "run page after a live update")
	b.screenshot(t, "run-live")
}

// TestBrowserTrajectoryTaskAndOtherPages opens every other page of the
// dashboard: each loads without console errors, a trajectory page shows
// every turn of the episode, a task page its diffs.
func TestBrowserTrajectoryTaskAndOtherPages(t *testing.T) {
	b := newBrowser(t)
	f := startNode(t, 3)
	q := url.QueryEscape

	for i, traj := range f.trajs {
		b.visit(t, f.url("trajectory?id=%s", q(traj.GetId())), "#turns")
		if got, want := b.count(t, "#turns li.turn"), len(traj.GetTurns()); got != want {
			t.Errorf("episode %s: %d turns shown, want %d", traj.GetId(), got, want)
		}
		for j, turn := range traj.GetTurns() {
			text := b.text(t, fmt.Sprintf(`#turns li[data-turn="%d"]`, j+1))
			// The turn's first line of content, as the page renders it.
			first := strings.TrimSpace(strings.SplitN(strings.TrimSpace(turn.GetContent()), "\n", 2)[0])
			if first != "" && !strings.Contains(text, first) && !strings.Contains(text, strings.TrimPrefix(first, "```")) {
				t.Errorf("episode %s turn %d does not show %q", traj.GetId(), j+1, first)
			}
		}
		ending := b.text(t, "#ending")
		if ending != traj.GetTermination() {
			t.Errorf("ending %q, want %q", ending, traj.GetTermination())
		}
		b.noErrors(t, "trajectory "+traj.GetId())
		if i == 2 {
			if b.count(t, "#patch pre.diff span.add") == 0 {
				t.Errorf("episode %s: its applied patch is not shown as a diff", traj.GetId())
			}
			b.screenshot(t, "trajectory")
		}
	}

	task := f.tasks[0]
	b.visit(t, f.url("task?id=%s", q(task.GetId())), "#statement")
	if b.count(t, "#bug-diff span.add")+b.count(t, "#bug-diff span.del") == 0 || b.count(t, "#gold-diff span.add") == 0 {
		t.Error("task page: the bug and gold patches are not rendered as diffs")
	}
	if got := b.count(t, "#fail-to-pass li"); got != len(task.GetFailToPass()) {
		t.Errorf("FAIL_TO_PASS: %d shown, want %d", got, len(task.GetFailToPass()))
	}
	if got := b.count(t, "#pass-to-pass li"); got != len(task.GetPassToPass()) {
		t.Errorf("PASS_TO_PASS: %d shown, want %d", got, len(task.GetPassToPass()))
	}
	b.noErrors(t, "task page")
	b.screenshot(t, "task")

	// From the task list, filtered by its environment, to the task; the
	// filter's form works in the browser.
	b.visit(t, f.url("tasks"), "#tasks")
	hint := fmt.Sprint(task.GetDifficulty().GetHintLevel())
	b.do(t, "filter",
		chromedp.SetValue(chromedp.CSS(`#filter select[name="env"]`), f.env.GetName()),
		chromedp.SetValue(chromedp.CSS(`#filter select[name="hint"]`), hint),
		chromedp.Submit(chromedp.CSS("#filter")),
		chromedp.Sleep(time.Second),
		chromedp.WaitVisible(chromedp.CSS("#tasks")))
	loc := run(t, b, "location", chromedp.Location())
	if !strings.Contains(loc, "hint="+hint) || !strings.Contains(loc, "env=") {
		t.Errorf("the filter form went to %s", loc)
	}
	want := 0
	for _, x := range f.tasks {
		if fmt.Sprint(x.GetDifficulty().GetHintLevel()) == hint {
			want++
		}
	}
	if got := b.count(t, "#tasks tbody tr"); got != want {
		t.Errorf("tasks at hint %s: %d rows, want %d", hint, got, want)
	}
	b.noErrors(t, "tasks list")
	b.screenshot(t, "tasks")

	// The run's held-out point links to its episodes.
	b.visit(t, f.url("run?id=%s", q(realRun)), "#points")
	href := js[string](t, b, `document.querySelector('#points a[href*="eval=start-0"]').href`)
	b.visit(t, href, "#trajectories")
	if got := b.count(t, "#trajectories tbody tr"); got != 2 {
		t.Errorf("held-out episodes of the start point: %d, want 2", got)
	}
	b.noErrors(t, "held-out episodes")

	// The node runs a diag actor: its member row shows it among its load
	// figures once the node's record is sampled anew (at most a second on).
	if res, err := f.node.System().Root.RequestFuture(f.node.Manager(), &rtmsg.SpawnRequest{Kind: diag.Kind}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	} else if _, ok := res.(*rtmsg.SpawnReply); !ok {
		t.Fatalf("spawn answered %v", res)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.visit(t, f.url("cluster"), "#members")
		if b.text(t, "#members tbody tr td.actors") == diag.Kind+": 1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member's actors: %q, want %q", b.text(t, "#members tbody tr td.actors"), diag.Kind+": 1")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := b.count(t, "#members tbody tr"); got < 1 {
		t.Error("cluster page lists no member")
	}
	load1, cpu, mem := b.text(t, "#members td.load1"), b.text(t, "#members td.cpu"), b.text(t, "#members td.memavail")
	if !regexp.MustCompile(`^\d+\.\d\d$`).MatchString(load1) || !regexp.MustCompile(`^\d+%$`).MatchString(cpu) || !strings.HasSuffix(mem, " GiB") {
		t.Errorf("the member's load: load %q, CPU %q, memory available %q", load1, cpu, mem)
	}
	if got := b.count(t, "#environments tbody tr"); got != 1 {
		t.Errorf("environments: %d rows, want 1", got)
	}
	b.noErrors(t, "cluster page")
	b.screenshot(t, "cluster")

	b.visit(t, f.url("frontier"), "#pool")
	b.waitAttr(t, "#calibration", "data-bins", "3")
	if b.count(t, "#calibration canvas") != 1 {
		t.Error("no calibration plot")
	}
	if got := b.count(t, "#pool tbody tr"); got != len(f.tasks) {
		t.Errorf("pool: %d rows, want %d", got, len(f.tasks))
	}
	// The bands hold every task once, at its hint level: none is retired,
	// so the active bands' columns add up to the tasks at each level.
	perLevel := map[string]int{}
	for _, task := range f.tasks {
		perLevel[fmt.Sprint(task.GetDifficulty().GetHintLevel())]++
	}
	bands := js[map[string]map[string]int](t, b, `(function(){
		var levels = Array.from(document.querySelectorAll('#bands thead th[data-level]')).map(function(th){ return th.dataset.level; });
		var out = {};
		document.querySelectorAll('#bands tbody tr').forEach(function(tr){
			var cells = tr.querySelectorAll('td'), row = {tasks: +tr.dataset.tasks};
			levels.forEach(function(l, i){ row[l] = +cells[3+i].innerText; });
			out[tr.dataset.band] = row;
		});
		return out;
	})()`)
	if len(bands) != 5 {
		t.Errorf("bands: %v, want five", bands)
	}
	active := 0
	for _, band := range []string{"too_hard", "frontier", "too_easy"} {
		active += bands[band]["tasks"]
	}
	if active != len(f.tasks) {
		t.Errorf("active bands hold %d tasks, want %d: %v", active, len(f.tasks), bands)
	}
	for level, want := range perLevel {
		got := 0
		for _, row := range bands {
			got += row[level]
		}
		if got != want {
			t.Errorf("hint level %s: %d tasks in the bands, want %d: %v", level, got, want, bands)
		}
	}
	b.noErrors(t, "frontier page")
	b.screenshot(t, "frontier")
}

// TestBrowserRunChartsOfAnAsynchronousRun opens a run whose steps finish
// in bursts, as asynchronous steps do (two points milliseconds apart), and
// whose share of clipped tokens is 0 at every step, as a real run's was:
// the episode rate must stay near the run's (it read 60,000 per minute on
// a real run, from one point to the next), and the share's axis must not
// run to 100.
func TestBrowserRunChartsOfAnAsynchronousRun(t *testing.T) {
	b := newBrowser(t)
	f := startNode(t, 3)
	ctx := context.Background()
	run, err := f.node.DB().Runs().Get(ctx, realRun)
	if err != nil {
		t.Fatal(err)
	}
	last := run.GetCurve()[len(run.GetCurve())-1]
	burst := stepPoint(len(run.GetCurve()), last.GetPolicyVersion())
	burst.WallSeconds = last.GetWallSeconds() + 0.01
	run.Curve = append(run.Curve, burst)
	for _, p := range run.GetCurve() {
		if _, ok := p.GetMetrics()["clip_fraction"]; ok {
			p.Metrics["clip_fraction"] = 0
		}
	}
	if err := f.node.DB().Runs().Put(ctx, run); err != nil {
		t.Fatal(err)
	}
	b.visit(t, f.url("run?id=%s", url.QueryEscape(realRun)), "#charts")
	b.waitAttr(t, "#charts", "data-points", fmt.Sprint(len(run.GetCurve())))
	// The fixture's steps play 16 episodes every 95 s: about 10 a minute.
	if got, err := strconv.ParseFloat(b.attr(t, "#chart-episodes_per_minute", "data-max"), 64); err != nil || got <= 0 || got > 30 {
		t.Errorf("episodes per minute peak at %v (%v), want about 10", got, err)
	}
	b.waitAttr(t, "#chart-clip_fraction", "data-ymax", "1") // the all-zero share's axis tops at 1
	b.noErrors(t, "run page of an asynchronous run")
	b.screenshot(t, "run-async")
}
