package testreport

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// goEvent is one line of `go test -json` (cmd/test2json's TestEvent).
type goEvent struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
	ImportPath  string
}

type goTest struct {
	pkg     string
	status  Status
	elapsed float64
	output  strings.Builder
	ran     bool
	// verdicts counts pass/fail/skip events. A real run has one per test;
	// more means the code under test printed test2json's ^V framing to
	// forge a verdict.
	verdicts int
}

// ParseGoTestJSON reads `go test -json` output. Everything the code under
// test prints reaches this stream only as the Output of an event, escaped by
// test2json, so it cannot pose as an event of its own. Each test's result is
// its last pass/fail/skip; a test that started but never ended (its binary
// crashed or was killed) is an error. A package that failed without a
// failing test (build error, vet error, panic in TestMain, os.Exit) is
// reported as an error under the package's import path. Unfinished
// packages make the output incomplete, which is an error for the whole run.
func ParseGoTestJSON(r io.Reader) ([]Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	tests := map[string]*goTest{}
	var order []string
	type pkgState struct {
		started, ended bool
		status         Status
		failedBuild    bool
		output         strings.Builder
	}
	pkgs := map[string]*pkgState{}
	var pkgOrder []string
	pkg := func(name string) *pkgState {
		p, ok := pkgs[name]
		if !ok {
			p = &pkgState{}
			pkgs[name] = p
			pkgOrder = append(pkgOrder, name)
		}
		return p
	}
	events := 0
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue // not an event; go test writes only events to stdout
		}
		var ev goEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			continue
		}
		events++
		switch {
		case ev.Action == "build-fail":
			p := pkg(importPath(ev.ImportPath))
			p.failedBuild, p.started, p.ended, p.status = true, true, true, StatusFail
		case ev.Action == "build-output":
			if p := pkg(importPath(ev.ImportPath)); p.output.Len() < 8<<10 {
				p.output.WriteString(ev.Output)
			}
		case ev.Package == "":
		case ev.Test == "":
			p := pkg(ev.Package)
			switch ev.Action {
			case "start":
				p.started = true
			case "pass", "fail", "skip":
				p.started, p.ended = true, true
				p.status = map[string]Status{"pass": StatusPass, "fail": StatusFail, "skip": StatusSkip}[ev.Action]
				if ev.FailedBuild != "" {
					p.failedBuild = true
				}
			case "output":
				if p.output.Len() < 8<<10 {
					p.output.WriteString(ev.Output)
				}
			}
		default:
			pkg(ev.Package).started = true
			id := ev.Package + "/" + ev.Test
			t, ok := tests[id]
			if !ok {
				t = &goTest{pkg: ev.Package}
				tests[id] = t
				order = append(order, id)
			}
			switch ev.Action {
			case "run":
				t.ran = true
			case "pass":
				t.status, t.elapsed, t.verdicts = StatusPass, ev.Elapsed, t.verdicts+1
			case "fail":
				t.status, t.elapsed, t.verdicts = StatusFail, ev.Elapsed, t.verdicts+1
			case "skip":
				t.status, t.elapsed, t.verdicts = StatusSkip, ev.Elapsed, t.verdicts+1
			case "output":
				if t.output.Len() < 8<<10 {
					t.output.WriteString(ev.Output)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read go test -json output: %w", err)
	}
	if events == 0 {
		return nil, fmt.Errorf("no go test -json events")
	}

	var out []Result
	var forged []string
	failedIn := map[string]bool{}
	for _, id := range order {
		t := tests[id]
		res := Result{ID: id, Status: t.status, Duration: time.Duration(t.elapsed * float64(time.Second))}
		switch {
		case t.verdicts > 1:
			forged = append(forged, id)
			res.Status, res.Message = StatusError, fmt.Sprintf("%d verdicts for one test: forged test2json framing", t.verdicts)
		case res.Status == StatusUnknown:
			res.Status, res.Message = StatusError, "no outcome: the test binary exited or was killed while this test ran"
		}
		if res.Status == StatusFail || res.Status == StatusSkip || res.Status == StatusError {
			if res.Message == "" {
				res.Message = truncate(t.output.String(), 2000)
			}
		}
		if res.Status == StatusFail || res.Status == StatusError {
			failedIn[t.pkg] = true
		}
		out = append(out, res)
	}
	var unfinished []string
	for _, name := range pkgOrder {
		p := pkgs[name]
		switch {
		case p.started && !p.ended:
			unfinished = append(unfinished, name)
		case p.status == StatusFail && !failedIn[name]:
			why := "package failed without a failing test (TestMain, os.Exit, panic outside a test)"
			if p.failedBuild {
				why = "build failed"
			}
			out = append(out, Result{ID: name, Status: StatusError, Message: truncate(why+": "+p.output.String(), 2000)})
		}
	}
	if len(forged) > 0 {
		return out, fmt.Errorf("go test -json output has more than one verdict for %v: the code under test forged test2json framing", forged)
	}
	if len(unfinished) > 0 {
		return out, fmt.Errorf("go test -json output ends before packages %v finished", unfinished)
	}
	return out, nil
}

// importPath drops the test variant go adds to build events:
// "m/pkg [m/pkg.test]" is package m/pkg.
func importPath(s string) string {
	p, _, _ := strings.Cut(s, " [")
	return p
}

// goTestSegment is a path segment that can start a Go test name: the
// prefixes the testing package runs, followed by nothing or a character that
// is not a lowercase letter (so "Testing" is not a test).
var goTestSegment = regexp.MustCompile(`^(Test|Example|Fuzz|Benchmark)($|[^a-z])`)

// SplitGoID splits "example.com/m/pkg/TestX/sub" into the package
// "example.com/m/pkg" and the test "TestX/sub": at the first path segment
// that is a Go test name. An import path with such a segment (a directory
// named "TestData2") cannot be told apart; Go repositories rarely have one.
func SplitGoID(id string) (pkg, test string, ok bool) {
	segs := strings.Split(id, "/")
	for i := 1; i < len(segs); i++ {
		if goTestSegment.MatchString(segs[i]) {
			return strings.Join(segs[:i], "/"), strings.Join(segs[i:], "/"), true
		}
	}
	return "", "", false
}
