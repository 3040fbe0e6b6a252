package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/sandbox/testreport"
)

// TestSpec says how an environment runs its tests. The runner's report
// plugin and flags are added by RunTests and must not be in Command or Args.
type TestSpec struct {
	Framework testreport.Framework
	// Dir is where the runner starts and, for pytest, the rootdir node ids
	// are relative to (default RepoDir).
	Dir string
	// Command is the interpreter for pytest (default ["python3"], e.g. a
	// virtualenv's python) or the go command for go test (default ["go"]).
	Command []string
	// Args go after the report flags and before the test ids: pytest
	// options, or go test flags (and packages when no tests are named).
	Args    []string
	Env     []string
	Timeout time.Duration
}

// goReportLimit bounds `go test -json` output; a run that prints more has
// its report cut, and a cut report is invalid.
const goReportLimit = 64 << 20

// RunTests runs the named tests (all of them when tests is empty) and
// returns the report parsed from the runner's machine-readable output,
// cross-checked with its exit code (see testreport.Report.Verify):
//
//   - pytest runs with frognano's plugin (testreport.PytestPlugin), which
//     writes each test's node id, phase and outcome as pytest itself knows
//     them to a fresh directory under /tmp whose name has 128 random bits,
//     created just for this run. Once pytest exits, whatever the run left
//     in the background is killed, and only then is the report read back
//     and the directory removed. Nothing the tests print to stdout or into
//     the repository is read.
//   - go test -json writes its events to stdout, which goes from the runner
//     straight to frognano through the shim: no file in the sandbox to
//     forge, and the test binaries' own output arrives escaped inside events.
//
// An error means the sandbox broke; a failing or rigged run is a report
// with Valid false.
func (s *Sandbox) RunTests(ctx context.Context, spec TestSpec, tests []string) (*testreport.Report, error) {
	dir := spec.Dir
	if dir == "" {
		dir = s.opts.RepoDir
	}
	timeout := deadline(spec.Timeout, DefaultTestsTimeout)
	switch spec.Framework {
	case testreport.Pytest:
		return s.runPytest(ctx, spec, dir, timeout, tests)
	case testreport.GoTest:
		return s.runGoTest(ctx, spec, dir, timeout, tests)
	default:
		return nil, fmt.Errorf("unknown test framework %q", spec.Framework)
	}
}

func (s *Sandbox) runPytest(ctx context.Context, spec TestSpec, dir string, timeout time.Duration, tests []string) (*testreport.Report, error) {
	if err := checkPytestIDs(tests); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	argv := append(pytestCommand(spec), "-I", "-c", pytestBootstrap, s.opts.RepoDir)
	argv = append(argv, pytestRunArgs(spec, dir, tests)...)
	res, err := s.Exec(ctx, ExecRequest{
		Argv:        argv,
		Stdin:       strings.NewReader(hex.EncodeToString(key)),
		Timeout:     timeout,
		OutputLimit: pytestStreamLimit,
		Workdir:     dir,
		Env:         spec.Env,
		KillOrphans: true,
	})
	if err != nil {
		return nil, err
	}
	// A fail-fast run (the Synthesizer's screening, -x) stops at its first
	// failure and reports fewer tests than pytest collected, which a
	// grading run's stream must not: it is read as validation reads its
	// fork server's stream (lines authenticated alike). Grading specs
	// never carry these options (they come from the environment).
	read := testreport.NewPytestStream
	if pytestFailFast(spec.Args) {
		read = testreport.NewPytestValidationStream
	}
	r := read(res.Stdout, key, res.ExitCode, res.TimedOut, res.Duration)
	if res.Truncated && r.Valid {
		r.Valid, r.Problem = false, fmt.Sprintf("pytest's output passed %d bytes and was cut", pytestStreamLimit)
	}
	return r, nil
}

func checkPytestIDs(tests []string) error {
	for _, id := range tests {
		if strings.HasPrefix(id, "-") {
			return fmt.Errorf("pytest node id %q looks like an option", id)
		}
	}
	return nil
}

// pytestRunArgs are pytest's arguments for a grading run of tests in dir.
func pytestRunArgs(spec TestSpec, dir string, tests []string) []string {
	args := append(PytestArgs(dir), spec.Args...)
	if len(tests) > 0 {
		args = append(append(args, "--"), tests...)
	}
	return args
}

// pytestStreamLimit bounds the results stream (and the tests' own output,
// kept for diagnostics); a cut stream is an invalid run.
const pytestStreamLimit = 64 << 20

