package rollout

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

func scriptedRunner(t *testing.T, sbs Sandboxes, store persistence.TrajectoryStore, turns []string) *Runner {
	t.Helper()
	r, err := New(Config{Policy: &harness.ScriptedPolicy{Tokenizer: smolTokenizer(t), Turns: turns, Version: 3}, Tokenizer: smolTokenizer(t),
		Sandboxes: sbs, Trajectories: store, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkStored compares a stored trajectory with its episode.
func checkStored(t *testing.T, store persistence.TrajectoryStore, ep *Episode, runID, taskID string) *records.Trajectory {
	t.Helper()
	tr, err := store.Get(context.Background(), ep.TrajectoryID)
	if err != nil {
		t.Fatal(err)
	}
	r := ep.Result
	if tr.RunId != runID || tr.TaskId != taskID || tr.Termination != string(r.Ending) || tr.Reward != r.Reward || tr.Seed != ep.Seed {
		t.Fatalf("stored %s/%s %s %v seed %d; episode %s %v seed %d", tr.RunId, tr.TaskId, tr.Termination, tr.Reward, tr.Seed, r.Ending, r.Reward, ep.Seed)
	}
	if len(tr.TokenIds) == 0 || len(tr.TokenIds) != len(tr.PolicyMask) || len(tr.TokenIds) != len(tr.Logprobs) || len(tr.Turns) != len(r.Turns) {
		t.Fatalf("stored %d ids, %d mask, %d log-probs, %d turns", len(tr.TokenIds), len(tr.PolicyMask), len(tr.Logprobs), len(tr.Turns))
	}
	if tr.GenerationSeconds <= 0 || tr.SandboxSeconds <= 0 || tr.CreatedUnixNano == 0 {
		t.Fatalf("timings %v %v", tr.GenerationSeconds, tr.SandboxSeconds)
	}
	return tr
}

// TestScriptedPolicySolvesRealTasks: the scripted policy, given each
// task's gold patch, solves real synthesized tasks through the real
// harness, real sandboxes and the real grader, in both modes, with
// episodes in SandboxWorker actors (Workers) and in pooled sandboxes
// (Containerd); G episodes run concurrently, each in its own sandbox, and
// are stored in Badger.
func TestScriptedPolicySolvesRealTasks(t *testing.T) {
	_, tasks := inflectionTasks(t)
	store := badgerStore(t)
	for _, kind := range bothSandboxes(t) {
		t.Run(kind.name, func(t *testing.T) {
			solveRealTasks(t, kind.sbs, store, tasks, kind.name)
		})
	}
}

func solveRealTasks(t *testing.T, sbs Sandboxes, store persistence.TrajectoryStore, tasks []*records.Task, kind string) {
	for _, mode := range []harness.Mode{harness.ModeAgent, harness.ModePatch} {
		runID := "solve-" + kind + "-" + string(mode)
		for _, task := range tasks {
			t.Run(string(mode)+"/"+task.Id, func(t *testing.T) {
				script, err := harness.SolveScript(task, mode)
				if err != nil {
					t.Fatal(err)
				}
				r := scriptedRunner(t, sbs, store, script)
				var done atomic.Int32
				res, err := r.Run(context.Background(), Request{Task: task, Group: 2, Mode: mode, Seed: 11, RunID: runID}, func(*Episode) { done.Add(1) })
				if err != nil {
					t.Fatal(err)
				}
				want := harness.EndSubmitted
				if mode == harness.ModePatch {
					want = harness.EndPatchApplied
				}
				if len(res.Episodes) != 2 || done.Load() != 2 || len(res.Rewards()) != 2 {
					t.Fatalf("%d episodes, %d reported, rewards %v", len(res.Episodes), done.Load(), res.Rewards())
				}
				if res.Episodes[0].Seed == res.Episodes[1].Seed || res.Episodes[0].TrajectoryID == res.Episodes[1].TrajectoryID {
					t.Fatal("two episodes share a seed")
				}
				for _, ep := range res.Episodes {
					r := ep.Result
					if r.Ending != want || r.Reward != 1 || r.Grade == nil || !r.Grade.Resolved || ep.Attempts != 1 || ep.Infra {
						t.Fatalf("episode %d: %s (%s), reward %v, grade %+v", ep.Index, r.Ending, r.Detail, r.Reward, r.Grade)
					}
					tr := checkStored(t, store, ep, runID, task.Id)
					if tr.Report == nil || !tr.Report.Valid || len(tr.Report.Results) < len(task.FailToPass)+len(task.PassToPass) {
						t.Fatalf("stored report %+v", tr.Report)
					}
					if mode == harness.ModeAgent {
						// The Bash turn ran in the sandbox: the repository
						// shows the agent's edit against the buggy base commit.
						var bash string
						for i, turn := range tr.Turns {
							if len(turn.ToolCalls) > 0 && turn.ToolCalls[0].Name == "Bash" {
								bash = tr.Turns[i+1].Content
							}
						}
						if !strings.Contains(bash, " M ") || !strings.Contains(bash, "[exit code 0]") {
							t.Fatalf("git status in the sandbox: %q", bash)
						}
					}
				}
			})
		}
	}
	runs, err := store.ListByRun(context.Background(), "solve-"+kind+"-agent")
	if err != nil || len(runs) != 2*len(tasks) {
		t.Fatalf("%d stored trajectories of the agent run, want %d: %v", len(runs), 2*len(tasks), err)
	}
}

// TestGradingIsNotFooled: an agent that rewrites the failing tests instead
// of the code is graded 0 (the tests are restored from the image), and an
// agent that submits at once is not graded at all.
func TestGradingIsNotFooled(t *testing.T) {
	_, tasks := inflectionTasks(t)
	task := tasks[0]
	file, _, _ := strings.Cut(task.FailToPass[0], "::")
	cheat := []string{
		harness.ToolCallText("Write", map[string]string{"path": file, "content": "def test_nothing():\n    pass\n"}),
		harness.ToolCallText("Submit", map[string]any{}),
	}
	for _, kind := range bothSandboxes(t) {
		r := scriptedRunner(t, kind.sbs, nil, cheat)
		res, err := r.Run(context.Background(), Request{Task: task, Group: 1, Seed: 1, RunID: "cheat"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ep := res.Episodes[0].Result
		if ep.Ending != harness.EndSubmitted || ep.Reward != 0 || ep.Grade == nil || ep.Grade.Resolved {
			t.Fatalf("%s: cheat: %s (%s), reward %v, grade %+v", kind.name, ep.Ending, ep.Detail, ep.Reward, ep.Grade)
		}
		r = scriptedRunner(t, kind.sbs, nil, []string{harness.ToolCallText("Submit", map[string]any{})})
		res, err = r.Run(context.Background(), Request{Task: task, Group: 1, Seed: 1, RunID: "give-up"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ep := res.Episodes[0].Result; ep.Ending != harness.EndSubmitted || ep.Reward != 0 || ep.Grade != nil {
			t.Fatalf("%s: give up: %s, reward %v, grade %+v", kind.name, ep.Ending, ep.Reward, ep.Grade)
		}
	}
}

// dyingSandboxes kills the sandbox of chosen attempts under the episode:
// the container is destroyed from outside right before the first tool call.
type dyingSandboxes struct {
	*Containerd
	attempts atomic.Int32
	kill     func(attempt int32) bool
}

func (d *dyingSandboxes) Workspace(ctx context.Context, task *records.Task) (Workspace, error) {
	ws, err := d.Containerd.Workspace(ctx, task)
	if err != nil {
		return nil, err
	}
	n := d.attempts.Add(1)
	if !d.kill(n) {
		return ws, nil
	}
	return &dyingWorkspace{Workspace: ws}, nil
}

type dyingWorkspace struct {
	Workspace
	once atomic.Bool
}

func (d *dyingWorkspace) die(ctx context.Context) {
	if d.once.CompareAndSwap(false, true) {
		d.Workspace.(*pooled).Sandbox().Destroy(ctx)
	}
}

func (d *dyingWorkspace) ListFiles(ctx context.Context, dir, glob string) ([]string, error) {
	d.die(ctx)
	return d.Workspace.ListFiles(ctx, dir, glob)
}

func (d *dyingWorkspace) ReadFile(ctx context.Context, p string) ([]byte, error) {
	d.die(ctx)
	return d.Workspace.ReadFile(ctx, p)
}

// TestContainerDiesMidEpisode: an episode whose container dies is retried
// once in a fresh sandbox; when the retry dies too, the episode is an
// infrastructure failure, stored as such and left out of the rewards.
func TestContainerDiesMidEpisode(t *testing.T) {
	_, tasks := inflectionTasks(t)
	task := tasks[0]
	script, err := harness.SolveScript(task, harness.ModeAgent)
	if err != nil {
		t.Fatal(err)
	}
	store := badgerStore(t)

	t.Run("retried", func(t *testing.T) {
		d := &dyingSandboxes{Containerd: containerd(t), kill: func(n int32) bool { return n == 1 }}
		res, err := scriptedRunner(t, d, store, script).Run(context.Background(), Request{Task: task, Group: 1, Seed: 2, RunID: "die-once"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ep := res.Episodes[0]
		if ep.Attempts != 2 || ep.Infra || ep.Result.Ending != harness.EndSubmitted || ep.Result.Reward != 1 {
			t.Fatalf("attempts %d infra %v ending %s (%s) reward %v", ep.Attempts, ep.Infra, ep.Result.Ending, ep.Result.Detail, ep.Result.Reward)
		}
		if got := res.Rewards(); len(got) != 1 || got[0] != 1 {
			t.Fatalf("rewards %v", got)
		}
		checkStored(t, store, ep, "die-once", task.Id)
	})
	t.Run("infrastructure failure", func(t *testing.T) {
		d := &dyingSandboxes{Containerd: containerd(t), kill: func(n int32) bool { return n <= 2 }}
		res, err := scriptedRunner(t, d, store, script).Run(context.Background(), Request{Task: task, Group: 1, Seed: 3, RunID: "die-twice"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ep := res.Episodes[0]
		if ep.Attempts != 2 || !ep.Infra || ep.Result.Ending != harness.EndSandboxFailure || !strings.Contains(ep.Result.Detail, "sandbox is dead") {
			t.Fatalf("attempts %d infra %v ending %s (%s)", ep.Attempts, ep.Infra, ep.Result.Ending, ep.Result.Detail)
		}
		if got := res.Rewards(); len(got) != 0 {
			t.Fatalf("rewards %v include an infrastructure failure", got)
		}
		tr, err := store.Get(context.Background(), ep.TrajectoryID)
		if err != nil || tr.Termination != "sandbox_failure" {
			t.Fatalf("stored %v %v", tr.GetTermination(), err)
		}
		if p := res.Proto(); !p.Episodes[0].InfrastructureFailure || len(p.Result.Rewards) != 0 || len(p.Result.TrajectoryIds) != 1 {
			t.Fatalf("proto %v", p)
		}
	})
}

// TestBadTasks: a task whose image is gone, or whose environment is not
// registered, fails the request with a clear error and stores nothing.
func TestBadTasks(t *testing.T) {
	_, tasks := inflectionTasks(t)
	store := persistence.NewMemory().Trajectories()
	gone := proto.Clone(tasks[0]).(*records.Task)
	gone.Image = "frognano.local/env/removed:0"
	unknown := proto.Clone(tasks[0]).(*records.Task)
	unknown.Environment = "nope-1.0"
	// Workers without a containerd connection of their own leave the
	// image check to the worker: the same error, once the group started.
	remote := workers(t)
	remote.Runtime = nil
	kinds := append(bothSandboxes(t), struct {
		name string
		sbs  Sandboxes
	}{"workers checking images remotely", remote})
	for _, kind := range kinds {
		r := scriptedRunner(t, kind.sbs, store, nil)
		_, err := r.Run(context.Background(), Request{Task: gone, Group: 2, RunID: "bad"}, nil)
		if !errors.Is(err, ErrImageGone) || !strings.Contains(err.Error(), "frognano.local/env/removed:0 is not in containerd namespace "+testNamespace) {
			t.Fatalf("%s: image gone: %v", kind.name, err)
		}
		if _, err := r.Run(context.Background(), Request{Task: unknown, Group: 1, RunID: "bad"}, nil); !errors.Is(err, ErrNoEnvironment) {
			t.Fatalf("%s: unknown environment: %v", kind.name, err)
		}
	}
	r := scriptedRunner(t, workers(t), store, nil)
	for _, req := range []Request{{Task: tasks[0], Group: 0, RunID: "bad"}, {Task: tasks[0], Group: 1}, {Group: 1, RunID: "bad"}, {Task: tasks[0], Group: 1, RunID: "bad", Mode: "chat"}} {
		if _, err := r.Run(context.Background(), req, nil); err == nil {
			t.Errorf("%+v ran", req)
		}
	}
	if ts, _ := store.ListByRun(context.Background(), "bad"); len(ts) != 0 {
		t.Fatalf("%d trajectories stored for bad requests", len(ts))
	}
}

// TestActor drives the rollout actor by messages; it makes its own Runner
// from a policy and Workers, as a node's does.
func TestActor(t *testing.T) {
	_, tasks := inflectionTasks(t)
	task := tasks[1]
	script, err := harness.SolveScript(task, harness.ModePatch)
	if err != nil {
		t.Fatal(err)
	}
	store := badgerStore(t)
	system := actor.NewActorSystem()
	scripted := func(context.Context) (policy.Policy, *tokenizer.Tokenizer, error) {
		return &harness.ScriptedPolicy{Tokenizer: smolTokenizer(t), Turns: script, Version: 3}, smolTokenizer(t), nil
	}
	pid := system.Root.Spawn(Props(ActorConfig{Policy: scripted, Sandboxes: workers(t), Trajectories: store, Logger: quiet()}))
	defer system.Root.Stop(pid)
	ask := func(msg any) any {
		res, err := system.Root.RequestFuture(pid, msg, 5*time.Minute).Result()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := ask(&messages.RolloutGroupRequest{Request: &messages.RolloutRequest{Task: task, GroupSize: 2, Seed: 4, RunId: "actor"}, Mode: "patch",
		Limits: &messages.EpisodeLimits{MaxTurnTokens: 2048}, Sampling: &messages.SamplingParams{Temperature: 0.7}})
	g, ok := res.(*messages.RolloutGroupResult)
	if !ok {
		t.Fatalf("reply %T %v", res, res)
	}
	if len(g.Episodes) != 2 || len(g.Result.Rewards) != 2 || g.Result.Rewards[0] != 1 || g.Episodes[1].Termination != "patch_applied" || g.Episodes[0].PolicyTokens == 0 {
		t.Fatalf("result %v", g)
	}
	list := ask(&messages.TrajectoryListRequest{RunId: "actor"}).(*messages.TrajectoryList)
	if len(list.Trajectories) != 2 || list.Trajectories[0].Reward != 1 || list.Trajectories[0].Turns != 1 {
		t.Fatalf("list %v", list)
	}
	got := ask(&messages.TrajectoryGetRequest{Id: g.Result.TrajectoryIds[0]}).(*messages.TrajectoryGetReply)
	if got.Trajectory.TaskId != task.Id || got.Trajectory.Termination != "patch_applied" {
		t.Fatalf("get %v", got.Trajectory.Termination)
	}
	for _, bad := range []any{&messages.TrajectoryGetRequest{Id: "nope"}, &messages.TrajectoryListRequest{},
		&messages.RolloutGroupRequest{Request: &messages.RolloutRequest{Task: task, GroupSize: 1, RunId: "x"}, Mode: "chat"}} {
		if f, ok := ask(bad).(*rtmsg.Failure); !ok {
			t.Errorf("%T: no failure", bad)
		} else if f.Message == "" {
			t.Errorf("%T: empty failure", bad)
		}
	}
	// A node without a policy serves trajectories but refuses rollouts.
	bare := system.Root.Spawn(Props(ActorConfig{Trajectories: store}))
	defer system.Root.Stop(bare)
	res, err = system.Root.RequestFuture(bare, &messages.RolloutRequest{Task: task, GroupSize: 1, RunId: "x"}, time.Minute).Result()
	if err != nil || !rtmsg.IsFailure(res, rtmsg.FailureCode_FAILURE_CODE_NO_POLICY) {
		t.Fatalf("%v %v", res, err)
	}
	// A policy that cannot be loaded fails the request with its reason.
	broken := system.Root.Spawn(Props(ActorConfig{Sandboxes: workers(t), Trajectories: store,
		Policy: func(context.Context) (policy.Policy, *tokenizer.Tokenizer, error) {
			return nil, nil, errors.New("no model smollm2-135m in the store")
		}}))
	defer system.Root.Stop(broken)
	res, err = system.Root.RequestFuture(broken, &messages.RolloutRequest{Task: task, GroupSize: 1, RunId: "x"}, time.Minute).Result()
	if f, ok := res.(*rtmsg.Failure); err != nil || !ok || f.GetCode() != rtmsg.FailureCode_FAILURE_CODE_NO_POLICY || !strings.Contains(f.Message, "no model smollm2-135m") {
		t.Fatalf("%v %v", res, err)
	}
}
