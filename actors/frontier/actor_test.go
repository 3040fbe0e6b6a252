package frontier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

func ask(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, msg any) any {
	t.Helper()
	res, err := sys.Root.RequestFuture(pid, msg, 10*time.Second).Result()
	if err != nil {
		t.Fatalf("ask %T: %v", msg, err)
	}
	return res
}

// dbWithTasks is a Badger database, closed when the test ends, holding tasks.
func dbWithTasks(t *testing.T, tasks []*records.Task) *persistence.DB {
	t.Helper()
	db, err := persistence.Open(t.TempDir(), persistence.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.Tasks().PutMany(context.Background(), tasks); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestActorRestartKeepsState stops the actor (as a crash or a node restart
// would) and spawns it again on the same Badger database: the state it
// reports is identical, and it goes on from there.
func TestActorRestartKeepsState(t *testing.T) {
	var tasks []*records.Task
	for i := range 10 {
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), "six", "off_by_one", 1+i%2, i%3))
	}
	db := dbWithTasks(t, tasks)
	sys := actor.NewActorSystem()
	props := Props(ActorConfig{Tasks: db.Tasks(), State: db.Frontier(), Logger: quiet})
	pid, err := sys.Root.SpawnNamed(props, ActorName)
	if err != nil {
		t.Fatal(err)
	}
	for v := int64(0); v < 3; v++ {
		batch, ok := ask(t, sys, pid, &messages.BatchRequest{Tasks: 3, PolicyVersion: v}).(*messages.TaskBatch)
		if !ok || len(batch.GetTasks()) != 3 || batch.GetPolicyVersion() != v {
			t.Fatalf("batch %d: %v", v, batch)
		}
		var outs []*messages.EpisodeOutcome
		for i, tk := range batch.GetTasks() {
			outs = append(outs, outcomes(tk.GetId(), v, float64(i%2), 1, 0, 1)...)
		}
		outs = append(outs, &messages.EpisodeOutcome{TaskId: "ghost", PolicyVersion: v, Reward: 1})
		ack, ok := ask(t, sys, pid, &messages.OutcomesReport{Outcomes: outs}).(*messages.OutcomesAck)
		if !ok || ack.GetRecorded() != 12 {
			t.Fatalf("ack %v, want 12 recorded", ack)
		}
	}
	if r := ask(t, sys, pid, &messages.BatchRequest{Tasks: 0}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Errorf("empty batch request answered %v", r)
	}
	before := ask(t, sys, pid, &messages.FrontierStateRequest{}).(*messages.FrontierStateReply)
	if before.GetState().GetCounters()[CountUnknownTask] != 3 || before.GetState().GetReports() != 3 {
		t.Errorf("state before restart: %v", before.GetState().GetCounters())
	}
	if err := sys.Root.PoisonFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	pid, err = sys.Root.SpawnNamed(props, ActorName)
	if err != nil {
		t.Fatal(err)
	}
	after := ask(t, sys, pid, &messages.FrontierStateRequest{}).(*messages.FrontierStateReply)
	if !proto.Equal(before, after) {
		t.Errorf("state after restart differs:\nbefore %v\n after %v", before, after)
	}
	if batch := ask(t, sys, pid, &messages.BatchRequest{Tasks: 3, PolicyVersion: 3}).(*messages.TaskBatch); len(batch.GetTasks()) != 3 {
		t.Errorf("batch after restart: %v", batch)
	}
}

