package synth

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/harness"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
	"github.com/frognano/frognano/actors/synth/mutate"
)

// worker validates candidates one at a time in its own sandbox, created on
// first use and reset (not recreated) between candidates: a reset is a git
// checkout of a few files, a new container costs ten times more.
type worker struct {
	r     *run
	id    int
	sb    Sandbox
	dirty bool
	tried int // candidates since this worker's last validated task
	// patched are the files patched since the last reset, whose bytecode
	// the reset drops.
	patched []string
	// pytest is this sandbox's pytest fork server (validation use), nil
	// until the first pytest run; noPytest: it could not start, and every
	// run is a RunTests.
	pytest   *sandbox.PytestServer
	noPytest bool
}

// outcome is a candidate's verdict.
type outcome struct {
	reason   string // "" when validated
	f2p, p2p []string
	full     *testreport.Report // the whole suite with the bug
	runs     int
	seconds  float64
	canceled bool // the run ended before a verdict
}

func (w *worker) prepare(ctx context.Context) error {
	if w.sb != nil && w.dirty {
		err := shell(ctx, w.sb, w.r.env.GetRepoDir(), resetScript, time.Minute)
		if err == nil && len(w.patched) > 0 {
			err = shell(ctx, w.sb, w.r.env.GetRepoDir(), dropBytecode, time.Minute, w.patched...)
		}
		w.patched = nil
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			w.r.s.cfg.Logger.Warn("sandbox reset failed; replacing the sandbox", "err", err)
			w.destroy()
		}
	}
	if w.sb == nil {
		sb, err := w.r.s.cfg.Sandboxes.Create(ctx, w.r.env)
		if err != nil {
			return err
		}
		w.sb = sb
		w.pytest, w.noPytest = nil, false
	}
	w.dirty = false
	return nil
}

func (w *worker) destroy() {
	if w.sb == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.sb.Destroy(ctx); err != nil {
		w.r.s.cfg.Logger.Warn("destroy validation sandbox", "sandbox", w.sb.ID(), "err", err)
	}
	w.sb = nil
}

// broken turns an error from the sandbox into an outcome: a canceled run,
// or a broken sandbox that is replaced before the next candidate.
func (w *worker) broken(ctx context.Context, err error) outcome {
	if ctx.Err() != nil {
		return outcome{canceled: true}
	}
	w.r.s.cfg.Logger.Warn("validation sandbox failed; replacing it", "err", err)
	w.destroy()
	return outcome{reason: ReasonSandbox}
}

// timeout bounds a run of tests in wall-clock time: generous for the
// tests' baseline time (a bug can make them slower, and the node may be
// busy), plus room for the runner to start and, in Go, to compile.
func (w *worker) timeout(tests []string) time.Duration {
	return 20*time.Second + 5*w.baselineTime(tests)
}

// cpuLimit bounds a pytest run in CPU time (see sandbox.PytestServer.Run):
// an infinite loop costs this much instead of the whole timeout.
func (w *worker) cpuLimit(tests []string) time.Duration {
	return 3*time.Second + 5*w.baselineTime(tests)
}

// baselineTime is what tests took at baseline (nil: the whole suite).
func (w *worker) baselineTime(tests []string) time.Duration {
	secs := 0.0
	if tests == nil {
		secs = w.r.env.GetBaseline().GetDurationSeconds()
	} else {
		for _, t := range tests {
			secs += w.r.duration[t]
		}
	}
	return time.Duration(secs * float64(time.Second))
}

// runTests runs tests (nil: the whole suite); failFast stops at the first
// failure, which is all screening needs.
func (w *worker) runTests(ctx context.Context, tests []string, failFast bool, o *outcome) (*testreport.Report, error) {
	tests = w.r.inSuiteOrder(tests)
	spec := w.r.spec
	spec.Timeout = w.timeout(tests)
	if failFast {
		switch spec.Framework {
		case testreport.Pytest:
			spec.Args = append(slices.Clone(spec.Args), "-x")
		case testreport.GoTest:
			spec.Args = append(slices.Clone(spec.Args), "-failfast")
		}
	}
	o.runs++
	start := time.Now()
	defer func() {
		w.r.s.cfg.Logger.Debug("test run", "worker", w.id, "tests", len(tests), "fail_fast", failFast, "seconds", time.Since(start).Seconds())
	}()
	if spec.Framework == testreport.Pytest && !w.r.s.cfg.NoForkServer && !w.noPytest {
		if w.pytest == nil {
			p, err := w.sb.StartPytestServer(ctx, spec, sandbox.PytestValidation)
			switch {
			case err == nil:
				w.pytest = p
			case ctx.Err() != nil:
				return nil, ctx.Err()
			default:
				w.r.s.cfg.Logger.Debug("pytest fork server did not start; validating with full runs", "worker", w.id, "err", err)
				w.noPytest = true
			}
		}
		if w.pytest != nil {
			rep, err := w.pytest.Run(ctx, forkSpec(spec), tests, w.cpuLimit(tests))
			if err == nil || !errors.Is(err, sandbox.ErrServer) {
				return rep, err
			}
			// The server died (OOM, a test that killed its process group's
			// parent) and Run killed what was left of it: start another next
			// time, and run this one the usual way.
			w.r.s.cfg.Logger.Debug("pytest fork server failed; running in full", "worker", w.id, "err", err)
			w.pytest = nil
		}
	}
	return w.sb.RunTests(ctx, spec, tests)
}

