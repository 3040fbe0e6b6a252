package testreport

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// PytestPlugin is the Python source of frognano's pytest plugin: it defines
// the class FrognanoReport(path), which, passed to
// pytest.main(plugins=[...]), writes one JSON line per test event to path
// (see the file for the format). Every runner of pytest executes this
// source in the interpreter that runs pytest, before pytest.main.
//
//go:embed pytest_plugin.py
var PytestPlugin string

// pytestEvent is one line of the plugin's report.
type pytestEvent struct {
	NodeID     *string  `json:"nodeid"`
	Phase      string   `json:"phase"`
	Outcome    string   `json:"outcome"`
	Duration   float64  `json:"duration"`
	Message    string   `json:"message"`
	ExitStatus *float64 `json:"exitstatus"`
}

// maxPytestReportBytes bounds what is parsed: a report is kilobytes to a
// few megabytes; more is an attack on the grader's memory.
const maxPytestReportBytes = 64 << 20

// ParsePytestReport reads the plugin's report. Each test's status comes
// from its phases as pytest's own summary counts them: a failed setup or
// teardown is an error, a failed call a failure, a skipped setup or call
// (xfail included) a skip, a passed call a pass; the worst wins. A
// collector that failed is an error under its own node id (the test file),
// one that was skipped whole a skip; both are marked Collection.
//
// The file is written only by the plugin, so anything it would not write
// (a line that is not an event, an unknown phase, lines after the finish
// line, no finish line) makes the whole report unusable.
func ParsePytestReport(r io.Reader) ([]Result, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxPytestReportBytes))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	type test struct {
		res  Result
		call bool
	}
	tests := map[string]*test{}
	var order []string
	finished := false
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if finished {
			return nil, fmt.Errorf("pytest report: line %d follows the finish line", n)
		}
		var ev pytestEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("pytest report: line %d is not an event: %v", n, err)
		}
		if ev.Phase == "finish" {
			if ev.ExitStatus == nil {
				return nil, fmt.Errorf("pytest report: line %d: finish without an exit status", n)
			}
			finished = true
			continue
		}
		if ev.NodeID == nil {
			return nil, fmt.Errorf("pytest report: line %d has no node id", n)
		}
		status, err := phaseStatus(ev.Phase, ev.Outcome)
		if err != nil {
			return nil, fmt.Errorf("pytest report: line %d: %w", n, err)
		}
		if status == StatusUnknown {
			// An outcome pytest itself never gives (a plugin's "rerun"):
			// not a verdict this package can trust.
			status, ev.Message = StatusError, fmt.Sprintf("%s outcome %q", ev.Phase, ev.Outcome)
		}
		id := *ev.NodeID
		if id == "" {
			id = "." // the session's own collector: the rootdir
		}
		t, ok := tests[id]
		if !ok {
			t = &test{res: Result{ID: id}}
			tests[id] = t
			order = append(order, id)
		}
		// A phase reported twice (a rerun plugin): the worst verdict wins.
		t.call = t.call || ev.Phase == "call"
		t.res.Collection = t.res.Collection || ev.Phase == "collect"
		t.res.Duration += time.Duration(ev.Duration * float64(time.Second))
		if worse(t.res.Status, status) != t.res.Status {
			t.res.Status = status
			if status != StatusPass {
				t.res.Message = truncate(ev.Message, 2000)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read pytest report: %w", err)
	}
	out := make([]Result, 0, len(order))
	for _, id := range order {
		t := tests[id]
		// A test whose setup passed and that reached no verdict: the run
		// stopped inside it (pytest.exit, an interrupt).
		if t.res.Status == StatusPass && !t.call && !t.res.Collection {
			t.res.Status, t.res.Message = StatusError, "setup passed but the test never ran"
		}
		out = append(out, t.res)
	}
	if !finished {
		return out, fmt.Errorf("pytest report ends before the session finished (%d tests): the run was cut short", len(out))
	}
	return out, nil
}

