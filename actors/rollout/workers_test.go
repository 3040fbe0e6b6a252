package rollout

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/containerd/containerd/namespaces"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandboxworker"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
	"github.com/frognano/frognano/runtime/placement"
)

// stoppingWorkers stops the SandboxWorker actor of chosen attempts under
// the episode, right before its first tool call: the worker's actor ends
// (and destroys its container) while the episode still needs it.
type stoppingWorkers struct {
	*Workers
	attempts atomic.Int32
	stop     func(attempt int32) bool
	// sandboxes are the containers of the stopped workers.
	sandboxes chan string
}

func (s *stoppingWorkers) Workspace(ctx context.Context, task *records.Task) (Workspace, error) {
	ws, err := s.Workers.Workspace(ctx, task)
	if err != nil {
		return nil, err
	}
	if !s.stop(s.attempts.Add(1)) {
		return ws, nil
	}
	return &stoppingWorkspace{Workspace: ws, s: s}, nil
}

type stoppingWorkspace struct {
	Workspace
	s    *stoppingWorkers
	once atomic.Bool
}

func (d *stoppingWorkspace) stop() {
	if d.once.CompareAndSwap(false, true) {
		ws := d.Workspace.(*workerWorkspace)
		d.s.sandboxes <- ws.sandboxID
		d.s.Root.Poison(ws.PID)
	}
}

func (d *stoppingWorkspace) ListFiles(ctx context.Context, dir, glob string) ([]string, error) {
	d.stop()
	return d.Workspace.ListFiles(ctx, dir, glob)
}

func (d *stoppingWorkspace) ReadFile(ctx context.Context, p string) ([]byte, error) {
	d.stop()
	return d.Workspace.ReadFile(ctx, p)
}

