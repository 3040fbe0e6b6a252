package persistence

import (
	"context"
	"errors"
	"testing"

	messages "github.com/frognano/frognano/actors/messages/v1"
)

// TestFrontierConformance runs the same cases against the Badger and the
// in-memory frontier stores, each writing task stats into its curriculum.
func TestFrontierConformance(t *testing.T) {
	impls := []struct {
		name string
		open func(t *testing.T) (FrontierStore, CurriculumStore)
	}{
		{"badger", func(t *testing.T) (FrontierStore, CurriculumStore) {
			db := openTestDB(t)
			return db.Frontier(), db.Curriculum()
		}},
		{"memory", func(t *testing.T) (FrontierStore, CurriculumStore) {
			m := NewMemory()
			return NewMemoryFrontier(m.Curriculum()), m.Curriculum()
		}},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			ctx := context.Background()
			s, cur := impl.open(t)
			if _, err := s.Get(ctx, "default"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get(missing) = %v, want ErrNotFound", err)
			}
			bad := []struct {
				name  string
				stats []*messages.TaskStats
			}{
				{"", nil},
				{"a\x00b", nil},
				{"default", []*messages.TaskStats{nil}},
				{"default", []*messages.TaskStats{{}}},
				{"default", []*messages.TaskStats{{TaskId: "t", Attempts: 1, Successes: 2}}},
			}
			for i, b := range bad {
				if err := s.Commit(ctx, b.name, &messages.FrontierState{}, b.stats); !errors.Is(err, ErrInvalid) {
					t.Errorf("Commit(bad %d) = %v, want ErrInvalid", i, err)
				}
			}
			if _, err := cur.List(ctx); err != nil {
				t.Fatal(err)
			}
			state := &messages.FrontierState{PolicyVersion: 7, BatchSeq: 3, Counters: map[string]int64{"unknown_task": 2}}
			stats := []*messages.TaskStats{
				{TaskId: "a", Alpha: 1.5, Beta: 2, Attempts: 4, Successes: 1, PolicyVersion: 7},
				{TaskId: "b", Alpha: 0, Beta: 8, Attempts: 8, Retired: true, RetiredReason: "hopeless", PolicyVersion: 6},
			}
			if err := s.Commit(ctx, "default", state, stats); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			got, err := s.Get(ctx, "default")
			if err != nil {
				t.Fatal(err)
			}
			if !sameProto(t, got, state) {
				t.Errorf("Get = %v, want %v", got, state)
			}
			for _, want := range stats {
				st, err := cur.Get(ctx, want.GetTaskId())
				if err != nil {
					t.Fatal(err)
				}
				if !sameProto(t, st, want) {
					t.Errorf("stats %s = %v, want %v", want.GetTaskId(), st, want)
				}
			}
			// A nil state writes only stats and keeps the stored state.
			if err := s.Commit(ctx, "default", nil, []*messages.TaskStats{{TaskId: "a", Alpha: 9, Attempts: 9, Successes: 9}}); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.Get(ctx, "default"); got.GetPolicyVersion() != 7 {
				t.Errorf("state after stats-only commit: version %d, want 7", got.GetPolicyVersion())
			}
			if st, _ := cur.Get(ctx, "a"); st.GetAlpha() != 9 {
				t.Errorf("stats a after commit: alpha %v, want 9", st.GetAlpha())
			}
			// Another estimator (a training run's) keeps its own stats of
			// the same task; the default one's are untouched.
			run := "run-20261130-140000.001"
			if err := s.Commit(ctx, run, &messages.FrontierState{PolicyVersion: 0}, []*messages.TaskStats{{TaskId: "a", Alpha: 3, Attempts: 1, Successes: 1}}); err != nil {
				t.Fatal(err)
			}
			if st, _ := cur.Get(ctx, "a"); st.GetAlpha() != 9 {
				t.Errorf("the default estimator's stats of a: alpha %v after another's commit, want 9", st.GetAlpha())
			}
			runStats, err := s.Stats(ctx, run)
			if err != nil || len(runStats) != 1 || runStats[0].GetTaskId() != "a" || runStats[0].GetAlpha() != 3 {
				t.Errorf("Stats(%s) = %v, %v", run, runStats, err)
			}
			defStats, err := s.Stats(ctx, "default")
			if err != nil || len(defStats) != 2 {
				t.Errorf("Stats(default) = %v, %v, want a and b", defStats, err)
			}
			if none, err := s.Stats(ctx, "nobody"); err != nil || len(none) != 0 {
				t.Errorf("Stats(nobody) = %v, %v", none, err)
			}
			if _, err := s.Stats(ctx, ""); !errors.Is(err, ErrInvalid) {
				t.Errorf("Stats(\"\") = %v, want ErrInvalid", err)
			}
			if names, err := s.Names(ctx); err != nil || len(names) != 2 || names[0] != "default" || names[1] != run {
				t.Errorf("Names = %v, %v", names, err)
			}
			// Returned records are copies.
			got.Counters["unknown_task"] = 100
			if again, _ := s.Get(ctx, "default"); again.GetCounters()["unknown_task"] != 2 {
				t.Errorf("Get returned a shared record")
			}
		})
	}
}

// TestFrontierSurvivesReopen checks the state and stats of one commit are
// read back after the database is closed and opened again.
func TestFrontierSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	state := &messages.FrontierState{PolicyVersion: 3, Model: &messages.DifficultyModel{Weights: map[string]float64{"bias": -0.5}}}
	if err := db.Frontier().Commit(ctx, "default", state, []*messages.TaskStats{{TaskId: "x", Alpha: 1, Beta: 1, Attempts: 2, Successes: 1}}); err != nil {
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
	if st, err := db.Curriculum().Get(ctx, "x"); err != nil || st.GetAttempts() != 2 {
		t.Errorf("stats after reopen: %v, %v", st, err)
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Errorf("CheckConsistency: %v", err)
	}
	// A run's estimator survives too, apart from the default one.
	if err := db.Frontier().Commit(ctx, "run-1", &messages.FrontierState{PolicyVersion: 9}, []*messages.TaskStats{{TaskId: "x", Attempts: 5, Successes: 5}}); err != nil {
		t.Fatal(err)
	}
	reopen()
	if st, err := db.Frontier().Stats(ctx, "run-1"); err != nil || len(st) != 1 || st[0].GetAttempts() != 5 {
		t.Errorf("run-1 stats after reopen: %v, %v", st, err)
	}
	if st, err := db.Curriculum().Get(ctx, "x"); err != nil || st.GetAttempts() != 2 {
		t.Errorf("default stats after run-1's commit: %v, %v", st, err)
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Errorf("CheckConsistency: %v", err)
	}
}