// phaseStatus is what one report of a phase says about its test; an
// outcome other than passed, failed or skipped is StatusUnknown.
func phaseStatus(phase, outcome string) (Status, error) {
	var failed Status
	switch phase {
	case "collect", "setup", "teardown":
		failed = StatusError
	case "call":
		failed = StatusFail
	default:
		return StatusUnknown, fmt.Errorf("unknown phase %q", phase)
	}
	switch outcome {
	case "passed":
		return StatusPass, nil
	case "failed":
		return failed, nil
	case "skipped":
		return StatusSkip, nil
	}
	return StatusUnknown, nil
}

// CollectionSummary is what a pytest run says about test files that did
// not load: how many of the files it collected from failed, and the first
// failure's node id and the line that says why.
type CollectionSummary struct {
	Failed, Files int
	FirstID       string
	FirstError    string
}

// String says it in a sentence, for people: "5 of 6 test files failed to
// collect; the first, tests/test_x.py: ModuleNotFoundError: ...".
func (s CollectionSummary) String() string {
	if s.Failed == 0 {
		return "every test file collected"
	}
	files := "test files"
	if s.Files == 1 {
		files = "test file"
	}
	return fmt.Sprintf("%d of %d %s failed to collect; the first, %s: %s", s.Failed, s.Files, files, s.FirstID, s.FirstError)
}

// Collection summarizes the collection errors among results.
func Collection(results []Result) CollectionSummary {
	var s CollectionSummary
	files := map[string]bool{}
	for _, r := range results {
		file, _, _ := strings.Cut(r.ID, "::")
		files[file] = true
		if r.Collection && r.Status == StatusError {
			s.Failed++
			if s.FirstID == "" {
				s.FirstID, s.FirstError = r.ID, ErrorLine(r.Message)
			}
		}
	}
	s.Files = len(files)
	return s
}

// ErrorLine picks from a traceback the line that names the error: pytest
// marks it with "E " ("E   ModuleNotFoundError: No module named 'x'");
// failing that, the last non-empty line.
func ErrorLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	last := ""
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			continue
		}
		if last == "" {
			last = l
		}
		if rest, ok := strings.CutPrefix(l, "E "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return last
}

// NewPytestStream reads the results stream of a grading run (the plugin
// with the sink _frognano_stream(fd, key)): one line per event, "SEQ MAC
// JSON", SEQ counting from 1 and MAC the hex HMAC-SHA256 under key of
// "SEQ JSON". The run is valid only when every line carries the right
// number and MAC (a line the code under test wrote to the stream, or one
// it held back, breaks them), the stream starts with the plugin's start
// line and ends with its finish line, the plugin saw no tampering with
// pytest's reporting machinery, the finish line's exit status is the
// process's exit code, and as many tests reported as pytest collected.
// Then the events are parsed as ParsePytestReport does and verified
// against the exit code.
func NewPytestStream(stream, key []byte, exitCode int, timedOut bool, d time.Duration) *Report {
	r := &Report{Framework: Pytest, ExitCode: exitCode, TimedOut: timedOut, Duration: d}
	events, finish, err := authenticate(stream, key, false)
	if err == nil {
		r.Results, err = ParsePytestReport(bytes.NewReader(events))
	}
	r.Verify()
	if err != nil {
		r.Problem = ""
		r.reject("%v", err)
		return r
	}
	if finish.ExitStatus == nil || int(*finish.ExitStatus) != exitCode {
		said := "none"
		if finish.ExitStatus != nil {
			said = strconv.Itoa(int(*finish.ExitStatus))
		}
		r.Problem = ""
		r.reject("pytest finished with exit status %s but the process exited %d: something made it exit with another code", said, exitCode)
		return r
	}
	if exitCode == 0 || exitCode == 1 {
		tests := 0
		for _, res := range r.Results {
			if !res.Collection {
				tests++
			}
		}
		if finish.Collected == nil || int(*finish.Collected) != tests {
			said := "an unknown number of"
			if finish.Collected != nil {
				said = strconv.Itoa(int(*finish.Collected))
			}
			r.Problem = ""
			r.reject("pytest collected %s tests but the stream reports %d", said, tests)
		}
	}
	return r
}