// TestWorkerDiesMidEpisode: an episode whose SandboxWorker stops under it
// fails at once as a sandbox failure (not after a request timeout) and is
// retried once in a fresh worker; when the retry's worker stops too, the
// episode is an infrastructure failure, stored as such and left out of the
// rewards. The stopped workers' containers are destroyed.
func TestWorkerDiesMidEpisode(t *testing.T) {
	_, tasks := inflectionTasks(t)
	task := tasks[0]
	rt := needRuntime(t)
	script, err := harness.SolveScript(task, harness.ModeAgent)
	if err != nil {
		t.Fatal(err)
	}
	store := badgerStore(t)

	t.Run("retried", func(t *testing.T) {
		s := &stoppingWorkers{Workers: workers(t), stop: func(n int32) bool { return n == 1 }, sandboxes: make(chan string, 2)}
		start := time.Now()
		res, err := scriptedRunner(t, s, store, script).Run(context.Background(), Request{Task: task, Group: 1, Seed: 2, RunID: "worker-dies-once"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ep := res.Episodes[0]
		if ep.Attempts != 2 || ep.Infra || ep.Result.Ending != harness.EndSubmitted || ep.Result.Reward != 1 {
			t.Fatalf("attempts %d infra %v ending %s (%s) reward %v", ep.Attempts, ep.Infra, ep.Result.Ending, ep.Result.Detail, ep.Result.Reward)
		}
		// A request timeout is the tool's own (a minute for a read) plus
		// 30s of slack: the retry must not have waited for it.
		if d := time.Since(start); d > time.Minute {
			t.Fatalf("the episode took %v: the dead worker was not noticed", d)
		}
		checkStored(t, store, ep, "worker-dies-once", task.Id)
		waitContainerGone(t, rt, <-s.sandboxes)
	})
	t.Run("infrastructure failure", func(t *testing.T) {
		s := &stoppingWorkers{Workers: workers(t), stop: func(n int32) bool { return n <= 2 }, sandboxes: make(chan string, 2)}
		res, err := scriptedRunner(t, s, store, script).Run(context.Background(), Request{Task: task, Group: 1, Seed: 3, RunID: "worker-dies-twice"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ep := res.Episodes[0]
		if ep.Attempts != 2 || !ep.Infra || ep.Result.Ending != harness.EndSandboxFailure || !strings.Contains(ep.Result.Detail, "the worker stopped") {
			t.Fatalf("attempts %d infra %v ending %s (%s)", ep.Attempts, ep.Infra, ep.Result.Ending, ep.Result.Detail)
		}
		if got := res.Rewards(); len(got) != 0 {
			t.Fatalf("rewards %v include an infrastructure failure", got)
		}
		tr, err := store.Get(context.Background(), ep.TrajectoryID)
		if err != nil || tr.Termination != "sandbox_failure" {
			t.Fatalf("stored %v %v", tr.GetTermination(), err)
		}
		waitContainerGone(t, rt, <-s.sandboxes)
		waitContainerGone(t, rt, <-s.sandboxes)
	})
}

// TestClusterWorkersCandidates: members offering sandbox workers with
// containerd come first, taken in turn from one spawn to the next; those
// that do not report containerd (or published no facts) follow; members
// without the kind are left out.
func TestClusterWorkersCandidates(t *testing.T) {
	containerd := &rtmsg.Capabilities{Containerd: true}
	members := []*rtmsg.NodeInfo{
		{Address: "c:1", Kinds: []string{sandboxworker.Kind}, Capabilities: containerd},
		{Address: "b:1", Kinds: []string{sandboxworker.Kind}},
		{Address: "a:1", Kinds: []string{"sampler", sandboxworker.Kind}, Capabilities: containerd},
		{Address: "d:1", Kinds: []string{"sampler"}, Capabilities: containerd},
	}
	c := &ClusterWorkers{Members: func() []*rtmsg.NodeInfo { return members }}
	for i, want := range []string{"c:1 a:1 b:1", "a:1 c:1 b:1", "c:1 a:1 b:1"} {
		got, err := c.candidates()
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("spawn %d: candidates %v %v, want %s", i, got, err, want)
		}
	}
	if got, err := (&ClusterWorkers{Members: func() []*rtmsg.NodeInfo { return members[3:] }}).candidates(); !errors.Is(err, placement.ErrUnknownKind) {
		t.Errorf("no member offers the kind: candidates %v %v", got, err)
	}
}

// TestEpisodesOnAClusterMember runs a group through workers spawned by
// kind name on a real node (its manager's SpawnRequest, as a remote node
// would be asked), and checks that closing the episodes stops the workers
// and destroys their containers.
func TestEpisodesOnAClusterMember(t *testing.T) {
	_, tasks := inflectionTasks(t)
	task := tasks[1]
	rt := needRuntime(t)
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Log.Level = "warn"
	runtime := func(context.Context) (*sandbox.Runtime, error) { return rt, nil }
	n, err := node.Start(context.Background(), cfg, node.Options{Version: "test", Logger: quiet(), Kinds: []node.Kind{{
		Name: sandboxworker.Kind,
		Props: func(*node.Node) *actor.Props {
			return sandboxworker.Props(sandboxworker.Config{Runtime: runtime, Environments: testEnvs, Logger: quiet()})
		},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })

	cluster := &ClusterWorkers{Root: n.System().Root, Manager: n.Manager(), Members: n.MemberInfos}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if cands, _ := cluster.candidates(); len(cands) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node never listed itself as a member offering sandbox workers")
		}
		time.Sleep(50 * time.Millisecond)
	}
	spawned := make(chan *actor.PID, 4)
	w := &Workers{Root: n.System().Root, Environments: testEnvs, Logger: quiet(), Spawn: func(ctx context.Context) (*actor.PID, error) {
		pid, err := cluster.Spawn(ctx)
		if err == nil {
			spawned <- pid
		}
		return pid, err
	}}
	t.Cleanup(w.Close)
	script, err := harness.SolveScript(task, harness.ModePatch)
	if err != nil {
		t.Fatal(err)
	}
	store := badgerStore(t)
	res, err := scriptedRunner(t, w, store, script).Run(context.Background(), Request{Task: task, Group: 2, Mode: harness.ModePatch, Seed: 8, RunID: "cluster"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range res.Episodes {
		if ep.Result.Reward != 1 || ep.Attempts != 1 {
			t.Fatalf("episode %d: %s (%s) reward %v after %d attempts", ep.Index, ep.Result.Ending, ep.Result.Detail, ep.Result.Reward, ep.Attempts)
		}
		checkStored(t, store, ep, "cluster", task.Id)
	}
	w.Close()
	close(spawned)
	count := 0
	for pid := range spawned {
		count++
		if pid.Address != n.Address() {
			t.Fatalf("worker %s is not on the member %s", pid, n.Address())
		}
		// A stopped worker answers nothing: the request is a dead letter.
		if _, err := n.System().Root.RequestFuture(pid, &messages.SandboxExec{Argv: []string{"true"}}, 5*time.Second).Result(); err == nil {
			t.Fatalf("worker %s still answers after its episode closed", pid)
		}
	}
	if count != 2 {
		t.Fatalf("%d workers spawned for 2 episodes", count)
	}
	if ts, err := store.ListByRun(context.Background(), "cluster"); err != nil || len(ts) != 2 {
		t.Fatalf("%d trajectories stored: %v", len(ts), err)
	}
}

// waitContainerGone waits for the container of sandbox id to be deleted.
func waitContainerGone(t *testing.T, rt *sandbox.Runtime, id string) {
	t.Helper()
	if id == "" {
		t.Fatal("no sandbox id")
	}
	ctx := namespaces.WithNamespace(context.Background(), rt.Namespace())
	deadline := time.Now().Add(30 * time.Second)
	for {
		cs, err := rt.Client().Containers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, c := range cs {
			if strings.Contains(c.ID(), id) {
				found = true
			}
		}
		if !found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container of sandbox %s is still there", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
