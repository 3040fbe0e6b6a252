package learner

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/kernels/grpo"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/model/modeltest"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

func toProto(groups []grpo.Group) []*messages.TrajectoryGroup {
	var out []*messages.TrajectoryGroup
	for _, g := range groups {
		tg := &messages.TrajectoryGroup{}
		for _, s := range g {
			tg.Trajectories = append(tg.Trajectories, &records.Trajectory{TokenIds: s.Tokens, PolicyMask: s.PolicyMask, Logprobs: s.SamplerLogProbs, Reward: s.Reward})
		}
		out = append(out, tg)
	}
	return out
}

// TestActor drives the actor: a batch trains, an SFT batch is evaluated
// and trains, each LearnerStep names its published step and the store
// already holds those weights when the step answers (they load at once and
// equal the same step's outside the actor), a bad batch is a Failure, and
// stopping the actor writes a final checkpoint that a restarted actor
// resumes from.
func TestActor(t *testing.T) {
	dir := tinyDir(t, modeltest.Llama, 8)
	store := persistence.NewMemory().Checkpoints()
	open := func(ctx context.Context) (*Learner, error) {
		m, err := model.LoadHF(dir, model.Options{})
		if err != nil {
			return nil, err
		}
		cfg := testConfig(m, store)
		cfg.PublishEvery = 1
		return Open(ctx, cfg)
	}
	sys := actor.NewActorSystem()
	pid := sys.Root.Spawn(Props(ActorConfig{Open: open}))

	// published loads what a step names, as the Sampler does when the
	// Trainer hands it on.
	published := func(st *messages.LearnerStep) map[string][]float32 {
		t.Helper()
		sm := load(t, dir)
		if _, err := LoadPublished(context.Background(), store, sm, "run1", st.PublishedStep); err != nil {
			t.Fatalf("step %d: published weights v%d do not load when the step answers: %v", st.Step, st.PublishedStep, err)
		}
		return weights(t, sm)
	}

	res, err := sys.Root.RequestFuture(pid, &messages.LearnerStatusRequest{}, 5*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if s := res.(*messages.LearnerStatus); s.PublishedStep != -1 || s.PolicyVersion != 0 {
		t.Fatalf("status before any step %v, want nothing published", s)
	}

	base, _ := model.LoadHF(dir, model.Options{})
	res, err = sys.Root.RequestFuture(pid, &messages.LearnerTrainBatch{BatchId: "b1", Groups: toProto(batch(t, base, 1))}, 30*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	st, ok := res.(*messages.LearnerStep)
	if !ok {
		t.Fatalf("reply %T %v", res, res)
	}
	if st.Step != 1 || st.PolicyVersion != 1 || st.PublishedStep != 1 || st.BatchId != "b1" || st.Skipped != "" {
		t.Fatalf("step reply %v", st)
	}
	// The same step outside the actor gives the published weights.
	ref, err := Open(context.Background(), testConfig(load(t, dir), persistence.NewMemory().Checkpoints()))
	if err != nil {
		t.Fatal(err)
	}
	step(t, ref, batch(t, base, 1))
	sameBits(t, "published weights", weights(t, ref.Model()), published(st))

	// An SFT step: evaluated, trained, published like a GRPO step.
	var demoTrajs []*records.Trajectory
	for _, d := range demos(t, base, 4, 4) {
		demoTrajs = append(demoTrajs, &records.Trajectory{TokenIds: d.Tokens, PolicyMask: d.PolicyMask})
	}
	res, err = sys.Root.RequestFuture(pid, &messages.LearnerSFTEvaluate{BatchId: "e1", Trajectories: demoTrajs}, 30*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	ev, ok := res.(*messages.LearnerSFTLoss)
	if !ok || ev.BatchId != "e1" || !(ev.Nll > 0) || ev.PolicyTokens == 0 || ev.PolicyVersion != 1 {
		t.Fatalf("evaluation reply %T %v", res, res)
	}
	res, err = sys.Root.RequestFuture(pid, &messages.LearnerSFTBatch{BatchId: "s1", Trajectories: demoTrajs, Lr: 1e-2}, 30*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	st, ok = res.(*messages.LearnerStep)
	if !ok || st.Step != 2 || st.PolicyVersion != 2 || st.PublishedStep != 2 || st.BatchId != "s1" || st.Lr != 1e-2 ||
		st.PolicyTokens != ev.PolicyTokens || math.Abs(st.Loss-ev.Nll) > 1e-4 {
		t.Fatalf("SFT step reply %T %v (evaluation %v)", res, res, ev)
	}
	published(st)
	res, _ = sys.Root.RequestFuture(pid, &messages.LearnerSFTBatch{BatchId: "s2", Trajectories: demoTrajs}, 10*time.Second).Result()
	if !rtmsg.IsFailure(res, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Fatalf("SFT batch without a learning rate: reply %v", res)
	}

	bad := toProto(batch(t, base, 2))
	bad[0].Trajectories[0].PolicyMask = bad[0].Trajectories[0].PolicyMask[:1]
	res, _ = sys.Root.RequestFuture(pid, &messages.LearnerTrainBatch{BatchId: "bad", Groups: bad}, 10*time.Second).Result()
	if !rtmsg.IsFailure(res, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Fatalf("bad batch: reply %v", res)
	}
	res, _ = sys.Root.RequestFuture(pid, &messages.LearnerStatusRequest{}, 5*time.Second).Result()
	if s := res.(*messages.LearnerStatus); s.Step != 2 || s.LastCheckpointStep != -1 || s.PublishedStep != 2 {
		t.Fatalf("status %v", s)
	}

	if err := sys.Root.StopFuture(pid).Wait(); err != nil {
		t.Fatal(err)
	}
	steps, _ := store.Steps(context.Background(), TrainRunID("run1"))
	if len(steps) != 1 || steps[0] != 2 {
		t.Fatalf("training checkpoints after stop: %v, want [2]", steps)
	}
	pid = sys.Root.Spawn(Props(ActorConfig{Open: open}))
	res, _ = sys.Root.RequestFuture(pid, &messages.LearnerStatusRequest{}, 5*time.Second).Result()
	if s := res.(*messages.LearnerStatus); s.Step != 2 || s.PolicyVersion != 2 || s.LastCheckpointStep != 2 {
		t.Fatalf("restarted actor status %v", s)
	}
}

// TestPickGPU: the GPU with the most free memory wins; without GPUs the
// CPU backend is chosen.
func TestSelectBackend(t *testing.T) {
	if b := SelectBackend(&rtmsg.Capabilities{}, nil); b.Name()[:3] != "cpu" {
		t.Fatalf("no GPUs: backend %s", b.Name())
	}
	if b := SelectBackend(&rtmsg.Capabilities{Gpus: []*rtmsg.GPU{{Uuid: "GPU-x"}}}, nil); b.Name()[:3] != "cpu" {
		t.Fatalf("GPU in a build without the CUDA backend that trains: backend %s", b.Name())
	}
	best := pickGPU([]GPUFree{{UUID: "a", FreeBytes: 10}, {UUID: "b", FreeBytes: 30}, {UUID: "c", FreeBytes: 20}})
	if best.UUID != "b" {
		t.Fatalf("picked %s, want b (most free memory)", best.UUID)
	}
}
