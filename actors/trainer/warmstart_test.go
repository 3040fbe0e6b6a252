package trainer

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	records "github.com/frognano/frognano/persistence/records/v1"
)

func TestWarmStartSettings(t *testing.T) {
	ok := Settings{Steps: 1, TasksPerStep: 1, Group: 2, Mode: "patch", LR: 1e-5,
		WarmStartEpochs: 1, WarmStartTasks: 4, WarmStartLR: 3e-4, WarmStartHoldout: 1, WarmStartEnvs: "six, other"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := ok.warmStartEnvs(); !slices.Equal(got, []string{"six", "other"}) {
		t.Fatalf("environments %v", got)
	}
	for name, edit := range map[string]func(*Settings){
		"no rate":             func(s *Settings) { s.WarmStartLR = 0 },
		"rate above 1":        func(s *Settings) { s.WarmStartLR = 2 },
		"no environment":      func(s *Settings) { s.WarmStartEnvs = " , " },
		"negative batch":      func(s *Settings) { s.WarmStartBatch = -1 },
		"everything held out": func(s *Settings) { s.WarmStartHoldout = 4 },
		"negative epochs":     func(s *Settings) { s.WarmStartEpochs = -1 },
	} {
		s := ok
		edit(&s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	off := ok
	off.WarmStartEpochs, off.WarmStartTasks, off.WarmStartLR, off.WarmStartHoldout, off.WarmStartEnvs = 0, 0, 0, 0, ""
	if err := off.Validate(); err != nil {
		t.Fatalf("no warm start: %v", err)
	}
	back, err := DecodeSettings(&records.Run{Id: "r", ConfigYaml: ok.Encode()})
	if err != nil || !reflect.DeepEqual(back, ok) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if strings.Contains(off.Encode(), "warm_start") {
		t.Fatalf("settings without a warm start mention it: %s", off.Encode())
	}
}

// TestWarmStartPending: the stage runs once, before the first GRPO step.
func TestWarmStartPending(t *testing.T) {
	s := Settings{WarmStartEpochs: 1}
	run := &records.Run{Metrics: map[string]float64{}}
	if !warmStartPending(run, s) {
		t.Fatal("a new run with a warm start has it pending")
	}
	run.Metrics[MetricWarmStartDone] = 1
	if warmStartPending(run, s) {
		t.Fatal("a finished warm start is pending again")
	}
	if warmStartPending(&records.Run{Step: 1, Metrics: map[string]float64{}}, s) {
		t.Fatal("a run past its first GRPO step has a warm start pending")
	}
	if warmStartPending(&records.Run{Metrics: map[string]float64{}}, Settings{}) {
		t.Fatal("a run without a warm start has one pending")
	}
}

func TestEpochOrder(t *testing.T) {
	a, b := epochOrder(7, 0, 10), epochOrder(7, 0, 10)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed and epoch give different orders")
	}
	if slices.Equal(a, epochOrder(7, 1, 10)) {
		t.Fatal("two epochs in the same order")
	}
	sorted := slices.Clone(a)
	slices.Sort(sorted)
	for i, v := range sorted {
		if v != i {
			t.Fatalf("not a permutation: %v", a)
		}
	}
}
