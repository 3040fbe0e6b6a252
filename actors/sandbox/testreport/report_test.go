package testreport

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	records "github.com/frognano/frognano/persistence/records/v1"
)

func TestVerify(t *testing.T) {
	pass := Result{ID: "a", Status: StatusPass}
	fail := Result{ID: "b", Status: StatusFail}
	errd := Result{ID: "c", Status: StatusError}
	skip := Result{ID: "d", Status: StatusSkip}
	tests := []struct {
		name     string
		fw       Framework
		results  []Result
		exit     int
		timedOut bool
		valid    bool
	}{
		{"all pass, exit 0", Pytest, []Result{pass, skip}, 0, false, true},
		{"a failure, exit 1", Pytest, []Result{pass, fail}, 1, false, true},
		{"an error, exit 1", GoTest, []Result{pass, errd}, 1, false, true},
		{"failure but exit 0", Pytest, []Result{pass, fail}, 0, false, false},
		{"all pass but exit 1", GoTest, []Result{pass}, 1, false, false},
		{"no tests, exit 0", Pytest, nil, 0, false, false},
		{"nothing collected", Pytest, nil, 5, false, false},
		{"usage error", Pytest, []Result{pass}, 4, false, false},
		{"killed", GoTest, []Result{pass}, 137, false, false},
		{"timed out", Pytest, []Result{pass}, 0, true, false},
		{"unknown framework", "jest", []Result{pass}, 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Report{Framework: tt.fw, Results: tt.results, ExitCode: tt.exit, TimedOut: tt.timedOut}
			r.Verify()
			if r.Valid != tt.valid {
				t.Fatalf("valid = %v (%s), want %v", r.Valid, r.Problem, tt.valid)
			}
			if !r.Valid && r.Problem == "" {
				t.Fatal("invalid report without a problem")
			}
		})
	}
}

func TestGrade(t *testing.T) {
	valid := &Report{Valid: true, Results: []Result{
		{ID: "f2p", Status: StatusPass},
		{ID: "p2p", Status: StatusPass},
		{ID: "skipped", Status: StatusSkip},
		{ID: "failed", Status: StatusFail},
		{ID: "dup", Status: StatusPass},
		{ID: "dup", Status: StatusError},
	}}
	invalid := &Report{Valid: false, Problem: "exit code 1 but the report has no failing test", Results: valid.Results}
	tests := []struct {
		name     string
		r        *Report
		f2p, p2p []string
		reward   float64
		failing  []string
		missing  []string
	}{
		{"resolved", valid, []string{"f2p"}, []string{"p2p"}, 1, nil, nil},
		{"a p2p test fails", valid, []string{"f2p"}, []string{"p2p", "failed"}, 0, []string{"failed"}, nil},
		{"a skip is not a pass", valid, []string{"skipped"}, nil, 0, []string{"skipped"}, nil},
		{"a missing test is not a pass", valid, []string{"f2p", "gone"}, nil, 0, nil, []string{"gone"}},
		{"the worst of duplicate results counts", valid, []string{"dup"}, nil, 0, []string{"dup"}, nil},
		{"invalid report", invalid, []string{"f2p"}, []string{"p2p"}, 0, nil, nil},
		{"no fail-to-pass tests", valid, nil, []string{"p2p"}, 0, nil, nil},
		{"no report", nil, []string{"f2p"}, nil, 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Grade(tt.r, tt.f2p, tt.p2p)
			if o.Reward != tt.reward || o.Resolved != (tt.reward == 1) {
				t.Fatalf("outcome %+v, want reward %v", o, tt.reward)
			}
			if !slices.Equal(o.Failing, tt.failing) || !slices.Equal(o.Missing, tt.missing) {
				t.Fatalf("failing %v missing %v, want %v %v", o.Failing, o.Missing, tt.failing, tt.missing)
			}
			if o.Reward == 0 && o.Reason == "" {
				t.Fatal("zero reward without a reason")
			}
		})
	}
}

