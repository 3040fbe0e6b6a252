package ui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/actors/frontier"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/actors/ui"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

// The records under testdata/real were read out of a real node's store: a
// training run of SmolLM2-135M as it stood after its start evaluation, five
// of its episodes (two held-out ones, three of its warm start, whose
// patches applied), the warm start's tasks and their environment.
// startNode writes them into a fresh node's store through the persistence
// API, then plays the run on: it adds step points the way the trainer
// does, so the run page has a curve to draw.

const realRun = "run-20261201-202002.493"

func readProto(t *testing.T, name string, m proto.Message) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "real", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

type fixture struct {
	node  *node.Node
	base  string // http://HOST:PORT/ui/
	run   *records.Run
	trajs []*records.Trajectory
	tasks []*records.Task
	env   *records.Environment
}

// stepPoint is what the trainer records after step n (trainer.go's step):
// the training figures, the batch's hint mix, the clock; every third step
// is an evaluation point with held-out scores (made-up values of the shape
// the trainer writes).
func stepPoint(n int, version int64) *records.RunPoint {
	var held []*records.HeldOutScore
	if n%3 == 0 {
		for _, h := range []struct {
			level int32
			tasks int32
			pass  float64
		}{{3, 4, 0.125 * float64(n/3)}, {4, 8, 0.0625 * float64(n/3)}, {-1, 12, 0.083 * float64(n/3)}} {
			held = append(held, &records.HeldOutScore{HintLevel: h.level, Mode: "patch", Tasks: h.tasks, Episodes: 2 * h.tasks,
				Pass1: h.pass, Pass1Low: max(0, h.pass-0.1), Pass1High: min(1, h.pass+0.15)})
		}
	}
	m := map[string]float64{
		"solve_rate": 0.2 + 0.05*float64(n%4), "effective_fraction": 0.5 + 0.1*float64(n%3),
		"batch_hint_1": 0.5, "batch_hint_3": 0.25, "batch_hint_4": 0.25,
		"rollouts": 16 * float64(n), "train_seconds": 380 + 90*float64(n),
		// Where the step's time went, as the trainer records it.
		trainer.PointSecondsRollouts: 70 + float64(n), trainer.PointSecondsLearning: 20,
		trainer.MetricEpisodeGeneration: 8 * 41.5, trainer.MetricEpisodeSandbox: 8 * 3.25,
	}
	// The Learner's answer and the frontier's pool, through the trainer's
	// own conversion into point metrics.
	trainer.LearnerPointMetrics(m, &messages.LearnerStep{Step: int64(n), PolicyVersion: version,
		Loss: 0.05 - 0.004*float64(n), GradNorm: 1.5 - 0.1*float64(n), PolicyTokens: 512, ClipFraction: 0.02 * float64(n),
		MeanAbsLogRatio: 0.01 * float64(n), MaxAbsLogRatio: 0.3 * float64(n)})
	trainer.PoolPointMetrics(m, poolAt(n))
	return &records.RunPoint{Step: int64(n), Phase: "step", PolicyVersion: version, HeldOut: held,
		WallSeconds: 420 + 95*float64(n), CpuSeconds: 610 + 170*float64(n), Metrics: m}
}

// poolAt is a FrontierEstimator's answer after step n (made-up counts of
// the shape frontier.Snapshot answers): tasks move from too hard to the
// frontier as the steps go by, at hint levels 1, 3 and 4.
func poolAt(n int) *messages.FrontierStateReply {
	return &messages.FrontierStateReply{Pool: []*messages.FrontierBand{
		{Name: frontier.BandTooHard, Tasks: int32(12 - n), Low: 0, High: 0.2, HintTasks: map[int32]int32{1: int32(8 - n), 3: 3, 4: 1}},
		{Name: frontier.BandFrontier, Tasks: int32(4 + n), Low: 0.2, High: 0.8, HintTasks: map[int32]int32{1: int32(n), 3: 2, 4: 2}},
		{Name: frontier.BandTooEasy, Tasks: 1, Low: 0.8, High: 1, HintTasks: map[int32]int32{4: 1}},
		{Name: frontier.BandRetiredHopeless, Tasks: 0, Low: 0, High: 0.05},
		{Name: frontier.BandRetiredMastered, Tasks: 0, Low: 0.95, High: 1},
	}}
}

// startUINode starts a node on loopback with the dashboard mounted and a
// diag kind, and returns it with the dashboard's base URL.
func startUINode(t *testing.T) (*node.Node, string) {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr = "127.0.0.1:0"
	cfg.Node.RemoteAddr = "127.0.0.1:0"
	cfg.Cluster.Heartbeat = 100 * time.Millisecond
	cfg.Cluster.FailureTimeout = time.Second
	cfg.Log.Level = "warn"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.Start(context.Background(), cfg, diag.NodeOptions(node.Options{Version: "test", Logger: quiet, Handlers: []node.Handler{ui.NodeHandler()}}))
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	return n, "http://" + n.HTTPAddr() + ui.Prefix
}

