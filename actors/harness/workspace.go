package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// SandboxWorkspace is a Workspace over a containerd sandbox of the task's
// environment image.
type SandboxWorkspace struct {
	sb   *sandbox.Sandbox
	spec sandbox.TestSpec
	task *records.Task
	// testPatch is applied after the protected files are restored, before
	// the tests run (SWE-bench instances bring their tests this way).
	testPatch string
	log       *slog.Logger
	// server is the grading fork server started before the episode (nil
	// when fast grading is off or it did not start).
	server *sandbox.PytestServer
}

// Fast grading: counts for the node's logs and the benchmark.
var fastGrading struct {
	started, startFailed, fast, fallback atomic.Int64
}

// FastGradingCounts says how many workspaces started a grading fork
// server, how many failed to (and grade in full), how many episodes the
// fast path graded and how many fell back to the full run.
func FastGradingCounts() (started, startFailed, fast, fallback int64) {
	return fastGrading.started.Load(), fastGrading.startFailed.Load(), fastGrading.fast.Load(), fastGrading.fallback.Load()
}

// FullGradingEnv, set to 1, turns fast grading off for every workspace
// of the process (WorkspaceOptions.FullGrading).
const FullGradingEnv = "FROGNANO_FULL_GRADING"

var _ Workspace = (*SandboxWorkspace)(nil)

// WorkspaceOptions tune NewWorkspace.
type WorkspaceOptions struct {
	// TestPatch is applied for grading only (SWE-bench's test_patch).
	TestPatch string
	// TestTimeout bounds the grading run (default: the task's validation
	// time ×10, at least 2 minutes, at most 15).
	TestTimeout time.Duration
	// FullGrading turns off the fast path: by default a pytest workspace
	// starts a grading fork server (sandbox.PytestServer) before the
	// episode, and Grade runs the tests in a fork of it, falling back to
	// the full run (sandbox.RunTests) on any error of the server.
	FullGrading bool
	// Logger gets a line when the fast path falls back (default
	// slog.Default()).
	Logger *slog.Logger
}

// NewWorkspace prepares sb, a fresh sandbox of the task's environment
// image, for an episode: it applies the task's bug patch and squashes the
// repository's history into one commit of the buggy tree, so that neither
// `git diff` nor `git log` shows what changed. spec is how the environment
// runs its tests. A task without a bug patch (a SWE-bench image, already at
// the buggy commit) is used as it is.
func NewWorkspace(ctx context.Context, sb *sandbox.Sandbox, spec sandbox.TestSpec, task *records.Task, opts WorkspaceOptions) (*SandboxWorkspace, error) {
	if len(task.GetFailToPass()) == 0 {
		return nil, fmt.Errorf("task %s names no FAIL_TO_PASS test", task.GetId())
	}
	if spec.Timeout <= 0 {
		spec.Timeout = opts.TestTimeout
	}
	if spec.Timeout <= 0 {
		spec.Timeout = min(max(time.Duration(task.GetValidation().GetSeconds()*10*float64(time.Second)), 2*time.Minute), 15*time.Minute)
	}
	if task.GetBugPatch() != "" {
		if err := sb.ApplyPatch(ctx, task.GetBugPatch()); err != nil {
			return nil, fmt.Errorf("apply the bug of task %s: %w", task.GetId(), err)
		}
		if _, err := sb.SquashGitHistory(ctx, "", "base"); err != nil {
			return nil, fmt.Errorf("task %s: %w", task.GetId(), err)
		}
	}
	w := &SandboxWorkspace{sb: sb, spec: spec, task: task, testPatch: opts.TestPatch, log: opts.Logger}
	if w.log == nil {
		w.log = slog.Default()
	}
	// Not with a test patch: a fallback after a fork that ran would apply
	// it twice.
	if spec.Framework == testreport.Pytest && opts.TestPatch == "" && !opts.FullGrading && os.Getenv(FullGradingEnv) != "1" {
		// Before the agent acts: see sandbox.PytestServer.
		server, err := sb.StartPytestServer(ctx, spec, sandbox.PytestGrading)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			fastGrading.startFailed.Add(1)
			w.log.Warn("grading fork server did not start; the episode is graded by the full run", "task", task.GetId(), "err", err)
		} else {
			fastGrading.started.Add(1)
			w.server = server
		}
	}
	return w, nil
}

// Sandbox is the underlying sandbox.
func (w *SandboxWorkspace) Sandbox() *sandbox.Sandbox { return w.sb }

// Exec runs a command for the Bash tool.
func (w *SandboxWorkspace) Exec(ctx context.Context, argv []string, timeout time.Duration, limit int64) (ExecResult, error) {
	res, err := w.sb.Exec(ctx, sandbox.ExecRequest{Argv: argv, Timeout: timeout, OutputLimit: limit})
	if err != nil {
		return ExecResult{}, err
	}
	out := ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr, Truncated: res.Truncated, TimedOut: res.TimedOut}
	if res.QuotaExceeded {
		out.Stderr = append(out.Stderr, []byte("\n[the sandbox's disk quota was exceeded; its processes were killed]\n")...)
	}
	return out, nil
}

