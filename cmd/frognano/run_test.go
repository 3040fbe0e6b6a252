package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/frognano/frognano/actors/frontier"
	"github.com/frognano/frognano/actors/harness"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/cmd/internal/nodeflags"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
)

// childEnv makes the test binary run the CLI (the arguments after "--")
// instead of the tests, so a test can SIGKILL a real frognano run.
const childEnv = "FROGNANO_TEST_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "gold" {
		if err := goldChild(os.Getenv(childEnv+"_DATA"), os.Getenv(childEnv+"_RUNID")); err != nil {
			fmt.Fprintln(os.Stderr, "gold child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(childEnv) == "1" {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		cmd := root()
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "frognano:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// trainPrereqs skips a test that needs containerd and the model.
func trainPrereqs(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds an environment image and trains; skipped with -short")
	}
	if _, err := os.Stat("/run/containerd/containerd.sock"); err != nil {
		t.Skip("containerd is not running (scripts/setup-containerd.sh starts it)")
	}
	if os.Getenv("FROGNANO_TEST_GGUF") == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: set it to SmolLM2-135M-Instruct.Q4_1.gguf (the model store's smollm2-135m)")
	}
}

// writeArith writes a small Python project whose functions a mutation can
// break, named name (the environment's default name).
func writeArith(t *testing.T, name string) string {
	t.Helper()
	proj := filepath.Join(t.TempDir(), name)
	for file, body := range map[string]string{
		"setup.py": "from setuptools import setup\nsetup(name='arith', version='0.1', packages=['arith'])\n",
		"arith/__init__.py": "def add(a, b):\n    return a + b\n\n\ndef subtract(a, b):\n    return a - b\n\n\n" +
			"def maximum(a, b):\n    if a > b:\n        return a\n    return b\n",
		"tests/test_arith.py": "from arith import add, subtract, maximum\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n" +
			"def test_subtract():\n    assert subtract(5, 3) == 2\n\n\ndef test_maximum():\n    assert maximum(2, 7) == 7\n    assert maximum(9, 1) == 9\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(proj, file)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proj, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proj
}

// TestRunTrainsAndResumes runs the main job with SmolLM2-135M on a small
// local project through a real frognano process: the environment, task
// synthesis, then training steps (frontier batch, patch-mode rollouts at
// temperature 1, outcomes, the Learner, the Sampler). It SIGKILLs the
// process during step 2 and resumes the run with --run: the record goes
// on from step 1, the Learner reopens, the Sampler serves the run's newest
// version, and the stores hold the trajectories, the frontier's outcomes,
// the learner's figures and, when an update happened, its publication.
func TestRunTrainsAndResumes(t *testing.T) {
	trainPrereqs(t)
	proj := writeArith(t, "trainarith")
	data := t.TempDir()
	const runID = "test-resume"
	args := []string{"run", "--data-dir", data, "--log-level", "warn", "--jobs", "2", "--rounds", "10", "--env", proj, "--tasks", "2",
		"--steps", "2", "--tasks-per-step", "1", "--group", "2", "--max-turn-tokens", "48", "--parallel", "2", "--run", runID, "--seed", "7",
		"--max-staleness", "0"} // synchronous steps: killed at step 2, the record holds step 1 (TestAsyncRunResumes kills asynchronous ones)
	defer runCLI(t, "", "env", "rm", "trainarith", "--data-dir", data, "--log-level", "warn")

	// A real process, killed while it plays step 2.
	child := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	child.Env = append(os.Environ(), childEnv+"=1")
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	child.Stderr = &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var before strings.Builder
	killed := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		before.WriteString(line + "\n")
		if strings.HasPrefix(line, "step 2/2: rollouts:") {
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
			break
		}
	}
	_ = child.Wait()
	if !killed {
		t.Fatalf("the run ended before step 2:\n%s\n%s", before.String(), stderr.String())
	}
	for _, s := range []string{"synthesized 2 validated tasks", "learner: opening run " + runID, "step 1/2: batch of 1 task(s) from the frontier at policy v0",
		"step 1/2: rollouts done in", "step 1/2: frontier recorded 2 of 2 outcome(s)", "step 1/2: learner"} {
		if !strings.Contains(before.String(), s) {
			t.Fatalf("output before the kill lacks %q:\n%s\n%s", s, before.String(), stderr.String())
		}
	}

	// The record survived the kill at step 1.
	db, err := openAfterKill(t, filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	run, err := db.Runs().Get(context.Background(), runID)
	db.Close()
	if err != nil || run.Status != "running" || run.Step != 1 || run.Metrics[trainer.MetricEpisodes] != 2 {
		t.Fatalf("record after the kill: %v, %v", run, err)
	}

	// Resume: the same settings from the record, step 2 only, no new synthesis.
	out, errOut, err := runCLI(t, "", "run", "--data-dir", data, "--log-level", "warn", "--jobs", "2", "--rounds", "10", "--env", proj, "--run", runID)
	if err != nil {
		t.Fatalf("resume: %v\n%s\n%s", err, out, errOut)
	}
	t.Logf("before the kill:\n%s\nresumed:\n%s", before.String(), out)
	for _, s := range []string{"resuming run " + runID + " (running) after step 1 of 2", "step 2/2: batch of 1 task(s)", "step 2/2: frontier recorded 2 of 2 outcome(s)",
		"training run " + runID + ": 2 of 2 step(s): 2 task group(s), 4 episodes", "run " + runID + " done"} {
		if !strings.Contains(out, s) {
			t.Fatalf("resumed output lacks %q:\n%s\n%s", s, out, errOut)
		}
	}
	if strings.Contains(out, "step 1/2") || strings.Contains(out, "synthesized") {
		t.Fatalf("the resumed run replayed step 1 or synthesized again:\n%s", out)
	}

	db, err = persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run, err = db.Runs().Get(ctx, runID)
	if err != nil || run.Status != "done" || run.Step != 2 || run.Metrics[trainer.MetricEpisodes] != 4 || run.Metrics[trainer.MetricOutcomes] != 4 {
		t.Fatalf("final record: %v, %v", run, err)
	}
	s, err := trainer.DecodeSettings(run)
	if err != nil || s.Group != 2 || s.Mode != "patch" {
		t.Fatalf("stored settings %+v, %v", s, err)
	}
	// Every episode of both steps is stored (those of the killed attempt
	// at step 2 too, if any finished).
	trajs, err := db.Trajectories().ListByRun(ctx, runID)
	if err != nil || len(trajs) < 4 {
		t.Fatalf("%d trajectories of the run, %v", len(trajs), err)
	}
	for _, tr := range trajs {
		if tr.PolicyVersion > int64(run.Metrics[trainer.MetricPolicyVersion]) {
			t.Fatalf("trajectory %s of policy v%d, newer than the run's", tr.Id, tr.PolicyVersion)
		}
	}
	st, err := db.Frontier().Get(ctx, runID) // the run's own estimator
	if err != nil || st.GetReports() < 2 || st.GetCounters()[frontier.CountRecorded] < 4 {
		t.Fatalf("frontier state after two steps: reports %d counters %v, %v", st.GetReports(), st.GetCounters(), err)
	}
	updates := run.Metrics[trainer.MetricUpdates]
	if updates+run.Metrics[trainer.MetricNoSignal] != 2 {
		t.Fatalf("learner figures: %v", run.Metrics)
	}
	if updates > 0 {
		// A step with mixed rewards: published, and the Sampler moved.
		pub, err := db.Checkpoints().Latest(ctx, runID)
		if err != nil || pub.GetPolicyVersion() < 1 || !strings.Contains(out+before.String(), "sampler: now serves policy v") {
			t.Fatalf("an update without a publication: %v, %v", pub, err)
		}
	} else if run.Metrics[trainer.MetricPolicyVersion] != 0 {
		t.Fatalf("no update but policy v%v", run.Metrics[trainer.MetricPolicyVersion])
	}
	db.Close()

	// containerd gone (a socket nothing listens on): the run, lengthened,
	// plays steps whose every episode fails in the infrastructure and
	// stops after trainer.MaxInfraSteps of them with the cause, its record
	// failed at the last whole step, instead of spending its steps on
	// rewards of 0.
	out, errOut, err = runCLI(t, "", "run", "--data-dir", data, "--log-level", "warn", "--jobs", "2", "--rounds", "10", "--env", proj, "--run", runID,
		"--steps", "20", "--containerd-address", filepath.Join(t.TempDir(), "no-containerd.sock"))
	want := fmt.Sprintf("step %d/20: every episode of the last %d steps failed in the infrastructure", 2+trainer.MaxInfraSteps, trainer.MaxInfraSteps)
	if err == nil || !strings.Contains(out+errOut, want) || !strings.Contains(out+errOut, "containerd") {
		t.Fatalf("a run without containerd: %v, want %q:\n%s\n%s", err, want, out, errOut)
	}
	db, err = persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	run, err = db.Runs().Get(ctx, runID)
	if err != nil || run.Status != "failed" || run.Step != int64(1+trainer.MaxInfraSteps) || run.Metrics[trainer.MetricInfra] != float64(2*(trainer.MaxInfraSteps-1)) {
		t.Fatalf("record of the run stopped for its infrastructure: %v, %v", run, err)
	}
}

// TestAsyncRunResumes runs the main job with asynchronous steps
// (--max-staleness 3) through a real frognano process and SIGKILLs it once
// step 3's rollouts have begun, while the Learner is still behind (steps
// produced, not recorded); the record holds only whole steps. The resumed
// run plays the rest and ends with exactly the synchronous loop's counts
// (3 steps, 6 episodes), every outcome the frontier recorded counted once
// in the record and no step's outcomes recorded twice, each group's
// staleness within the bound and none dropped, and stored trajectories of
// the killed attempt left unused (their ids never reused).
func TestAsyncRunResumes(t *testing.T) {
	trainPrereqs(t)
	proj := writeArith(t, "asyncarith")
	data := t.TempDir()
	const runID = "test-async"
	args := []string{"run", "--data-dir", data, "--log-level", "warn", "--jobs", "2", "--rounds", "10", "--env", proj, "--tasks", "2",
		"--steps", "3", "--tasks-per-step", "1", "--group", "2", "--max-turn-tokens", "48", "--parallel", "2", "--run", runID, "--seed", "11",
		"--max-staleness", "3"}
	defer runCLI(t, "", "env", "rm", "asyncarith", "--data-dir", data, "--log-level", "warn")

	child := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	child.Env = append(os.Environ(), childEnv+"=1")
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	child.Stderr = &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var before strings.Builder
	killed := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		before.WriteString(line + "\n")
		if strings.HasPrefix(line, "step 3/3: rollouts:") {
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
			break
		}
	}
	_ = child.Wait()
	t.Logf("before the kill:\n%s", before.String())
	if !killed {
		t.Fatalf("the run ended before step 3's rollouts:\n%s", stderr.String())
	}
	// Step 3's rollouts began before the Learner had trained on step 2:
	// the steps overlap.
	if strings.Contains(before.String(), "step 2/3: learner") {
		t.Fatalf("the Learner trained on step 2 before step 3's rollouts began: the steps did not overlap")
	}

	ctx := context.Background()
	db, err := openAfterKill(t, filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	run, err := db.Runs().Get(ctx, runID)
	db.Close()
	// The kill lands while step 3's rollouts run; step 2's update (skipped
	// for lack of signal: a matter of microseconds) may have been recorded
	// by then, since the line reaches this test through the node's log and
	// its HTTP stream. Step 3 is never recorded, and the record is whole.
	if err != nil || run.Status != "running" || run.Step > 2 || run.Metrics[trainer.MetricEpisodes] != float64(2*run.Step) {
		t.Fatalf("record after the kill: %v, %v", run, err)
	}
	killedAt := run.Step

	out, errOut, err := runCLI(t, "", "run", "--data-dir", data, "--log-level", "warn", "--jobs", "2", "--rounds", "10", "--env", proj, "--run", runID)
	t.Logf("resumed:\n%s", out)
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, errOut)
	}
	for _, want := range []string{fmt.Sprintf("resuming run %s (running) after step %d of 3", runID, killedAt), "step 3/3: frontier recorded",
		"training run " + runID + ": 3 of 3 step(s): 3 task group(s), 6 episodes", "run " + runID + " done"} {
		if !strings.Contains(out, want) {
			t.Fatalf("resumed output lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(out, fmt.Sprintf("step %d/3", killedAt)) && killedAt > 0 {
		t.Fatalf("the resumed run replayed step %d", killedAt)
	}
	db, err = persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	run, err = db.Runs().Get(ctx, runID)
	m := run.GetMetrics()
	if err != nil || run.Status != "done" || run.Step != 3 || m[trainer.MetricEpisodes] != 6 || m[trainer.MetricTasks] != 3 || m[trainer.MetricAttempts] != 2 {
		t.Fatalf("final record: %v, %v", run, err)
	}
	s, err := trainer.DecodeSettings(run)
	if err != nil || s.MaxStaleness != 3 {
		t.Fatalf("stored settings %+v, %v", s, err)
	}
	if m[trainer.MetricStaleDropped] != 0 || m[trainer.MetricMaxStaleness] > 3 {
		t.Fatalf("staleness: %v dropped, max %v seen (bound 3)", m[trainer.MetricStaleDropped], m[trainer.MetricMaxStaleness])
	}
	if m[trainer.MetricUpdates]+m[trainer.MetricNoSignal] != 3 {
		t.Fatalf("learner figures: %v", m)
	}
	var points int
	for _, p := range run.GetCurve() {
		if p.GetPhase() != trainer.PhaseStep {
			continue
		}
		points++
		if _, ok := p.GetMetrics()[trainer.PointMaxStaleness]; !ok || p.GetMetrics()[trainer.PointStaleDropped] != 0 {
			t.Fatalf("step point %d without its staleness: %v", p.GetStep(), p.GetMetrics())
		}
	}
	if points != 3 {
		t.Fatalf("%d step points, want 3", points)
	}
	// The frontier recorded each step's outcomes once, and the record
	// counts exactly what it recorded.
	st, err := db.Frontier().Get(ctx, runID)
	if err != nil || st.GetLastStep() != 3 || float64(st.GetCounters()[frontier.CountRecorded]) != m[trainer.MetricOutcomes] || m[trainer.MetricOutcomes] > 6 {
		t.Fatalf("frontier: last step %d, recorded %d; the record counts %v outcomes; %v", st.GetLastStep(), st.GetCounters()[frontier.CountRecorded], m[trainer.MetricOutcomes], err)
	}
	trajs, err := db.Trajectories().ListByRun(ctx, runID)
	if err != nil || len(trajs) < 6 {
		t.Fatalf("%d trajectories of the run, %v", len(trajs), err)
	}
	for _, tr := range trajs {
		if tr.PolicyVersion > int64(m[trainer.MetricPolicyVersion]) {
			t.Fatalf("trajectory %s of policy v%d, newer than the run's", tr.Id, tr.PolicyVersion)
		}
	}
}

// goldOrSampler is a policy for TestTrainStepPublishes: its odd calls
// answer with the task's gold fix as a search/replace block (log-probs 0),
// its even calls are the node's real Sampler. A group of two thus has one
// solved and one unsolved episode: the rewards differ, and GRPO has a
// signal whatever the 135M model writes.
type goldOrSampler struct {
	gold    *harness.ScriptedPolicy
	sampler policy.Policy
	calls   atomic.Int64
}

func (p *goldOrSampler) Generate(ctx context.Context, req policy.GenerateRequest) (policy.GenerateResult, error) {
	if p.calls.Add(1)%2 == 1 {
		return p.gold.Generate(ctx, req)
	}
	return p.sampler.Generate(ctx, req)
}

// searchReplace turns a unified diff into search/replace blocks.
func searchReplace(diff string) (string, error) {
	var out, search, repl strings.Builder
	path := ""
	flush := func() {
		if search.Len() > 0 || repl.Len() > 0 {
			fmt.Fprintf(&out, "%s\n<<<<<<< SEARCH\n%s=======\n%s>>>>>>> REPLACE\n", path, search.String(), repl.String())
		}
		search.Reset()
		repl.Reset()
	}
	for _, l := range strings.Split(diff, "\n") {
		switch {
		case strings.HasPrefix(l, "+++ "):
			path = strings.TrimPrefix(strings.TrimPrefix(l, "+++ "), "b/")
		case strings.HasPrefix(l, "--- "), strings.HasPrefix(l, "diff "), strings.HasPrefix(l, "index "):
		case strings.HasPrefix(l, "@@"):
			flush()
		case strings.HasPrefix(l, "-"):
			search.WriteString(l[1:] + "\n")
		case strings.HasPrefix(l, "+"):
			repl.WriteString(l[1:] + "\n")
		case strings.HasPrefix(l, " "):
			search.WriteString(l[1:] + "\n")
			repl.WriteString(l[1:] + "\n")
		}
	}
	flush()
	if path == "" || out.Len() == 0 {
		return "", fmt.Errorf("no hunk in the gold patch:\n%s", diff)
	}
	return out.String(), nil
}

// goldSettings are the training settings of goldChild.
var goldSettings = trainer.Settings{Steps: 2, TasksPerStep: 1, Group: 2, Mode: "patch", MaxTurnTokens: 256, LR: 1e-5, CheckpointEvery: 1, Seed: 3}

// goldChild trains run runID on the embedded node of data (which holds one
// task) with goldOrSampler, printing the loop's progress on stdout, until
// its parent kills it.
func goldChild(data, runID string) error {
	return goldTrain(data, runID, goldSettings, os.Stdout)
}

// goldTrain trains run runID with settings s on the embedded node of data
// (which holds one task) with goldOrSampler, printing the loop's progress
// on out.
func goldTrain(data, runID string, s trainer.Settings, out io.Writer) error {
	fs := pflag.NewFlagSet("child", pflag.ContinueOnError)
	load := nodeflags.Bind(fs)
	if err := fs.Parse([]string{"--data-dir", data, "--log-level", "warn"}); err != nil {
		return err
	}
	ctx := context.Background()
	c, err := connect(ctx, "", load, func(cfg *config.Config) { cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0" })
	if err != nil {
		return err
	}
	defer c.close()
	tasks, err := c.embedded.DB().Tasks().List(ctx, persistence.TaskFilter{})
	if err != nil || len(tasks) != 1 {
		return fmt.Errorf("want one stored task: %d, %v", len(tasks), err)
	}
	store, err := modelstore.Open("")
	if err != nil {
		return err
	}
	tok, err := store.Tokenizer("smollm2-135m")
	if err != nil {
		return err
	}
	fix, err := searchReplace(tasks[0].GetGoldPatch())
	if err != nil {
		return err
	}
	policy := &goldOrSampler{
		gold:    &harness.ScriptedPolicy{Tokenizer: tok, Turns: []string{fix}},
		sampler: &sampler.Client{Root: c.system.Root, PID: c.pid(sampler.ActorName)},
	}
	run := &records.Run{Id: runID, Status: "running", ConfigYaml: s.Encode(), Metrics: map[string]float64{}, StartedUnixNano: time.Now().UnixNano()}
	cfg, err := load()
	if err != nil {
		return err
	}
	d := &trainer.Deps{Node: c.embedded, Runtime: c.sandboxes.Runtime, DataDir: cfg.Node.DataDir, Policy: policy}
	_, err = trainer.TrainOnNode(ctx, d, run, s, 2, out, nil, nil)
	return err
}

// TestAsyncStaleGroupsDroppedNotTrainedOn trains with asynchronous steps
// (at most 1 version of staleness) through the real loop, Learner and
// Sampler, with goldOrSampler: every group has one episode of the task's
// gold fix, whose scripted policy reports policy v0 at every step, and
// one of the node's Sampler. Step 1 is trained at v0 and step 2, whose
// rollouts ran while the Learner took step 1, at v1 (1 behind: kept), so
// both update; from step 3 on the Learner is at v2 and every group holds
// a v0 episode, 2 versions behind: steps 3 and 4 drop their group, count
// it, print it, and take no update.
func TestAsyncStaleGroupsDroppedNotTrainedOn(t *testing.T) {
	trainPrereqs(t)
	proj := writeArith(t, "stalearith")
	data := t.TempDir()
	const runID = "test-stale"
	cli := func(args ...string) {
		t.Helper()
		out, errOut, err := runCLI(t, "", append(args, "--data-dir", data, "--log-level", "warn")...)
		if err != nil {
			t.Fatalf("frognano %s: %v\n%s\n%s", strings.Join(args, " "), err, out, errOut)
		}
	}
	cli("env", "add", proj, "--min-tests", "1")
	defer runCLI(t, "", "env", "rm", "stalearith", "--data-dir", data, "--log-level", "warn")
	cli("synth", "--env", "stalearith", "--count", "1", "--seed", "1", "--hint-level", "2")

	s := goldSettings
	s.Steps, s.MaxStaleness, s.Seed = 4, 1, 5
	var out bytes.Buffer
	err := goldTrain(data, runID, s, &out)
	t.Logf("run:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"step 1/4: learner step 1 → policy v1", "step 2/4: 1 group(s) at staleness [1] (policy v1; at most 1), 0 dropped",
		"step 2/4: learner step 2 → policy v2", "step 3/4: group of task", "is 2 version(s) behind v2 (max 1): dropped, not trained on",
		"step 3/4: learner: every group was dropped as stale", "step 4/4: learner: every group was dropped as stale"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q", want)
		}
	}
	db, err := persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	run, err := db.Runs().Get(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	m := run.GetMetrics()
	if run.Step != 4 || m[trainer.MetricEpisodes] != 8 || m[trainer.MetricUpdates] != 2 || m[trainer.MetricLearnerStep] != 2 || m[trainer.MetricPolicyVersion] != 2 ||
		m[trainer.MetricStaleDropped] != 2 || m[trainer.MetricMaxStaleness] != 2 || m[trainer.MetricNoSignal] != 2 {
		t.Fatalf("record: step %d, %v", run.Step, m)
	}
	for _, p := range run.GetCurve() {
		if p.GetPhase() != trainer.PhaseStep {
			continue
		}
		want := map[int64][2]float64{1: {0, 0}, 2: {0, 1}, 3: {1, 2}, 4: {1, 2}}[p.GetStep()]
		if got := [2]float64{p.GetMetrics()[trainer.PointStaleDropped], p.GetMetrics()[trainer.PointMaxStaleness]}; got != want {
			t.Fatalf("step %d's point: dropped, max staleness %v, want %v", p.GetStep(), got, want)
		}
	}
}

// TestTrainStepPublishesAndResumes trains with a policy whose groups have
// mixed rewards (one episode is the task's gold fix, the other the real
// Sampler's answer) in a real process, so that the real Learner takes a
// GRPO step on SmolLM2-135M, publishes policy v1 in the checkpoint store
// and the node's Sampler moves to it; it SIGKILLs that process during step
// 2, then resumes the run with frognano run --run: the Learner reopens
// from its checkpoint at step 1 (policy v1), the new node's Sampler loads
// v1 before any episode, and step 2's episodes are played with v1.
func TestTrainStepPublishesAndResumes(t *testing.T) {
	trainPrereqs(t)
	proj := writeArith(t, "pubarith")
	data := t.TempDir()
	const runID = "test-publish"
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, "", append(args, "--data-dir", data, "--log-level", "warn")...)
		if err != nil {
			t.Fatalf("frognano %s: %v\n%s\n%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	cli("env", "add", proj, "--min-tests", "1")
	defer runCLI(t, "", "env", "rm", "pubarith", "--data-dir", data, "--log-level", "warn")
	cli("synth", "--env", "pubarith", "--count", "1", "--seed", "1", "--hint-level", "2")

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=gold", childEnv+"_DATA="+data, childEnv+"_RUNID="+runID)
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	child.Stderr = &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	var before strings.Builder
	killed := false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		before.WriteString(line + "\n")
		if strings.HasPrefix(line, "step 2/2: rollouts:") {
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true
			break
		}
	}
	_ = child.Wait()
	t.Logf("before the kill:\n%s", before.String())
	if !killed {
		t.Fatalf("the child ended before step 2:\n%s", stderr.String())
	}
	for _, want := range []string{"step 1/2: rollouts done in", "1/2 solved", "1 of 1 group(s) with mixed rewards", "step 1/2: learner step 1 → policy v1",
		"sampler: now serves policy v1 of run " + runID} {
		if !strings.Contains(before.String(), want) {
			t.Fatalf("output lacks %q", want)
		}
	}

	// What the killed process left: the publication, the full checkpoint
	// of step 1, the frontier's outcomes, the record at step 1.
	ctx := context.Background()
	db, err := persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := db.Checkpoints().Latest(ctx, runID)
	if err != nil || pub.GetPolicyVersion() != 1 || pub.GetStep() != 1 {
		t.Fatalf("publication: %v, %v", pub, err)
	}
	if full, err := db.Checkpoints().Latest(ctx, runID+"/train"); err != nil || full.GetStep() != 1 {
		t.Fatalf("full checkpoint: %v, %v", full, err)
	}
	st, err := db.Frontier().Get(ctx, runID)
	if err != nil || st.GetReports() != 1 || st.GetTotalEffectiveGroups() != 1 {
		t.Fatalf("frontier state: reports %d, effective groups %d, %v", st.GetReports(), st.GetTotalEffectiveGroups(), err)
	}
	run, err := db.Runs().Get(ctx, runID)
	if err != nil || run.Step != 1 || run.Metrics[trainer.MetricPolicyVersion] != 1 || run.Metrics[trainer.MetricLearnerStep] != 1 ||
		run.Metrics[trainer.MetricUpdates] != 1 || run.Metrics[trainer.MetricSolved] != 1 {
		t.Fatalf("run record: %v, %v", run, err)
	}
	trajs, err := db.Trajectories().ListByRun(ctx, runID)
	db.Close()
	if err != nil || len(trajs) < 2 {
		t.Fatalf("trajectories: %d, %v", len(trajs), err)
	}
	// Where the rollouts' time went: the record's episode totals are the
	// stored episodes' own seconds.
	var gen, sandbox float64
	for _, tr := range trajs {
		gen += tr.GetGenerationSeconds()
		sandbox += tr.GetSandboxSeconds()
	}
	if m := run.GetMetrics(); math.Abs(m[trainer.MetricEpisodeGeneration]-gen) > 1e-6 || math.Abs(m[trainer.MetricEpisodeSandbox]-sandbox) > 1e-6 ||
		gen <= 0 || sandbox <= 0 || m[trainer.MetricEpisodeGrading] <= 0 || m[trainer.MetricEpisodeGrading] > sandbox {
		t.Fatalf("episode seconds: generation %v, sandbox %v, grading %v; the %d trajectories hold %v and %v",
			m[trainer.MetricEpisodeGeneration], m[trainer.MetricEpisodeSandbox], m[trainer.MetricEpisodeGrading], len(trajs), gen, sandbox)
	}

	// Resume through the CLI, with the node's own Sampler as the policy.
	out, errOut, err := runCLI(t, "", "run", "--data-dir", data, "--log-level", "warn", "--jobs", "2", "--rounds", "10", "--env", proj, "--tasks", "0", "--run", runID)
	t.Logf("resumed:\n%s", out)
	if err != nil {
		t.Fatalf("resume: %v\n%s", err, errOut)
	}
	for _, want := range []string{"resuming run " + runID + " (running) after step 1 of 2", "at step 1, policy v1 (resumed from a checkpoint: true)",
		"sampler: now serves policy v1 of run " + runID, "step 2/2: batch of 1 task(s) from the frontier at policy v1", "step 2/2: frontier recorded 2 of 2 outcome(s)",
		"run " + runID + " done"} {
		if !strings.Contains(out, want) {
			t.Fatalf("resumed output lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(out, "step 1/2") {
		t.Fatalf("the resumed run replayed step 1")
	}
	db, err = persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	run, err = db.Runs().Get(ctx, runID)
	if err != nil || run.Status != "done" || run.Step != 2 || run.Metrics[trainer.MetricEpisodes] != 4 || run.Metrics[trainer.MetricLearnerStep] < 1 {
		t.Fatalf("final record: %v, %v", run, err)
	}
	trajs, err = db.Trajectories().ListByRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	atV1 := 0
	for _, tr := range trajs {
		if tr.PolicyVersion == 1 {
			atV1++
		}
	}
	if atV1 < 2 {
		t.Fatalf("%d trajectories of policy v1 after the resume (want step 2's two)", atV1)
	}
}

// TestRunOnSeveralEnvironmentsWithABudget: --env takes several sources,
// each registered and synthesized from; a spent --budget ends the run
// before its first step, recorded as done and budget-spent, and a resume
// trains nothing more.
func TestRunOnSeveralEnvironmentsWithABudget(t *testing.T) {
	trainPrereqs(t)
	one, two := writeArith(t, "budgetone"), writeArith(t, "budgettwo")
	data := t.TempDir()
	const runID = "test-budget"
	defer runCLI(t, "", "env", "rm", "budgetone", "--data-dir", data, "--log-level", "warn")
	defer runCLI(t, "", "env", "rm", "budgettwo", "--data-dir", data, "--log-level", "warn")
	args := []string{"run", "--data-dir", data, "--log-level", "warn", "--jobs", "2", "--rounds", "10", "--env", one + "," + two, "--tasks", "1",
		"--steps", "50", "--budget", "1ns", "--tasks-per-step", "1", "--group", "2", "--max-turn-tokens", "16", "--parallel", "2", "--run", runID, "--seed", "3"}
	out, errOut, err := runCLI(t, "", args...)
	if err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out, errOut)
	}
	for _, s := range []string{"environment budgetone:", "environment budgettwo:", "of budgetone at hint level 1", "of budgettwo at hint level 1",
		"after step 0 of at most 50: the run ends here", "run " + runID + " done"} {
		if !strings.Contains(out, s) {
			t.Fatalf("output lacks %q:\n%s\n%s", s, out, errOut)
		}
	}
	if strings.Contains(out, "step 1/50") {
		t.Fatalf("a step started after the budget was spent:\n%s", out)
	}
	out, errOut, err = runCLI(t, "", "run", "--data-dir", data, "--log-level", "warn", "--jobs", "2", "--rounds", "10", "--env", one+","+two, "--run", runID)
	if err != nil || strings.Contains(out, "step 1/50") || strings.Contains(out, "synthesized") {
		t.Fatalf("resuming a run whose budget is spent trained or synthesized: %v\n%s\n%s", err, out, errOut)
	}
	db, err := persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	run, err := db.Runs().Get(context.Background(), runID)
	if err != nil || run.Status != "done" || run.Step != 0 || run.Metrics[trainer.MetricBudgetSpent] != 1 || run.Metrics["tasks_synthesized"] != 2 {
		t.Fatalf("record: %v, %v", run, err)
	}
	s, err := trainer.DecodeSettings(run)
	if err != nil || s.BudgetSeconds != 1e-9 {
		t.Fatalf("stored settings %+v, %v: want the 1 ns budget", s, err)
	}
}

// TestAsyncThroughput measures, only when FROGNANO_MEASURE_ASYNC is set,
// training episodes per hour of the same run with synchronous and with
// asynchronous steps (--max-staleness 3): goldOrSampler gives every group
// mixed rewards, so the real Learner takes a GRPO step on SmolLM2-135M at
// every step, which the asynchronous run overlaps with the next steps'
// rollouts. It checks that both runs take the same steps, episodes and
// updates, and logs the rates and the machine's load; it asserts nothing
// about speed.
func TestAsyncThroughput(t *testing.T) {
	if os.Getenv("FROGNANO_MEASURE_ASYNC") == "" {
		t.Skip("a measurement: set FROGNANO_MEASURE_ASYNC=1 to run it")
	}
	trainPrereqs(t)
	proj := writeArith(t, "tputarith")
	data := t.TempDir()
	cli := func(args ...string) {
		t.Helper()
		out, errOut, err := runCLI(t, "", append(args, "--data-dir", data, "--log-level", "warn")...)
		if err != nil {
			t.Fatalf("frognano %s: %v\n%s\n%s", strings.Join(args, " "), err, out, errOut)
		}
	}
	cli("env", "add", proj, "--min-tests", "1")
	defer runCLI(t, "", "env", "rm", "tputarith", "--data-dir", data, "--log-level", "warn")
	cli("synth", "--env", "tputarith", "--count", "1", "--seed", "1", "--hint-level", "2")
	load := func() string { b, _ := os.ReadFile("/proc/loadavg"); return strings.TrimSpace(string(b)) }
	rates := map[int]float64{}
	for _, staleness := range []int{0, 3} {
		s := goldSettings
		s.Steps, s.Group, s.MaxStaleness, s.Seed = 4, 4, staleness, 5
		runID := fmt.Sprintf("tput-%d", staleness)
		var out bytes.Buffer
		before := load()
		start := time.Now()
		err := goldTrain(data, runID, s, &out)
		wall := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v\n%s", runID, err, out.String())
		}
		db, err := persistence.Open(filepath.Join(data, "db"))
		if err != nil {
			t.Fatal(err)
		}
		run, err := db.Runs().Get(context.Background(), runID)
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		m := run.GetMetrics()
		if run.Step != 4 || m[trainer.MetricEpisodes] != 16 || m[trainer.MetricUpdates] != 4 || m[trainer.MetricStaleDropped] != 0 {
			t.Fatalf("%s: step %d, %v\n%s", runID, run.Step, m, out.String())
		}
		rates[staleness] = m[trainer.MetricEpisodes] / wall.Hours()
		t.Logf("max staleness %d: %v episodes, %v updates in %.0fs (rollouts %.0fs, learning %.0fs): %.0f episodes/hour; max staleness seen %v; load before %s, after %s",
			staleness, m[trainer.MetricEpisodes], m[trainer.MetricUpdates], wall.Seconds(), m[trainer.MetricSecondsRollouts], m[trainer.MetricSecondsLearning],
			rates[staleness], m[trainer.MetricMaxStaleness], before, load())
	}
	t.Logf("asynchronous / synchronous episodes per hour: %.2f", rates[3]/rates[0])
}

// openAfterKill opens the store of a process the test has just SIGKILLed
// and reaped. Its directory lock goes with the process, but under load the
// kernel may finish releasing it a moment after the reap (CI saw "in use by
// another process" once): retry that one error for a while, and name any
// process that still holds the directory if it does not clear.
func openAfterKill(t *testing.T, dir string) (*persistence.DB, error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		db, err := persistence.Open(dir)
		if !errors.Is(err, persistence.ErrLocked) || time.Now().After(deadline) {
			if errors.Is(err, persistence.ErrLocked) {
				err = fmt.Errorf("%w (held by: %s)", err, holdersOf(dir))
			}
			return db, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// holdersOf lists the processes with a descriptor on dir or a file in it.
func holdersOf(dir string) string {
	abs, _ := filepath.Abs(dir)
	var out []string
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		target, err := os.Readlink(fd)
		if err != nil || !(target == abs || strings.HasPrefix(target, abs+"/")) {
			continue
		}
		pid := strings.Split(fd, "/")[2]
		cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		out = append(out, fmt.Sprintf("pid %s (%s) %s", pid, strings.ReplaceAll(string(cmd), "\x00", " "), target))
	}
	if len(out) == 0 {
		return "no process has it open"
	}
	return strings.Join(out, "; ")
}