// forkSpec is a validation run's spec in the fork server: native
// tracebacks. The report's messages are the same, and a mutation that
// recurses without end costs milliseconds per failing test instead of a
// tenth of a second or more for pytest's own formatting.
func forkSpec(spec sandbox.TestSpec) sandbox.TestSpec {
	spec.Args = append([]string{"--tb=native"}, spec.Args...)
	return spec
}

// inSuiteOrder sorts tests as the baseline ran them (unknown ones last):
// pytest runs named tests in the order named, and a suite whose tests
// depend on what earlier ones imported (six) judges a subset run in another
// order differently from the grading run, which is the whole suite.
func (r *run) inSuiteOrder(tests []string) []string {
	out := slices.Clone(tests)
	slices.SortStableFunc(out, func(a, b string) int {
		ia, oka := r.order[a]
		ib, okb := r.order[b]
		switch {
		case oka && okb:
			return cmp.Compare(ia, ib)
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	return out
}

func (w *worker) patch(ctx context.Context, patch string, files []string) (bad bool, err error) {
	w.dirty = true
	if err := w.sb.ApplyPatch(ctx, patch); err != nil {
		var pe *sandbox.PatchError
		if errors.As(err, &pe) {
			return true, nil
		}
		return false, err
	}
	if w.r.lang == mutate.Python {
		w.patched = append(w.patched, files...)
		if err := shell(ctx, w.sb, w.r.env.GetRepoDir(), dropBytecode, time.Minute, files...); err != nil {
			return false, err
		}
	}
	return false, nil
}

// rest is the baseline-passing tests not in screened (sorted).
func (w *worker) rest(screened []string) []string {
	in := make(map[string]bool, len(screened))
	for _, t := range screened {
		in[t] = true
	}
	var out []string
	for _, t := range sortedKeys(w.r.passing) {
		if !in[t] {
			out = append(out, t)
		}
	}
	return out
}

// validate runs the checks on c; screenOnly stops after screening (the
// multi-bug pool). In full-suite mode, screening is the whole suite and
// doubles as the full check.
func (w *worker) validate(ctx context.Context, c candidate, screenOnly bool) (o outcome) {
	start := time.Now()
	defer func() { o.seconds = time.Since(start).Seconds() }()
	if err := w.prepare(ctx); err != nil {
		return w.broken(ctx, err)
	}
	if bad, err := w.patch(ctx, c.Patch, c.Features.Files); err != nil {
		return w.broken(ctx, err)
	} else if bad {
		o.reason = ReasonPatchApply
		return o
	}
	// In full-suite mode, and when the covering tests are most of the suite
	// anyway, screening is the whole suite and doubles as the full check.
	var full *testreport.Report
	if w.r.req.FullSuiteScreening || 2*len(c.tests) >= len(w.r.passing) {
		rep, err := w.runTests(ctx, nil, false, &o)
		if err != nil {
			return w.broken(ctx, err)
		}
		if screenOnly {
			o.reason = screenVerdict(rep, sortedKeys(w.r.passing))
			return o
		}
		full = rep
		if _, _, reason := fullVerdict(full, w.r.passing); reason == ReasonNoFailToPass {
			o.reason = ReasonSurvived // this run was the screening
			return o
		}
	} else {
		// Screening runs to the end (no fail-fast) so that the full check
		// only has to run the other baseline-passing tests: every test runs
		// once with the bug, in two processes instead of one.
		rep, err := w.runTests(ctx, c.tests, screenOnly, &o)
		if err != nil {
			return w.broken(ctx, err)
		}
		if o.reason = screenVerdict(rep, c.tests); o.reason != "" || screenOnly {
			return o
		}
		full = rep
		if rest := w.rest(c.tests); len(rest) > 0 {
			more, err := w.runTests(ctx, rest, false, &o)
			if err != nil {
				return w.broken(ctx, err)
			}
			full = mergeReports(rep, more)
		}
	}
	o.full = full
	if o.f2p, o.p2p, o.reason = fullVerdict(full, w.r.passing); o.reason != "" {
		return o
	}
	rep, err := w.runTests(ctx, o.f2p, false, &o)
	if err != nil {
		return w.broken(ctx, err)
	}
	if o.reason = rerunVerdict(rep, o.f2p); o.reason != "" {
		st := statuses(rep)
		var bad []string
		for _, id := range o.f2p {
			if !failed(st[id]) {
				bad = append(bad, id+"="+st[id].String())
			}
		}
		w.r.s.cfg.Logger.Debug("flaky candidate: the rerun disagrees", "valid", rep.Valid, "problem", rep.Problem, "exit", rep.ExitCode,
			"fail_to_pass", len(o.f2p), "not_failing_again", bad, "patch", c.Patch)
		return o
	}
	if bad, err := w.patch(ctx, c.Gold, c.Features.Files); err != nil {
		return w.broken(ctx, err)
	} else if bad {
		o.reason = ReasonGoldApply
		return o
	}
	if rep, err = w.runTests(ctx, o.f2p, false, &o); err != nil {
		return w.broken(ctx, err)
	}
	if o.reason = goldVerdict(rep, o.f2p); o.reason != "" {
		return o
	}
	if o.reason, err = w.deletionCheck(ctx, c, &o); err != nil {
		return w.broken(ctx, err)
	}
	return o
}

// deletionCheck grades the answer that deletes the fix's first SEARCH side
// (the lines hint level 4 gives, written over with nothing) like an
// agent's edit: if it passes every FAIL_TO_PASS and PASS_TO_PASS test, the
// tests cannot tell the bug from no code at all, and a policy learns to
// delete what it is shown (Qwen2.5-Coder-0.5B did, 2026-12-07: 140 of its
// 160 held-out answers after 36 GRPO steps were that 2-token edit). Such a
// candidate is rejected (ReasonDeletionPasses). A candidate whose fix has
// no SEARCH side unique in its file is not checked.
func (w *worker) deletionCheck(ctx context.Context, c candidate, o *outcome) (string, error) {
	e, err := harness.SearchHint(c.Gold)
	if err != nil {
		return "", nil
	}
	buggy, ok := buggyOf(c)[e.Path]
	if !ok || strings.Count(string(buggy), e.Search) != 1 {
		return "", nil
	}
	var orig []byte
	for _, mu := range c.Mutations {
		if mu.File.Path == e.Path {
			orig = mu.File.Src
		}
	}
	// The sandbox holds the gold fix now, which is the original file.
	diff := mutate.UnifiedDiff(e.Path, orig, []mutate.Replacement{wholeLines(orig, []byte(strings.Replace(string(buggy), e.Search, "", 1)))})
	if diff == "" {
		return "", nil
	}
	if bad, err := w.patch(ctx, diff, c.Features.Files); err != nil || bad {
		return "", err
	}
	rep, err := w.runTests(ctx, o.f2p, true, o)
	if err != nil || rep.TimedOut || !testreport.Grade(rep, o.f2p, nil).Resolved {
		return "", err
	}
	full, err := w.runTests(ctx, nil, true, o)
	if err != nil || full.TimedOut || !testreport.Grade(full, o.f2p, o.p2p).Resolved {
		return "", err
	}
	return ReasonDeletionPasses, nil
}

// wholeLines is the replacement that turns a into b: the lines from the
// first that differs to the last, so its diff is as small as the change.
func wholeLines(a, b []byte) mutate.Replacement {
	start := 0
	for start < len(a) && start < len(b) && a[start] == b[start] {
		start++
	}
	start = bytes.LastIndexByte(a[:start], '\n') + 1
	ea, eb := len(a), len(b)
	for ea > start && eb > start && a[ea-1] == b[eb-1] {
		ea, eb = ea-1, eb-1
	}
	if i := bytes.IndexByte(a[ea:], '\n'); i >= 0 && ea < len(a) {
		eb += i + 1
		ea += i + 1
	} else {
		ea, eb = len(a), len(b)
	}
	return mutate.Replacement{Start: start, End: ea, Old: string(a[start:ea]), New: string(b[start:eb])}
}
