package testreport

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// JUnit XML as pytest writes it (--junitxml). The root is <testsuites>
// (pytest ≥ 5.1) or a single <testsuite> (older); both are read.
type junitSuites struct {
	XMLName xml.Name
	Suites  []junitSuite `xml:"testsuite"`
	// For a root that is itself a <testsuite>:
	junitSuite
}

type junitSuite struct {
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	File      string        `xml:"file,attr"`
	Time      string        `xml:"time,attr"`
	Failures  []junitDetail `xml:"failure"`
	Errors    []junitDetail `xml:"error"`
	Skipped   []junitDetail `xml:"skipped"`
}

type junitDetail struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// maxJUnitBytes bounds what is parsed: a report is kilobytes to a few
// megabytes; more is an attack on the grader's memory.
const maxJUnitBytes = 64 << 20

// ParseJUnit reads pytest's JUnit XML. JUnit names a test by classname and
// name, which lose the pytest node id's structure; it is rebuilt from the
// file attribute (pytest -o junit_family=xunit1 writes it) and, more
// reliably, by matching the ids that were asked for: a requested node id is
// mangled the way pytest mangles it, and a test case with that classname
// and name gets the requested id back verbatim.
func ParseJUnit(r io.Reader, requested []string) ([]Result, error) {
	var doc junitSuites
	dec := xml.NewDecoder(io.LimitReader(r, maxJUnitBytes))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("parse JUnit XML: %w", err)
	}
	var suites []junitSuite
	switch doc.XMLName.Local {
	case "testsuites":
		suites = doc.Suites
	case "testsuite":
		suites = []junitSuite{doc.junitSuite}
	default:
		return nil, fmt.Errorf("parse JUnit XML: root element <%s>, want <testsuites> or <testsuite>", doc.XMLName.Local)
	}
	byMangled := map[string]string{}
	for _, id := range requested {
		cn, name := MangleNodeID(id)
		byMangled[cn+"\x00"+name] = id
	}

	var out []Result
	index := map[string]int{}
	for _, s := range suites {
		var fails, errs, skips int
		for _, c := range s.Cases {
			res := Result{ID: nodeID(c, byMangled), Status: StatusPass}
			if secs, err := parseSeconds(c.Time); err == nil {
				res.Duration = secs
			}
			for _, d := range c.Skipped {
				res.Status, res.Message = worse(res.Status, StatusSkip), detail(d)
			}
			for _, d := range c.Failures {
				res.Status, res.Message = worse(res.Status, StatusFail), detail(d)
			}
			for _, d := range c.Errors {
				res.Status, res.Message = worse(res.Status, StatusError), detail(d)
			}
			fails += len(c.Failures)
			errs += len(c.Errors)
			skips += len(c.Skipped)
			// pytest writes a test twice when it fails and then errors in
			// teardown; keep one result with the worst verdict.
			if i, ok := index[res.ID]; ok {
				prev := out[i]
				if worse(prev.Status, res.Status) != prev.Status {
					out[i].Status, out[i].Message = res.Status, res.Message
				}
				out[i].Duration += res.Duration
				continue
			}
			index[res.ID] = len(out)
			out = append(out, res)
		}
		// The suite's own counters must agree with its test cases. pytest
		// keeps them in step; a hand-written or truncated report rarely does.
		if s.Failures != fails || s.Errors != errs || s.Skipped != skips {
			return nil, fmt.Errorf("JUnit suite counters (failures=%d errors=%d skipped=%d) disagree with its test cases (%d, %d, %d)",
				s.Failures, s.Errors, s.Skipped, fails, errs, skips)
		}
	}
	return out, nil
}

func detail(d junitDetail) string {
	msg := d.Message
	if msg == "" {
		msg = d.Text
	}
	return truncate(msg, 2000)
}

func parseSeconds(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("no time")
	}
	var f float64
	if _, err := fmt.Sscanf(s, "%g", &f); err != nil {
		return 0, err
	}
	return time.Duration(f * float64(time.Second)), nil
}

// MangleNodeID is what pytest's JUnit writer makes of a node id: the path
// becomes a dotted module name joined with the classes into classname, and
// the function name with its parameters is name.
func MangleNodeID(id string) (classname, name string) {
	p, params, bracket := strings.Cut(id, "[")
	parts := strings.Split(p, "::")
	parts[0] = strings.TrimSuffix(strings.ReplaceAll(parts[0], "/", "."), ".py")
	if bracket {
		parts[len(parts)-1] += "[" + params
	}
	return strings.Join(parts[:len(parts)-1], "."), parts[len(parts)-1]
}

// nodeID rebuilds a pytest node id for a test case.
func nodeID(c junitCase, requested map[string]string) string {
	if id, ok := requested[c.Classname+"\x00"+c.Name]; ok {
		return id
	}
	if c.Classname == "" {
		// A collection error: name is the dotted module.
		if c.File != "" {
			return c.File
		}
		return c.Name
	}
	if c.File != "" && strings.HasSuffix(c.File, ".py") {
		module := strings.ReplaceAll(strings.TrimSuffix(c.File, ".py"), "/", ".")
		switch {
		case c.Classname == module:
			return c.File + "::" + c.Name
		case strings.HasPrefix(c.Classname, module+"."):
			classes := strings.Split(strings.TrimPrefix(c.Classname, module+"."), ".")
			return c.File + "::" + strings.Join(classes, "::") + "::" + c.Name
		}
	}
	// No usable file attribute (xunit2 output): guess that trailing
	// segments named Test* are classes (pytest's default python_classes)
	// and the rest is the module path. Ask for tests by id to avoid guessing.
	segs := strings.Split(c.Classname, ".")
	i := len(segs)
	for i > 1 && strings.HasPrefix(segs[i-1], "Test") {
		i--
	}
	id := strings.Join(segs[:i], "/") + ".py"
	for _, class := range segs[i:] {
		id += "::" + class
	}
	return id + "::" + c.Name
}
