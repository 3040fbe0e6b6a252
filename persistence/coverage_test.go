package persistence

import (
	"context"
	"errors"
	"testing"

	messages "github.com/frognano/frognano/actors/messages/v1"
)

// TestCoverageConformance runs the same cases against the Badger and the
// in-memory coverage stores.
func TestCoverageConformance(t *testing.T) {
	impls := []struct {
		name string
		open func(t *testing.T) CoverageStore
	}{
		{"badger", func(t *testing.T) CoverageStore { return openTestDB(t).Coverage() }},
		{"memory", func(t *testing.T) CoverageStore { return NewMemoryCoverage() }},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			ctx := context.Background()
			s := impl.open(t)
			if _, err := s.Get(ctx, "six"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get(missing) = %v, want ErrNotFound", err)
			}
			if err := s.Delete(ctx, "six"); err != nil {
				t.Errorf("Delete(missing) = %v, want nil", err)
			}
			bad := []*messages.CoverageMap{
				nil,
				{},
				{Environment: "six", Tests: []string{"t"}, Files: []*messages.FileCoverage{{Path: "six.py", Lines: []*messages.LineCoverage{{Line: 3, Tests: []int32{1}}}}}},
			}
			for i, m := range bad {
				if err := s.Put(ctx, m); !errors.Is(err, ErrInvalid) {
					t.Errorf("Put(bad %d) = %v, want ErrInvalid", i, err)
				}
			}
			m := &messages.CoverageMap{Environment: "six", Image: "img:1", Tests: []string{"test_six.py::test_a", "test_six.py::test_b"},
				Files: []*messages.FileCoverage{{Path: "six.py", Lines: []*messages.LineCoverage{{Line: 3, Tests: []int32{0, 1}}, {Line: 4}}}}}
			if err := s.Put(ctx, m); err != nil {
				t.Fatal(err)
			}
			m.Image = "changed after Put"
			got, err := s.Get(ctx, "six")
			if err != nil || got.Image != "img:1" || len(got.Files[0].Lines) != 2 || got.Files[0].Lines[0].Tests[1] != 1 {
				t.Fatalf("Get = %v, %v", got, err)
			}
			m.Image = "img:2"
			if err := s.Put(ctx, m); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.Get(ctx, "six"); got.GetImage() != "img:2" {
				t.Errorf("Put did not replace: %v", got)
			}
			if err := s.Delete(ctx, "six"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "six"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get after Delete = %v", err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.Put(cctx, m); err == nil {
				t.Errorf("Put with a canceled context succeeded")
			}
		})
	}
}
