package synth

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
	"github.com/frognano/frognano/actors/synth/mutate"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Coverage is an environment's coverage map: for each non-test source file,
// the lines the suite executes and, per line, the tests that execute it.
// Tests are indexes into Tests; a line executed only outside any test (a
// module's top level, run when a test file imports it) has none.
type Coverage struct {
	Image   string
	Tests   []string
	Files   map[string]map[int][]int32
	Seconds float64
	Tool    string
}

// ErrCoverage means the coverage run did not give a usable map.
var ErrCoverage = errors.New("coverage measurement failed")

// Lines is the mutate line filter for a file: every executed line. Lines
// run only at import stay in: a module-level constant is a fine place for a
// bug, and its tests are those of the file (see TestsFor).
func (c *Coverage) Lines(path string) mutate.LineSet {
	ls := mutate.LineSet{}
	for l := range c.Files[path] {
		ls[l] = true
	}
	return ls
}

// TestsFor returns the tests that can notice a change to lines [from, to]
// of path, most precise first: the tests executing those lines; else those
// executing any line of the enclosing function [fnFrom, fnTo] (a default
// argument is evaluated at import, its effect shows in the body); else those
// executing any line of the file (module-level state such as a compiled
// pattern is used by the file's functions). Sorted, deduplicated ids.
func (c *Coverage) TestsFor(path string, from, to, fnFrom, fnTo int) []string {
	lines := c.Files[path]
	collect := func(a, b int) []string {
		seen := map[int32]bool{}
		for l := a; l <= b; l++ {
			for _, t := range lines[l] {
				seen[t] = true
			}
		}
		return c.names(seen)
	}
	if ts := collect(from, to); len(ts) > 0 {
		return ts
	}
	if fnFrom > 0 {
		if ts := collect(fnFrom, fnTo); len(ts) > 0 {
			return ts
		}
	}
	seen := map[int32]bool{}
	for _, ts := range lines {
		for _, t := range ts {
			seen[t] = true
		}
	}
	return c.names(seen)
}

func (c *Coverage) names(set map[int32]bool) []string {
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, c.Tests[t])
	}
	sort.Strings(out)
	return out
}

