package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/persistence"
)

// TestWarmStartStage runs frognano run with a warm start and no GRPO step
// on SmolLM2-135M and two real tasks of six==1.16.0, patch mode: both gold
// fixes, played by the scripted demonstration policy through the rollout
// path and graded in sandboxes, are verified demonstrations; one SFT step
// lowers their NLL; the step is published as policy v1 and the node's
// Sampler serves it; the record says the stage is done, and resuming the
// run does not repeat it.
func TestWarmStartStage(t *testing.T) {
	trainPrereqs(t)
	data := t.TempDir()
	const runID = "test-warm-start"
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, "", append(args, "--data-dir", data, "--log-level", "warn")...)
		if err != nil {
			t.Fatalf("frognano %s: %v\n%s\n%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	cli("env", "add", "six==1.16.0")
	cli("synth", "--env", "six-1.16.0", "--count", "2", "--seed", "3")
	run := []string{"run", "--jobs", "2", "--rounds", "10", "--env", "six==1.16.0", "--tasks", "0", "--steps", "0", "--run", runID,
		"--seed", "5", "--mode", "patch", "--warm-start-epochs", "1", "--warm-start-tasks", "2", "--warm-start-batch", "2", "--warm-start-lr", "3e-4"}
	out := cli(run...)
	t.Logf("run:\n%s", out)
	for _, want := range []string{
		"warm start: demonstrations of 2 task(s) of six-1.16.0, patch mode: 0 stored, 2 to play",
		"warm start: 2 verified demonstration(s) of 2 task(s), none rejected",
		"warm start: SFT step 1/1 (epoch 1) → policy v1",
		"sampler: now serves policy v1 of run " + runID,
		"warm start: done",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q", want)
		}
	}

	ctx := context.Background()
	db, err := persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := db.Runs().Get(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	m := rec.GetMetrics()
	if m[trainer.MetricWarmStartDone] != 1 || m[trainer.MetricWarmStartDemos] != 2 || m[trainer.MetricWarmStartSteps] != 1 || m[trainer.MetricPolicyVersion] != 1 {
		t.Fatalf("record metrics %v", m)
	}
	before, after := m[trainer.MetricWarmStartNLLBefore], m[trainer.MetricWarmStartNLLAfter]
	t.Logf("demonstrations' NLL %.4f → %.4f", before, after)
	if !(before > 0) || !(after < before) {
		t.Fatalf("demonstrations' NLL %v → %v: want lower after the stage", before, after)
	}
	pub, err := db.Checkpoints().Latest(ctx, runID)
	if err != nil || pub.GetPolicyVersion() != 1 {
		t.Fatalf("publication %v, %v", pub, err)
	}
	demos, err := db.Trajectories().ListByRun(ctx, trainer.DemoRunID(runID))
	if err != nil || len(demos) != 2 {
		t.Fatalf("stored demonstrations: %d, %v", len(demos), err)
	}
	for _, d := range demos {
		if d.GetReward() != 1 {
			t.Fatalf("demonstration %s: reward %v", d.GetId(), d.GetReward())
		}
	}
	if trajs, err := db.Trajectories().ListByRun(ctx, runID); err != nil || len(trajs) != 0 {
		t.Fatalf("the run's own trajectories: %d, %v (demonstrations belong to %s)", len(trajs), err, trainer.DemoRunID(runID))
	}
	db.Close()

	out = cli(run...)
	if strings.Contains(out, "warm start:") {
		t.Fatalf("the resumed run repeated its warm start:\n%s", out)
	}
}
