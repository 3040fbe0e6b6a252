package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	for _, id := range tests {
		if strings.HasPrefix(id, "-") {
			return nil, fmt.Errorf("pytest node id %q looks like an option", id)
		}
	}
	reportDir := "/tmp/.frognano-report-" + randomHex(16)
	report := reportDir + "/" + PytestReportFile
	cmd := spec.Command
	if len(cmd) == 0 {
		cmd = []string{"python3"}
	}
	argv := []string{"/bin/sh", "-c", `umask 077; mkdir -- "$1" || exit 125; shift; exec "$@"`, "sh", reportDir}
	argv = append(argv, cmd...)
	argv = append(argv, "-I", "-c", pytestBootstrap, report)
	argv = append(argv, PytestArgs(dir)...)
	argv = append(argv, spec.Args...)
	if len(tests) > 0 {
		argv = append(argv, "--")
		argv = append(argv, tests...)
	}
	res, err := s.Exec(ctx, ExecRequest{
		Argv:        argv,
		Timeout:     timeout,
		OutputLimit: 256 << 10, // only for diagnostics; the verdict comes from the report
		Workdir:     dir,
		Env:         spec.Env,
		KillOrphans: true,
	})
	if err != nil {
		return nil, err
	}
	events, err := s.ReadFile(ctx, report)
	var pathErr *fs.PathError
	switch {
	case errors.As(err, &pathErr):
		events = nil // missing, too large, not a file: no report, an invalid run
	case err != nil:
		return nil, err
	}
	if _, err := s.Exec(ctx, ExecRequest{Argv: []string{"rm", "-rf", "--", reportDir}, Timeout: fileOpTimeout, Workdir: "/"}); err != nil {
		return nil, err
	}
	return testreport.NewPytestReport(events, res.ExitCode, res.TimedOut, res.Duration), nil
}

// PytestReportFile is the name of the plugin's report in its run's
// directory.
const PytestReportFile = "report.jsonl"

// PytestArgs are the options every pytest run of frognano's starts with:
// no cache written into the repository, and node ids relative to rootdir.
// Runners add the environment's options and the test ids after them.
func PytestArgs(rootdir string) []string {
	return []string{"-p", "no:cacheprovider", "--rootdir=" + rootdir}
}

// pytestBootstrap starts pytest so that the repository cannot replace it.
// `python -m pytest` puts the working directory first on sys.path, so a
// /repo/pytest.py (or _pytest/, or json.py) written by the agent would be
// imported instead of pytest and could write any report it likes. Instead,
// Python starts isolated (-I: no working directory, no PYTHON* variables on
// sys.path), pytest, its built-in plugins and frognano's report plugin are
// loaded from the installation and this source, and only then are the
// working directory and PYTHONPATH put in front, as `python -m pytest`
// would have them for the tests' imports. Its arguments are the report's
// path, then pytest's.
var pytestBootstrap = `import os, sys, importlib
import pytest
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
_report = FrognanoReport(sys.argv[1])
_args = sys.argv[2:]
sys.path[:0] = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
sys.argv = ["pytest"] + _args
sys.exit(int(pytest.main(_args, plugins=[_report])))
`

func (s *Sandbox) runGoTest(ctx context.Context, spec TestSpec, dir string, timeout time.Duration, tests []string) (*testreport.Report, error) {
	cmd := spec.Command
	if len(cmd) == 0 {
		cmd = []string{"go"}
	}
	argv := append(slices.Clone(cmd), "test", "-json", "-count=1", "-vet=off") // vet is a lint, newer with every toolchain: a module that passed its own CI fails it later
	pkgs, run, err := goSelection(tests)
	if err != nil {
		return nil, err
	}
	if run != "" {
		argv = append(argv, "-run", run)
	}
	argv = append(argv, spec.Args...)
	switch {
	case len(pkgs) > 0:
		argv = append(argv, pkgs...)
	case !hasPackageArg(spec.Args):
		argv = append(argv, "./...")
	}
	res, err := s.Exec(ctx, ExecRequest{
		Argv:        argv,
		Timeout:     timeout,
		OutputLimit: goReportLimit,
		Workdir:     dir,
		Env:         spec.Env,
		KillOrphans: true,
	})
	if err != nil {
		return nil, err
	}
	r := testreport.NewGoTestReport(res.Stdout, res.ExitCode, res.TimedOut, res.Duration)
	if res.Truncated && r.Valid {
		r.Valid, r.Problem = false, fmt.Sprintf("go test output passed %d bytes and was cut", goReportLimit)
	}
	return r, nil
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
