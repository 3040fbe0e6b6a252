package synth

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/sandbox/testreport"
	"github.com/frognano/frognano/actors/synth/mutate"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// report builds a verified report from id → status.
func report(fw testreport.Framework, exit int, results map[string]testreport.Status) *testreport.Report {
	r := &testreport.Report{Framework: fw, ExitCode: exit}
	for id, st := range results {
		r.Results = append(r.Results, testreport.Result{ID: id, Status: st})
	}
	slices.SortFunc(r.Results, func(a, b testreport.Result) int { return strings.Compare(a.ID, b.ID) })
	r.Verify()
	return r
}

const (
	pass  = testreport.StatusPass
	fail  = testreport.StatusFail
	errst = testreport.StatusError
	skip  = testreport.StatusSkip
)

func TestScreenVerdict(t *testing.T) {
	timedOut := report(testreport.Pytest, 1, map[string]testreport.Status{"a": fail})
	timedOut.TimedOut = true
	timedOut.Verify()
	tests := []struct {
		name     string
		r        *testreport.Report
		screened []string
		want     string
	}{
		{"a screened test fails", report(testreport.Pytest, 1, map[string]testreport.Status{"a": pass, "b": fail}), []string{"a", "b"}, ""},
		{"an error counts as failing", report(testreport.Pytest, 1, map[string]testreport.Status{"a": errst}), []string{"a"}, ""},
		{"all pass", report(testreport.Pytest, 0, map[string]testreport.Status{"a": pass, "b": pass}), []string{"a", "b"}, ReasonSurvived},
		{"a test went missing", report(testreport.Pytest, 0, map[string]testreport.Status{"a": pass}), []string{"a", "b"}, ReasonTestsNotRun},
		{"a failure outside the screened set does not count", report(testreport.Pytest, 1, map[string]testreport.Status{"a": pass, "z": fail}), []string{"a"}, ReasonSurvived},
		{"timeout", timedOut, []string{"a"}, ReasonTimeout},
		{"pytest could not find the ids", report(testreport.Pytest, 4, nil), []string{"a"}, ReasonTestsNotRun},
		{"runner crashed", report(testreport.Pytest, 3, map[string]testreport.Status{"a": fail}), []string{"a"}, ReasonInvalidReport},
		{"go build failure", report(testreport.GoTest, 1, map[string]testreport.Status{"example.com/m": errst}), []string{"example.com/m/TestA"}, ReasonTestsNotRun},
	}
	for _, tt := range tests {
		if got := screenVerdict(tt.r, tt.screened); got != tt.want {
			t.Errorf("%s: screenVerdict = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestFullVerdict(t *testing.T) {
	passing := map[string]bool{"a": true, "b": true, "c": true}
	tests := []struct {
		name     string
		r        *testreport.Report
		f2p, p2p []string
		want     string
	}{
		{"one fails, others pass", report(testreport.Pytest, 1, map[string]testreport.Status{"a": fail, "b": pass, "c": pass, "flaky-at-baseline": fail}), []string{"a"}, []string{"b", "c"}, ""},
		{"nothing fails", report(testreport.Pytest, 0, map[string]testreport.Status{"a": pass, "b": pass, "c": pass}), nil, nil, ReasonNoFailToPass},
		{"a passing test is missing", report(testreport.Pytest, 1, map[string]testreport.Status{"a": fail, "b": pass}), nil, nil, ReasonTestsNotRun},
		{"a passing test is now skipped", report(testreport.Pytest, 1, map[string]testreport.Status{"a": fail, "b": pass, "c": skip}), nil, nil, ReasonTestsNotRun},
		{"invalid", report(testreport.Pytest, 2, map[string]testreport.Status{"a": fail}), nil, nil, ReasonInvalidReport},
	}
	for _, tt := range tests {
		f2p, p2p, got := fullVerdict(tt.r, passing)
		if got != tt.want || !slices.Equal(f2p, tt.f2p) || !slices.Equal(p2p, tt.p2p) {
			t.Errorf("%s: fullVerdict = %v %v %q, want %v %v %q", tt.name, f2p, p2p, got, tt.f2p, tt.p2p, tt.want)
		}
	}
}

func TestRerunAndGoldVerdicts(t *testing.T) {
	f2p := []string{"a", "b"}
	tests := []struct {
		name        string
		r           *testreport.Report
		rerun, gold string
	}{
		{"both fail again", report(testreport.Pytest, 1, map[string]testreport.Status{"a": fail, "b": errst}), "", ReasonGoldNotFixing},
		{"one passes now", report(testreport.Pytest, 1, map[string]testreport.Status{"a": fail, "b": pass}), ReasonFlaky, ReasonGoldNotFixing},
		{"both pass", report(testreport.Pytest, 0, map[string]testreport.Status{"a": pass, "b": pass}), ReasonFlaky, ""},
		{"one missing", report(testreport.Pytest, 0, map[string]testreport.Status{"a": pass}), ReasonFlaky, ReasonGoldNotFixing},
	}
	for _, tt := range tests {
		if got := rerunVerdict(tt.r, f2p); got != tt.rerun {
			t.Errorf("%s: rerunVerdict = %q, want %q", tt.name, got, tt.rerun)
		}
		if got := goldVerdict(tt.r, f2p); got != tt.gold {
			t.Errorf("%s: goldVerdict = %q, want %q", tt.name, got, tt.gold)
		}
	}
}

func TestMergeReports(t *testing.T) {
	a := report(testreport.Pytest, 1, map[string]testreport.Status{"a": fail})
	b := report(testreport.Pytest, 0, map[string]testreport.Status{"b": pass, "c": pass})
	m := mergeReports(a, b)
	f2p, p2p, reason := fullVerdict(m, map[string]bool{"a": true, "b": true, "c": true})
	if reason != "" || !slices.Equal(f2p, []string{"a"}) || !slices.Equal(p2p, []string{"b", "c"}) {
		t.Errorf("merged verdict %v %v %q", f2p, p2p, reason)
	}
	bad := report(testreport.Pytest, 3, map[string]testreport.Status{"b": pass})
	if m := mergeReports(a, bad); m.Valid || m.Problem == "" {
		t.Errorf("merging an invalid run gave a valid report: %+v", m)
	}
}

var statementIn = StatementInput{
	Repo: "calc", Language: "python", PassToPass: 7,
	Failing: []FailingTest{
		{ID: "tests/test_calc.py::test_clamp_low", Message: "AssertionError: assert 5 == 0\n +  where 5 = clamp(-3, 0, 10)"},
		{ID: "tests/test_calc.py::test_clamp_mid", Message: ""},
	},
	Locations: []Location{{Path: "calc/__init__.py", Module: "calc", Function: "clamp", StartLine: 4,
		Source: "def clamp(x, lo, hi):\n    if x > lo:\n        return lo\n    return min(x, hi)\n"}},
	BugPatch: "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -4,4 +4,4 @@\n def clamp(x, lo, hi):\n-    if x < lo:\n+    if x > lo:\n         return lo\n",
}

const statementGold = "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -4,4 +4,4 @@\n def clamp(x, lo, hi):\n-    if x > lo:\n+    if x < lo:\n         return lo\n"

func TestTemplateWriterHintLevels(t *testing.T) {
	buggy := map[string][]byte{"calc/__init__.py": []byte(statementIn.Locations[0].Source)}
	tests := []struct {
		level        int
		want, absent []string
	}{
		{HintTests, []string{"2 tests of calc fail", "tests/test_calc.py::test_clamp_low", "assert 5 == 0", "tests/test_calc.py::test_clamp_mid"},
			[]string{"clamp(x", "calc/__init__.py", "`calc.clamp`"}},
		{HintLocation, []string{"`calc.clamp`", "calc/__init__.py", "2 tests that exercise it fail", "other 7 tests pass", "assert 5 == 0"},
			[]string{"def clamp", "x > lo"}},
		{HintSource, []string{"`calc.clamp`", "```python\ndef clamp(x, lo, hi):\n    if x > lo:", "from line 4"}, nil},
	}
	for _, tt := range tests {
		in := statementIn
		in.HintLevel = tt.level
		got, err := TemplateWriter{}.WriteStatement(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("level %d: statement lacks %q:\n%s", tt.level, w, got)
			}
		}
		for _, a := range tt.absent {
			if strings.Contains(got, a) {
				t.Errorf("level %d: statement has %q:\n%s", tt.level, a, got)
			}
		}
		if Leaks(got, statementGold, buggy) {
			t.Errorf("level %d: statement leaks the fix:\n%s", tt.level, got)
		}
	}
	if _, err := (TemplateWriter{}).WriteStatement(context.Background(), StatementInput{}); err == nil {
		t.Error("a statement without failing tests was written")
	}
}

// Statements say only what is true, in agreement with their counts: no
// "while the other 0 tests pass", no "so that it pass".
func TestTemplateWriterCounts(t *testing.T) {
	one := statementIn.Failing[:1]
	two := statementIn.Locations[0]
	two.Function, two.StartLine = "wrap", 9
	twoLocs := []Location{statementIn.Locations[0], two}
	tests := []struct {
		name      string
		level     int
		failing   []FailingTest
		p2p       int
		locations []Location
		want      string
	}{
		{"tests, one failing", HintTests, one, 0, nil,
			"1 test of calc fails. Fix the code so that it passes again, without changing the tests; every other test must keep passing.\n"},
		{"tests, two failing", HintTests, statementIn.Failing, 3, nil,
			"2 tests of calc fail. Fix the code so that they pass again, without changing the tests; every other test must keep passing.\n"},
		{"location, one failing, none other", HintLocation, one, 0, statementIn.Locations,
			"no longer behaves as the test suite expects: 1 test that exercises it fails.\nPlease find the defect and fix it without changing the tests.\n"},
		{"location, one failing, one other", HintLocation, one, 1, statementIn.Locations,
			": 1 test that exercises it fails, while the one other test passes.\n"},
		{"location, two failing, seven others", HintLocation, statementIn.Failing, 7, statementIn.Locations,
			": 2 tests that exercise it fail, while the other 7 tests pass.\n"},
		{"two locations, one failing, none other", HintLocation, one, 0, twoLocs,
			"\n1 test fails. More than one place needs fixing.\nPlease find the defects and fix them without changing the tests.\n"},
		{"two locations, two failing, one other", HintLocation, statementIn.Failing, 1, twoLocs,
			"\n2 tests fail, while the one other test passes. More than one place needs fixing.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := statementIn
			in.HintLevel, in.Failing, in.PassToPass, in.Locations = tt.level, tt.failing, tt.p2p, tt.locations
			got, err := TemplateWriter{}.WriteStatement(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("statement lacks %q:\n%s", tt.want, got)
			}
			for _, bad := range []string{" 0 test", "other 1 test", "1 tests", "it pass ", "1 test fail ", "1 test fail,", "1 test fail."} {
				if strings.Contains(got, bad) {
					t.Errorf("statement has %q:\n%s", bad, got)
				}
			}
		})
	}
}

func TestLeaks(t *testing.T) {
	gold := "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,4 @@\n def f(x):\n+    x = normalize(x)\n-    return x >= 0\n+    return x > 0\n"
	buggy := map[string][]byte{"m.py": []byte("def f(x):\n    return x >= 0\n\ndef g(y):\n    return y > 0\n")}
	tests := []struct {
		stmt string
		want bool
	}{
		{"f fails for 0", false},
		{"Fix: x = normalize(x) is missing", true},
		{"add `x   =   normalize(x)`", true}, // whitespace does not hide it
		{"it should `return x > 0`", true},   // the restored line, absent from the buggy file
		{"see `return x >= 0`", false},       // the buggy line itself
		{"`def f(x):` misbehaves", false},    // context, present in the buggy file
	}
	for _, tt := range tests {
		if got := Leaks(tt.stmt, gold, buggy); got != tt.want {
			t.Errorf("Leaks(%q) = %v, want %v", tt.stmt, got, tt.want)
		}
	}
	// A restored line that also appears elsewhere in the buggy file says
	// nothing about the fix.
	buggy["m.py"] = append(buggy["m.py"], []byte("def h(x):\n    return x > 0\n")...)
	if Leaks("it should `return x > 0`", gold, buggy) {
		t.Error("a line present in the buggy file counted as a leak")
	}
}

func TestDistance(t *testing.T) {
	pyTest := "import calc\nfrom calc.util import helper\n\ndef test_clamp():\n    assert calc.clamp(-1, 0, 2) == 0\n\ndef test_other():\n    assert helper(3)\n"
	tests := []struct {
		name string
		ts   testSource
		b    bugSite
		lang string
		want int
	}{
		{"python direct call", testSource{body: pythonTestBody(pyTest, "test_clamp"), imports: pyTest}, bugSite{"calc/__init__.py", "calc", "clamp"}, "python", 0},
		{"python through other code", testSource{body: pythonTestBody(pyTest, "test_other"), imports: pyTest}, bugSite{"calc/__init__.py", "calc", "clamp"}, "python", 1},
		{"python submodule of an imported package", testSource{body: pythonTestBody(pyTest, "test_clamp"), imports: pyTest}, bugSite{"calc/core.py", "calc.core", "_impl"}, "python", 1},
		{"python module-level bug", testSource{body: pythonTestBody(pyTest, "test_clamp"), imports: pyTest}, bugSite{"calc/__init__.py", "calc", ""}, "python", 1},
		{"python unrelated module", testSource{body: pythonTestBody(pyTest, "test_clamp"), imports: pyTest}, bugSite{"other.py", "other", "clamp"}, "python", 2},
		{"python constructor by class", testSource{body: "def test_x():\n    Point(1, 2)\n", imports: "from calc import Point\n"}, bugSite{"calc/__init__.py", "calc", "Point.__init__"}, "python", 0},
		{"go same package, names the method", testSource{body: "func TestParse(t *testing.T) {\n\tu.Parse(s)\n}\n", imports: "package uuid\n", pkgDir: "."}, bugSite{"uuid.go", "example.com/uuid", "(*UUID).Parse"}, "go", 0},
		{"go same package, other function", testSource{body: "func TestNew(t *testing.T) {\n\tNew()\n}\n", imports: "package uuid\n", pkgDir: "."}, bugSite{"uuid.go", "example.com/uuid", "Parse"}, "go", 1},
		{"go other package importing it", testSource{body: "func TestX(t *testing.T) {}\n", imports: "import \"example.com/uuid/internal\"\n", pkgDir: "cmd"}, bugSite{"internal/a.go", "example.com/uuid/internal", "F"}, "go", 1},
		{"go other package", testSource{body: "func TestX(t *testing.T) {}\n", imports: "package cmd\n", pkgDir: "cmd"}, bugSite{"internal/a.go", "example.com/uuid/internal", "F"}, "go", 2},
		{"no test source", testSource{}, bugSite{"a.py", "a", "f"}, "python", 2},
	}
	for _, tt := range tests {
		if got := distance(tt.ts, tt.b, tt.lang); got != tt.want {
			t.Errorf("%s: distance = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestTestBodies(t *testing.T) {
	py := "class TestA:\n    def test_x(self):\n        foo()\n\n    def test_y(self):\n        bar()\n\ndef test_x():\n    baz()\n"
	if got := pythonTestBody(py, "test_x"); !strings.Contains(got, "foo()") || !strings.Contains(got, "baz()") || strings.Contains(got, "bar()") {
		t.Errorf("pythonTestBody = %q", got)
	}
	gosrc := "package p\n\nfunc TestA(t *testing.T) {\n\tA()\n}\n\nfunc TestB(t *testing.T) {\n\tB()\n}\n"
	if got := goTestBody(gosrc, "TestA"); !strings.Contains(got, "A()") || strings.Contains(got, "B()") {
		t.Errorf("goTestBody = %q", got)
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{
		"six.py": "six", "inflection/__init__.py": "inflection", "src/slugify/slugify.py": "slugify.slugify", "toolz/curried/__init__.py": "toolz.curried",
	} {
		if got := pythonModule(in); got != want {
			t.Errorf("pythonModule(%q) = %q, want %q", in, got, want)
		}
	}
	if got := goPackage("github.com/google/uuid", "uuid.go"); got != "github.com/google/uuid" {
		t.Errorf("goPackage root = %q", got)
	}
	if got := goPackage("example.com/m", "a/b/c.go"); got != "example.com/m/a/b" {
		t.Errorf("goPackage = %q", got)
	}
	for fn, want := range map[[2]string]string{
		{"Class.method", "python"}: "method", {"Class.__eq__", "python"}: "Class", {"__getattr__", "python"}: "",
		{"(*UUID).Scan", "go"}: "Scan", {"UUID.String", "go"}: "String", {"Parse", "go"}: "Parse", {"init", "go"}: "",
	} {
		if got := callName(fn[0], fn[1]); got != want {
			t.Errorf("callName(%q, %s) = %q, want %q", fn[0], fn[1], got, want)
		}
	}
}

func TestParseProfileLine(t *testing.T) {
	tests := []struct {
		line     string
		file     string
		from, to int
		ok       bool
	}{
		{"github.com/google/uuid/dce.go:38.2,40.16 2 1", "dce.go", 38, 40, true},
		{"github.com/google/uuid/internal/x/y.go:7.1,7.30 1 1", "internal/x/y.go", 7, 7, true},
		{"golang.org/x/text/a.go:1.1,2.2 1 1", "", 0, 0, false},
		{"github.com/google/uuidx/a.go:1.1,2.2 1 1", "", 0, 0, false},
		{"mode: set", "", 0, 0, false},
		{"github.com/google/uuid/a.go:9.1,3.2 1 1", "", 0, 0, false},
	}
	for _, tt := range tests {
		file, from, to, ok := parseProfileLine(tt.line, "github.com/google/uuid")
		if ok != tt.ok || file != tt.file || from != tt.from || to != tt.to {
			t.Errorf("parseProfileLine(%q) = %q %d %d %v", tt.line, file, from, to, ok)
		}
	}
	if got := modulePath([]byte("// comment\nmodule \"example.com/m\"\n\ngo 1.22\n")); got != "example.com/m" {
		t.Errorf("modulePath = %q", got)
	}
}

func TestCheckOperators(t *testing.T) {
	tests := []struct {
		lang     mutate.Language
		ops      []string
		usable   int
		na       int
		badInput bool
	}{
		{mutate.Python, nil, len(mutate.OperatorNames), 0, false},
		{mutate.Python, []string{mutate.FlipComparison, mutate.UnwrapTry}, 2, 0, false},
		{mutate.Go, []string{mutate.UnwrapTry, mutate.ChangeDefault}, 0, 2, false},
		{mutate.Go, []string{mutate.UnwrapTry, mutate.OffByOne}, 1, 1, false},
		{mutate.Python, []string{"flip_comparisons"}, 0, 0, true},
		{"cobol", nil, 0, 0, true},
	}
	for _, tt := range tests {
		usable, na, err := checkOperators(tt.lang, tt.ops)
		if (err != nil) != tt.badInput || (err != nil && !errors.Is(err, ErrBadRequest)) || len(usable) != tt.usable || na != tt.na {
			t.Errorf("checkOperators(%s, %v) = %v, %d, %v", tt.lang, tt.ops, usable, na, err)
		}
	}
}

// testCoverage is a hand-made map: calc.py's clamp (lines 1–5) run by two
// tests, line 7 (module level) only at import, mean (9–10) by one test.
func testCoverage() *Coverage {
	return &Coverage{
		Tests: []string{"tests/test_calc.py::test_clamp", "tests/test_calc.py::test_clamp_hi", "tests/test_calc.py::test_mean"},
		Files: map[string]map[int][]int32{
			"calc.py": {1: nil, 2: {0, 1}, 3: {0}, 4: {1}, 5: {1}, 7: nil, 9: nil, 10: {2}},
		},
	}
}

func TestCoverageTestsFor(t *testing.T) {
	c := testCoverage()
	tests := []struct {
		from, to, fnFrom, fnTo int
		want                   []string
	}{
		{3, 3, 1, 5, []string{"tests/test_calc.py::test_clamp"}},
		{2, 2, 1, 5, []string{"tests/test_calc.py::test_clamp", "tests/test_calc.py::test_clamp_hi"}},
		{1, 1, 1, 5, []string{"tests/test_calc.py::test_clamp", "tests/test_calc.py::test_clamp_hi"}},                                  // the def line: its function's tests
		{7, 7, 0, 0, []string{"tests/test_calc.py::test_clamp", "tests/test_calc.py::test_clamp_hi", "tests/test_calc.py::test_mean"}}, // module level: the file's tests
	}
	for _, tt := range tests {
		if got := c.TestsFor("calc.py", tt.from, tt.to, tt.fnFrom, tt.fnTo); !slices.Equal(got, tt.want) {
			t.Errorf("TestsFor(%d-%d in %d-%d) = %v, want %v", tt.from, tt.to, tt.fnFrom, tt.fnTo, got, tt.want)
		}
	}
	if got := c.TestsFor("other.py", 1, 1, 0, 0); len(got) != 0 {
		t.Errorf("TestsFor(an uncovered file) = %v", got)
	}
	back := CoverageFromProto(c.Proto("calc"))
	if !slices.Equal(back.Tests, c.Tests) || len(back.Files["calc.py"]) != 8 || !slices.Equal(back.Files["calc.py"][2], []int32{0, 1}) {
		t.Errorf("proto round trip: %+v", back)
	}
	if ls := c.Lines("calc.py"); len(ls) != 8 || !ls[7] || ls[6] {
		t.Errorf("Lines = %v", ls)
	}
}

func TestBuilderKeepsSourcesAndPassingTests(t *testing.T) {
	env := &records.Environment{TestFiles: []string{"tests/helpers_for_tests.py"}, Baseline: &records.TestReport{Results: []*records.TestResult{
		{Name: "t1", Status: records.TestStatus_TEST_STATUS_PASS}, {Name: "t2", Status: records.TestStatus_TEST_STATUS_FAIL},
	}}}
	b := newBuilder(env, "test")
	for _, f := range []string{"pkg/a.py", "test_a.py", "pkg/a_test.py", "tests/helpers_for_tests.py", "pkg/tests/util.py", "conftest.py", "setup.py", "a_test.go", "docs/conf.py"} {
		b.line(f, 1, "t1")
	}
	b.line("pkg/a.py", 2, "t2") // failing at baseline: cannot become FAIL_TO_PASS
	b.line("pkg/a.py", 3, "")
	if len(b.c.Files) != 1 || len(b.c.Files["pkg/a.py"]) != 3 || len(b.c.Files["pkg/a.py"][2]) != 0 || !slices.Equal(b.c.Tests, []string{"t1"}) {
		t.Errorf("coverage kept %+v", b.c)
	}
}

func TestGenerateCountsWhatItSkips(t *testing.T) {
	files := map[string][]byte{
		"calc.py":   []byte("def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    return min(x, hi)\n\nLIMIT = 10\n\ndef mean(xs):\n    return sum(xs) / len(xs)\n"),
		"broken.py": []byte("def f(:\n    return (\n"),
	}
	cov := testCoverage()
	cov.Files["broken.py"] = map[int][]int32{1: {0}}
	rejected := map[string]int{}
	cands := generate(files, cov, mutate.Python, []string{mutate.FlipComparison, mutate.UnwrapTry}, 1, rejected)
	if rejected[mutate.ReasonParseError] != 1 {
		t.Errorf("parse errors counted %d, want 1 (%v)", rejected[mutate.ReasonParseError], rejected)
	}
	if rejected[mutate.ReasonNoSite] != 1 { // unwrap_try has no site in calc.py
		t.Errorf("no_site counted %d, want 1 (%v)", rejected[mutate.ReasonNoSite], rejected)
	}
	if len(cands) == 0 {
		t.Fatalf("no candidates (%v)", rejected)
	}
	for _, c := range cands {
		if len(c.tests) == 0 || c.Features.Operators[0] != mutate.FlipComparison {
			t.Errorf("candidate %s: tests %v, operators %v", c.Key, c.tests, c.Features.Operators)
		}
	}
	// A file no baseline-passing test runs at all yields no candidates.
	cov.Files["calc.py"] = map[int][]int32{2: nil}
	rejected = map[string]int{}
	if cands := generate(map[string][]byte{"calc.py": files["calc.py"]}, cov, mutate.Python, nil, 1, rejected); len(cands) != 0 || rejected[ReasonNotCovered] == 0 {
		t.Errorf("uncovered: %d candidates, rejected %v", len(cands), rejected)
	}
}

// noSandboxes fails the test if synthesis gets as far as a sandbox.
type noSandboxes struct{ t *testing.T }

func (n noSandboxes) Create(context.Context, *records.Environment) (Sandbox, error) {
	n.t.Error("a sandbox was created for a request that should have been refused")
	return nil, errors.New("no sandboxes here")
}

func TestSynthesizeRefusesBadInput(t *testing.T) {
	passing := &records.TestReport{Results: []*records.TestResult{{Name: "t", Status: records.TestStatus_TEST_STATUS_PASS}}}
	failing := &records.TestReport{Results: []*records.TestResult{{Name: "t", Status: records.TestStatus_TEST_STATUS_FAIL}, {Name: "u", Status: records.TestStatus_TEST_STATUS_SKIP}}}
	env := func(lang string, r *records.TestReport) *records.Environment {
		return &records.Environment{Name: "e", Language: lang, TestFramework: "pytest", Baseline: r}
	}
	tests := []struct {
		name   string
		env    *records.Environment
		req    Request
		err    error
		reason string
	}{
		{"no passing test", env("python", failing), Request{Count: 1}, ErrNoPassingTests, ReasonNoPassingTests},
		{"count 0", env("python", passing), Request{}, ErrBadRequest, ""},
		{"hint level above the highest", env("python", passing), Request{Count: 1, HintLevel: MaxHintLevel + 1}, ErrBadRequest, ""},
		{"negative hint level", env("python", passing), Request{Count: 1, HintLevel: -1}, ErrBadRequest, ""},
		{"unknown operator", env("python", passing), Request{Count: 1, Operators: []string{"flip"}}, ErrBadRequest, ""},
		{"unknown language", env("cobol", passing), Request{Count: 1}, ErrBadRequest, ""},
		{"no environment", nil, Request{Count: 1}, ErrBadRequest, ""},
		{"only inapplicable operators", env("go", passing), Request{Count: 1, Operators: []string{mutate.UnwrapTry}}, nil, ReasonOperatorNotApplicable},
	}
	for _, tt := range tests {
		s := New(Config{Sandboxes: noSandboxes{t}})
		res, err := s.Synthesize(context.Background(), tt.env, tt.req, nil)
		if !errors.Is(err, tt.err) || (tt.err == nil && err != nil) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.err)
		}
		if res == nil || len(res.Tasks) != 0 || (tt.reason != "" && res.Rejected[tt.reason] != 1) {
			t.Errorf("%s: result %+v, want reason %q counted once", tt.name, res, tt.reason)
		}
	}
}

func TestExportRecord(t *testing.T) {
	task := &records.Task{Id: "six.0123", Environment: "six", Language: "python", BugPatch: "bug", GoldPatch: "gold", ProblemStatement: "it fails",
		FailToPass: []string{"test_six.py::test_a"}, TestCommand: "pytest", Image: "img:1", CreatedUnixNano: 1e18,
		Difficulty: &records.DifficultyFeatures{Operators: []string{"flip_comparison"}, Edits: 1, Files: 1, LinesTouched: 1, FailingTests: 1, HintLevel: 2, TestDistance: 0, Mode: "agent"},
		Provenance: &records.Provenance{Operator: "flip_comparison", Seed: 9, Generator: Generator}}
	env := &records.Environment{Name: "six", SourceKind: "pypi", Source: "six==1.16.0", BaseCommit: "abc"}
	b, err := json.Marshal(Export(task, env))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(b, &got)
	want := map[string]any{"instance_id": "six.0123", "repo": "six", "base_commit": "abc", "patch": "gold", "bug_patch": "bug", "test_patch": "",
		"problem_statement": "it fails", "image_name": "img:1", "version": "1.16.0", "created_at": "2001-09-09T01:46:40Z"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if f2p, ok := got["FAIL_TO_PASS"].([]any); !ok || len(f2p) != 1 {
		t.Errorf("FAIL_TO_PASS = %v", got["FAIL_TO_PASS"])
	}
	if p2p, ok := got["PASS_TO_PASS"].([]any); !ok || len(p2p) != 0 {
		t.Errorf("PASS_TO_PASS = %#v, want an empty array", got["PASS_TO_PASS"])
	}
	if d := got["difficulty"].(map[string]any); d["hint_level"] != 2.0 || d["test_distance"] != 0.0 {
		t.Errorf("difficulty = %v", d)
	}
	if r := Export(task, nil); r.Repo != "six" || r.BaseCommit != "" {
		t.Errorf("without an environment: %+v", r)
	}
}

func TestTaskIDIsAContentHash(t *testing.T) {
	a, b := TaskID("six", "k1"), TaskID("six", "k2")
	if a == b || a != TaskID("six", "k1") || TaskID("other", "k1") == a || !strings.HasPrefix(a, "six.") {
		t.Errorf("TaskID: %s %s", a, b)
	}
}

func TestInSuiteOrder(t *testing.T) {
	r := &run{order: map[string]int{"t.py::z": 0, "t.py::a": 1, "u.py::m": 2}}
	in := []string{"u.py::m", "x.py::new", "t.py::a", "t.py::z", "b.py::new"}
	got := r.inSuiteOrder(in)
	want := []string{"t.py::z", "t.py::a", "u.py::m", "b.py::new", "x.py::new"}
	if !slices.Equal(got, want) {
		t.Errorf("inSuiteOrder = %v, want %v", got, want)
	}
	if in[0] != "u.py::m" {
		t.Errorf("inSuiteOrder sorted its argument in place")
	}
}

// TestWholeLines: the replacement covers whole lines from the first that
// differs to the last, and applying it gives the other text.
func TestWholeLines(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"a\nb\nc\nd\n", "a\nc\nd\n"},
		{"a\nb\nc\n", "a\nb\n"},
		{"a\nb\nc\n", "b\nc\n"},
		{"x = 1\ny = 2\n", "x = 1\ny = 3\n"},
		{"a\nb", "a\n"},
		{"same\n", "same\n"},
	} {
		r := wholeLines([]byte(tc.a), []byte(tc.b))
		if got := string(mutate.ApplyReplacements([]byte(tc.a), []mutate.Replacement{r})); got != tc.b {
			t.Errorf("%q → %q: applying %+v gives %q", tc.a, tc.b, r, got)
		}
		if r.Start > 0 && tc.a[r.Start-1] != '\n' || r.End < len(tc.a) && tc.a[r.End-1] != '\n' {
			t.Errorf("%q → %q: %+v does not cover whole lines", tc.a, tc.b, r)
		}
	}
}
