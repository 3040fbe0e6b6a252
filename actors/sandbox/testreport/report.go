// Package testreport turns the machine-readable output of test runners —
// the report of frognano's pytest plugin and `go test -json` — into
// per-test results, decides
// whether a run can be trusted, and grades a run against a task's
// FAIL_TO_PASS and PASS_TO_PASS lists.
//
// It never reads human-readable output: a test that prints "PASSED" or
// "--- PASS" changes nothing here. A report that contradicts the runner's
// exit code is rejected as a whole, because the only ways to get one are a
// crashed runner or code under test that forged the report.
package testreport

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// Status is one test's outcome.
type Status int

const (
	StatusUnknown Status = iota
	StatusPass
	StatusFail
	StatusError // the test could not run to a verdict: setup/teardown error, crash, collection error
	StatusSkip
)

func (s Status) String() string {
	switch s {
	case StatusPass:
		return "pass"
	case StatusFail:
		return "fail"
	case StatusError:
		return "error"
	case StatusSkip:
		return "skip"
	default:
		return "unknown"
	}
}

// worse orders statuses for a test reported more than once (a failure and
// then a teardown error): the worst verdict wins.
func worse(a, b Status) Status {
	rank := map[Status]int{StatusUnknown: 0, StatusPass: 1, StatusSkip: 2, StatusFail: 3, StatusError: 4}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// Result is one test.
type Result struct {
	// ID is a pytest node id (tests/test_x.py::TestClass::test_y[param]) or,
	// for Go, import path + "/" + test name (example.com/m/pkg/TestX/sub).
	ID       string        `json:"id"`
	Status   Status        `json:"status"`
	Duration time.Duration `json:"duration"`
	// Message is the failure or skip reason, truncated.
	Message string `json:"message,omitempty"`
	// Collection marks a pytest collector's result rather than a test's:
	// a test file that failed to import (an error) or was skipped whole.
	Collection bool `json:"collection,omitempty"`
}

// Framework names a test runner whose output this package parses.
type Framework string

const (
	Pytest Framework = "pytest"
	GoTest Framework = "gotest"
)

// Report is one run of a test command.
type Report struct {
	Framework Framework
	Results   []Result
	ExitCode  int
	TimedOut  bool
	Duration  time.Duration
	// Valid is false when the run cannot be trusted (timed out, no or
	// unparsable report, report and exit code disagree). An invalid report
	// grades to zero whatever its results say.
	Valid   bool
	Problem string
}

// Lookup returns the result for id.
func (r *Report) Lookup(id string) (Result, bool) {
	for _, res := range r.Results {
		if res.ID == id {
			return res, true
		}
	}
	return Result{}, false
}

// Counts is the number of results per status.
func (r *Report) Counts() map[Status]int {
	c := map[Status]int{}
	for _, res := range r.Results {
		c[res.Status]++
	}
	return c
}

func (r *Report) reject(format string, args ...any) {
	r.Valid = false
	if r.Problem == "" {
		r.Problem = fmt.Sprintf(format, args...)
	}
}

// Verify cross-checks the parsed results against how the runner exited and
// sets Valid and Problem. The rules, per runner:
//
//   - pytest exits 0 only when every collected test passed or was skipped,
//     and 1 only when some test failed or errored; any other exit (2
//     interrupted, 3 internal error, 4 usage error, 5 nothing collected, a
//     signal) is an invalid run.
//   - go test exits 0 only when nothing failed, 1 when a test or a package
//     (build, vet, a crashed binary) failed; anything else is invalid.
//
// A run must also report at least one test, and must not have timed out.
func (r *Report) Verify() {
	r.Valid = true
	if r.TimedOut {
		r.reject("the test run timed out")
		return
	}
	c := r.Counts()
	bad := c[StatusFail] + c[StatusError]
	switch r.Framework {
	case Pytest, GoTest:
	default:
		r.reject("unknown test framework %q", r.Framework)
		return
	}
	switch {
	case len(r.Results) == 0:
		r.reject("the report has no tests (exit code %d)", r.ExitCode)
	case r.ExitCode == 0 && bad > 0:
		r.reject("exit code 0 but the report has %d failing tests", bad)
	case r.ExitCode == 1 && bad == 0:
		r.reject("exit code 1 but the report has no failing test")
	case r.ExitCode != 0 && r.ExitCode != 1:
		r.reject("%s exited %d: %s", r.Framework, r.ExitCode, exitMeaning(r.Framework, r.ExitCode))
	}
}

func exitMeaning(f Framework, code int) string {
	if code > 128 {
		return fmt.Sprintf("killed by signal %d", code-128)
	}
	if f == Pytest {
		switch code {
		case 2:
			return "interrupted"
		case 3:
			return "internal error"
		case 4:
			return "usage error (unknown test id?)"
		case 5:
			return "no tests collected"
		}
	}
	return "not a test verdict"
}

// Outcome is a graded run.
type Outcome struct {
	// Reward is 1 when the task is resolved, else 0.
	Reward   float64
	Resolved bool
	// Reason says why the reward is 0.
	Reason string
	// Failing are required tests that ran but did not pass (skips
	// included); Missing are required tests the report does not contain.
	Failing []string
	Missing []string
}

// Grade decides the reward of a run from its report alone: every
// FAIL_TO_PASS and every PASS_TO_PASS test must be present and passed, and
// the report must be valid. Nothing the agent printed enters.
func Grade(r *Report, failToPass, passToPass []string) Outcome {
	if r == nil {
		return Outcome{Reason: "no report"}
	}
	if !r.Valid {
		return Outcome{Reason: "invalid report: " + r.Problem}
	}
	if len(failToPass) == 0 {
		return Outcome{Reason: "the task names no FAIL_TO_PASS test"}
	}
	status := make(map[string]Status, len(r.Results))
	for _, res := range r.Results {
		status[res.ID] = worse(status[res.ID], res.Status)
	}
	var o Outcome
	for _, id := range slices.Concat(failToPass, passToPass) {
		st, ok := status[id]
		switch {
		case !ok:
			o.Missing = append(o.Missing, id)
		case st != StatusPass:
			o.Failing = append(o.Failing, id)
		}
	}
	if len(o.Missing) > 0 || len(o.Failing) > 0 {
		o.Reason = fmt.Sprintf("%d required tests failing, %d missing", len(o.Failing), len(o.Missing))
		return o
	}
	o.Resolved, o.Reward = true, 1
	return o
}

// Proto is the report as the shared record. The record has no field for
// validity, so an invalid report is sent with every result turned into an
// ERROR carrying the problem, plus one synthetic result named
// "frognano:report": whoever grades from the record alone still gets 0.
func (r *Report) Proto() *records.TestReport {
	out := &records.TestReport{
		ExitCode:        int32(r.ExitCode),
		TimedOut:        r.TimedOut,
		DurationSeconds: r.Duration.Seconds(),
		Valid:           r.Valid,
		Problem:         r.Problem,
	}
	for _, res := range r.Results {
		tr := &records.TestResult{
			Name:            res.ID,
			Status:          protoStatus(res.Status),
			DurationSeconds: res.Duration.Seconds(),
			Message:         res.Message,
			Collection:      res.Collection,
		}
		if !r.Valid {
			tr.Status = records.TestStatus_TEST_STATUS_ERROR
			tr.Message = "report rejected: " + r.Problem
		}
		out.Results = append(out.Results, tr)
	}
	if !r.Valid {
		out.Results = append(out.Results, &records.TestResult{
			Name:    InvalidReportID,
			Status:  records.TestStatus_TEST_STATUS_ERROR,
			Message: r.Problem,
		})
	}
	return out
}

// InvalidReportID names the synthetic result Proto adds to a rejected report.
const InvalidReportID = "frognano:report"

func protoStatus(s Status) records.TestStatus {
	switch s {
	case StatusPass:
		return records.TestStatus_TEST_STATUS_PASS
	case StatusFail:
		return records.TestStatus_TEST_STATUS_FAIL
	case StatusError:
		return records.TestStatus_TEST_STATUS_ERROR
	case StatusSkip:
		return records.TestStatus_TEST_STATUS_SKIP
	default:
		return records.TestStatus_TEST_STATUS_UNSPECIFIED
	}
}

// truncate keeps messages short: they travel in every report.
func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// NewPytestReport parses the report of frognano's pytest plugin (see
// PytestPlugin) and verifies it against the exit code. report is nil when
// pytest wrote none.
func NewPytestReport(report []byte, exitCode int, timedOut bool, d time.Duration) *Report {
	r := &Report{Framework: Pytest, ExitCode: exitCode, TimedOut: timedOut, Duration: d}
	if report == nil {
		r.Verify()
		r.reject("pytest wrote no report (exit code %d)", exitCode)
		return r
	}
	results, err := ParsePytestReport(bytes.NewReader(report))
	r.Results = results
	r.Verify()
	if err != nil {
		// The parse error is the more precise complaint.
		r.Problem = ""
		r.reject("%v", err)
	}
	return r
}

// NewGoTestReport parses `go test -json` output and verifies it against the
// exit code.
func NewGoTestReport(out []byte, exitCode int, timedOut bool, d time.Duration) *Report {
	r := &Report{Framework: GoTest, ExitCode: exitCode, TimedOut: timedOut, Duration: d}
	results, err := ParseGoTestJSON(bytes.NewReader(out))
	r.Results = results
	r.Verify()
	if err != nil {
		// The parse error is the more precise complaint.
		r.Problem = ""
		r.reject("%v", err)
	}
	return r
}
