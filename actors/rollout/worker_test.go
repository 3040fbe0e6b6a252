package rollout

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandboxworker"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// TestToolsThroughSandboxWorker runs the harness's tools in a real
// SandboxWorker actor: the task's bug applied, the gold fix made with Edit
// calls, checked with Bash and the worker's test run; a missing file is an
// observation, and a worker that is gone ends the episode.
func TestToolsThroughSandboxWorker(t *testing.T) {
	_, tasks := inflectionTasks(t)
	task := tasks[0]
	rt := needRuntime(t)
	system := actor.NewActorSystem()
	pid := system.Root.Spawn(sandboxworker.Props(sandboxworker.Config{
		Runtime: func(context.Context) (*sandbox.Runtime, error) { return rt, nil }, Environments: testEnvs, Logger: quiet()}))
	ask := func(msg any) any {
		res, err := system.Root.RequestFuture(pid, msg, 2*time.Minute).Result()
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := res.(*rtmsg.Failure); ok {
			t.Fatalf("%T: %s", msg, f.Message)
		}
		return res
	}
	ask(&messages.SandboxCreate{Environment: task.Environment})
	ask(&messages.SandboxApplyPatch{Patch: task.BugPatch})
	ws := &WorkerSandbox{Root: system.Root, PID: pid}
	ctx := context.Background()
	run := func(name string, args any) harness.Result {
		t.Helper()
		raw, _ := json.Marshal(args)
		res, err := harness.Run(ctx, ws, policy.ToolCall{Name: name, Arguments: raw}, harness.Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	hunks, err := harness.ParseHunks(task.GoldPatch)
	if err != nil {
		t.Fatal(err)
	}
	if obs := run("Glob", map[string]string{"pattern": "**/*.py"}).Observation; !strings.Contains(obs, hunks[0].Path) {
		t.Fatalf("Glob: %q", obs)
	}
	if obs := run("Read", map[string]any{"path": hunks[0].Path, "limit": 3}).Observation; !strings.HasPrefix(obs, "     1\t") {
		t.Fatalf("Read: %q", obs)
	}
	if obs := run("Read", map[string]string{"path": "no/such/file.py"}).Observation; !strings.HasPrefix(obs, "Error: tool failed: read no/such/file.py") {
		t.Fatalf("Read of a missing file: %q", obs)
	}
	for _, h := range hunks {
		if obs := run("Edit", map[string]string{"path": h.Path, "old_string": h.Before, "new_string": h.After}).Observation; obs != "Edited "+h.Path+"." {
			t.Fatalf("Edit: %q", obs)
		}
	}
	if obs := run("Bash", map[string]string{"command": "git diff --stat"}).Observation; !strings.Contains(obs, "[exit code 0]") {
		t.Fatalf("Bash: %q", obs)
	}
	rep := ask(&messages.SandboxRunTests{Tests: slices.Clone(task.FailToPass)}).(*messages.SandboxTestsResult).Report
	for _, r := range rep.Results {
		if r.Status != records.TestStatus_TEST_STATUS_PASS {
			t.Fatalf("after the fix through the worker, %s is %v", r.Name, r.Status)
		}
	}
	if len(rep.Results) < len(task.FailToPass) {
		t.Fatalf("%d results for %d tests", len(rep.Results), len(task.FailToPass))
	}
	ask(&messages.SandboxDestroy{})
	ws.Slack = time.Second
	raw, _ := json.Marshal(map[string]string{"path": hunks[0].Path})
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := harness.Run(short, ws, policy.ToolCall{Name: "Read", Arguments: raw}, harness.Options{}); err == nil {
		t.Fatal("a tool ran in a destroyed worker")
	}
}
