//go:build unix

package persistence

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// The crash test runs a writer in a child process, SIGKILLs it at a random
// moment, reopens the database and checks it against a model built only from
// what the child acknowledged. The child prints "I <op>" before each write
// and "A <op>" after the write returned nil, so after a kill the model knows
// every acknowledged write and at most one write whose outcome is unknown.
const (
	crashDirEnv   = "FROGNANO_PERSISTENCE_CRASH_DIR"
	crashSeedEnv  = "FROGNANO_PERSISTENCE_CRASH_SEED"
	crashRoundEnv = "FROGNANO_PERSISTENCE_CRASH_ROUND"
	crashRun      = "run-1"
	crashKeep     = 3
	// crashWriteKills are kills while the child writes (after "ready"),
	// 50-400 ms in; crashOpenKills land while the child starts and opens
	// the database.
	crashWriteKills = 25
	crashOpenKills  = 5
)

// crashOptions are shared by child and parent: 64 KiB chunks go to the value
// log, 4 MiB value-log files rotate during the test, and 128 KiB checkpoint
// transactions make every checkpoint span several transactions.
func openCrashDB(dir string, log *slog.Logger) (*DB, error) {
	db, err := Open(dir, WithLogger(log), WithChunkSize(64<<10), smallFiles)
	if err != nil {
		return nil, err
	}
	db.ckptTxnBytes = 128 << 10
	return db, nil
}

// crashTensors are the tensors of checkpoint step: sizes vary with the step
// (2-6 chunks each) and bytes are derived from it, so the parent can
// regenerate them.
func crashTensors(step int64) (weights, optimizer []Tensor) {
	n := 20_000 + int(step*7919%50_000)
	weights = []Tensor{
		f32Tensor("model.embed", uint64(step), n),
		{Name: "model.norm", DType: records.DType_DTYPE_BF16, Shape: []int64{64}, Data: seeded(uint64(step), "norm", 128)},
	}
	optimizer = []Tensor{f32Tensor("adam.m.embed", uint64(step)+1, n), f32Tensor("adam.v.embed", uint64(step)+2, n)}
	return weights, optimizer
}

func crashManifest(step int64) *records.Checkpoint {
	return &records.Checkpoint{
		RunId: crashRun, Step: step, PolicyVersion: step,
		RngState: seeded(uint64(step), "rng", 32),
		Model:    &records.ModelConfig{Architecture: "llama", HiddenSize: 576, Layers: 30},
	}
}

