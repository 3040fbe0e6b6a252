package ui_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/node"
)

// testdata/grpo holds records read out of a real node's store after a real
// training run (testdata/gen/export_run.go): the run with every point of
// its curve as the trainer wrote it (held-out evaluations, GRPO steps that
// updated the policy), its FrontierEstimator's state and posteriors, the
// environments, and a few episodes of each policy version and held-out
// point with their tasks. Nothing in it is made up.
const grpoDir = "testdata/grpo"

type grpoFixture struct {
	node  *node.Node
	base  string
	run   *records.Run
	trajs []*records.Trajectory
	tasks []*records.Task
}

func (f *grpoFixture) url(path string, args ...any) string {
	return f.base + fmt.Sprintf(path, args...)
}

// startGRPONode starts a node holding the real run's records, the run
// without its last point (which the test adds while a page is open, as the
// trainer would).
func startGRPONode(t *testing.T) *grpoFixture {
	t.Helper()
	read := func(name string, m proto.Message) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(grpoDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(b, m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	n, base := startUINode(t)
	f := &grpoFixture{node: n, base: base, run: &records.Run{}}
	ctx, db := context.Background(), n.DB()

	read("run.binpb", f.run)
	partial := proto.Clone(f.run).(*records.Run)
	partial.Curve = partial.Curve[:len(partial.Curve)-1]
	if err := db.Runs().Put(ctx, partial); err != nil {
		t.Fatal(err)
	}
	var stats []*records.TaskStats
	names, _ := filepath.Glob(filepath.Join(grpoDir, "*.binpb"))
	for _, path := range names {
		name := filepath.Base(path)
		switch {
		case strings.HasPrefix(name, "env-"):
			e := &records.Environment{}
			read(name, e)
			must(t, db.Environments().Put(ctx, e))
		case strings.HasPrefix(name, "task-"):
			task := &records.Task{}
			read(name, task)
			must(t, db.Tasks().Put(ctx, task))
			f.tasks = append(f.tasks, task)
		case strings.HasPrefix(name, "traj-"):
			traj := &records.Trajectory{}
			read(name, traj)
			must(t, db.Trajectories().Append(ctx, traj))
			f.trajs = append(f.trajs, traj)
		case strings.HasPrefix(name, "stats-"):
			st := &records.TaskStats{}
			read(name, st)
			stats = append(stats, st)
		}
	}
	frontierName, err := os.ReadFile(filepath.Join(grpoDir, "frontier-name.txt"))
	if err != nil {
		t.Fatal(err)
	}
	state := &records.FrontierState{}
	read("frontier-state.binpb", state)
	if err := db.Frontier().Commit(ctx, string(frontierName), state, stats); err != nil {
		t.Fatal(err)
	}
	if len(f.tasks) == 0 || len(f.trajs) == 0 || len(stats) == 0 {
		t.Fatalf("%s: %d tasks, %d episodes, %d posteriors", grpoDir, len(f.tasks), len(f.trajs), len(stats))
	}
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBrowserARealGRPORun opens every page of the dashboard against a node
// holding a real GRPO run's records: none logs a console error; the run
// page draws every stored point and, when the run's last real point is
// stored while it is open, draws it without a reload; every episode page
// shows each of its turns; the held-out point lists its episodes; the
// frontier page draws the run's estimator.
func TestBrowserARealGRPORun(t *testing.T) {
	b := newBrowser(t)
	f := startGRPONode(t)
	q := url.QueryEscape
	n := len(f.run.GetCurve())
	updated := 0
	for _, p := range f.run.GetCurve() {
		if p.GetPhase() == "step" && p.GetMetrics()["loss"] != 0 {
			updated++
		}
	}
	if n < 3 || updated == 0 {
		t.Fatalf("the run holds %d points and %d steps with a loss: not a run that trained", n, updated)
	}

	b.visit(t, f.base, "#runs")
	if !strings.Contains(b.text(t, "#runs"), f.run.GetId()) {
		t.Errorf("runs list lacks %s", f.run.GetId())
	}
	b.noErrors(t, "runs list")

	b.visit(t, f.url("run?id=%s", q(f.run.GetId())), "#charts")
	b.waitAttr(t, "#charts", "data-points", fmt.Sprint(n-1))
	for _, id := range []string{"held_out", "solve_rate", "loss", "grad_norm", "policy_version"} {
		if b.count(t, "#chart-"+id+" canvas") != 1 {
			t.Errorf("no %s chart", id)
		}
	}
	b.waitAttr(t, "#live", "class", "live on")
	b.noErrors(t, "run page")

	// The run's last point, as the trainer stored it, arrives live.
	if err := f.node.DB().Runs().Put(context.Background(), f.run); err != nil {
		t.Fatal(err)
	}
	b.waitAttr(t, "#charts", "data-points", fmt.Sprint(n))
	last := f.run.GetCurve()[n-1]
	row := b.text(t, fmt.Sprintf(`#points tr[data-index="%d"]`, n-1))
	if !strings.Contains(row, fmt.Sprint(last.GetStep())) {
		t.Errorf("the last point's row reads %q, want its step %d", row, last.GetStep())
	}
	b.noErrors(t, "run page after the live update")
	b.screenshot(t, "grpo-run")

	for _, traj := range f.trajs {
		b.visit(t, f.url("trajectory?id=%s", q(traj.GetId())), "#turns")
		if got, want := b.count(t, "#turns li.turn"), len(traj.GetTurns()); got != want {
			t.Errorf("episode %s: %d turns shown, want %d", traj.GetId(), got, want)
		}
		if got := b.text(t, "#ending"); got != traj.GetTermination() {
			t.Errorf("episode %s: ending %q, want %q", traj.GetId(), got, traj.GetTermination())
		}
		b.noErrors(t, "episode "+traj.GetId())
	}

	// The start point's held-out episodes, from its link on the run page.
	b.visit(t, f.url("run?id=%s", q(f.run.GetId())), "#points")
	href := js[string](t, b, `(function(a){return a ? a.href : ''})(document.querySelector('#points a[href*="eval=start-0"]'))`)
	if href == "" {
		t.Fatal("the run page links to no held-out episodes of its start point")
	}
	b.visit(t, href, "#trajectories")
	if b.count(t, "#trajectories tbody tr") == 0 {
		t.Error("the start point lists no held-out episodes")
	}
	b.noErrors(t, "held-out episodes")

	// The episodes a step's policy version played.
	version := int64(-1)
	for _, tr := range f.trajs {
		if tr.GetRunId() == f.run.GetId() {
			version = tr.GetPolicyVersion()
		}
	}
	if version < 0 {
		t.Fatal("no training episode among the records")
	}
	b.visit(t, f.url("trajectories?run=%s&version=%d", q(f.run.GetId()), version), "#trajectories")
	if b.count(t, "#trajectories tbody tr") == 0 {
		t.Errorf("no episodes listed at policy version %d", version)
	}
	b.noErrors(t, fmt.Sprintf("episodes of version %d", version))

	b.visit(t, f.url("task?id=%s", q(f.tasks[0].GetId())), "#statement")
	if b.count(t, "#gold-diff span.add") == 0 {
		t.Error("task page: no gold diff")
	}
	b.noErrors(t, "task page")
	b.visit(t, f.url("tasks"), "#tasks")
	b.noErrors(t, "tasks list")
	b.visit(t, f.url("cluster"), "#members")
	b.noErrors(t, "cluster page")
	b.visit(t, f.url("frontier"), "#pool")
	if b.count(t, "#pool tbody tr") == 0 {
		t.Error("frontier page: the run's pool is empty")
	}
	time.Sleep(200 * time.Millisecond)
	b.noErrors(t, "frontier page")
	b.screenshot(t, "grpo-frontier")
}
