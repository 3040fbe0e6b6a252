package sandboxworker

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/errdefs"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// base is a runtime and its base image, for tests that need a container
// but no environment.
var base struct {
	once sync.Once
	rt   *sandbox.Runtime
	img  string
	err  error
}

func baseImage(t *testing.T) (*sandbox.Runtime, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs containerd; skipped with -short")
	}
	base.once.Do(func() {
		ctx := context.Background()
		if base.rt, base.err = sandbox.New(ctx, sandbox.Config{Logger: quiet}); base.err == nil {
			base.img, base.err = base.rt.EnsureBaseImage(ctx)
		}
	})
	if base.err != nil {
		t.Skipf("no containerd or base image: %v", base.err)
	}
	return base.rt, base.img
}

// startNode starts a node on loopback with fast membership, offering the
// worker kind when rt is not nil.
func startNode(t *testing.T, rt *sandbox.Runtime, seeds ...string) *node.Node {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Cluster.Seeds = seeds
	cfg.Cluster.Heartbeat, cfg.Cluster.FailureTimeout = 100*time.Millisecond, time.Second
	cfg.Log.Level = "warn"
	var kinds []node.Kind
	if rt != nil {
		kinds = append(kinds, node.Kind{Name: Kind, Props: func(*node.Node) *actor.Props {
			return Props(Config{Runtime: func(context.Context) (*sandbox.Runtime, error) { return rt, nil },
				Environments: persistence.NewMemory().Environments(), Logger: quiet})
		}})
	}
	n, err := node.Start(context.Background(), cfg, node.Options{Version: "test", Logger: quiet, Kinds: kinds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	return n
}

// knows reports whether n lists a member at addr.
func knows(n *node.Node, addr string) bool {
	for _, m := range n.Members() {
		if m.Address() == addr {
			return true
		}
	}
	return false
}

func containerExists(t *testing.T, rt *sandbox.Runtime, id string) bool {
	t.Helper()
	_, err := rt.Client().LoadContainer(namespaces.WithNamespace(context.Background(), rt.Namespace()), id)
	if err != nil && !errdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestSandboxOfADepartedMemberIsDestroyed: a run on node B has a worker on
// sandbox node A create a sandbox; while B lives the sandbox stays, and
// when B's process goes (here its node stops without destroying anything,
// as a SIGKILLed run would) A's membership drops B after
// cluster.failure_timeout and the worker destroys the sandbox and stops.
// Before, the container stayed on A for as long as A ran (the
// fault-injection suite's kill-run finding).
func TestSandboxOfADepartedMemberIsDestroyed(t *testing.T) {
	rt, img := baseImage(t)
	a := startNode(t, rt)
	b := startNode(t, nil, a.HTTPAddr())
	deadline := time.Now().Add(20 * time.Second)
	for !knows(a, b.Address()) || !knows(b, a.Address()) {
		if time.Now().After(deadline) {
			t.Fatal("the two nodes never saw each other")
		}
		time.Sleep(50 * time.Millisecond)
	}

	res, err := b.System().Root.RequestFuture(b.Manager(), &rtmsg.SpawnRequest{Kind: Kind, Member: a.Address()}, 30*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	spawned, ok := res.(*rtmsg.SpawnReply)
	if !ok {
		t.Fatalf("spawn answered %v", res)
	}
	worker := actor.NewPID(spawned.Address, spawned.Id)
	res, err = b.System().Root.RequestFuture(worker, &messages.SandboxCreate{Image: img}, 2*time.Minute).Result()
	if err != nil {
		t.Fatal(err)
	}
	created, ok := res.(*messages.SandboxCreated)
	if !ok {
		t.Fatalf("create answered %v", res)
	}
	id := created.SandboxId
	t.Cleanup(func() {
		if containerExists(t, rt, id) { // never leave it behind
			a.System().Root.RequestFuture(worker, &messages.SandboxDestroy{}, time.Minute).Result()
		}
	})

	// Its owner alive, the sandbox stays (3 failure timeouts).
	time.Sleep(3 * time.Second)
	if !containerExists(t, rt, id) {
		t.Fatal("the sandbox was destroyed while the member that asked for it was alive")
	}
	if r, err := b.System().Root.RequestFuture(worker, &messages.SandboxExec{Argv: []string{"true"}, TimeoutSeconds: 10}, 30*time.Second).Result(); err != nil {
		t.Fatalf("the worker stopped answering its live owner: %v", err)
	} else if _, ok := r.(*messages.SandboxExecResult); !ok {
		t.Fatalf("exec answered %v", r)
	}

	stopped := time.Now()
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for containerExists(t, rt, id) {
		if time.Since(stopped) > 30*time.Second {
			t.Fatalf("the sandbox of departed member %s is still on %s 30s later", b.Address(), a.Address())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("sandbox %s destroyed %v after its owner's node stopped", id, time.Since(stopped).Round(100*time.Millisecond))
	if _, err := a.System().Root.RequestFuture(worker, &messages.SandboxExec{Argv: []string{"true"}}, 5*time.Second).Result(); err == nil {
		t.Fatal("the worker still answers after its sandbox was reclaimed")
	}
}
