package sampler

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/sample"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// TestActor drives a Sampler actor through Client: results equal the
// engine's, concurrent requests are batched (the mailbox is not blocked),
// bad requests come back as ErrBadRequest, a cancelled request leaves the
// engine, and a redelivered weight update is acknowledged.
func TestActor(t *testing.T) {
	m := smollm2(t)
	e := newEngine(t, Config{Version: 5})
	system := actor.NewActorSystem()
	defer system.Shutdown()
	pid, err := system.Root.SpawnNamed(Props(ActorConfig{Engine: func(context.Context) (*Engine, error) { return e, nil }}), ActorName)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{Root: system.Root, PID: pid}
	ctx := context.Background()

	reqs := make([]policy.GenerateRequest, 4)
	for i := range reqs {
		reqs[i] = policy.GenerateRequest{PromptIDs: chatPrompt(t, m, questions[i]), MaxTokens: 12, Sampling: sample.Params{Temperature: 0.9, TopK: 50}, Seed: uint64(i), Stop: []int32{imEnd(t, m)}}
	}
	want := make([]policy.GenerateResult, len(reqs))
	for i, r := range reqs {
		if want[i], err = e.Generate(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	steps := e.Stats().Steps
	got := make([]policy.GenerateResult, len(reqs))
	errs := make(chan error, len(reqs))
	for i, r := range reqs {
		go func() {
			var err error
			got[i], err = c.Generate(ctx, r)
			errs <- err
		}()
	}
	for range reqs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var alone int64
	for i := range reqs {
		if !slices.Equal(got[i].TokenIDs, want[i].TokenIDs) || got[i].Finish != want[i].Finish || got[i].PolicyVersion != 5 {
			t.Fatalf("request %d through the actor: %+v, engine: %+v", i, got[i], want[i])
		}
		if _, ok := closeLogProbs(got[i].LogProbs, want[i].LogProbs); !ok {
			t.Fatalf("request %d log-probs: %v vs %v", i, got[i].LogProbs, want[i].LogProbs)
		}
		alone += int64(len(want[i].TokenIDs))
	}
	if batched := e.Stats().Steps - steps; batched >= alone {
		t.Fatalf("%d steps for %d tokens: the actor's requests were not batched", batched, alone)
	}

	if _, err := c.Generate(ctx, policy.GenerateRequest{PromptIDs: []int32{-1}}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("bad request through the actor: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Generate(cctx, policy.GenerateRequest{PromptIDs: reqs[0].PromptIDs, MaxTokens: 4000})
		done <- err
	}()
	for e.Stats().Running == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled through the actor: %v", err)
	}
	// GenerateCancel reached the actor: the sequence leaves the engine
	// (without it, it would run for 4000 tokens).
	deadline := time.Now().Add(time.Minute)
	for e.Stats().Running != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled request still runs: %+v", e.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := e.Stats(); st.GeneratedTokens > alone*3+200 {
		t.Fatalf("the cancelled request ran on: %+v", st)
	}

	res, err := system.Root.RequestFuture(pid, &messages.WeightsPublished{RunId: "r", Step: 1, PolicyVersion: 3}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := res.(*messages.WeightsApplied); !ok || a.PolicyVersion != 5 {
		t.Fatalf("stale WeightsPublished: %v", res)
	}
	res, err = system.Root.RequestFuture(pid, &messages.WeightsPublished{RunId: "r", Step: 1, PolicyVersion: 6}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !rtmsg.IsFailure(res, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Fatalf("WeightsPublished to an engine without a checkpoint store: %v", res)
	}
	res, err = system.Root.RequestFuture(pid, &messages.SamplerStatusRequest{}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := res.(*messages.SamplerStatus); !ok || st.PolicyVersion != 5 || st.Config.GetVocabSize() != 49152 || st.Running != 0 {
		t.Fatalf("status: %v", res)
	}
}
