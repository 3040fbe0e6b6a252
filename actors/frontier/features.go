package frontier

import (
	"fmt"
	"math"
	"slices"
	"strings"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// Features are what the difficulty model knows of a task: the categorical
// settings a synthesis request can choose (environment, operators, bugs,
// hint level, harness mode) and the numeric facts only a finished task has
// (edits, files, lines touched, failing tests, test distance).
type Features struct {
	Environment  string
	Operators    []string // distinct, sorted
	Bugs         int
	HintLevel    int
	Mode         string
	Edits        int
	Files        int
	LinesTouched int
	FailingTests int
	TestDistance int
}

// numericNames are the numeric features, fed to the model as log(1+x).
var numericNames = []string{"log_edits", "log_files", "log_lines", "log_failing", "log_distance"}

// harderWithMore are the numeric features whose growth never makes a task
// easier (more edits, files, lines touched, a test farther from the bug):
// learn keeps their weights nonpositive. The number of failing tests is
// left free (more failures also say more about the bug).
var harderWithMore = []string{"log_edits", "log_files", "log_lines", "log_distance"}

// FeaturesOf reads a task's difficulty features. A task without operators
// takes its provenance's operator; bugs is the number of operators listed
// (one per planted bug).
func FeaturesOf(t *records.Task) Features {
	d := t.GetDifficulty()
	ops := d.GetOperators()
	if len(ops) == 0 && t.GetProvenance().GetOperator() != "" {
		ops = strings.Split(t.GetProvenance().GetOperator(), "+")
	}
	mode := d.GetMode()
	if mode == "" {
		mode = "agent"
	}
	distinct := slices.Clone(ops)
	slices.Sort(distinct)
	distinct = slices.Compact(distinct)
	return Features{
		Environment: t.GetEnvironment(), Operators: distinct, Bugs: max(1, len(ops)),
		HintLevel: int(d.GetHintLevel()), Mode: mode,
		Edits: int(d.GetEdits()), Files: int(d.GetFiles()), LinesTouched: int(d.GetLinesTouched()),
		FailingTests: int(d.GetFailingTests()), TestDistance: int(d.GetTestDistance()),
	}
}

// numeric returns the raw numeric features in numericNames order.
func (f Features) numeric() []float64 {
	l := func(n int) float64 { return math.Log1p(float64(max(0, n))) }
	return []float64{l(f.Edits), l(f.Files), l(f.LinesTouched), l(f.FailingTests), l(f.TestDistance)}
}

// feature is one named input of the model with its value.
type feature struct {
	name  string
	value float64
}

// The hint level and the number of bugs are ordered: more hint never makes
// a task harder, and more bugs never make it easier. They enter the model
// as steps ("hint>=k" is 1 for every level from k up, "bugs>=k" for every
// count from k up) whose weights learn clamps to one sign (nonnegative for
// hints, nonpositive for bugs), so that a level is always predicted at least
// as easy as every level with less hint or more bugs. One-hot levels would
// not be: a level never played keeps its prior weight while the levels
// played are pushed down by failures, so when a policy solves nothing the
// least-played settings (no hint, three bugs) look easiest, and synthesis
// asks for the hardest tasks it can make (measured: docs/learning.md,
// 2026-12-07).
const (
	hintStep = "hint>="
	bugsStep = "bugs>="
	maxHint  = 5 // the easiest hint level (harness.HintReplace)
	maxBugs  = 4 // bug counts from here up share one setting
)

// vector is the model's input: a bias, the hint and bug steps, one-hot
// categorical features (the operators share a total weight of one) and the
// numeric features. Features of value 0 are left out.
func (f Features) vector() []feature {
	v := []feature{{"bias", 1}, {"env=" + f.Environment, 1}, {"mode=" + f.Mode, 1}}
	for k := 1; k <= min(f.HintLevel, maxHint); k++ {
		v = append(v, feature{fmt.Sprintf("%s%d", hintStep, k), 1})
	}
	for k := 2; k <= min(f.Bugs, maxBugs); k++ {
		v = append(v, feature{fmt.Sprintf("%s%d", bugsStep, k), 1})
	}
	for _, op := range f.Operators {
		v = append(v, feature{"op=" + op, 1 / float64(len(f.Operators))})
	}
	for i, x := range f.numeric() {
		v = append(v, feature{numericNames[i], x})
	}
	return v
}

// SpecKey names a synthesis setting; tasks and specs with the same key are
// alike to the synthesis control.
func SpecKey(s *records.SynthesisSpec) string {
	ops := slices.Clone(s.GetOperators())
	slices.Sort(ops)
	return fmt.Sprintf("%s|%s|bugs=%d|hint=%d|%s", s.GetEnvironment(), strings.Join(slices.Compact(ops), "+"), max(1, s.GetBugs()), s.GetHintLevel(), s.GetMode())
}

// specOf is the synthesis setting a task came from, as far as its features tell.
func (f Features) spec() *records.SynthesisSpec {
	return &records.SynthesisSpec{Environment: f.Environment, Operators: f.Operators, Bugs: int32(f.Bugs), HintLevel: int32(f.HintLevel), Mode: f.Mode}
}

// specFeatures are the features a task made to spec is expected to have;
// the numeric ones come from the model's running means for the bugs count.
func specFeatures(s *records.SynthesisSpec, m *records.DifficultyModel) Features {
	ops := slices.Clone(s.GetOperators())
	slices.Sort(ops)
	bugs := max(1, int(s.GetBugs()))
	f := Features{Environment: s.GetEnvironment(), Operators: slices.Compact(ops), Bugs: bugs, HintLevel: int(s.GetHintLevel()), Mode: s.GetMode()}
	if f.Mode == "" {
		f.Mode = "agent"
	}
	// A bug count no task has had yet borrows the means of the nearest
	// smaller count that has (at least fallback): a setting never made
	// must not look easier than one made already for having fewer edits,
	// lines or failing tests on paper.
	mean := func(name string, fallback int) int {
		for b := min(bugs, maxBugs); b >= 1; b-- {
			key := fmt.Sprintf("bugs=%d/%s", b, name)
			if m.GetNumericCounts()[key] == 0 {
				continue
			}
			v := int(math.Round(math.Expm1(m.GetNumericMeans()[key])))
			if b < min(bugs, maxBugs) {
				v = max(v, fallback)
			}
			return v
		}
		return fallback
	}
	f.Edits = mean("log_edits", bugs)
	f.Files = mean("log_files", 1)
	f.LinesTouched = mean("log_lines", bugs)
	f.FailingTests = mean("log_failing", 1)
	f.TestDistance = mean("log_distance", 0)
	return f
}
