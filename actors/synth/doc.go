// Package synth is the Synthesizer: it turns a registered environment (a
// real repository in a containerd image, with a baseline test report) into
// validated bug-fix tasks, and the synthesizer actor that serves
// SynthesizeRequest on a node.
//
// # Pipeline
//
//  1. Targeting. A coverage map records which tests execute which lines of
//     the non-test source files: for Python, the suite runs once under
//     coverage.py with a pytest plugin that switches the coverage context to
//     each test's node id (so the map is keyed by exactly the ids reports
//     use, parametrized ones included); for Go, each package's test binary
//     is built once with -cover and run once per test. The map is stored per
//     environment (persistence.CoverageStore) and measured again only when
//     the environment's image changes.
//  2. Candidates. The mutate package plants one bug (or, with Bugs ≥ 2,
//     several) on covered lines only. Each candidate carries the tests that
//     can notice it: those executing its lines, else those executing its
//     enclosing function (a default argument runs at import), else those
//     executing its file (module-level state). Candidates are shuffled with
//     the seed so a run samples every file and operator.
//  3. Validation, in sandboxes reused across candidates (one per worker,
//     one worker per CPU; a git checkout resets the repository between
//     candidates): apply the bug; screening runs the candidate's tests and
//     needs ≥1 pass→fail; the full check runs the rest of the suite, so the
//     whole suite has run with the bug: every baseline-passing test must now
//     fail (FAIL_TO_PASS, at least one) or pass (PASS_TO_PASS), none missing
//     or skipped, no timeout; the FAIL_TO_PASS tests are rerun and must fail
//     again (else the candidate is flaky); then the gold patch is applied on
//     top and they must pass (graded with testreport.Grade). Bugs already
//     stored for the environment, or seen earlier in the run, are skipped by
//     the mutator's key. Every rejection is counted under a stable reason
//     (the Reason constants, plus mutate's skip reasons).
//  4. The task: a problem statement (StatementWriter; TemplateWriter by
//     default) checked by Leaks, difficulty features, provenance and
//     validation figures, stored as soon as it is validated.
//
// # Hint levels
//
// The hint level is a parameter of a request, not one task per level: a
// bug becomes one task with the statement at the level asked for (the
// FrontierEstimator asks for the level it needs; the level is recorded in
// the task's difficulty). Level 0 lists the failing tests with their
// truncated error output; 1 adds an issue-style description naming the
// misbehaving functions and modules, never what changed; 2 also shows the
// buggy functions' current source. Statements never quote a line the gold
// patch restores (Leaks); one that would is rewritten without error output.
//
// # Speed
//
// Python validation runs pytest in forks of a process that imported it once
// per sandbox (sandbox.PytestServer, validation use: the grading fork server
// serving many runs), with a CPU-time limit per run so that a planted
// infinite loop costs seconds. The whole suite runs as "screened tests + the
// rest", so a killed candidate runs each test once. CPU time is measured from
// the sandboxes' cgroups plus this process (Result.CPUSeconds), excluding the
// one-off coverage measurement.
//
// On the small packages measured (see README), coverage-guided screening is
// about as fast as screening with the whole suite: 45–75% of candidates on
// covered lines are killed and need the whole suite anyway, and a run's cost
// is mostly process start and collection, not the tests. The saving grows
// with the suite's cost and the share of candidates that survive.
package synth
