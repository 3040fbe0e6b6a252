package synth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/containerd/containerd/namespaces"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// ourSandboxes lists the containers this test process owns in the test
// namespace (their owner label names this pid).
func ourSandboxes(t *testing.T, rt *sandbox.Runtime) []string {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), rt.Namespace())
	cs, err := rt.Client().Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := fmt.Sprintf("/%d/", os.Getpid())
	var ours []string
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if err == nil && strings.Contains(labels[sandbox.LabelOwner], pid) {
			ours = append(ours, c.ID())
		}
	}
	return ours
}

// TestNodeStopEndsSynthesisAndItsSandboxes: a node stopped while its
// synthesizer validates candidates (a training run ending cleanly while a
// synthesis request of its frontier is in flight) cancels the synthesis
// and has destroyed every validation sandbox by the time Stop returns.
// Before, Stop left the synthesis running, and the process exited with its
// sandboxes in containerd (the fault-injection suite's clean-exit finding).
func TestNodeStopEndsSynthesisAndItsSandboxes(t *testing.T) {
	env := mixinEnv(t)
	rt := needRuntime(t)
	if left := ourSandboxes(t, rt); len(left) > 0 {
		t.Fatalf("sandboxes of this process before the test: %v", left)
	}
	stores := persistence.NewMemory()
	if err := stores.Environments().Put(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Log.Level = "warn"
	n, err := node.Start(context.Background(), cfg, node.Options{Version: "test", Logger: quietLogger(), Actors: []node.NamedActor{{
		Name: ActorName,
		Props: func(*node.Node) *actor.Props {
			return Props(ActorConfig{Environments: stores.Environments(), Tasks: stores.Tasks(), Coverage: persistence.NewMemoryCoverage(),
				Runtime: func(context.Context) (*sandbox.Runtime, error) { return rt, nil }, Workers: 1, Logger: quietLogger()})
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			n.Stop(context.Background())
		}
	})

	replies := make(chan any, 256)
	n.System().Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch m := ctx.Message().(type) {
		case *actor.Started:
			ctx.Request(actor.NewPID(n.Address(), ActorName),
				&messages.SynthesizeRequest{Environment: env.Name, Count: 1000, Seed: 3, Target: &records.DifficultyFeatures{HintLevel: 1}})
		case *messages.SynthesizeProgress, *messages.SynthesizeResult, *rtmsg.Failure:
			replies <- m
		}
	}))
	// Wait for a validation sandbox to be up and a candidate judged.
	deadline := time.Now().Add(3 * time.Minute)
	validating := false
	for !validating || len(ourSandboxes(t, rt)) == 0 {
		select {
		case m := <-replies:
			switch m := m.(type) {
			case *messages.SynthesizeProgress:
				validating = validating || m.GetCandidates() > 0
			default:
				t.Fatalf("the synthesis ended before the node was stopped: %v", m)
			}
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no validation under way after 3 minutes")
		}
	}
	inFlight := ourSandboxes(t, rt)
	start := time.Now()
	stopped = true
	if err := n.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if left := ourSandboxes(t, rt); len(left) > 0 {
		t.Fatalf("after Stop returned, the synthesis's sandboxes %v are still in containerd (in flight at Stop: %v)", left, inFlight)
	}
	t.Logf("Stop took %v and destroyed the validation sandboxes %v", time.Since(start).Round(100*time.Millisecond), inFlight)
}