// PytestArgs are the options every pytest run of frognano's starts with:
// no cache written into the repository, and node ids relative to rootdir.
// Runners add the environment's options and the test ids after them.
func PytestArgs(rootdir string) []string {
	return []string{"-p", "no:cacheprovider", "--rootdir=" + rootdir}
}

// pytestBootstrap starts pytest so that neither the repository nor the
// code under test can replace it or speak for it. Its arguments are the
// repository's directory, then pytest's; its stdin carries the run's key
// (64 hex digits) and nothing else.
//
//   - Python starts isolated (-I: no working directory, no PYTHON*
//     variables on sys.path), and pytest, its dependencies, its built-in
//     plugins and frognano's plugin are imported with every sys.path entry
//     inside the repository taken out (an editable install's .pth puts the
//     repository there at start-up, ahead of the system's pytest), so a
//     /repo/pytest.py, _pytest/ or pluggy.py is never imported in their
//     place. Only then are the working directory and PYTHONPATH put in
//     front, as `python -m pytest` would have them for the tests' imports.
//   - The results stream is a duplicate of the process's stdout, a pipe
//     to the grader; stdout itself (fd 1) is pointed at stderr, so
//     whatever the tests print never reaches the stream. The key is read
//     from stdin before any code of the repository is imported, stdin is
//     then pointed at /dev/null, and the key is in no file, argument or
//     environment variable. Every line is numbered and authenticated with
//     the key, and sent when its event happens: what a later hook (atexit,
//     a daemon thread) writes cannot take back what was sent.
//   - The plugin's guard (_frognano_guard) records the functions and
//     classes of the modules through which outcomes travel, the plugin
//     itself, pytest's plugin manager and hook callers and their
//     implementations, and the trace and profile functions, and the
//     stream's sink runs it before every line: a "tampered" line goes out
//     first when any of them changed (package code that monkeypatches
//     pytest, or the plugin). The guard lives in the sink's closure, next
//     to the key, not in an attribute the code under test could swap.
var pytestBootstrap = `import os, sys, importlib
_frognano_key = bytes.fromhex(sys.stdin.buffer.read(64).decode("ascii"))
_n = os.open(os.devnull, os.O_RDONLY)
os.dup2(_n, 0)
os.close(_n)
_frognano_fd = os.dup(1)
os.dup2(2, 1)
_frognano_exit = sys.exit
_frognano_guarded = True
` + pytestImports + pytestMain

// pytestImports imports pytest, its dependencies and plugins and
// frognano's plugin with the repository off sys.path, then puts sys.path
// back: the part of pytestBootstrap the fork server (pytestServerScript)
// runs once, when it starts.
var pytestImports = `_repo = os.path.realpath(sys.argv[1])
_path = sys.path[:]
sys.path[:] = [p for p in _path if not (os.path.realpath(p or ".") + os.sep).startswith(_repo + os.sep)]
import json, hmac, hashlib
import pytest, pluggy
for _m in ("iniconfig", "packaging", "packaging.version", "exceptiongroup", "tomli", "py", "colorama"):
    try:
        importlib.import_module(_m)
    except Exception:
        pass
` + testreport.PytestPlugin + `
try:
    from _pytest.config import default_plugins as _plugins
except ImportError:
    _plugins = ()
for _p in _plugins:
    try:
        importlib.import_module("_pytest." + _p)
    except Exception:
        pass
for _p in ("unittest", "_pytest.unittest", "_pytest.python", "_pytest.skipping", "_pytest.runner", "_pytest.reports"):
    try:
        importlib.import_module(_p)
    except Exception:
        pass
sys.path[:] = _path
`

// pytestMain starts the results stream on _frognano_fd under
// _frognano_key, runs pytest with sys.argv[2:] and ends with
// _frognano_exit(its exit status): the end of pytestBootstrap, and what a
// fork of the fork server runs.
const pytestMain = `_check = _frognano_guard(_repo) if _frognano_guarded else None
_sink = _frognano_stream(_frognano_fd, _frognano_key, _check)
_sink({"phase": "start"})
_report = FrognanoReport(None, _sink, _check, _repo)
del _sink, _check, _frognano_key, _frognano_fd
_args = sys.argv[2:]
sys.path[:0] = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
sys.argv = ["pytest"] + _args
_frognano_exit(int(pytest.main(_args, plugins=[_report])))
`