func startNode(t *testing.T, steps int) *fixture {
	t.Helper()
	n, base := startUINode(t)
	f := &fixture{node: n, base: base}
	ctx := context.Background()
	db := n.DB()

	f.run = &records.Run{}
	readProto(t, "run.binpb", f.run)
	if f.run.GetId() != realRun || len(f.run.GetCurve()) != 1 || len(f.run.GetCurve()[0].GetHeldOut()) == 0 {
		t.Fatalf("testdata run: %s with %d points", f.run.GetId(), len(f.run.GetCurve()))
	}
	// The start evaluation's wall time (this record was read out before the
	// trainer kept it; the value is made up, of the shape it writes).
	if f.run.Metrics[trainer.MetricEvalSeconds] == 0 {
		f.run.Metrics[trainer.MetricEvalSeconds] = 372
	}
	for i := 1; i <= steps; i++ {
		f.run.Curve = append(f.run.Curve, stepPoint(i, int64(i)))
		// The training episodes' own seconds, as the trainer adds them
		// up after each step (eight episodes of made-up durations).
		f.run.Metrics[trainer.MetricEpisodeGeneration] += 8 * 41.5
		f.run.Metrics[trainer.MetricEpisodeSandbox] += 8 * 3.25
		f.run.Metrics[trainer.MetricEpisodeGrading] += 8 * 2.5
	}
	f.run.Step = int64(steps)
	if err := db.Runs().Put(ctx, f.run); err != nil {
		t.Fatal(err)
	}

	f.env = &records.Environment{}
	readProto(t, "env.binpb", f.env)
	if err := db.Environments().Put(ctx, f.env); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob(filepath.Join("testdata", "real", "*.binpb"))
	for _, path := range names {
		name := filepath.Base(path)
		switch {
		case strings.HasPrefix(name, "task-"):
			task := &records.Task{}
			readProto(t, name, task)
			if err := db.Tasks().Put(ctx, task); err != nil {
				t.Fatal(err)
			}
			f.tasks = append(f.tasks, task)
		case strings.HasPrefix(name, "traj-"):
			traj := &records.Trajectory{}
			readProto(t, name, traj)
			if err := db.Trajectories().Append(ctx, traj); err != nil {
				t.Fatal(err)
			}
			f.trajs = append(f.trajs, traj)
		}
	}
	if len(f.tasks) == 0 || len(f.trajs) == 0 {
		t.Fatal("testdata: no tasks or trajectories")
	}
	// A training episode of step 1 (played at v0), made from a real one.
	train := proto.Clone(f.trajs[len(f.trajs)-1]).(*records.Trajectory)
	train.RunId, train.Id, train.PolicyVersion = realRun, realRun+"/step-1/"+train.GetTaskId(), 0
	if err := db.Trajectories().Append(ctx, train); err != nil {
		t.Fatal(err)
	}
	f.trajs = append(f.trajs, train)

	// The frontier's record of the pool: posteriors for the tasks, a
	// calibration and one synthesis request.
	var stats []*records.TaskStats
	for i, task := range f.tasks {
		stats = append(stats, &records.TaskStats{TaskId: task.GetId(), Alpha: 1 + float64(i), Beta: 3, Attempts: int64(4 * (i + 1)), Successes: int64(i), PolicyVersion: 1})
	}
	state := &records.FrontierState{PolicyVersion: 1, BatchSeq: 3, TotalGroups: 12, TotalEffectiveGroups: 5, Mode: "patch",
		Calibration:      []*records.CalibrationBin{{PredictedSum: 1, ObservedSum: 0.5, Episodes: 8}, {PredictedSum: 4, ObservedSum: 5, Episodes: 10}},
		ModelCalibration: []*records.CalibrationBin{{PredictedSum: 2, ObservedSum: 1, Episodes: 6}},
		Synthesis: []*records.SynthesisRecord{{Id: "synth-1", Spec: &records.SynthesisSpec{Environment: f.env.GetName(), Operators: []string{"swap_operands"}, Bugs: 1, HintLevel: 3, Mode: "patch"},
			Asked: 4, Predicted: 0.4, Status: "done", TaskIds: []string{f.tasks[0].GetId()}, Graded: 1, Effective: 1}},
		Counters: map[string]int64{"outcomes": 48}}
	if err := db.Frontier().Commit(ctx, persistence.DefaultFrontier, state, stats); err != nil {
		t.Fatal(err)
	}
	return f
}

// appendPoint records one more step of the run, as the trainer does
// between two reads of the page.
func (f *fixture) appendPoint(t *testing.T) *records.RunPoint {
	t.Helper()
	ctx := context.Background()
	run, err := f.node.DB().Runs().Get(ctx, realRun)
	if err != nil {
		t.Fatal(err)
	}
	n := len(run.GetCurve())
	p := stepPoint(n, int64(n))
	p.Metrics["solve_rate"] = 0.875
	run.Curve = append(run.Curve, p)
	run.Step = int64(n)
	if err := f.node.DB().Runs().Put(ctx, run); err != nil {
		t.Fatal(err)
	}
	f.run = run
	return p
}

func (f *fixture) url(path string, args ...any) string { return f.base + fmt.Sprintf(path, args...) }