// ReadFile, WriteFile and ListFiles are the sandbox's.
func (w *SandboxWorkspace) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return w.sb.ReadFile(ctx, p)
}

func (w *SandboxWorkspace) WriteFile(ctx context.Context, p string, content []byte) error {
	return w.sb.WriteFile(ctx, p, content)
}

func (w *SandboxWorkspace) ListFiles(ctx context.Context, dir, glob string) ([]string, error) {
	return w.sb.ListFiles(ctx, dir, glob)
}

// dropBytecode removes Python's bytecode caches: RunTests' isolated
// interpreter ignores PYTHONDONTWRITEBYTECODE, and an edit that keeps a
// module's size within the mtime second of its cached bytecode would run
// the stale code.
const dropBytecode = `find . -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null; true`

// GradingTests are the tests a grading run names: nil (the whole suite, in
// its own order) for a synthesized task, whose FAIL_TO_PASS and
// PASS_TO_PASS are every test that passed at baseline; the two lists for
// an instance that brings its own (SWE-bench). Naming a synthesized task's
// tests would run them FAIL_TO_PASS first, and a test that depends on what
// earlier tests imported (six's test_lazy) can then fail under a correct
// fix.
func GradingTests(task *records.Task) []string {
	if task.GetBugPatch() != "" {
		return nil
	}
	return slices.Concat(task.GetFailToPass(), task.GetPassToPass())
}

// Protected is what the grader puts back to the image's version before a
// grading run: the task's protected set (its environment's, stored with
// the task) and, whatever the task says, every path its framework's tests
// can be configured or extended by (sandbox.DefaultProtected), so tasks
// recorded before the set was widened are graded as strictly as new ones.
// The files the task's bug patch changes are not restored (that would
// undo the bug); they are returned as except.
func Protected(task *records.Task, f testreport.Framework) (protected, except []string) {
	protected = slices.Clone(task.GetProtectedFiles())
	for _, p := range sandbox.DefaultProtected(f) {
		if !slices.Contains(protected, p) {
			protected = append(protected, p)
		}
	}
	for line := range strings.Lines(task.GetBugPatch()) {
		rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "diff --git ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if p, ok := strings.CutPrefix(f, "a/"); ok {
				except = append(except, p)
			} else if p, ok := strings.CutPrefix(f, "b/"); ok {
				except = append(except, p)
			}
		}
	}
	return protected, except
}

// Grade kills whatever the agent left running, puts the protected set
// back to the image's version (Protected), applies the test patch if any,
// runs the task's tests (GradingTests) and grades the report: reward 1
// only when every one of them passes. A repository the agent made
// impossible to restore safely grades 0.
func (w *SandboxWorkspace) Grade(ctx context.Context) (Grade, error) {
	if g, err := w.prepareGrading(ctx); g != nil || err != nil {
		return *g, err
	}
	var rep *testreport.Report
	if server := w.server; server != nil {
		w.server = nil
		r, err := server.RunTests(ctx, GradingTests(w.task))
		switch {
		case err == nil:
			fastGrading.fast.Add(1)
			rep = r
		case !errors.Is(err, sandbox.ErrServer) || ctx.Err() != nil:
			return Grade{}, err
		default:
			// The fork may have run some of the tests: the full run starts
			// from a freshly restored repository, as it would have.
			fastGrading.fallback.Add(1)
			w.log.Warn("grading fork server failed; grading by the full run", "task", w.task.GetId(), "sandbox", w.sb.ID(), "err", err)
			if g, err := w.prepareGrading(ctx); g != nil || err != nil {
				return *g, err
			}
		}
	}
	if rep == nil {
		var err error
		if rep, err = w.sb.RunTests(ctx, w.spec, GradingTests(w.task)); err != nil {
			return Grade{}, err
		}
	}
	o := testreport.Grade(rep, w.task.GetFailToPass(), w.task.GetPassToPass())
	return Grade{Report: rep.Proto(), Resolved: o.Resolved, Reward: o.Reward, Reason: o.Reason}, nil
}

// prepareGrading kills what the agent left (but the grading server),
// restores the protected set, applies the test patch and drops bytecode.
// A non-nil Grade is the episode's grade already (tampered).
func (w *SandboxWorkspace) prepareGrading(ctx context.Context) (*Grade, error) {
	protected, except := Protected(w.task, w.spec.Framework)
	if err := w.sb.PrepareForGrading(ctx, protected, except...); errors.Is(err, sandbox.ErrTampered) {
		return &Grade{Reason: "tampered: " + err.Error()}, nil
	} else if err != nil {
		return &Grade{}, err
	}
	if w.testPatch != "" {
		if err := w.sb.ApplyPatch(ctx, w.testPatch); err != nil {
			return &Grade{}, fmt.Errorf("apply the test patch: %w", err)
		}
	}
	if w.spec.Framework == testreport.Pytest {
		if _, err := w.sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", dropBytecode}, Timeout: time.Minute}); err != nil {
			return &Grade{}, err
		}
	}
	return nil, nil
}
