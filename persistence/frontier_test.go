package persistence

import (
	"context"
	"testing"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// TestFrontierSurvivesReopen checks the state and stats of one commit are
// read back after the database is closed and opened again.
func TestFrontierSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	state := &records.FrontierState{PolicyVersion: 3, Model: &records.DifficultyModel{Weights: map[string]float64{"bias": -0.5}}}
	if err := db.Frontier().Commit(ctx, "default", state, []*records.TaskStats{{TaskId: "x", Alpha: 1, Beta: 1, Attempts: 2, Successes: 1}}); err != nil {
		t.Fatal(err)
	}
	reopen := func() {
		t.Helper()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if db, err = Open(dir, WithLogger(testLogger(t)), smallFiles); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { db.Close() }) // the db open at the end
	reopen()
	got, err := db.Frontier().Get(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if !sameProto(t, got, state) {
		t.Errorf("after reopen: %v, want %v", got, state)
	}
	if st, err := db.Frontier().Stats(ctx, DefaultFrontier); err != nil || len(st) != 1 || st[0].GetAttempts() != 2 {
		t.Errorf("stats after reopen: %v, %v", st, err)
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Errorf("CheckConsistency: %v", err)
	}
	// A run's estimator survives too, apart from the default one.
	if err := db.Frontier().Commit(ctx, "run-1", &records.FrontierState{PolicyVersion: 9}, []*records.TaskStats{{TaskId: "x", Attempts: 5, Successes: 5}}); err != nil {
		t.Fatal(err)
	}
	reopen()
	if st, err := db.Frontier().Stats(ctx, "run-1"); err != nil || len(st) != 1 || st[0].GetAttempts() != 5 {
		t.Errorf("run-1 stats after reopen: %v, %v", st, err)
	}
	if st, err := db.Frontier().Stats(ctx, DefaultFrontier); err != nil || len(st) != 1 || st[0].GetAttempts() != 2 {
		t.Errorf("default stats after run-1's commit: %v, %v", st, err)
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Errorf("CheckConsistency: %v", err)
	}
}