func TestSplitGoID(t *testing.T) {
	tests := []struct {
		id, pkg, test string
		ok            bool
	}{
		{"example.com/m/pkg/TestX", "example.com/m/pkg", "TestX", true},
		{"example.com/m/pkg/TestX/sub_case", "example.com/m/pkg", "TestX/sub_case", true},
		{"example.com/m/Testing/TestX", "example.com/m/Testing", "TestX", true},
		{"m/ExampleFoo", "m", "ExampleFoo", true},
		{"m/Test", "m", "Test", true},
		{"m/Test_under", "m", "Test_under", true},
		{"example.com/m/pkg", "", "", false},
		{"TestX", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			pkg, test, ok := SplitGoID(tt.id)
			if pkg != tt.pkg || test != tt.test || ok != tt.ok {
				t.Fatalf("got (%q, %q, %v), want (%q, %q, %v)", pkg, test, ok, tt.pkg, tt.test, tt.ok)
			}
		})
	}
}

// TestGoTruncatedOutput cuts a real capture in the middle of a package: a
// killed or cut-off runner must not leave a valid report behind.
func TestGoTruncatedOutput(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "gotest-pass.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(in), "\n")
	cut := strings.Join(lines[:len(lines)/2], "")
	r := NewGoTestReport([]byte(cut), 0, false, time.Second)
	if r.Valid {
		t.Fatalf("a truncated report is valid: %+v", r)
	}
	if !strings.Contains(r.Problem, "before packages") {
		t.Fatalf("problem %q", r.Problem)
	}
}

func TestGoNonJSONLinesIgnored(t *testing.T) {
	in := "PASS\nok  \texample.com/m\t0.1s\n--- PASS: TestGhost (0.00s)\n" +
		`{"Action":"start","Package":"m"}` + "\n" +
		`{"Action":"run","Package":"m","Test":"TestA"}` + "\n" +
		`{"Action":"pass","Package":"m","Test":"TestA","Elapsed":0.5}` + "\n" +
		`{"Action":"pass","Package":"m","Elapsed":0.6}` + "\n"
	r := NewGoTestReport([]byte(in), 0, false, time.Second)
	if !r.Valid || len(r.Results) != 1 || r.Results[0].ID != "m/TestA" || r.Results[0].Duration != 500*time.Millisecond {
		t.Fatalf("%+v", r)
	}
}

func TestPytestWithoutReport(t *testing.T) {
	r := NewPytestReport(nil, 0, false, time.Second)
	if r.Valid {
		t.Fatal("a run without a report is valid")
	}
}

// TestPytestReportTampered edits a real capture the ways a crashed run or
// code under test could: every one must make the run invalid, whatever the
// exit code says.
func TestPytestReportTampered(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "pytest9-collection-error-continue.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	real := string(in)
	if r := NewPytestReport(in, 1, false, time.Second); !r.Valid {
		t.Fatalf("the capture itself is invalid: %s", r.Problem)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(real, "\n"), "\n")
	finish := lines[len(lines)-1]
	body := strings.Join(lines[:len(lines)-1], "")
	tests := []struct {
		name, report string
		exit         int
		problem      string
	}{
		{"cut before the finish line", body, 1, "before the session finished"},
		{"cut inside a line", real[:len(real)/2], 1, "not an event"},
		{"a line after the finish", real + `{"nodeid": "t.py::test_x", "phase": "call", "outcome": "passed", "duration": 0}` + "\n", 1, "follows the finish"},
		{"text that is not an event", "tests/test_fine.py::test_fine PASSED\n" + real, 1, "not an event"},
		{"an unknown phase", `{"nodeid": "t.py::test_x", "phase": "lunch", "outcome": "passed", "duration": 0}` + "\n" + real, 1, "unknown phase"},
		{"a finish without exit status", body + `{"phase": "finish"}` + "\n", 1, "finish without"},
		{"a test without node id", `{"phase": "call", "outcome": "passed", "duration": 0}` + "\n" + real, 1, "no node id"},
		{"the collection error removed", strings.Join(lines[1:], ""), 1, "exit code 1 but the report has no failing test"},
		{"only a finish line", finish, 0, "no tests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewPytestReport([]byte(tt.report), tt.exit, false, time.Second)
			if r.Valid || !strings.Contains(r.Problem, tt.problem) {
				t.Fatalf("valid %v, problem %q; want invalid with %q", r.Valid, r.Problem, tt.problem)
			}
		})
	}
}

