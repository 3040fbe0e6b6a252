package trainer

import (
	"math"
	"reflect"
	"strings"
	"testing"

	records "github.com/frognano/frognano/persistence/records/v1"
)

func validSettings() Settings {
	return Settings{Steps: 1, TasksPerStep: 2, Group: 4, Mode: "patch", MaxTurnTokens: 256, LR: 1e-5}
}

func TestSettingsValidate(t *testing.T) {
	if err := validSettings().Validate(); err != nil {
		t.Fatalf("valid settings refused: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(*Settings)
		want string
	}{
		{"unknown mode", func(s *Settings) { s.Mode = "chat" }, "chat"},
		{"negative steps", func(s *Settings) { s.Steps = -1 }, "steps"},
		{"no tasks", func(s *Settings) { s.TasksPerStep = 0 }, "tasks per step"},
		{"group of one", func(s *Settings) { s.Group = 1 }, "at least 2"},
		{"negative limit", func(s *Settings) { s.MaxContext = -5 }, "negative"},
		{"zero learning rate", func(s *Settings) { s.LR = 0 }, "learning rate"},
		{"huge learning rate", func(s *Settings) { s.LR = 3 }, "learning rate"},
		{"negative checkpoint interval", func(s *Settings) { s.CheckpointEvery = -1 }, "checkpoint"},
		{"unknown sampler", func(s *Settings) { s.Sampler = "greedy" }, "sampler"},
		{"evaluation without episodes", func(s *Settings) { s.EvalTasks, s.EvalK = 8, 0 }, "evaluation"},
		{"negative evaluation interval", func(s *Settings) { s.EvalTasks, s.EvalK, s.EvalEvery = 8, 2, -1 }, "evaluation"},
		{"negative budget", func(s *Settings) { s.BudgetSeconds = -1 }, "budget"},
		{"infinite budget", func(s *Settings) { s.BudgetSeconds = math.Inf(1) }, "budget"},
		{"negative staleness", func(s *Settings) { s.MaxStaleness = -1 }, "staleness"},
	} {
		s := validSettings()
		c.edit(&s)
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
}

func TestSettingsRoundTripThroughARunRecord(t *testing.T) {
	s := validSettings()
	s.Seed, s.CheckpointEvery, s.WallSeconds = 42, 3, 90.5
	s.EvalTasks, s.EvalK, s.EvalEvery, s.EvalHints = 12, 2, 5, []int{3, 4}
	got, err := DecodeSettings(&records.Run{Id: "r", ConfigYaml: s.Encode()})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("decoded %+v, want %+v", got, s)
	}
	if _, err := DecodeSettings(&records.Run{Id: "plain"}); err == nil || !strings.Contains(err.Error(), "not a training run") {
		t.Fatalf("a run without settings: %v", err)
	}
	if _, err := DecodeSettings(&records.Run{Id: "bad", ConfigYaml: "{"}); err == nil {
		t.Fatal("malformed settings decoded")
	}
}

func TestSummaryOfARunRecord(t *testing.T) {
	run := &records.Run{Id: "r", Step: 3, Metrics: map[string]float64{
		MetricEpisodes: 10, MetricInfra: 2, MetricSolved: 4, MetricGroups: 5, MetricEffective: 3,
		MetricPolicyVersion: 2, MetricLoss: -0.25,
	}}
	s := SummaryOf(run, 7)
	if s.Steps != 3 || s.TotalSteps != 7 || s.PolicyVersion != 2 || !s.HaveLoss || s.Loss != -0.25 {
		t.Fatalf("summary %+v", s)
	}
	if got := s.SolveRate(); got != 0.5 { // 4 solved of 8 graded
		t.Fatalf("solve rate %v, want 0.5", got)
	}
	if SummaryOf(&records.Run{Id: "empty"}, 1).HaveLoss {
		t.Fatal("a run without updates reports a loss")
	}
	if got := (Summary{Episodes: 2, Infra: 2}).SolveRate(); got != 0 {
		t.Fatalf("all-infrastructure solve rate %v", got)
	}
}

// TestBudget: a run's budget counts its wall time less its held-out
// evaluations, ends the run (Finished) once spent, and never ends a run
// that has none.
func TestBudget(t *testing.T) {
	s := validSettings()
	s.Steps = 100
	run := &records.Run{Step: 3, Metrics: map[string]float64{MetricWallSeconds: 700, MetricEvalSeconds: 200}}
	if got := TrainSeconds(run); got != 500 {
		t.Fatalf("TrainSeconds = %v, want 500 (700 s wall less 200 s of evaluation)", got)
	}
	if BudgetSpent(run, s) || Finished(run, s) {
		t.Fatal("a run without a budget counts as spent or finished after 3 of 100 steps")
	}
	s.BudgetSeconds = 600
	if BudgetSpent(run, s) {
		t.Fatal("500 s of training spent a 600 s budget: evaluation time was counted")
	}
	run.Metrics[MetricWallSeconds] = 801
	if !BudgetSpent(run, s) || Finished(run, s) {
		t.Fatalf("601 s of training: spent %v, finished %v; want spent, not finished until the loop marks it", BudgetSpent(run, s), Finished(run, s))
	}
	run.Metrics[MetricBudgetSpent] = 1
	run.Metrics[MetricWallSeconds] = 10 // a marked run stays spent whatever its clock says
	if !BudgetSpent(run, s) || !Finished(run, s) {
		t.Fatal("a run marked budget-spent does not count as finished")
	}
	if !EvalPending(run, Settings{Steps: 100, EvalTasks: 4, EvalK: 2, BudgetSeconds: 600}) {
		t.Fatal("a run ended by its budget without an end point has no evaluation pending")
	}
	run2 := &records.Run{Step: 100, Metrics: map[string]float64{}}
	if !Finished(run2, s) {
		t.Fatal("a run at its last step is not finished")
	}
	// A run of no steps measures its start point (what --start-from reads
	// back), once.
	none := Settings{Steps: 0, EvalTasks: 4, EvalK: 2}
	run3 := &records.Run{Metrics: map[string]float64{}}
	if !EvalPending(run3, none) {
		t.Fatal("a run of no steps without its start point has no evaluation pending")
	}
	run3.Curve = append(run3.Curve, &records.RunPoint{Phase: PhaseStart, HeldOut: []*records.HeldOutScore{{HintLevel: 4}}})
	if EvalPending(run3, none) || EvalPending(&records.Run{}, Settings{}) {
		t.Fatal("a run of no steps with its start point, or one that evaluates nothing, has an evaluation pending")
	}
}

// TestBudgetRaisedOnResume: a run its budget ended reopens when it is
// resumed with a larger --budget (or none), stays ended with a budget it has
// already spent, and the record keeps the settings it now runs with.
func TestBudgetRaisedOnResume(t *testing.T) {
	base := validSettings()
	base.Steps, base.BudgetSeconds = 1000, 3600
	ended := func() *records.Run {
		return &records.Run{Id: "r", Step: 12, ConfigYaml: base.Encode(), Metrics: map[string]float64{
			MetricWallSeconds: 4800, MetricEvalSeconds: 1100, MetricBudgetSpent: 1}}
	}
	for _, tc := range []struct {
		name     string
		override []string
		budget   float64
		finished bool
	}{
		{"no override", nil, 7200, true},
		{"budget already spent", []string{"budget"}, 3000, true},
		{"budget raised", []string{"budget"}, 7200, false},
		{"budget removed", []string{"budget"}, 0, false},
	} {
		run := ended()
		job := &Job{Settings: base, Override: tc.override}
		job.Settings.BudgetSeconds = tc.budget
		s, err := resumeSettings(run, job)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := Finished(run, s); got != tc.finished {
			t.Errorf("%s: finished %v after resuming, want %v", tc.name, got, tc.finished)
		}
		stored, err := DecodeSettings(run)
		if err != nil {
			t.Fatal(err)
		}
		if stored.BudgetSeconds != s.BudgetSeconds {
			t.Errorf("%s: the record keeps budget %v, the run runs with %v", tc.name, stored.BudgetSeconds, s.BudgetSeconds)
		}
	}
	// Bad overrides are refused and change nothing; no change leaves the
	// record as it was written.
	for _, bad := range []Settings{{Steps: -1}, {BudgetSeconds: -300}} {
		run := ended()
		job := &Job{Settings: base, Override: []string{"steps", "budget"}}
		job.Settings.Steps, job.Settings.BudgetSeconds = bad.Steps, bad.BudgetSeconds
		if _, err := resumeSettings(run, job); err == nil {
			t.Errorf("resuming with steps %d, budget %v: no error", bad.Steps, bad.BudgetSeconds)
		}
		if run.GetConfigYaml() != base.Encode() || run.GetMetrics()[MetricBudgetSpent] != 1 {
			t.Errorf("a refused override changed the record")
		}
	}
	run := ended()
	run.ConfigYaml = `{"steps": 1000, "budget_seconds": 3600, "mode": "patch", "tasks_per_step": 4, "group": 8, "lr": 1e-05, "a_later_field": 1}`
	if _, err := resumeSettings(run, &Job{Settings: base, Override: []string{"budget"}}); err != nil || !strings.Contains(run.GetConfigYaml(), "a_later_field") {
		t.Errorf("an override that changes nothing rewrote the record (%v): %s", err, run.GetConfigYaml())
	}
}
