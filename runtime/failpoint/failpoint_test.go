//go:build failpoints

package failpoint

import (
	"errors"
	"testing"
	"time"
)

func TestParseAndFire(t *testing.T) {
	p, err := Parse("a=error, b=2*error@3,c=sleep(20),d=off,e=panic")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	points, setupErr = p, nil
	mu.Unlock()
	if err := Inject("a"); !errors.Is(err, ErrInjected) {
		t.Fatalf("a: %v", err)
	}
	var got []bool
	for range 6 {
		got = append(got, Inject("b") != nil)
	}
	if want := []bool{false, false, true, true, false, false}; !equal(got, want) {
		t.Fatalf("b fired %v, want %v (from hit 3, twice)", got, want)
	}
	start := time.Now()
	if err := Inject("c"); err != nil || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("c: %v after %v", err, time.Since(start))
	}
	if Inject("d") != nil || Inject("unarmed") != nil {
		t.Fatal("off or unarmed point fired")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("e did not panic")
			}
		}()
		Inject("e")
	}()
	for _, bad := range []string{"x", "x=", "x=explode", "x=0%error", "x=0*error", "x=error@0", "x=sleep(abc)"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
