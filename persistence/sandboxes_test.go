package persistence

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSandboxDestroysSurviveReopen: pending destructions are listed per
// namespace in id order, updated in place, forgotten by Delete, and still
// there after the store is closed and opened again.
func TestSandboxDestroysSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	s := db.SandboxDestroys()
	since := time.Unix(1700000000, 0).UTC()
	for _, d := range []PendingDestroy{
		{Namespace: "ns", ID: "fn-b", Since: since, Attempts: 1, LastError: "unavailable"},
		{Namespace: "ns", ID: "fn-a", Since: since, Attempts: 1},
		{Namespace: "other", ID: "fn-c", Since: since, Attempts: 1},
		{Namespace: "ns", ID: "fn-b", Since: since, Attempts: 2, LastError: "still unavailable"},
	} {
		if err := s.Put(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Put(ctx, PendingDestroy{Namespace: "ns"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Put without an id: %v", err)
	}
	if err := s.Delete(ctx, "ns", "fn-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "ns", "fn-missing"); err != nil {
		t.Fatalf("deleting a missing record: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.SandboxDestroys().List(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "fn-b" || got[0].Attempts != 2 || got[0].LastError != "still unavailable" || !got[0].Since.Equal(since) {
		t.Fatalf("after reopening, namespace ns holds %+v", got)
	}
	if other, err := db.SandboxDestroys().List(ctx, "other"); err != nil || len(other) != 1 {
		t.Fatalf("namespace other: %+v, %v", other, err)
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Fatal(err)
	}
}