// TestCrashChild is not a test: it is the writer process of
// TestCrashRecovery, and writes until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashRecovery")
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	round, _ := strconv.ParseUint(os.Getenv(crashRoundEnv), 10, 64)
	time.AfterFunc(30*time.Second, func() { os.Exit(3) }) // if the parent is gone
	fail := func(err error) {
		fmt.Println("E", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(2)
	}
	ctx := context.Background()
	db, err := openCrashDB(dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fail(err)
	}
	tasks, err := db.Tasks().List(ctx, TaskFilter{})
	if err != nil {
		fail(err)
	}
	known := ids(tasks)
	// The child is the only writer, so what it last committed is what
	// the store holds.
	stats := map[string]*records.TaskStats{}
	committed, err := db.Frontier().Stats(ctx, DefaultFrontier)
	if err != nil {
		fail(err)
	}
	for _, st := range committed {
		stats[st.GetTaskId()] = st
	}
	step := int64(1)
	if latest, err := db.Checkpoints().Latest(ctx, crashRun); err == nil {
		step = latest.GetStep() + 1
	} else if !errors.Is(err, ErrNotFound) {
		fail(err)
	}
	fmt.Println("ready")

	rng := rand.New(rand.NewPCG(seed, round))
	for i := 0; ; i++ {
		var op []string
		var write func() error
		switch p := rng.IntN(100); {
		case p < 30 || len(known) == 0:
			id, env := fmt.Sprintf("r%d-t%d", round, i), fmt.Sprintf("env-%d", rng.IntN(4))
			op = []string{"task", id, env}
			write = func() error { return db.Tasks().Put(ctx, sampleTask(id, env)) }
			known = append(known, id)
		case p < 40:
			// Move an existing task to another environment: the index
			// entry must move with it, atomically.
			id, env := known[rng.IntN(len(known))], fmt.Sprintf("env-%d", rng.IntN(4))
			op = []string{"task", id, env}
			write = func() error { return db.Tasks().Put(ctx, sampleTask(id, env)) }
		case p < 65:
			id, task := fmt.Sprintf("r%d-j%d", round, i), known[rng.IntN(len(known))]
			op = []string{"traj", id, task}
			write = func() error { return db.Trajectories().Append(ctx, sampleTrajectory(id, crashRun, task)) }
		case p < 86:
			task, success := fmt.Sprintf("c-%d", rng.IntN(5)), rng.IntN(2)
			op = []string{"stat", task, strconv.Itoa(success)}
			write = func() error {
				st := &records.TaskStats{TaskId: task}
				if old := stats[task]; old != nil {
					st = clone(old)
				}
				st.Attempts++
				st.Successes += int64(success)
				st.Alpha, st.Beta = float64(1+st.Successes), float64(1+st.Attempts-st.Successes)
				if err := db.Frontier().Commit(ctx, DefaultFrontier, nil, []*records.TaskStats{st}); err != nil {
					return err
				}
				stats[task] = st
				return nil
			}
		case p < 96:
			s := step
			op = []string{"ckpt", strconv.FormatInt(s, 10)}
			write = func() error {
				w, o := crashTensors(s)
				return db.Checkpoints().Save(ctx, crashManifest(s), w, o)
			}
			step++
		default:
			op = []string{"prune", strconv.Itoa(crashKeep)}
			write = func() error { _, err := db.Checkpoints().Prune(ctx, crashRun, crashKeep); return err }
		}
		line := strings.Join(op, " ")
		fmt.Println("I", line)
		if err := write(); err != nil {
			fail(fmt.Errorf("%s: %w", line, err))
		}
		fmt.Println("A", line)
	}
}

// crashModel is what the database must hold, built from acknowledgements.
type crashModel struct {
	tasks        map[string]string   // id -> environment
	trajs        map[string]string   // id -> task id
	stats        map[string][2]int64 // task id -> attempts, successes
	steps        []int64             // checkpoint steps present
	acked        map[string]int      // acknowledged writes per kind
	maxAckedStep int64
}

func newCrashModel() *crashModel {
	return &crashModel{
		tasks: map[string]string{}, trajs: map[string]string{}, stats: map[string][2]int64{},
		acked: map[string]int{}, maxAckedStep: -1,
	}
}

func (m *crashModel) clone() *crashModel {
	return &crashModel{
		tasks: maps.Clone(m.tasks), trajs: maps.Clone(m.trajs), stats: maps.Clone(m.stats),
		steps: slices.Clone(m.steps), acked: maps.Clone(m.acked), maxAckedStep: m.maxAckedStep,
	}
}

// apply records one write the database now holds.
func (m *crashModel) apply(op []string) error {
	switch op[0] {
	case "task":
		m.tasks[op[1]] = op[2]
	case "traj":
		m.trajs[op[1]] = op[2]
	case "stat":
		s := m.stats[op[1]]
		s[0]++
		if op[2] == "1" {
			s[1]++
		}
		m.stats[op[1]] = s
	case "ckpt":
		step, _ := strconv.ParseInt(op[1], 10, 64)
		if step <= m.maxAckedStep {
			return fmt.Errorf("checkpoint step %d acknowledged after step %d: steps must only increase", step, m.maxAckedStep)
		}
		m.maxAckedStep = step
		m.steps = append(m.steps, step)
	case "prune":
		keep, _ := strconv.Atoi(op[1])
		if len(m.steps) > keep {
			m.steps = m.steps[len(m.steps)-keep:]
		}
	default:
		return fmt.Errorf("unknown op %q", op)
	}
	m.acked[op[0]]++
	return nil
}