// NewPytestValidationStream reads the results stream of a validation run
// (the Synthesizer's, through a PytestServer of the validation use): its
// lines are authenticated as NewPytestStream's are, and the events they
// carry are read as NewPytestReport reads the plugin's report file, which
// validation read before it used the stream: a stream cut short keeps the
// results it has (and is invalid), and the finish line is not checked
// against the exit code or the number of tests collected (a fail-fast run,
// pytest -x, reports fewer tests than it collected).
func NewPytestValidationStream(stream, key []byte, exitCode int, timedOut bool, d time.Duration) *Report {
	events, _, err := authenticate(stream, key, true)
	if err != nil {
		r := &Report{Framework: Pytest, ExitCode: exitCode, TimedOut: timedOut, Duration: d}
		r.Verify()
		r.Problem = ""
		r.reject("%v", err)
		return r
	}
	if len(events) == 0 {
		events = nil // no event: as when pytest wrote no report file
	}
	return NewPytestReport(events, exitCode, timedOut, d)
}

// streamFinish is the finish line's fields that NewPytestStream checks.
type streamFinish struct {
	Phase      string   `json:"phase"`
	ExitStatus *float64 `json:"exitstatus"`
	Collected  *float64 `json:"collected"`
	Changed    []string `json:"changed"`
}

// authenticate checks a results stream line by line and returns its events
// (the JSON of every line but the start line) and its finish line. partial
// accepts a stream cut short (empty, ending inside a line or before the
// finish line) and returns the events of its complete lines.
func authenticate(stream, key []byte, partial bool) ([]byte, streamFinish, error) {
	var fin streamFinish
	if len(key) == 0 {
		return nil, fin, fmt.Errorf("no key to check the results stream with")
	}
	if len(stream) > maxPytestReportBytes {
		return nil, fin, fmt.Errorf("the results stream passed %d bytes", maxPytestReportBytes)
	}
	if partial {
		stream = stream[:bytes.LastIndexByte(stream, '\n')+1]
		if len(stream) == 0 {
			return nil, fin, nil
		}
	}
	if len(stream) == 0 {
		return nil, fin, fmt.Errorf("pytest sent no results: the process died or was stopped before its plugin started")
	}
	if stream[len(stream)-1] != '\n' {
		return nil, fin, fmt.Errorf("the results stream ends inside a line: the run was cut short")
	}
	var events bytes.Buffer
	lines := bytes.Split(stream[:len(stream)-1], []byte{'\n'})
	finished := false
	for i, line := range lines {
		n := i + 1
		seq, rest, ok1 := bytes.Cut(line, []byte{' '})
		mac, body, ok2 := bytes.Cut(rest, []byte{' '})
		if !ok1 || !ok2 || string(seq) != strconv.Itoa(n) {
			return nil, fin, fmt.Errorf("results stream line %d is not the plugin's line %d: something else wrote to the stream", n, n)
		}
		want := hmac.New(sha256.New, key)
		want.Write(seq)
		want.Write([]byte{' '})
		want.Write(body)
		got, err := hex.DecodeString(string(mac))
		if err != nil || !hmac.Equal(got, want.Sum(nil)) {
			return nil, fin, fmt.Errorf("results stream line %d is not authentic: something else wrote to the stream", n)
		}
		var ev streamFinish
		if err := json.Unmarshal(body, &ev); err != nil {
			return nil, fin, fmt.Errorf("results stream line %d: %v", n, err)
		}
		switch {
		case n == 1:
			if ev.Phase != "start" {
				return nil, fin, fmt.Errorf("the results stream does not start with the plugin's start line")
			}
			continue
		case ev.Phase == "tampered":
			return nil, fin, fmt.Errorf("the code under test replaced pytest's reporting machinery: %s", strings.Join(ev.Changed, ", "))
		case ev.Phase == "finish":
			fin, finished = ev, true
		}
		events.Write(body)
		events.WriteByte('\n')
	}
	if !finished && !partial {
		return nil, fin, fmt.Errorf("the results stream ends before the session finished (%d lines): the run was cut short", len(lines))
	}
	return events.Bytes(), fin, nil
}