func TestPytestPhases(t *testing.T) {
	ev := func(id, phase, outcome string) string {
		return `{"nodeid": "` + id + `", "phase": "` + phase + `", "outcome": "` + outcome + `", "duration": 0.5, "message": "` + phase + " " + outcome + `"}` + "\n"
	}
	in := ev("t.py::ok", "setup", "passed") + ev("t.py::ok", "call", "passed") + ev("t.py::ok", "teardown", "passed") +
		ev("t.py::rerun", "setup", "passed") + ev("t.py::rerun", "call", "rerun") + ev("t.py::rerun", "call", "passed") +
		ev("t.py::stopped", "setup", "passed") +
		ev("t.py::skipped", "setup", "skipped") + ev("t.py::skipped", "teardown", "passed") +
		ev("t.py::teardown", "setup", "passed") + ev("t.py::teardown", "call", "failed") + ev("t.py::teardown", "teardown", "failed") +
		ev("gone.py", "collect", "skipped") + ev("", "collect", "failed") +
		`{"phase": "finish", "exitstatus": 1}` + "\n"
	results, err := ParsePytestReport(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{
		{ID: "t.py::ok", Status: StatusPass, Duration: 1500 * time.Millisecond},
		{ID: "t.py::rerun", Status: StatusError, Duration: 1500 * time.Millisecond, Message: `call outcome "rerun"`},
		{ID: "t.py::stopped", Status: StatusError, Duration: 500 * time.Millisecond, Message: "setup passed but the test never ran"},
		{ID: "t.py::skipped", Status: StatusSkip, Duration: time.Second, Message: "setup skipped"},
		{ID: "t.py::teardown", Status: StatusError, Duration: 1500 * time.Millisecond, Message: "teardown failed"},
		{ID: "gone.py", Status: StatusSkip, Duration: 500 * time.Millisecond, Message: "collect skipped", Collection: true},
		{ID: ".", Status: StatusError, Duration: 500 * time.Millisecond, Message: "collect failed", Collection: true},
	}
	if !slices.Equal(results, want) {
		t.Fatalf("got  %+v\nwant %+v", results, want)
	}
}

func TestCollectionSummary(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "pytest9-collection-error-continue.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	r := NewPytestReport(in, 1, false, time.Second)
	got := Collection(r.Results)
	want := CollectionSummary{Failed: 1, Files: 2, FirstID: "tests/test_broken.py", FirstError: "ModuleNotFoundError: No module named 'does_not_exist'"}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	p := r.Proto()
	if !p.Results[0].Collection || p.Results[1].Collection {
		t.Fatalf("collection flags in the record: %v", p.Results)
	}
	for msg, want := range map[string]string{
		"Traceback:\n  x\nE   ValueError: bad\nE   more\n":            "more",
		"ImportError while importing\nE   ModuleNotFoundError: m\n\n": "ModuleNotFoundError: m",
		"no marker\nlast line\n":                                      "last line",
		"":                                                            "",
	} {
		if got := ErrorLine(msg); got != want {
			t.Errorf("ErrorLine(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestProto(t *testing.T) {
	r := &Report{Framework: Pytest, ExitCode: 1, Duration: 2 * time.Second, Results: []Result{
		{ID: "t.py::test_a", Status: StatusPass, Duration: time.Second},
		{ID: "t.py::test_b", Status: StatusFail, Message: "boom"},
	}}
	r.Verify()
	p := r.Proto()
	if len(p.Results) != 2 || p.Results[0].Status != records.TestStatus_TEST_STATUS_PASS || p.Results[1].Status != records.TestStatus_TEST_STATUS_FAIL || p.ExitCode != 1 || p.DurationSeconds != 2 {
		t.Fatalf("%v", p)
	}

	r.ExitCode = 0 // now the report contradicts the exit code
	r.Verify()
	p = r.Proto()
	if len(p.Results) != 3 {
		t.Fatalf("want the synthetic result too: %v", p)
	}
	for _, res := range p.Results {
		if res.Status != records.TestStatus_TEST_STATUS_ERROR {
			t.Fatalf("an invalid report must carry only errors: %v", p)
		}
	}
	if p.Results[2].Name != InvalidReportID {
		t.Fatalf("%v", p.Results[2])
	}
}

// TestPytestValidationStream: a validation run's stream, once its lines are
// authentic, reads exactly as the same events in a report file would
// (NewPytestReport), including runs NewPytestStream rejects: cut short, and
// fail-fast (fewer tests reported than collected). A line that is not the
// plugin's makes it invalid.
func TestPytestValidationStream(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	sign := func(lines ...string) []byte {
		var b strings.Builder
		for i, l := range append([]string{`{"phase": "start"}`}, lines...) {
			h := hmac.New(sha256.New, key)
			fmt.Fprintf(h, "%d %s", i+1, l)
			fmt.Fprintf(&b, "%d %x %s\n", i+1, h.Sum(nil), l)
		}
		return []byte(b.String())
	}
	ev := func(id, phase, outcome string) string {
		return `{"nodeid": "` + id + `", "phase": "` + phase + `", "outcome": "` + outcome + `", "duration": 0.5}`
	}
	events := []string{ev("t.py::a", "setup", "passed"), ev("t.py::a", "call", "failed"), ev("t.py::a", "teardown", "passed")}
	// pytest -x: two tests collected, one ran.
	failFast := append(slices.Clone(events), `{"phase": "finish", "exitstatus": 1, "collected": 2}`)
	full := sign(failFast...)
	tests := []struct {
		name   string
		stream []byte
		file   []byte // the same run's report file; nil: none
		exit   int
	}{
		{"fail-fast", full, []byte(strings.Join(failFast, "\n") + "\n"), 1},
		{"cut before the finish", sign(events...), []byte(strings.Join(events, "\n") + "\n"), 1},
		{"cut inside a line", full[:len(full)-10], []byte(strings.Join(events, "\n") + "\n"), 137},
		{"no results", nil, nil, 1},
		{"only the start line", sign(), nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NewPytestValidationStream(tt.stream, key, tt.exit, false, time.Second)
			want := NewPytestReport(tt.file, tt.exit, false, time.Second)
			if got.Valid != want.Valid || got.Problem != want.Problem || !slices.Equal(got.Results, want.Results) {
				t.Fatalf("stream: valid %v (%s) %+v\nfile:   valid %v (%s) %+v", got.Valid, got.Problem, got.Results, want.Valid, want.Problem, want.Results)
			}
		})
	}
	if r := NewPytestValidationStream(full, key, 1, false, time.Second); !r.Valid {
		t.Fatalf("fail-fast run invalid: %s", r.Problem)
	}
	if r := NewPytestStream(full, key, 1, false, time.Second); r.Valid {
		t.Fatal("a grading stream with fewer tests than collected is valid")
	}
	forged := append(slices.Clone(full[:len(full)-1]), []byte("\n9 00 "+ev("t.py::b", "call", "passed")+"\n")...)
	if r := NewPytestValidationStream(forged, key, 1, false, time.Second); r.Valid || !strings.Contains(r.Problem, "not the plugin's") {
		t.Fatalf("a forged line: valid %v (%s)", r.Valid, r.Problem)
	}
}