// TestActorSynthesizerCannotDeliver: a synthesizer that answers with a
// Failure, and one that does not exist, are both recorded as failed
// requests, counted, and their settings backed off.
func TestActorSynthesizerCannotDeliver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		synth func(sys *actor.ActorSystem) *actor.PID
		want  string
	}{
		{"failure", func(sys *actor.ActorSystem) *actor.PID {
			return sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
				if _, ok := ctx.Message().(*messages.SynthesizeRequest); ok {
					ctx.Respond(&messages.SynthesizeProgress{Stage: "screening"})
					ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_CONTAINERD, errors.New("containerd is not running")))
				}
			}))
		}, "containerd is not running"},
		{"gone", func(sys *actor.ActorSystem) *actor.PID {
			return actor.NewPID(sys.Address(), "no-such-synthesizer")
		}, "stopped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := persistence.NewMemory()
			if err := mem.Tasks().Put(ctx, task("t0", "six", "off_by_one", 1, 1)); err != nil {
				t.Fatal(err)
			}
			sys := actor.NewActorSystem()
			pid := sys.Root.Spawn(Props(ActorConfig{
				Tasks: mem.Tasks(), State: mem.Frontier(),
				Synthesis: true, Synthesizer: tc.synth(sys), Logger: quiet,
				Params: Params{TargetFrontier: 4, Operators: []string{"off_by_one"}},
			}))
			ask(t, sys, pid, &messages.BatchRequest{Tasks: 1})
			deadline := time.Now().Add(10 * time.Second)
			for {
				st := ask(t, sys, pid, &messages.FrontierStateRequest{}).(*messages.FrontierStateReply).GetState()
				if st.GetCounters()[CountSynthFailed] == 1 {
					rec := st.GetSynthesis()[0]
					if rec.GetStatus() != StatusFailed || !strings.Contains(rec.GetError(), tc.want) || len(st.GetSpecBackoff()) != 1 {
						t.Errorf("failed request %v, backoff %v", rec, st.GetSpecBackoff())
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("no failure recorded: counters %v, requests %v", st.GetCounters(), st.GetSynthesis())
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestEachRunHasItsOwnEstimator: two training runs on one node keep their
// own posteriors and policy versions. A new run at version 0 after another
// reached version 100 is recorded, not refused as stale; the latest
// estimator is the one that was active last; all of it survives a restart.
func TestEachRunHasItsOwnEstimator(t *testing.T) {
	ctx := context.Background()
	var tasks []*records.Task
	for i := range 6 {
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), "six", "off_by_one", 1, i%3))
	}
	db := dbWithTasks(t, tasks)
	sys := actor.NewActorSystem()
	props := Props(ActorConfig{Tasks: db.Tasks(), State: db.Frontier(), Logger: quiet})
	pid, err := sys.Root.SpawnNamed(props, ActorName)
	if err != nil {
		t.Fatal(err)
	}
	play := func(run string, version int64, reward float64) *messages.OutcomesAck {
		t.Helper()
		batch, ok := ask(t, sys, pid, &messages.BatchRequest{Tasks: 2, PolicyVersion: version, Run: run, Mode: "patch"}).(*messages.TaskBatch)
		if !ok || len(batch.GetTasks()) != 2 {
			t.Fatalf("run %s: batch %v", run, batch)
		}
		var outs []*messages.EpisodeOutcome
		for _, tk := range batch.GetTasks() {
			outs = append(outs, outcomes(tk.GetId(), version, reward, reward, reward, reward)...)
		}
		ack, ok := ask(t, sys, pid, &messages.OutcomesReport{Outcomes: outs, Run: run}).(*messages.OutcomesAck)
		if !ok {
			t.Fatalf("run %s: report answered %v", run, ack)
		}
		return ack
	}
	state := func(req *messages.FrontierStateRequest) *messages.FrontierStateReply {
		t.Helper()
		r, ok := ask(t, sys, pid, req).(*messages.FrontierStateReply)
		if !ok {
			t.Fatalf("state %v: %v", req, r)
		}
		return r
	}
	if ack := play("run-a", 100, 1); ack.GetRecorded() != 8 {
		t.Fatalf("run-a recorded %d of 8", ack.GetRecorded())
	}
	if ack := play("run-b", 0, 0); ack.GetRecorded() != 8 {
		t.Fatalf("run-b at version 0 after run-a at 100: recorded %d of 8 (refused as stale?)", ack.GetRecorded())
	}
	a := state(&messages.FrontierStateRequest{Run: "run-a"})
	b := state(&messages.FrontierStateRequest{Run: "run-b"})
	def := state(&messages.FrontierStateRequest{})
	if a.GetEstimator() != "run-a" || a.GetState().GetPolicyVersion() != 100 || a.GetState().GetCounters()[CountRecorded] != 8 {
		t.Errorf("run-a: %s at v%d, counters %v", a.GetEstimator(), a.GetState().GetPolicyVersion(), a.GetState().GetCounters())
	}
	if b.GetEstimator() != "run-b" || b.GetState().GetPolicyVersion() != 0 || b.GetState().GetCounters()[CountRecorded] != 8 ||
		b.GetState().GetCounters()[CountStaleVersion] != 0 {
		t.Errorf("run-b: %s at v%d, counters %v", b.GetEstimator(), b.GetState().GetPolicyVersion(), b.GetState().GetCounters())
	}
	if def.GetEstimator() != persistence.DefaultFrontier || def.GetState().GetReports() != 0 {
		t.Errorf("default estimator: %s with %d reports, want none", def.GetEstimator(), def.GetState().GetReports())
	}
	// Each run's posteriors hold only its own outcomes: all solved in a,
	// none in b.
	sa, err := db.Frontier().Stats(ctx, "run-a")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := db.Frontier().Stats(ctx, "run-b")
	if err != nil {
		t.Fatal(err)
	}
	if len(sa) != 2 || len(sb) != 2 {
		t.Fatalf("stats: run-a %d tasks, run-b %d", len(sa), len(sb))
	}
	for _, st := range sa {
		if st.GetAttempts() != 4 || st.GetSuccesses() != 4 {
			t.Errorf("run-a %s: %d of %d", st.GetTaskId(), st.GetSuccesses(), st.GetAttempts())
		}
	}
	for _, st := range sb {
		if st.GetAttempts() != 4 || st.GetSuccesses() != 0 {
			t.Errorf("run-b %s: %d of %d", st.GetTaskId(), st.GetSuccesses(), st.GetAttempts())
		}
	}
	if l := state(&messages.FrontierStateRequest{Latest: true}); l.GetEstimator() != "run-b" {
		t.Errorf("latest estimator %s, want run-b", l.GetEstimator())
	}
	play("run-a", 101, 1)
	if l := state(&messages.FrontierStateRequest{Latest: true}); l.GetEstimator() != "run-a" {
		t.Errorf("latest estimator %s after run-a played again, want run-a", l.GetEstimator())
	}
	if r := ask(t, sys, pid, &messages.FrontierStateRequest{Run: "run-typo"}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND) {
		t.Errorf("the state of a run that never asked for a batch: %v", r)
	}
	if r := ask(t, sys, pid, &messages.BatchRequest{Tasks: 1, Run: "bad\x00run"}); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Errorf("a run with a NUL byte answered %v", r)
	}
	before := []*messages.FrontierStateReply{state(&messages.FrontierStateRequest{Run: "run-a"}), state(&messages.FrontierStateRequest{Run: "run-b"})}
	if err := sys.Root.PoisonFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	if pid, err = sys.Root.SpawnNamed(props, ActorName); err != nil {
		t.Fatal(err)
	}
	for i, run := range []string{"run-a", "run-b"} {
		if after := state(&messages.FrontierStateRequest{Run: run}); !proto.Equal(before[i], after) {
			t.Errorf("%s after restart differs:\nbefore %v\n after %v", run, before[i], after)
		}
	}
	if l := state(&messages.FrontierStateRequest{Latest: true}); l.GetEstimator() != "run-a" {
		t.Errorf("latest estimator after restart %s, want run-a", l.GetEstimator())
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Errorf("CheckConsistency: %v", err)
	}
}
