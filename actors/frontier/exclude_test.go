package frontier

import (
	"context"
	"slices"
	"testing"
	"time"
)

// Held-out environments never reach a batch nor a synthesis request,
// whatever the task store holds.
func TestExcludedEnvironments(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, task("train1", "six", "off_by_one", 1, 4), task("train2", "six", "flip_comparison", 1, 4),
		task("held1", "heldout", "off_by_one", 1, 4), task("held2", "heldout", "flip_comparison", 1, 3))
	e := f.openExcluding(t, "heldout")
	for seed := range uint64(20) {
		batch, err := e.SelectBatch(ctx, 4, 0, seed, "patch")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range batch {
			if task.GetEnvironment() == "heldout" {
				t.Fatalf("seed %d: batch holds held-out task %s", seed, task.GetId())
			}
		}
	}
	if envs := e.environments([]string{"six", "heldout"}); slices.Contains(envs, "heldout") {
		t.Fatalf("synthesis may use %v", envs)
	}
	// With only held-out tasks stored, synthesis falls back to the
	// caller's environments, still without the held-out ones.
	g := newFixture(t, task("held1", "heldout", "off_by_one", 1, 4))
	if envs := g.openExcluding(t, "heldout").environments([]string{"six", "heldout"}); !slices.Equal(envs, []string{"six"}) {
		t.Fatalf("synthesis may use %v, want [six]", envs)
	}
}

// The uniform baseline draws from the whole pool, whatever the posteriors
// say: over many batches every task comes up about equally often, the one
// the frontier would never pick (solved every time) included.
func TestSelectUniform(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, task("a", "env", "off_by_one", 1, 4), task("b", "env", "flip_comparison", 1, 4),
		task("c", "env", "swap_arithmetic", 1, 3), task("d", "env", "negate_condition", 1, 3))
	e := f.open(t, Params{})
	if _, err := e.Record(ctx, outcomes("a", 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for seed := range uint64(400) {
		batch, err := e.SelectUniform(ctx, 2, 0, seed+1, "patch")
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) != 2 || batch[0].GetId() == batch[1].GetId() {
			t.Fatalf("batch %v", batch)
		}
		for _, task := range batch {
			counts[task.GetId()]++
		}
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if counts[id] < 150 || counts[id] > 250 {
			t.Fatalf("uniform draws %v: want about 200 each", counts)
		}
	}
}

func (f *fixture) openExcluding(t *testing.T, env string) *Estimator {
	t.Helper()
	e, err := Open(context.Background(), Config{Tasks: f.mem.Tasks(), State: f.state, Logger: quiet,
		Now: func() time.Time { return f.clock }, Exclude: func(e string) bool { return e == env }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