func (s *Sandbox) runGoTest(ctx context.Context, spec TestSpec, dir string, timeout time.Duration, tests []string) (*testreport.Report, error) {
	cmd := spec.Command
	if len(cmd) == 0 {
		cmd = []string{"go"}
	}
	pkgs, run, err := goSelection(tests)
	if err != nil {
		return nil, err
	}
	var pkgArgs []string
	switch {
	case len(pkgs) > 0:
		pkgArgs = pkgs
	case !hasPackageArg(spec.Args):
		pkgArgs = []string{"./..."}
	}
	canary, err := s.goCanaries(ctx, spec, dir, cmd, pkgArgs)
	if err != nil {
		return nil, err
	}
	argv := append(slices.Clone(cmd), "test", "-json", "-count=1", "-vet=off") // vet is a lint, newer with every toolchain: a module that passed its own CI fails it later
	if canary.overlay != "" {
		argv = append(argv, "-overlay="+canary.overlay)
		if run != "" {
			run = run[:len(run)-2] + "|" + goCanaryPattern + ")$"
		}
	}
	if run != "" {
		argv = append(argv, "-run", run)
	}
	argv = append(argv, spec.Args...)
	argv = append(argv, pkgArgs...)
	res, err := s.Exec(ctx, ExecRequest{
		Argv:        argv,
		Timeout:     timeout,
		OutputLimit: goReportLimit,
		Workdir:     dir,
		Env:         spec.Env,
		KillOrphans: true,
	})
	if canary.dir != "" {
		if _, err := s.Exec(ctx, ExecRequest{Argv: []string{"rm", "-rf", "--", canary.dir}, Timeout: fileOpTimeout, Workdir: "/"}); err != nil {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	r := testreport.NewGoTestReport(res.Stdout, res.ExitCode, res.TimedOut, res.Duration)
	if res.Truncated && r.Valid {
		r.Valid, r.Problem = false, fmt.Sprintf("go test output passed %d bytes and was cut", goReportLimit)
	}
	canary.check(r)
	return r, nil
}

// goCanaryPattern matches every canary's name in a -run pattern without
// naming the run's.
const goCanaryPattern = "ExampleFrognanoZ[0-9a-f]{32}"

// goCanary is a grading run's last verdict in every package: an example
// (with an empty "// Output:", so it runs) whose name holds 128 random
// bits, added through go test's -overlay (never written into the
// repository) in a file named to sort after the package's own test files.
// A test binary runs its tests, then its fuzz targets' seed corpora, then
// its examples, the internal test package's before the external one's; so
// the canary is an example, in the external test package when the package
// has one, and runs after everything else. A package whose
// stream lacks its canary's pass as its last verdict stopped early (a
// forged "--- PASS" and os.Exit or syscall.Exit from the code under test)
// or had its verdicts forged: the run is invalid. The code under test
// could still find the name (it is in the test binary) and forge its
// verdict too; docs/grading.md lists that limit.
type goCanary struct {
	dir, overlay, name string
	pkgs               []string // import paths with a canary
}

func (s *Sandbox) goCanaries(ctx context.Context, spec TestSpec, dir string, cmd, pkgArgs []string) (goCanary, error) {
	// go list runs no code of the repository's.
	argv := append(slices.Clone(cmd), "list", "-e", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{.Name}}\t{{len .TestGoFiles}}\t{{len .XTestGoFiles}}")
	for _, a := range spec.Args {
		if !strings.HasPrefix(a, "-") && (strings.HasPrefix(a, ".") || strings.Contains(a, "/") || path.IsAbs(a)) {
			argv = append(argv, a)
		}
	}
	argv = append(argv, pkgArgs...)
	res, err := s.Exec(ctx, ExecRequest{Argv: argv, Timeout: 2 * time.Minute, OutputLimit: 16 << 20, Workdir: dir, Env: spec.Env})
	if err != nil {
		return goCanary{}, err
	}
	if res.ExitCode != 0 || res.TimedOut {
		return goCanary{}, nil // go test will report what is wrong
	}
	c := goCanary{dir: "/tmp/.frognano-canary-" + randomHex(16), name: "ExampleFrognanoZ" + randomHex(16)}
	replace := map[string]string{}
	var files []string
	for i, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 || f[2] == "" || (f[3] == "0" && f[4] == "0") {
			continue
		}
		src := fmt.Sprintf("%s/%d.go", c.dir, i)
		pkgName := f[2]
		if f[4] != "0" {
			pkgName += "_test" // after the external test package's examples too
		}
		files = append(files, src, "package "+pkgName+"\n\nfunc "+c.name+"() {\n\t// Output:\n}\n")
		replace[f[1]+"/zzzzzzzz_frognano_test.go"] = src
		c.pkgs = append(c.pkgs, f[0])
	}
	if len(c.pkgs) == 0 {
		return goCanary{}, nil
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return goCanary{}, err
	}
	c.overlay = c.dir + "/overlay.json"
	files = append(files, c.overlay, string(overlay))
	script := `set -e; umask 077; mkdir -- "$1"; shift; while [ $# -gt 0 ]; do printf '%s' "$2" > "$1"; shift 2; done`
	w, err := s.Exec(ctx, ExecRequest{Argv: append([]string{"/bin/sh", "-c", script, "sh", c.dir}, files...), Timeout: fileOpTimeout, Workdir: "/"})
	if err != nil {
		return goCanary{}, err
	}
	if w.ExitCode != 0 {
		return goCanary{}, fmt.Errorf("write go test canaries: exit %d: %s", w.ExitCode, strings.TrimSpace(string(w.Stderr)))
	}
	return c, nil
}

// check removes the canaries from r's results. In a package whose tests
// ran but whose canary did not pass last, the binary stopped early (a
// crash, an exit) or its stream was forged: every result of that package
// becomes an error, since any of its passes may be forged, and a run that
// claims no failure there is invalid.
func (c goCanary) check(r *testreport.Report) {
	if len(c.pkgs) == 0 {
		return
	}
	last := map[string]testreport.Result{}
	ran, failed := map[string]bool{}, map[string]bool{}
	var kept []testreport.Result
	for _, res := range r.Results {
		pkg, test, ok := testreport.SplitGoID(res.ID)
		if !ok {
			kept = append(kept, res)
			continue
		}
		ran[pkg] = true
		if res.Status == testreport.StatusFail || res.Status == testreport.StatusError {
			failed[pkg] = true
		}
		if !strings.Contains(test, "/") {
			last[pkg] = res
		}
		if top, _, _ := strings.Cut(test, "/"); top != c.name {
			kept = append(kept, res)
		}
	}
	r.Results = kept
	for _, pkg := range c.pkgs {
		if l := last[pkg]; !ran[pkg] || (l.ID == pkg+"/"+c.name && l.Status == testreport.StatusPass) {
			continue
		}
		why := fmt.Sprintf("the tests of %s did not run to their end (frognano's last test did not pass last): the test binary stopped early or its verdicts were forged", pkg)
		for i, res := range r.Results {
			if p, _, ok := testreport.SplitGoID(res.ID); ok && p == pkg && res.Status != testreport.StatusError {
				r.Results[i].Status, r.Results[i].Message = testreport.StatusError, why
			}
		}
		if !failed[pkg] && r.Valid {
			r.Valid, r.Problem = false, why
		}
	}
}

// goSelection turns Go test ids into packages and a -run pattern over the
// top-level test names (a subtest id runs its whole top-level test).
func goSelection(tests []string) (pkgs []string, run string, err error) {
	var names []string
	for _, id := range tests {
		pkg, test, ok := testreport.SplitGoID(id)
		if !ok {
			return nil, "", fmt.Errorf("go test id %q is not <package>/<TestName>", id)
		}
		if strings.HasPrefix(pkg, "-") {
			return nil, "", fmt.Errorf("go test id %q looks like an option", id)
		}
		top, _, _ := strings.Cut(test, "/")
		if !slices.Contains(pkgs, pkg) {
			pkgs = append(pkgs, pkg)
		}
		if !slices.Contains(names, top) {
			names = append(names, regexp.QuoteMeta(top))
		}
	}
	if len(names) == 0 {
		return nil, "", nil
	}
	return pkgs, "^(" + strings.Join(names, "|") + ")$", nil
}

// hasPackageArg reports whether go test args already name packages.
func hasPackageArg(args []string) bool {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") && (strings.HasPrefix(a, ".") || strings.Contains(a, "/") || path.IsAbs(a)) {
			return true
		}
	}
	return false
}

// pytestFailFast says whether pytest's arguments stop the run early: -x,
// --exitfirst or --maxfail.
func pytestFailFast(args []string) bool {
	for _, a := range args {
		if a == "-x" || a == "--exitfirst" || a == "--maxfail" || strings.HasPrefix(a, "--maxfail=") {
			return true
		}
	}
	return false
}