// SourceFiles lists the covered files, sorted.
func (c *Coverage) SourceFiles() []string {
	out := make([]string, 0, len(c.Files))
	for p := range c.Files {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Proto is the stored record.
func (c *Coverage) Proto(env string) *records.CoverageMap {
	m := &records.CoverageMap{Environment: env, Image: c.Image, Tests: c.Tests, Seconds: c.Seconds, Tool: c.Tool, CreatedUnixNano: time.Now().UnixNano()}
	for _, p := range c.SourceFiles() {
		fc := &records.FileCoverage{Path: p}
		ls := make([]int, 0, len(c.Files[p]))
		for l := range c.Files[p] {
			ls = append(ls, l)
		}
		sort.Ints(ls)
		for _, l := range ls {
			fc.Lines = append(fc.Lines, &records.LineCoverage{Line: int32(l), Tests: c.Files[p][l]})
		}
		m.Files = append(m.Files, fc)
	}
	return m
}

// CoverageFromProto reads a stored record.
func CoverageFromProto(m *records.CoverageMap) *Coverage {
	c := &Coverage{Image: m.GetImage(), Tests: m.GetTests(), Files: map[string]map[int][]int32{}, Seconds: m.GetSeconds(), Tool: m.GetTool()}
	for _, f := range m.GetFiles() {
		lines := map[int][]int32{}
		for _, l := range f.GetLines() {
			lines[int(l.GetLine())] = l.GetTests()
		}
		c.Files[f.GetPath()] = lines
	}
	return c
}

// builder accumulates a map while a measurement is parsed, keeping only
// tests that passed at baseline and files that are not tests.
type builder struct {
	c       *Coverage
	index   map[string]int32
	passing map[string]bool
	isTest  func(string) bool
}

func newBuilder(env *records.Environment, tool string) *builder {
	return &builder{
		c:       &Coverage{Image: env.GetImage(), Files: map[string]map[int][]int32{}, Tool: tool},
		index:   map[string]int32{},
		passing: baselinePassing(env),
		isTest:  testFileMatcher(env),
	}
}

func (b *builder) line(file string, line int, test string) {
	if b.isTest(file) {
		return
	}
	lines := b.c.Files[file]
	if lines == nil {
		lines = map[int][]int32{}
		b.c.Files[file] = lines
	}
	if _, ok := lines[line]; !ok {
		lines[line] = nil
	}
	if test == "" || !b.passing[test] {
		return
	}
	i, ok := b.index[test]
	if !ok {
		i = int32(len(b.c.Tests))
		b.index[test] = i
		b.c.Tests = append(b.c.Tests, test)
	}
	if !slices.Contains(lines[line], i) {
		lines[line] = append(lines[line], i)
	}
}

// baselinePassing is the set of tests that passed at baseline: the only
// ones that can become FAIL_TO_PASS or must stay PASS_TO_PASS.
func baselinePassing(env *records.Environment) map[string]bool {
	out := map[string]bool{}
	for _, r := range env.GetBaseline().GetResults() {
		if r.GetStatus() == records.TestStatus_TEST_STATUS_PASS {
			out[r.GetName()] = true
		}
	}
	return out
}

// testFileMatcher says which repository files are tests or test support
// and must not be mutated: the environment's protected test files, files
// named like tests, and anything under a test directory.
func testFileMatcher(env *records.Environment) func(string) bool {
	protected := map[string]bool{}
	for _, f := range env.GetTestFiles() {
		protected[f] = true
	}
	set := environment.Protected(env)
	return func(p string) bool {
		if protected[p] || sandbox.MatchProtected(set, p) {
			return true
		}
		base := path.Base(p)
		switch {
		case strings.HasSuffix(base, "_test.go"),
			strings.HasPrefix(base, "test_") && strings.HasSuffix(base, ".py"),
			strings.HasSuffix(base, "_test.py"),
			base == "conftest.py", base == "setup.py", base == "noxfile.py":
			return true
		}
		for _, seg := range strings.Split(path.Dir(p), "/") {
			switch seg {
			case "test", "tests", "testing", "testdata", "vendor", "docs", "examples", "benchmarks":
				return true
			}
		}
		return false
	}
}

// MeasureCoverage runs the suite once under a coverage tool in sb (a fresh
// sandbox of env's image; the repository is left as it was).
func MeasureCoverage(ctx context.Context, sb Sandbox, env *records.Environment) (*Coverage, error) {
	start := time.Now()
	var c *Coverage
	var err error
	switch testreport.Framework(env.GetTestFramework()) {
	case testreport.Pytest:
		c, err = measurePython(ctx, sb, env)
	case testreport.GoTest:
		c, err = measureGo(ctx, sb, env)
	default:
		return nil, fmt.Errorf("%w: no coverage tool for test framework %q", ErrCoverage, env.GetTestFramework())
	}
	if err != nil {
		return nil, err
	}
	if len(c.Tests) == 0 {
		return nil, fmt.Errorf("%w: no baseline-passing test executed any source line (%d source files seen)", ErrCoverage, len(c.Files))
	}
	c.Seconds = time.Since(start).Seconds()
	return c, nil
}

// coverageTimeout gives the instrumented suite room: tracing slows Python
// several times, and Go compiles a test binary per package.
func coverageTimeout(env *records.Environment) time.Duration {
	return max(3*time.Minute, time.Duration(10*env.GetBaseline().GetDurationSeconds()*float64(time.Second)))
}

const covDir = "/tmp/.frognano-coverage"

// pytestContexts is a pytest plugin that switches coverage.py's dynamic
// context to each test's node id while it runs (setup, call and teardown),
// so the map is keyed by exactly the ids RunTests reports. coverage.py's own
// dynamic_context = test_function would name functions, not parametrized
// node ids.
const pytestContexts = `import coverage, pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(item.nodeid)
    try:
        yield
    finally:
        if cov is not None:
            cov.switch_context("")
`

// coveragerc measures lines (not branches) of the repository only, with
// paths relative to it.
const coveragerc = `[run]
branch = false
source = %s
relative_files = true
data_file = ` + covDir + `/data
`

// compactJSON turns coverage.py's JSON report into {"tests": [...],
// "files": {path: {line: [test index...]}}}, a fraction of its size.
const compactJSON = `import json, sys
d = json.load(open(sys.argv[1]))
tests, out = {}, {}
for path, f in d["files"].items():
    ctxs = f.get("contexts", {})
    lines = {}
    for ln in f["executed_lines"]:
        ids = []
        for c in ctxs.get(str(ln), []):
            if not c:
                continue
            if c not in tests:
                tests[c] = len(tests)
            ids.append(tests[c])
        lines[str(ln)] = ids
    out[path] = lines
json.dump({"tests": sorted(tests, key=tests.get), "files": out}, sys.stdout)
`

func measurePython(ctx context.Context, sb Sandbox, env *records.Environment) (*Coverage, error) {
	spec := environment.Spec(env)
	python := "python3"
	if len(spec.Command) > 0 {
		python = spec.Command[0]
	}
	repo := env.GetRepoDir()
	for name, body := range map[string]string{
		"frognano_covctx.py": pytestContexts,
		"rc":                 fmt.Sprintf(coveragerc, repo),
		"compact.py":         compactJSON,
	} {
		if err := sb.WriteFile(ctx, covDir+"/"+name, []byte(body)); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCoverage, err)
		}
	}
	argv := []string{python, "-m", "coverage", "run", "--rcfile=" + covDir + "/rc", "-m", "pytest",
		"-p", "frognano_covctx", "-p", "no:cacheprovider", "--rootdir=" + repo}
	argv = append(argv, spec.Args...)
	envv := append(slices.Clone(spec.Env), "PYTHONPATH="+covDir)
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: argv, Workdir: repo, Env: envv, Timeout: coverageTimeout(env), OutputLimit: 256 << 10, KillOrphans: true})
	if err != nil {
		return nil, err
	}
	if res.TimedOut || res.ExitCode > 1 {
		return nil, fmt.Errorf("%w: pytest under coverage.py exited %d (timed out: %v): %s", ErrCoverage, res.ExitCode, res.TimedOut, tailOf(res.Stdout, res.Stderr))
	}
	script := fmt.Sprintf(`set -e
%[1]s -m coverage json --rcfile=%[2]s/rc --show-contexts -q -o %[2]s/cov.json
%[1]s %[2]s/compact.py %[2]s/cov.json
rm -rf %[2]s`, python, covDir)
	res, err = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Workdir: repo, Env: spec.Env, Timeout: 5 * time.Minute, OutputLimit: 256 << 20})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 || res.Truncated {
		return nil, fmt.Errorf("%w: coverage json exited %d (truncated: %v): %s", ErrCoverage, res.ExitCode, res.Truncated, tailOf(nil, res.Stderr))
	}
	var raw struct {
		Tests []string                    `json:"tests"`
		Files map[string]map[string][]int `json:"files"`
	}
	if err := json.Unmarshal(res.Stdout, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCoverage, err)
	}
	b := newBuilder(env, "coverage.py, one dynamic context per pytest node id")
	for file, lines := range raw.Files {
		file = strings.TrimPrefix(path.Clean(file), "./")
		if path.IsAbs(file) || strings.HasPrefix(file, "..") || !strings.HasSuffix(file, ".py") {
			continue
		}
		for ln, idx := range lines {
			n, err := strconv.Atoi(ln)
			if err != nil {
				continue
			}
			if len(idx) == 0 {
				b.line(file, n, "")
			}
			for _, i := range idx {
				if i >= 0 && i < len(raw.Tests) {
					b.line(file, n, raw.Tests[i])
				}
			}
		}
	}
	return b.c, nil
}

