package rollout

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/frognano/frognano/actors/harness"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// noSandboxes checks every task and makes no workspace: each episode it is
// asked to play ends in an infrastructure failure, counted.
type noSandboxes struct{ asked atomic.Int32 }

func (*noSandboxes) Check(context.Context, *records.Task) error { return nil }
func (s *noSandboxes) Workspace(context.Context, *records.Task) (Workspace, error) {
	s.asked.Add(1)
	return nil, errors.New("no sandbox here")
}

type neverPolicy struct{ t *testing.T }

func (p neverPolicy) Generate(context.Context, policy.GenerateRequest) (policy.GenerateResult, error) {
	p.t.Error("the policy was asked to generate")
	return policy.GenerateResult{}, errors.New("not here")
}

// TestReuseReadsBackStoredEpisodes: with Request.Reuse, an episode stored
// by one of the named runs at the request's policy version or later is
// read back (Reused, its stored ending and reward, not stored again); one
// stored at an older version, or not stored, is played and stored under
// the request's run. Reuse without a trajectory store is refused.
func TestReuseReadsBackStoredEpisodes(t *testing.T) {
	ctx := context.Background()
	store := persistence.NewMemory().Trajectories()
	task := &records.Task{Id: "task-1", Environment: "envx", ProblemStatement: "fix it"}
	stored := func(run string, i int, version int64, reward float64) {
		t.Helper()
		seed := EpisodeSeed(7, task.Id, i)
		tr := &records.Trajectory{Id: TrajectoryID(run, task.Id, seed), TaskId: task.Id, RunId: run, Seed: seed, PolicyVersion: version,
			Termination: "patch_applied", Reward: reward, Report: &records.TestReport{}, TokenIds: []int32{5, 6, 7}, PolicyMask: []bool{false, true, true},
			GenerationSeconds: 3, SandboxSeconds: 2}
		if err := store.Append(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	stored("ev/end-4.1", 0, 2, 1) // at the version asked for: reused
	stored("ev/end-4.2", 1, 1, 1) // older than the version asked for: played again
	stored("ev/other", 2, 5, 1)   // a run not named: played again

	sbs := &noSandboxes{}
	tok := &tokenizer.Tokenizer{}
	r, err := New(Config{Policy: neverPolicy{t}, Tokenizer: tok, Sandboxes: sbs, Trajectories: store, MaxEpisodes: 2, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Task: task, Group: 3, Mode: harness.ModePatch, Seed: 7, PolicyVersion: 2, RunID: "ev/end-4.3", Reuse: []string{"ev/end-4.1", "ev/end-4.2"}}
	res, err := r.Run(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	e0, e1, e2 := res.Episodes[0], res.Episodes[1], res.Episodes[2]
	if !e0.Reused || e0.Infra || e0.Result.Reward != 1 || e0.Result.Ending != harness.EndPatchApplied || e0.Result.Grade == nil || !e0.Result.Grade.Resolved ||
		e0.Result.PolicyTokens() != 2 || e0.TrajectoryID != TrajectoryID("ev/end-4.1", task.Id, EpisodeSeed(7, task.Id, 0)) {
		t.Errorf("episode 0 not read back as stored: %+v %+v", e0, e0.Result)
	}
	for _, e := range []*Episode{e1, e2} {
		if e.Reused || !e.Infra || !strings.HasPrefix(e.TrajectoryID, "ev/end-4.3/") {
			t.Errorf("episode %d should have been played (and failed without a sandbox): %+v", e.Index, e)
		}
	}
	if n := sbs.asked.Load(); n != 4 { // two episodes, two attempts each
		t.Errorf("%d workspaces asked for, want 4", n)
	}
	mine, err := store.ListByRun(ctx, "ev/end-4.3")
	if err != nil || len(mine) != 2 {
		t.Errorf("the request's run holds %d trajectories (%v), want the 2 it played", len(mine), err)
	}
	if got := res.Rewards(); len(got) != 1 || got[0] != 1 {
		t.Errorf("rewards %v, want [1] (two infrastructure failures left out)", got)
	}

	bare, err := New(Config{Policy: neverPolicy{t}, Tokenizer: tok, Sandboxes: sbs, MaxEpisodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Run(ctx, req, nil); err == nil || !strings.Contains(err.Error(), "Reuse needs a trajectory store") {
		t.Errorf("Reuse without a store: %v", err)
	}
}
