package synth

import (
	"github.com/frognano/frognano/actors/sandbox/testreport"
)

// Why a candidate is not a task. The strings are stable: they are the keys
// of SynthesizeProgress.rejected and of the synthesis metrics. mutate's own
// skip reasons (parse_error, no_site, mutant_parse, duplicate, …) are
// counted beside them.
const (
	ReasonNoPassingTests        = "no_passing_tests"        // the environment's baseline passes no test
	ReasonOperatorNotApplicable = "operator_not_applicable" // a requested operator has no form in the language
	ReasonNotCovered            = "not_covered"             // no baseline-passing test executes the mutated code
	ReasonDuplicateStored       = "duplicate_stored"        // the same bug is already a stored task
	ReasonPatchApply            = "patch_apply"             // the bug patch does not apply in the sandbox
	ReasonTimeout               = "timeout"                 // a test run hit its time limit (an infinite loop, usually)
	ReasonInvalidReport         = "invalid_report"          // the runner crashed or its report contradicts its exit code
	ReasonSurvived              = "survived"                // no screened test fails: the mutant is equivalent or untested
	ReasonTestsNotRun           = "tests_not_run"           // baseline-passing tests are missing or skipped (collection or build broke)
	ReasonNoFailToPass          = "no_fail_to_pass"         // screening failed a test, the full run failed none
	ReasonFlaky                 = "flaky"                   // the rerun disagrees with the full run
	ReasonGoldApply             = "gold_apply"              // the gold patch does not apply on the bug
	ReasonGoldNotFixing         = "gold_not_fixing"         // with the gold patch, FAIL_TO_PASS tests still fail
	ReasonStatementLeak         = "statement_leak"          // every statement written would reveal the fix
	ReasonDeletionPasses        = "deletion_passes"         // deleting the lines of the fix's first SEARCH side passes every test: the tests cannot tell the bug from no code
	ReasonNoSearchHint          = "no_search_hint"          // at hint level 4: the fix's first SEARCH side is not unique in its file; at 5, also: its replacement's start leaves nothing to write
	ReasonSandbox               = "sandbox_error"           // the sandbox broke; the candidate was not judged
)

// notCollected is a pytest run that could not find the tests it was asked
// for (exit 4, "not found"; 5, nothing collected): a bug in module-level
// code can change the parametrization of the tests themselves.
func notCollected(r *testreport.Report) bool {
	return r.Framework == testreport.Pytest && (r.ExitCode == 4 || r.ExitCode == 5) && !r.TimedOut
}

func failed(s testreport.Status) bool {
	return s == testreport.StatusFail || s == testreport.StatusError
}

func statuses(r *testreport.Report) map[string]testreport.Status {
	m := make(map[string]testreport.Status, len(r.Results))
	for _, res := range r.Results {
		if prev, ok := m[res.ID]; !ok || failed(res.Status) && !failed(prev) {
			m[res.ID] = res.Status
		}
	}
	return m
}

// screenVerdict judges the screening run of the tests that cover a
// candidate: "" when at least one of them failed (the candidate goes on to
// the full check), else why not.
func screenVerdict(r *testreport.Report, screened []string) string {
	switch {
	case r.TimedOut:
		return ReasonTimeout
	case notCollected(r):
		return ReasonTestsNotRun
	case !r.Valid:
		return ReasonInvalidReport
	}
	st := statuses(r)
	missing := false
	for _, id := range screened {
		s, ok := st[id]
		if ok && failed(s) {
			return ""
		}
		missing = missing || !ok
	}
	if missing {
		return ReasonTestsNotRun
	}
	return ReasonSurvived
}

// fullVerdict judges the whole suite with the bug: every baseline-passing
// test must either fail (FAIL_TO_PASS, at least one) or pass (PASS_TO_PASS).
// A test that went missing or skipped makes the task ungradable, since its
// PASS_TO_PASS promise could not be checked.
func fullVerdict(r *testreport.Report, passing map[string]bool) (f2p, p2p []string, reason string) {
	switch {
	case r.TimedOut:
		return nil, nil, ReasonTimeout
	case notCollected(r):
		return nil, nil, ReasonTestsNotRun
	case !r.Valid:
		return nil, nil, ReasonInvalidReport
	}
	st := statuses(r)
	for _, id := range sortedKeys(passing) {
		s, ok := st[id]
		switch {
		case !ok || s == testreport.StatusSkip || s == testreport.StatusUnknown:
			return nil, nil, ReasonTestsNotRun
		case failed(s):
			f2p = append(f2p, id)
		default:
			p2p = append(p2p, id)
		}
	}
	if len(f2p) == 0 {
		return nil, nil, ReasonNoFailToPass
	}
	return f2p, p2p, ""
}

// rerunVerdict judges a second run of the FAIL_TO_PASS tests with the bug
// still applied: each must fail again, or the candidate is flaky.
func rerunVerdict(r *testreport.Report, f2p []string) string {
	if r.TimedOut {
		return ReasonTimeout
	}
	if !r.Valid {
		return ReasonFlaky
	}
	st := statuses(r)
	for _, id := range f2p {
		if s, ok := st[id]; !ok || !failed(s) {
			return ReasonFlaky
		}
	}
	return ""
}

// goldVerdict judges the FAIL_TO_PASS tests with the gold patch applied on
// the bug: graded like an agent's fix, they must all pass.
func goldVerdict(r *testreport.Report, f2p []string) string {
	if r.TimedOut {
		return ReasonTimeout
	}
	if !testreport.Grade(r, f2p, nil).Resolved {
		return ReasonGoldNotFixing
	}
	return ""
}

// mergeReports joins two runs that together cover a suite: valid when both
// are, timed out when either did.
func mergeReports(a, b *testreport.Report) *testreport.Report {
	m := &testreport.Report{
		Framework: a.Framework,
		Results:   append(append([]testreport.Result{}, a.Results...), b.Results...),
		ExitCode:  max(a.ExitCode, b.ExitCode),
		TimedOut:  a.TimedOut || b.TimedOut,
		Duration:  a.Duration + b.Duration,
		Valid:     a.Valid && b.Valid,
		Problem:   a.Problem,
	}
	if m.Problem == "" {
		m.Problem = b.Problem
	}
	return m
}