// goCoverScript builds one coverage-instrumented test binary per package
// (instrumenting every package of the module) and runs it once per test,
// printing "@@ <import path> <test>" before the covered blocks of that test.
// A binary per package and a run per test costs one compile per package
// plus milliseconds per test, far less than `go test -run` per test.
// vet is off, as in sandbox.RunTests: `go test -c` vets too, and a lint
// the toolchain added since the module's release must not hide its tests.
const goCoverScript = `set -u
out=` + covDir + `
mkdir -p "$out"
i=0
go list -f '{{.ImportPath}} {{.Dir}} {{len .TestGoFiles}} {{len .XTestGoFiles}}' ./... | while read -r pkg dir nt nx; do
  [ "$nt" -eq 0 ] && [ "$nx" -eq 0 ] && continue
  i=$((i+1))
  bin="$out/$i.test"
  if ! go test -c -vet=off -covermode=set -coverpkg=./... -o "$bin" "$pkg" >"$out/build.log" 2>&1; then
    echo "@@! $pkg build failed: $(tail -c 500 "$out/build.log" | tr '\n' ' ')"
    continue
  fi
  [ -x "$bin" ] || continue
  (cd "$dir" && "$bin" -test.list '.*') | while read -r t; do
    case "$t" in Test*|Example*|Fuzz*) ;; *) continue ;; esac
    rm -f "$out/p"
    (cd "$dir" && "$bin" -test.run "^$t\$" -test.count=1 -test.coverprofile="$out/p" >/dev/null 2>&1)
    echo "@@ $pkg $t"
    [ -f "$out/p" ] && grep -v ' 0$' "$out/p" | grep -v '^mode:'
  done
done
rm -rf "$out"
exit 0
`

