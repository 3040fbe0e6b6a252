package testreport

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	messages "github.com/frognano/frognano/actors/messages/v1"
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

func TestMangleNodeID(t *testing.T) {
	tests := []struct{ id, classname, name string }{
		{"tests/test_a.py::test_x", "tests.test_a", "test_x"},
		{"tests/test_a.py::TestC::test_x", "tests.test_a.TestC", "test_x"},
		{"tests/test_a.py::TestC::TestD::test_x", "tests.test_a.TestC.TestD", "test_x"},
		{"test_a.py::test_x[1-2]", "test_a", "test_x[1-2]"},
		{"tests/test_a.py::test_x[a/b::c.py]", "tests.test_a", "test_x[a/b::c.py]"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			cn, n := MangleNodeID(tt.id)
			if cn != tt.classname || n != tt.name {
				t.Fatalf("got (%q, %q), want (%q, %q)", cn, n, tt.classname, tt.name)
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

func TestJUnitCountersMustAgree(t *testing.T) {
	in := `<testsuites><testsuite failures="0" errors="0" skipped="0" tests="1">` +
		`<testcase classname="t" name="test_a" file="t.py"><failure message="x"/></testcase></testsuite></testsuites>`
	r := NewPytestReport([]byte(in), nil, 1, false, time.Second)
	if r.Valid || !strings.Contains(r.Problem, "counters") {
		t.Fatalf("%+v", r)
	}
}

func TestPytestWithoutReport(t *testing.T) {
	r := NewPytestReport(nil, nil, 0, false, time.Second)
	if r.Valid {
		t.Fatal("a run without a report is valid")
	}
}

func TestProto(t *testing.T) {
	r := &Report{Framework: Pytest, ExitCode: 1, Duration: 2 * time.Second, Results: []Result{
		{ID: "t.py::test_a", Status: StatusPass, Duration: time.Second},
		{ID: "t.py::test_b", Status: StatusFail, Message: "boom"},
	}}
	r.Verify()
	p := r.Proto()
	if len(p.Results) != 2 || p.Results[0].Status != messages.TestStatus_TEST_STATUS_PASS || p.Results[1].Status != messages.TestStatus_TEST_STATUS_FAIL || p.ExitCode != 1 || p.DurationSeconds != 2 {
		t.Fatalf("%v", p)
	}

	r.ExitCode = 0 // now the report contradicts the exit code
	r.Verify()
	p = r.Proto()
	if len(p.Results) != 3 {
		t.Fatalf("want the synthetic result too: %v", p)
	}
	for _, res := range p.Results {
		if res.Status != messages.TestStatus_TEST_STATUS_ERROR {
			t.Fatalf("an invalid report must carry only errors: %v", p)
		}
	}
	if p.Results[2].Name != InvalidReportID {
		t.Fatalf("%v", p.Results[2])
	}
}
