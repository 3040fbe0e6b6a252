package rollout

import (
	"math"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/harness"
)

func TestPassAtK(t *testing.T) {
	for _, c := range []struct {
		n, c, k int
		want    float64
		ok      bool
	}{
		{8, 0, 1, 0, true},
		{8, 8, 8, 1, true},
		{8, 1, 1, 0.125, true},
		{8, 1, 8, 1, true},           // one success among exactly k samples
		{8, 2, 4, 1 - 15.0/70, true}, // 1 - C(6,4)/C(8,4)
		{10, 3, 5, 1 - 21.0/252, true},
		{4, 1, 8, 0, false}, // fewer samples than k
		{8, 9, 1, 0, false},
	} {
		got, ok := PassAtK(c.n, c.c, c.k)
		if ok != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("PassAtK(%d, %d, %d) = %v, %v; want %v, %v", c.n, c.c, c.k, got, ok, c.want, c.ok)
		}
	}
}

func TestBootstrap(t *testing.T) {
	e := Bootstrap([]float64{0, 0, 0, 1}, 2000, 1)
	if e.Mean != 0.25 || e.Low != 0 || e.High != 0.75 || e.Tasks != 4 { // P(all four draws are the 1) = 0.4% < 2.5%
		t.Fatalf("%+v", e)
	}
	e = Bootstrap([]float64{0.5, 0.5, 0.5}, 500, 1)
	if e.Low != 0.5 || e.High != 0.5 {
		t.Fatalf("constant values: %+v", e)
	}
	if e := Bootstrap(nil, 10, 1); e.Tasks != 0 || e.String() != "n/a" {
		t.Fatalf("%+v", e)
	}
	// Seeded: the same interval twice.
	a, b := Bootstrap([]float64{0, 1, 0, 1, 1}, 1000, 7), Bootstrap([]float64{0, 1, 0, 1, 1}, 1000, 7)
	if a != b {
		t.Fatal("bootstrap is not reproducible")
	}
}

func TestBuckets(t *testing.T) {
	ep := func(reward float64, ending harness.Ending, infra bool) *Episode {
		return &Episode{Infra: infra, Result: &harness.EpisodeResult{Ending: ending, Reward: reward}}
	}
	var tasks []*TaskOutcome
	for i, spec := range []struct {
		hint    int
		rewards []float64
		infra   int
	}{{0, []float64{0, 0, 0, 0}, 0}, {0, []float64{1, 0, 0, 0}, 0}, {1, []float64{1, 1, 0, 0}, 1}, {1, []float64{0, 0, 0}, 1}} {
		o := &TaskOutcome{TaskID: string(rune('a' + i)), Mode: "agent", HintLevel: spec.hint}
		for _, r := range spec.rewards {
			o.Add(ep(r, harness.EndSubmitted, false))
		}
		for range spec.infra {
			o.Add(ep(0, harness.EndSandboxFailure, true))
		}
		o.Finish(4)
		tasks = append(tasks, o)
	}
	if tasks[2].Samples != 4 || tasks[2].Infra != 1 || tasks[2].PassAt1 != 0.5 || *tasks[2].PassAtK != 1 || tasks[3].PassAtK != nil {
		t.Fatalf("%+v %+v", tasks[2], tasks[3])
	}
	b := Buckets(tasks, 4, 1)
	if len(b) != 3 || *b[0].HintLevel != 0 || *b[1].HintLevel != 1 || b[2].HintLevel != nil {
		t.Fatalf("%+v", b)
	}
	if b[0].PassAt1.Mean != 0.125 || b[0].PassAtK.Mean != 0.5 || b[0].Episodes != 8 {
		t.Fatalf("hint 0: %+v", b[0])
	}
	// Hint 1: the task with 3 samples has pass@1 but no pass@4.
	if b[1].PassAt1.Tasks != 2 || b[1].PassAtK.Tasks != 1 || b[1].Infra != 2 || b[1].PassAt1.Mean != 0.25 {
		t.Fatalf("hint 1: %+v", b[1])
	}
	if b[2].Tasks != 4 || b[2].Episodes != 17 {
		t.Fatalf("all: %+v", b[2])
	}
	var out strings.Builder
	WriteTable(&out, b, 4)
	if !strings.Contains(out.String(), "PASS@4") || !strings.Contains(out.String(), "agent  all") {
		t.Fatalf("table:\n%s", out.String())
	}
	if got := FormatEndings(map[string]int{"a": 1, "b": 3}); got != "b 3, a 1" {
		t.Fatal(got)
	}
}