func measureGo(ctx context.Context, sb Sandbox, env *records.Environment) (*Coverage, error) {
	spec := environment.Spec(env)
	repo := env.GetRepoDir()
	gomod, err := sb.ReadFile(ctx, repo+"/go.mod")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCoverage, err)
	}
	module := modulePath(gomod)
	if module == "" {
		return nil, fmt.Errorf("%w: no module line in go.mod", ErrCoverage)
	}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", goCoverScript}, Workdir: repo, Env: spec.Env,
		Timeout: coverageTimeout(env), OutputLimit: 256 << 20, KillOrphans: true})
	if err != nil {
		return nil, err
	}
	if res.TimedOut || res.ExitCode != 0 || res.Truncated {
		return nil, fmt.Errorf("%w: per-test coverage exited %d (timed out %v, truncated %v): %s", ErrCoverage, res.ExitCode, res.TimedOut, res.Truncated, tailOf(res.Stdout, res.Stderr))
	}
	b := newBuilder(env, "go test -coverprofile, one run of the package's test binary per test")
	var test string
	var buildErrs []string
	sc := bufio.NewScanner(bytes.NewReader(res.Stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "@@! "):
			buildErrs = append(buildErrs, line[4:])
		case strings.HasPrefix(line, "@@ "):
			f := strings.Fields(line[3:])
			test = ""
			if len(f) == 2 {
				test = f[0] + "/" + f[1]
			}
		default:
			file, from, to, ok := parseProfileLine(line, module)
			if !ok || test == "" {
				continue
			}
			for l := from; l <= to; l++ {
				b.line(file, l, test)
			}
		}
	}
	if len(b.c.Tests) == 0 && len(buildErrs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrCoverage, strings.Join(buildErrs, "; "))
	}
	return b.c, nil
}

// parseProfileLine reads "example.com/m/dir/f.go:12.5,14.3 2 1" into the
// file's path relative to the module root and its line span. Blocks of
// other modules are dropped.
func parseProfileLine(line, module string) (file string, from, to int, ok bool) {
	colon := strings.LastIndex(line, ".go:")
	if colon < 0 {
		return "", 0, 0, false
	}
	name := line[:colon+3]
	if !strings.HasPrefix(name, module+"/") {
		return "", 0, 0, false
	}
	span, _, _ := strings.Cut(line[colon+4:], " ")
	a, b, ok := strings.Cut(span, ",")
	if !ok {
		return "", 0, 0, false
	}
	la, _, _ := strings.Cut(a, ".")
	lb, _, _ := strings.Cut(b, ".")
	from, err1 := strconv.Atoi(la)
	to, err2 := strconv.Atoi(lb)
	if err1 != nil || err2 != nil || from < 1 || to < from {
		return "", 0, 0, false
	}
	return strings.TrimPrefix(name, module+"/"), from, to, true
}

func modulePath(gomod []byte) string {
	for _, l := range strings.Split(string(gomod), "\n") {
		l = strings.TrimSpace(l)
		if rest, ok := strings.CutPrefix(l, "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

func tailOf(stdout, stderr []byte) string {
	b := bytes.TrimSpace(append(append([]byte{}, stdout...), stderr...))
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(b)
}