// compare returns the first difference between the database and the model.
func (m *crashModel) compare(t *testing.T, ctx context.Context, db *DB) error {
	tasks, err := db.Tasks().List(ctx, TaskFilter{})
	if err != nil {
		return err
	}
	got := map[string]string{}
	for _, task := range tasks {
		got[task.GetId()] = task.GetEnvironment()
		if !sameProto(t, task, sampleTask(task.GetId(), task.GetEnvironment())) {
			return fmt.Errorf("task %s is not byte-identical to what was written", task.GetId())
		}
	}
	if !maps.Equal(got, m.tasks) {
		return fmt.Errorf("tasks: %d stored, %d expected (first difference %s)", len(got), len(m.tasks), firstDiff(got, m.tasks))
	}
	for env := range 4 {
		name := fmt.Sprintf("env-%d", env)
		var want []string
		for id, e := range m.tasks {
			if e == name {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		list, err := db.Tasks().List(ctx, TaskFilter{Environment: name})
		if err != nil {
			return err
		}
		if !slices.Equal(ids(list), want) {
			return fmt.Errorf("environment %s lists %v, want %v", name, ids(list), want)
		}
	}

	trajs, err := db.Trajectories().ListByRun(ctx, crashRun)
	if err != nil {
		return err
	}
	gotTrajs := map[string]string{}
	for _, tr := range trajs {
		gotTrajs[tr.GetId()] = tr.GetTaskId()
		if !sameProto(t, tr, sampleTrajectory(tr.GetId(), crashRun, tr.GetTaskId())) {
			return fmt.Errorf("trajectory %s is not byte-identical to what was written", tr.GetId())
		}
	}
	if !maps.Equal(gotTrajs, m.trajs) {
		return fmt.Errorf("trajectories: %d stored, %d expected (first difference %s)", len(gotTrajs), len(m.trajs), firstDiff(gotTrajs, m.trajs))
	}

	stats, err := db.Frontier().Stats(ctx, DefaultFrontier)
	if err != nil {
		return err
	}
	gotStats := map[string][2]int64{}
	for _, st := range stats {
		gotStats[st.GetTaskId()] = [2]int64{st.GetAttempts(), st.GetSuccesses()}
		if st.GetSuccesses() > st.GetAttempts() || st.GetAlpha() != float64(1+st.GetSuccesses()) ||
			st.GetBeta() != float64(1+st.GetAttempts()-st.GetSuccesses()) {
			return fmt.Errorf("stats of %s are inconsistent: %v", st.GetTaskId(), st)
		}
	}
	if !maps.Equal(gotStats, m.stats) {
		return fmt.Errorf("task stats counters %v, want %v", gotStats, m.stats)
	}

	steps, err := db.Checkpoints().Steps(ctx, crashRun)
	if err != nil {
		return err
	}
	if !slices.Equal(steps, m.steps) {
		return fmt.Errorf("checkpoint steps %v, want %v", steps, m.steps)
	}
	if len(steps) > 0 {
		latest, err := db.Checkpoints().Latest(ctx, crashRun)
		if err != nil || latest.GetStep() != steps[len(steps)-1] {
			return fmt.Errorf("Latest = %v, %v; want step %d", latest.GetStep(), err, steps[len(steps)-1])
		}
	}
	for _, step := range steps {
		manifest, err := db.Checkpoints().Load(ctx, crashRun, step)
		if err != nil {
			return err
		}
		want := crashManifest(step)
		if manifest.GetPolicyVersion() != step || !bytes.Equal(manifest.GetRngState(), want.GetRngState()) {
			return fmt.Errorf("manifest of step %d differs: %v", step, manifest)
		}
		w, o := crashTensors(step)
		for _, tensor := range append(w, o...) {
			data, err := db.Checkpoints().ReadTensor(ctx, crashRun, step, tensor.Name)
			if err != nil {
				return err
			}
			if !bytes.Equal(data, tensor.Data) {
				return fmt.Errorf("tensor %s of step %d differs from what was written", tensor.Name, step)
			}
		}
	}
	return nil
}

func firstDiff[V comparable](got, want map[string]V) string {
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return fmt.Sprintf("%s: stored %v (present %v), want %v", k, g, ok, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			return fmt.Sprintf("%s: stored %v, never acknowledged or in flight", k, v)
		}
	}
	return "none"
}

// crashChild is one run of the writer: its output lines and its stderr.
type crashChild struct {
	lines  []string
	stderr bytes.Buffer
}

// runCrashChild starts the writer and kills it delay after it is ready (or,
// when beforeReady, delay after it starts).
func runCrashChild(t *testing.T, dir string, seed uint64, round int, delay time.Duration, beforeReady bool) *crashChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1", "-test.timeout=60s")
	cmd.Env = append(os.Environ(),
		crashDirEnv+"="+dir, crashSeedEnv+"="+strconv.FormatUint(seed, 10), crashRoundEnv+"="+strconv.Itoa(round))
	child := &crashChild{}
	cmd.Stderr = &child.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Only this goroutine touches child.lines until done is closed.
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			child.lines = append(child.lines, sc.Text())
			if sc.Text() == "ready" {
				close(ready)
			}
		}
	}()
	if !beforeReady {
		select {
		case <-ready:
		case <-done:
		case <-time.After(20 * time.Second):
		}
	}
	time.Sleep(delay)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: child did not die by SIGKILL (%v); its output ends %q; stderr:\n%s",
			round, err, child.lines[max(0, len(child.lines)-3):], child.stderr.String())
	}
	return child
}

