package frontier

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
)

func ask(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, msg any) any {
	t.Helper()
	res, err := sys.Root.RequestFuture(pid, msg, 10*time.Second).Result()
	if err != nil {
		t.Fatalf("ask %T: %v", msg, err)
	}
	return res
}

// TestActorRestartKeepsState stops the actor (as a crash or a node restart
// would) and spawns it again on the same Badger database: the state it
// reports is identical, and it goes on from there.
func TestActorRestartKeepsState(t *testing.T) {
	ctx := context.Background()
	db, err := persistence.Open(t.TempDir(), persistence.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tasks []*messages.Task
	for i := range 10 {
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), "six", "off_by_one", 1+i%2, i%3))
	}
	if err := db.Tasks().PutMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	sys := actor.NewActorSystem()
	props := Props(ActorConfig{Tasks: db.Tasks(), Curriculum: db.Curriculum(), State: db.Frontier(), Logger: quiet})
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
	if f, ok := ask(t, sys, pid, &messages.BatchRequest{Tasks: 0}).(*messages.Failure); !ok || f.GetCode() != "bad_request" {
		t.Errorf("empty batch request answered %v", f)
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
					ctx.Respond(&messages.Failure{Code: "containerd", Message: "containerd is not running"})
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
				Tasks: mem.Tasks(), Curriculum: mem.Curriculum(), State: persistence.NewMemoryFrontier(mem.Curriculum()),
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