func TestCrashRecovery(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", crashSeedEnv, s, err)
		}
	}
	t.Logf("seed %d (rerun with %s=%d)", seed, crashSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := context.Background()
	dir := t.TempDir()
	model := newCrashModel()
	inFlight := map[string]int{}
	start := time.Now()

	for round := range crashWriteKills + crashOpenKills {
		// Every sixth kill lands while the child starts up and opens
		// the database; the others while it writes.
		beforeReady := round%6 == 5
		delay := time.Duration(50+rng.IntN(351)) * time.Millisecond
		if beforeReady {
			delay = time.Duration(rng.IntN(60)) * time.Millisecond
		}
		child := runCrashChild(t, dir, seed, round, delay, beforeReady)

		var pending []string
		for _, line := range child.lines {
			kind, rest, _ := strings.Cut(line, " ")
			switch kind {
			case "E":
				t.Fatalf("round %d: child failed: %s\nstderr:\n%s", round, rest, child.stderr.String())
			case "I":
				if pending != nil {
					t.Fatalf("round %d: intent %q while %q is unacknowledged", round, rest, pending)
				}
				pending = strings.Fields(rest)
			case "A":
				if strings.Join(pending, " ") != rest {
					t.Fatalf("round %d: acknowledgement %q does not match intent %q", round, rest, pending)
				}
				if err := model.apply(pending); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				pending = nil
			}
		}

		db, err := openCrashDB(dir, testLogger(t))
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		if err := db.CheckConsistency(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		// The write in flight at the kill either happened or did not;
		// nothing else may differ from the acknowledged history.
		errBefore := model.compare(t, ctx, db)
		if errBefore != nil && pending != nil {
			after := model.clone()
			if err := after.apply(pending); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if errAfter := after.compare(t, ctx, db); errAfter == nil {
				model, errBefore = after, nil
				inFlight[pending[0]+" (landed)"]++
			} else {
				t.Errorf("round %d: in-flight %q applied: %v", round, pending, errAfter)
			}
		} else if pending != nil {
			inFlight[pending[0]+" (lost)"]++
		}
		if err := db.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		if errBefore != nil {
			t.Fatalf("round %d (killed %v after %s): %v", round, delay,
				map[bool]string{true: "start", false: "ready"}[beforeReady], errBefore)
		}
	}
	t.Logf("%d kills in %v; acknowledged writes %v; writes in flight at a kill %v",
		crashWriteKills+crashOpenKills, time.Since(start).Round(time.Millisecond), model.acked, inFlight)
	for _, kind := range []string{"task", "traj", "stat", "ckpt"} {
		if model.acked[kind] == 0 {
			t.Errorf("no %s write was acknowledged in %d rounds; the test exercised nothing", kind, crashWriteKills)
		}
	}
}
