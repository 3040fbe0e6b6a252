package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// implementations lists every Stores implementation; each must pass every
// conformance case.
var implementations = []struct {
	name string
	open func(t *testing.T) Stores
}{
	{"badger", func(t *testing.T) Stores { return openTestDB(t) }},
	{"memory", func(t *testing.T) Stores { return NewMemory() }},
}

var conformanceCases = []struct {
	name string
	run  func(t *testing.T, s Stores)
}{
	{"TaskPutGet", testTaskPutGet},
	{"TaskInvalid", testTaskInvalid},
	{"TaskPutIdempotentAndMovesEnvironment", testTaskPutIdempotent},
	{"TaskListOrderAndFilter", testTaskListOrderAndFilter},
	{"TaskDelete", testTaskDelete},
	{"TaskPutMany", testTaskPutMany},
	{"Runs", testRuns},
	{"Evaluations", testEvaluations},
	{"Environments", testEnvironments},
	{"Trajectories", testTrajectories},
	{"CheckpointSaveLoad", testCheckpointSaveLoad},
	{"CheckpointInvalid", testCheckpointInvalid},
	{"CheckpointStepsIncrease", testCheckpointStepsIncrease},
	{"CheckpointPrune", testCheckpointPrune},
	{"Coverage", testCoverage},
	{"Frontier", testFrontier},
	{"FrontierConcurrentCommits", testFrontierConcurrentCommits},
	{"SandboxDestroys", testSandboxDestroys},
	{"CanceledContext", testCanceledContext},
}

func TestConformance(t *testing.T) {
	for _, impl := range implementations {
		t.Run(impl.name, func(t *testing.T) {
			for _, c := range conformanceCases {
				t.Run(c.name, func(t *testing.T) { c.run(t, impl.open(t)) })
			}
		})
	}
}

func ids[T interface{ GetId() string }](xs []T) []string {
	out := []string{}
	for _, x := range xs {
		out = append(out, x.GetId())
	}
	return out
}

func testTaskPutGet(t *testing.T, s Stores) {
	ctx := context.Background()
	want := sampleTask("t1", "env-a")
	if err := s.Tasks().Put(ctx, want); err != nil {
		t.Fatalf("Put: %v", err)
	}
	got, err := s.Tasks().Get(ctx, "t1")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !sameProto(t, got, want) {
		t.Errorf("Get = %v, want %v", got, want)
	}
	got.ProblemStatement = "mutated by the caller"
	again, _ := s.Tasks().Get(ctx, "t1")
	if !sameProto(t, again, want) {
		t.Errorf("mutating a returned task changed the store")
	}
	if _, err := s.Tasks().Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
}

func testTaskInvalid(t *testing.T, s Stores) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		task *records.Task
	}{
		{"nil", nil},
		{"empty id", &records.Task{Environment: "e"}},
		{"NUL in id", &records.Task{Id: "a\x00b"}},
		{"NUL in environment", &records.Task{Id: "a", Environment: "e\x00"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Tasks().Put(ctx, tc.task); !errors.Is(err, ErrInvalid) {
				t.Errorf("Put = %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := s.Tasks().Get(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Get(\"\") = %v, want ErrInvalid", err)
	}
	if n, err := s.Tasks().Count(ctx, TaskFilter{}); err != nil || n != 0 {
		t.Errorf("Count after invalid puts = %d, %v; want 0", n, err)
	}
}

func testTaskPutIdempotent(t *testing.T, s Stores) {
	ctx := context.Background()
	task := sampleTask("t1", "env-a")
	for range 3 {
		if err := s.Tasks().Put(ctx, task); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	if n, err := s.Tasks().Count(ctx, TaskFilter{}); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want 1", n, err)
	}
	moved := sampleTask("t1", "env-b")
	if err := s.Tasks().Put(ctx, moved); err != nil {
		t.Fatalf("Put moved: %v", err)
	}
	for _, tc := range []struct {
		env  string
		want []string
	}{
		{"env-a", []string{}},
		{"env-b", []string{"t1"}},
		{"", []string{"t1"}},
	} {
		got, err := s.Tasks().List(ctx, TaskFilter{Environment: tc.env})
		if err != nil {
			t.Fatalf("List(%q): %v", tc.env, err)
		}
		if !slices.Equal(ids(got), tc.want) {
			t.Errorf("List(%q) = %v, want %v", tc.env, ids(got), tc.want)
		}
		n, err := s.Tasks().Count(ctx, TaskFilter{Environment: tc.env})
		if err != nil || n != len(tc.want) {
			t.Errorf("Count(%q) = %d, %v; want %d", tc.env, n, err, len(tc.want))
		}
	}
}

func testTaskListOrderAndFilter(t *testing.T, s Stores) {
	ctx := context.Background()
	// Put in an order that is neither sorted nor grouped by environment.
	for _, p := range []struct{ id, env string }{
		{"t5", "a"}, {"t1", "b"}, {"t3", "a"}, {"t2", "a"}, {"t4", "b"}, {"t0", "c"},
	} {
		if err := s.Tasks().Put(ctx, sampleTask(p.id, p.env)); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	for _, tc := range []struct {
		env  string
		want []string
	}{
		{"", []string{"t0", "t1", "t2", "t3", "t4", "t5"}},
		{"a", []string{"t2", "t3", "t5"}},
		{"b", []string{"t1", "t4"}},
		{"c", []string{"t0"}},
		{"none", []string{}},
		// "a" must not match an environment that merely starts with "a".
		{"a-longer", []string{}},
	} {
		got, err := s.Tasks().List(ctx, TaskFilter{Environment: tc.env})
		if err != nil {
			t.Fatalf("List(%q): %v", tc.env, err)
		}
		if !slices.Equal(ids(got), tc.want) {
			t.Errorf("List(%q) = %v, want %v", tc.env, ids(got), tc.want)
		}
		for _, task := range got {
			if !sameProto(t, task, sampleTask(task.GetId(), task.GetEnvironment())) {
				t.Errorf("List(%q) returned a different record for %s", tc.env, task.GetId())
			}
		}
		if n, err := s.Tasks().Count(ctx, TaskFilter{Environment: tc.env}); err != nil || n != len(tc.want) {
			t.Errorf("Count(%q) = %d, %v; want %d", tc.env, n, err, len(tc.want))
		}
	}
}

func testTaskDelete(t *testing.T, s Stores) {
	ctx := context.Background()
	for _, id := range []string{"t1", "t2"} {
		if err := s.Tasks().Put(ctx, sampleTask(id, "env")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Tasks().Delete(ctx, "t1"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := s.Tasks().Delete(ctx, "t1"); err != nil {
		t.Errorf("Delete of a deleted task = %v, want nil", err)
	}
	if _, err := s.Tasks().Get(ctx, "t1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	got, err := s.Tasks().List(ctx, TaskFilter{Environment: "env"})
	if err != nil || !slices.Equal(ids(got), []string{"t2"}) {
		t.Errorf("List(env) after Delete = %v, %v; want [t2]", ids(got), err)
	}
}

func testTaskPutMany(t *testing.T, s Stores) {
	ctx := context.Background()
	var tasks []*records.Task
	var want []string
	for i := range 200 {
		id := fmt.Sprintf("t%03d", i)
		tasks = append(tasks, sampleTask(id, fmt.Sprintf("env-%d", i%4)))
		want = append(want, id)
	}
	bad := slices.Clone(tasks)
	bad[150] = &records.Task{}
	if err := s.Tasks().PutMany(ctx, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("PutMany with an invalid task = %v, want ErrInvalid", err)
	}
	if n, _ := s.Tasks().Count(ctx, TaskFilter{}); n != 0 {
		t.Errorf("an invalid batch stored %d tasks; validation must precede writes", n)
	}
	if err := s.Tasks().PutMany(ctx, tasks); err != nil {
		t.Fatalf("PutMany: %v", err)
	}
	got, err := s.Tasks().List(ctx, TaskFilter{})
	if err != nil || !slices.Equal(ids(got), want) {
		t.Errorf("List after PutMany: %d tasks, %v; want %d", len(got), err, len(want))
	}
	if n, _ := s.Tasks().Count(ctx, TaskFilter{Environment: "env-1"}); n != 50 {
		t.Errorf("Count(env-1) = %d, want 50", n)
	}
}

func testRuns(t *testing.T, s Stores) {
	ctx := context.Background()
	r := s.Runs()
	if _, err := r.Get(ctx, "r1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	if err := r.Put(ctx, &records.Run{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Put without id = %v, want ErrInvalid", err)
	}
	for _, id := range []string{"r2", "r1"} {
		if err := r.Put(ctx, &records.Run{Id: id, Status: "running", Metrics: map[string]float64{"loss": 1.5, "reward": 0.2}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Put(ctx, &records.Run{Id: "r1", Status: "done", Step: 9}); err != nil {
		t.Fatal(err)
	}
	got, err := r.Get(ctx, "r1")
	if err != nil || got.GetStatus() != "done" || got.GetStep() != 9 || len(got.GetMetrics()) != 0 {
		t.Errorf("Get after overwrite = %v, %v", got, err)
	}
	all, err := r.List(ctx)
	if err != nil || !slices.Equal(ids(all), []string{"r1", "r2"}) {
		t.Errorf("List = %v, %v", ids(all), err)
	}
	if all[1].GetMetrics()["loss"] != 1.5 {
		t.Errorf("metrics lost: %v", all[1])
	}
}

func testEvaluations(t *testing.T, s Stores) {
	ctx := context.Background()
	e := s.Evaluations()
	if _, err := e.Get(ctx, "e1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	if err := e.Put(ctx, &records.Evaluation{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Put without id = %v, want ErrInvalid", err)
	}
	if err := e.Put(ctx, &records.Evaluation{Id: "a\x00b"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Put with a NUL in its id = %v, want ErrInvalid", err)
	}
	for _, id := range []string{"e2", "e1"} {
		if err := e.Put(ctx, &records.Evaluation{Id: id, Status: "running", JobJson: `{"k":8}`}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Put(ctx, &records.Evaluation{Id: "e1", Status: "done", ReportJson: `{"episodes":8}`, EpisodesDone: 8}); err != nil {
		t.Fatal(err)
	}
	got, err := e.Get(ctx, "e1")
	if err != nil || got.GetStatus() != "done" || got.GetEpisodesDone() != 8 || got.GetJobJson() != "" {
		t.Errorf("Get after overwrite = %v, %v", got, err)
	}
	all, err := e.List(ctx)
	if err != nil || !slices.Equal(ids(all), []string{"e1", "e2"}) {
		t.Errorf("List = %v, %v", ids(all), err)
	}
	// Evaluations and runs are apart: a run of the same id is another record.
	if _, err := s.Runs().Get(ctx, "e1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an evaluation is visible as a run: %v", err)
	}
}

func testTrajectories(t *testing.T, s Stores) {
	ctx := context.Background()
	ts := s.Trajectories()
	for _, p := range []struct{ id, run, task string }{
		{"j4", "r2", "tA"}, {"j1", "r1", "tB"}, {"j3", "r1", "tA"}, {"j2", "r2", "tA"}, {"j0", "r1", "tA"},
	} {
		if err := ts.Append(ctx, sampleTrajectory(p.id, p.run, p.task)); err != nil {
			t.Fatalf("Append %s: %v", p.id, err)
		}
	}
	if err := ts.Append(ctx, sampleTrajectory("j1", "r1", "tB")); err != nil {
		t.Errorf("identical re-append = %v, want nil", err)
	}
	changed := sampleTrajectory("j1", "r1", "tB")
	changed.Reward = 42
	if err := ts.Append(ctx, changed); !errors.Is(err, ErrExists) {
		t.Errorf("re-append with new content = %v, want ErrExists", err)
	}
	if err := ts.Append(ctx, sampleTrajectory("j1", "r9", "tB")); !errors.Is(err, ErrExists) {
		t.Errorf("re-append under another run = %v, want ErrExists", err)
	}
	for _, bad := range []*records.Trajectory{nil, {Id: "x", TaskId: "t"}, {Id: "x", RunId: "r"}, {TaskId: "t", RunId: "r"}} {
		if err := ts.Append(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Append(%v) = %v, want ErrInvalid", bad, err)
		}
	}
	got, err := ts.Get(ctx, "j1")
	if err != nil || !sameProto(t, got, sampleTrajectory("j1", "r1", "tB")) {
		t.Errorf("Get = %v, %v", got, err)
	}
	if _, err := ts.Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	for _, tc := range []struct {
		name string
		list func() ([]*records.Trajectory, error)
		want []string
	}{
		{"ByTask tA", func() ([]*records.Trajectory, error) { return ts.ListByTask(ctx, "tA") }, []string{"j0", "j3", "j2", "j4"}},
		{"ByTask tB", func() ([]*records.Trajectory, error) { return ts.ListByTask(ctx, "tB") }, []string{"j1"}},
		{"ByTask none", func() ([]*records.Trajectory, error) { return ts.ListByTask(ctx, "t") }, []string{}},
		{"ByRun r1", func() ([]*records.Trajectory, error) { return ts.ListByRun(ctx, "r1") }, []string{"j0", "j3", "j1"}},
		{"ByRun r2", func() ([]*records.Trajectory, error) { return ts.ListByRun(ctx, "r2") }, []string{"j2", "j4"}},
		{"ByRun none", func() ([]*records.Trajectory, error) { return ts.ListByRun(ctx, "r") }, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.list()
			if err != nil || !slices.Equal(ids(got), tc.want) {
				t.Errorf("= %v, %v; want %v", ids(got), err, tc.want)
			}
			for _, tr := range got {
				if !sameProto(t, tr, sampleTrajectory(tr.GetId(), tr.GetRunId(), tr.GetTaskId())) {
					t.Errorf("%s differs from what was appended", tr.GetId())
				}
			}
		})
	}
}

// checkpointTensors are a weights group and an optimizer group with sizes
// that are below, at and above the 1 KiB test chunk size, and empty.
func checkpointTensors(step int64) (weights, optimizer []Tensor) {
	seed := uint64(step)
	weights = []Tensor{
		f32Tensor("embed", seed, 3000), // 12000 bytes: 12 chunks, the last partial
		f32Tensor("norm", seed, 256),   // exactly one chunk
		{Name: "bias.bf16", DType: records.DType_DTYPE_BF16, Shape: []int64{3, 7}, Data: seeded(seed, "bf16", 42)},
		{Name: "empty", DType: records.DType_DTYPE_F16, Shape: []int64{0, 4}},
		{Name: "scalar", DType: records.DType_DTYPE_F32, Data: seeded(seed, "scalar", 4)},
	}
	optimizer = []Tensor{f32Tensor("adam.m.embed", seed+100, 3000), f32Tensor("adam.v.embed", seed+200, 3000)}
	return weights, optimizer
}

func testCheckpointSaveLoad(t *testing.T, s Stores) {
	ctx := context.Background()
	cs := s.Checkpoints()
	if _, err := cs.Latest(ctx, "run"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Latest of an empty run = %v, want ErrNotFound", err)
	}
	weights, optimizer := checkpointTensors(10)
	manifest := &records.Checkpoint{
		RunId: "run", Step: 10, PolicyVersion: 3, RngState: []byte{1, 2, 3},
		Model: &records.ModelConfig{Architecture: "llama", HiddenSize: 64, Layers: 2},
	}
	if err := cs.Save(ctx, manifest, weights, optimizer); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if len(manifest.GetTensors()) != 0 {
		t.Errorf("Save modified the caller's manifest")
	}
	for _, load := range []struct {
		name string
		fn   func() (*records.Checkpoint, error)
	}{
		{"Load", func() (*records.Checkpoint, error) { return cs.Load(ctx, "run", 10) }},
		{"Latest", func() (*records.Checkpoint, error) { return cs.Latest(ctx, "run") }},
	} {
		got, err := load.fn()
		if err != nil {
			t.Fatalf("%s: %v", load.name, err)
		}
		if got.GetPolicyVersion() != 3 || !bytes.Equal(got.GetRngState(), []byte{1, 2, 3}) || got.GetModel().GetHiddenSize() != 64 {
			t.Errorf("%s lost manifest fields: %v", load.name, got)
		}
		if len(got.GetTensors()) != len(weights) || len(got.GetOptimizer()) != len(optimizer) {
			t.Fatalf("%s: %d weights %d optimizer tensors, want %d and %d",
				load.name, len(got.GetTensors()), len(got.GetOptimizer()), len(weights), len(optimizer))
		}
		for i, w := range weights {
			meta := got.GetTensors()[i]
			if meta.GetName() != w.Name || meta.GetDtype() != w.DType || !slices.Equal(meta.GetShape(), w.Shape) ||
				meta.GetSizeBytes() != int64(len(w.Data)) {
				t.Errorf("%s: tensor %d meta = %v, want %s %v %v", load.name, i, meta, w.Name, w.DType, w.Shape)
			}
		}
	}
	for _, tensor := range append(weights, optimizer...) {
		got, err := cs.ReadTensor(ctx, "run", 10, tensor.Name)
		if err != nil {
			t.Errorf("ReadTensor(%s): %v", tensor.Name, err)
			continue
		}
		if !bytes.Equal(got, tensor.Data) {
			t.Errorf("ReadTensor(%s): %d bytes differ from the %d saved", tensor.Name, len(got), len(tensor.Data))
		}
	}
	for _, tc := range []struct {
		step int64
		name string
	}{{10, "nope"}, {11, "embed"}} {
		if _, err := cs.ReadTensor(ctx, "run", tc.step, tc.name); !errors.Is(err, ErrNotFound) {
			t.Errorf("ReadTensor(%d, %s) = %v, want ErrNotFound", tc.step, tc.name, err)
		}
	}
	if _, err := cs.Load(ctx, "run", 11); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load(missing step) = %v, want ErrNotFound", err)
	}
}

func testCheckpointInvalid(t *testing.T, s Stores) {
	ctx := context.Background()
	good := f32Tensor("w", 1, 8)
	for _, tc := range []struct {
		name     string
		manifest *records.Checkpoint
		tensors  []Tensor
	}{
		{"nil manifest", nil, nil},
		{"no run id", &records.Checkpoint{Step: 1}, nil},
		{"negative step", &records.Checkpoint{RunId: "r", Step: -1}, nil},
		{"shape too big", &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{{Name: "w", DType: records.DType_DTYPE_F32, Shape: []int64{9}, Data: good.Data}}},
		{"negative dimension", &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{{Name: "w", DType: records.DType_DTYPE_F32, Shape: []int64{-1, -8}, Data: good.Data}}},
		// 4 * (2^62 + 8) wraps to 32 bytes, the length of good.Data.
		{"shape overflows int64", &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{{Name: "w", DType: records.DType_DTYPE_F32, Shape: []int64{1<<62 + 8}, Data: good.Data}}},
		{"no dtype", &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{{Name: "w", Shape: []int64{8}, Data: good.Data}}},
		{"no name", &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{{DType: records.DType_DTYPE_F32, Shape: []int64{8}, Data: good.Data}}},
		{"duplicate name", &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{good, good}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Checkpoints().Save(ctx, tc.manifest, tc.tensors, nil); !errors.Is(err, ErrInvalid) {
				t.Errorf("Save = %v, want ErrInvalid", err)
			}
		})
	}
	// A name shared by a weight and an optimizer tensor is a duplicate too.
	if err := s.Checkpoints().Save(ctx, &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{good}, []Tensor{good}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Save with a name in both groups = %v, want ErrInvalid", err)
	}
	if steps, err := s.Checkpoints().Steps(ctx, "r"); err != nil || len(steps) != 0 {
		t.Errorf("invalid saves left steps %v, %v", steps, err)
	}
}

func testCheckpointStepsIncrease(t *testing.T, s Stores) {
	ctx := context.Background()
	cs := s.Checkpoints()
	save := func(run string, step int64) error {
		w := []Tensor{f32Tensor("w", uint64(step), 300)}
		return cs.Save(ctx, &records.Checkpoint{RunId: run, Step: step}, w, nil)
	}
	for _, tc := range []struct {
		run     string
		step    int64
		wantErr error
	}{
		{"a", 0, nil},
		{"a", 5, nil},
		{"a", 5, ErrStepNotIncreasing},
		{"a", 3, ErrStepNotIncreasing},
		{"b", 1, nil}, // runs are independent
		{"a", 6, nil},
		{"a", 1 << 40, nil},
	} {
		if err := save(tc.run, tc.step); !errors.Is(err, tc.wantErr) {
			t.Errorf("Save(%s@%d) = %v, want %v", tc.run, tc.step, err, tc.wantErr)
		}
	}
	steps, err := cs.Steps(ctx, "a")
	if err != nil || !slices.Equal(steps, []int64{0, 5, 6, 1 << 40}) {
		t.Errorf("Steps(a) = %v, %v", steps, err)
	}
	got, err := cs.ReadTensor(ctx, "a", 5, "w")
	if err != nil || !bytes.Equal(got, f32Tensor("w", 5, 300).Data) {
		t.Errorf("a rejected save at step 5 changed its tensor: %v", err)
	}
	latest, err := cs.Latest(ctx, "a")
	if err != nil || latest.GetStep() != 1<<40 {
		t.Errorf("Latest(a) = %v, %v", latest.GetStep(), err)
	}
}

func testCheckpointPrune(t *testing.T, s Stores) {
	ctx := context.Background()
	cs := s.Checkpoints()
	for _, step := range []int64{1, 2, 4, 8, 16} {
		w, o := checkpointTensors(step)
		if err := cs.Save(ctx, &records.Checkpoint{RunId: "run", Step: step}, w, o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.Prune(ctx, "run", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Prune(keep 0) = %v, want ErrInvalid", err)
	}
	for _, tc := range []struct {
		keep        int
		wantDeleted []int64
		wantSteps   []int64
	}{
		{10, nil, []int64{1, 2, 4, 8, 16}},
		{2, []int64{1, 2, 4}, []int64{8, 16}},
		{2, nil, []int64{8, 16}},
		{1, []int64{8}, []int64{16}},
	} {
		deleted, err := cs.Prune(ctx, "run", tc.keep)
		if err != nil || !slices.Equal(deleted, tc.wantDeleted) {
			t.Errorf("Prune(keep %d) = %v, %v; want %v", tc.keep, deleted, err, tc.wantDeleted)
		}
		if steps, err := cs.Steps(ctx, "run"); err != nil || !slices.Equal(steps, tc.wantSteps) {
			t.Errorf("after Prune(keep %d): Steps = %v, %v; want %v", tc.keep, steps, err, tc.wantSteps)
		}
	}
	if _, err := cs.ReadTensor(ctx, "run", 4, "embed"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadTensor of a pruned step = %v, want ErrNotFound", err)
	}
	w, _ := checkpointTensors(16)
	if got, err := cs.ReadTensor(ctx, "run", 16, "embed"); err != nil || !bytes.Equal(got, w[0].Data) {
		t.Errorf("Prune damaged the kept checkpoint: %v", err)
	}
	if err := cs.Save(ctx, &records.Checkpoint{RunId: "run", Step: 4}, nil, nil); !errors.Is(err, ErrStepNotIncreasing) {
		t.Errorf("saving a pruned step again = %v, want ErrStepNotIncreasing", err)
	}
}

func testCanceledContext(t *testing.T, s Stores) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := map[string]func() error{
		"Tasks.Put":           func() error { return s.Tasks().Put(ctx, sampleTask("t", "e")) },
		"Tasks.List":          func() error { _, err := s.Tasks().List(ctx, TaskFilter{}); return err },
		"Runs.Get":            func() error { _, err := s.Runs().Get(ctx, "r"); return err },
		"Trajectories.Append": func() error { return s.Trajectories().Append(ctx, sampleTrajectory("j", "r", "t")) },
		"Checkpoints.Save": func() error {
			return s.Checkpoints().Save(ctx, &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{f32Tensor("w", 1, 8)}, nil)
		},
		"Coverage.Put": func() error { return s.Coverage().Put(ctx, &records.CoverageMap{Environment: "e"}) },
		"Coverage.Get": func() error { _, err := s.Coverage().Get(ctx, "e"); return err },
		"Frontier.Commit": func() error {
			return s.Frontier().Commit(ctx, DefaultFrontier, &records.FrontierState{}, []*records.TaskStats{{TaskId: "t"}})
		},
		"Frontier.Names":       func() error { _, err := s.Frontier().Names(ctx); return err },
		"SandboxDestroys.Put":  func() error { return s.SandboxDestroys().Put(ctx, PendingDestroy{Namespace: "ns", ID: "x"}) },
		"SandboxDestroys.List": func() error { _, err := s.SandboxDestroys().List(ctx, "ns"); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s = %v, want context.Canceled", name, err)
		}
	}
	bg := context.Background()
	if n, err := s.Tasks().Count(bg, TaskFilter{}); err != nil || n != 0 {
		t.Errorf("a canceled Put stored a task: %d, %v", n, err)
	}
	if _, err := s.Coverage().Get(bg, "e"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a canceled Put stored a coverage map: %v", err)
	}
	if names, err := s.Frontier().Names(bg); err != nil || len(names) != 0 {
		t.Errorf("a canceled Commit stored a frontier state: %v, %v", names, err)
	}
	if st, err := s.Frontier().Stats(bg, DefaultFrontier); err != nil || len(st) != 0 {
		t.Errorf("a canceled Commit stored task stats: %v, %v", st, err)
	}
	if ds, err := s.SandboxDestroys().List(bg, "ns"); err != nil || len(ds) != 0 {
		t.Errorf("a canceled Put stored a pending destroy: %v, %v", ds, err)
	}
}

func testCoverage(t *testing.T, s Stores) {
	ctx := context.Background()
	c := s.Coverage()
	if _, err := c.Get(ctx, "six"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	if err := c.Delete(ctx, "six"); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
	if _, err := c.Get(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Get(\"\") = %v, want ErrInvalid", err)
	}
	if err := c.Delete(ctx, "a\x00b"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Delete with a NUL = %v, want ErrInvalid", err)
	}
	for i, m := range []*records.CoverageMap{
		nil,
		{},
		{Environment: "a\x00b"},
		{Environment: "six", Tests: []string{"t"}, Files: []*records.FileCoverage{{Path: "six.py", Lines: []*records.LineCoverage{{Line: 3, Tests: []int32{1}}}}}},
		{Environment: "six", Tests: []string{"t"}, Files: []*records.FileCoverage{{Path: "six.py", Lines: []*records.LineCoverage{{Line: 3, Tests: []int32{-1}}}}}},
	} {
		if err := c.Put(ctx, m); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put(bad %d) = %v, want ErrInvalid", i, err)
		}
	}
	if _, err := c.Get(ctx, "six"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an invalid Put stored a map: %v", err)
	}
	m := &records.CoverageMap{Environment: "six", Image: "img:1", Tests: []string{"test_six.py::test_a", "test_six.py::test_b"},
		Files: []*records.FileCoverage{{Path: "six.py", Lines: []*records.LineCoverage{{Line: 3, Tests: []int32{0, 1}}, {Line: 4}}}}}
	if err := c.Put(ctx, m); err != nil {
		t.Fatal(err)
	}
	other := &records.CoverageMap{Environment: "attrs", Image: "img:a"}
	if err := c.Put(ctx, other); err != nil {
		t.Fatal(err)
	}
	want := clone(m)
	m.Image = "changed after Put"
	m.Files[0].Lines[0].Tests[1] = 0
	got, err := c.Get(ctx, "six")
	if err != nil || !sameProto(t, got, want) {
		t.Fatalf("Get = %v, %v; want %v", got, err, want)
	}
	got.Files[0].Lines[0].Tests[0] = 1
	got.Image = "changed after Get"
	if again, _ := c.Get(ctx, "six"); !sameProto(t, again, want) {
		t.Errorf("mutating a returned map changed the store: %v", again)
	}
	m.Image = "img:2"
	if err := c.Put(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Get(ctx, "six"); got.GetImage() != "img:2" || !sameProto(t, got, m) {
		t.Errorf("Put did not replace: %v", got)
	}
	if err := c.Delete(ctx, "six"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "six"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete = %v", err)
	}
	if got, err := c.Get(ctx, "attrs"); err != nil || got.GetImage() != "img:a" {
		t.Errorf("deleting six took attrs: %v, %v", got, err)
	}
}

func testFrontier(t *testing.T, stores Stores) {
	ctx := context.Background()
	s := stores.Frontier()
	// statsOf returns the named estimator's stats of one task.
	statsOf := func(name, taskID string) (*records.TaskStats, error) {
		all, err := s.Stats(ctx, name)
		if err != nil {
			return nil, err
		}
		for _, st := range all {
			if st.GetTaskId() == taskID {
				return st, nil
			}
		}
		return nil, fmt.Errorf("stats of %s by %s: %w", taskID, name, ErrNotFound)
	}
	if _, err := s.Get(ctx, DefaultFrontier); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Get(\"\") = %v, want ErrInvalid", err)
	}
	if names, err := s.Names(ctx); err != nil || len(names) != 0 {
		t.Errorf("Names of an empty store = %v, %v", names, err)
	}
	bad := []struct {
		name  string
		stats []*records.TaskStats
	}{
		{"", nil},
		{"a\x00b", nil},
		{DefaultFrontier, []*records.TaskStats{nil}},
		{DefaultFrontier, []*records.TaskStats{{}}},
		{DefaultFrontier, []*records.TaskStats{{TaskId: "a\x00b"}}},
		{DefaultFrontier, []*records.TaskStats{{TaskId: "t", Attempts: 1, Successes: 2}}},
		{DefaultFrontier, []*records.TaskStats{{TaskId: "t", Attempts: -1}}},
		// One bad record refuses the whole commit, the good ones and the
		// state included.
		{DefaultFrontier, []*records.TaskStats{{TaskId: "ok", Attempts: 1}, {TaskId: "t", Successes: -1}}},
		{"run-x", []*records.TaskStats{{TaskId: "ok", Attempts: 1}, nil}},
	}
	for i, b := range bad {
		if err := s.Commit(ctx, b.name, &records.FrontierState{PolicyVersion: 1}, b.stats); !errors.Is(err, ErrInvalid) {
			t.Errorf("Commit(bad %d) = %v, want ErrInvalid", i, err)
		}
	}
	if names, err := s.Names(ctx); err != nil || len(names) != 0 {
		t.Errorf("refused commits stored states: %v, %v", names, err)
	}
	if all, err := s.Stats(ctx, DefaultFrontier); err != nil || len(all) != 0 {
		t.Errorf("refused commits stored task stats: %v, %v", all, err)
	}
	if st, err := s.Stats(ctx, "run-x"); err != nil || len(st) != 0 {
		t.Errorf("a refused commit stored run-x's task stats: %v, %v", st, err)
	}

	state := &records.FrontierState{PolicyVersion: 7, BatchSeq: 3, Counters: map[string]int64{"unknown_task": 2},
		Model: &records.DifficultyModel{Weights: map[string]float64{"bias": -0.5}}}
	stats := []*records.TaskStats{ // not in id order
		{TaskId: "b", Alpha: 0, Beta: 8, Attempts: 8, Retired: true, RetiredReason: "hopeless", PolicyVersion: 6},
		{TaskId: "a", Alpha: 1.5, Beta: 2, Attempts: 4, Successes: 1, PolicyVersion: 7},
	}
	wantState, wantStats := clone(state), []*records.TaskStats{clone(stats[1]), clone(stats[0])}
	if err := s.Commit(ctx, DefaultFrontier, state, stats); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	// The store keeps copies of what it was given.
	state.PolicyVersion, state.Counters["unknown_task"] = 100, 100
	stats[0].Attempts = 100
	got, err := s.Get(ctx, DefaultFrontier)
	if err != nil {
		t.Fatal(err)
	}
	if !sameProto(t, got, wantState) {
		t.Errorf("Get = %v, want %v", got, wantState)
	}
	for _, want := range wantStats {
		st, err := statsOf(DefaultFrontier, want.GetTaskId())
		if err != nil {
			t.Fatal(err)
		}
		if !sameProto(t, st, want) {
			t.Errorf("stats %s = %v, want %v", want.GetTaskId(), st, want)
		}
	}
	defStats, err := s.Stats(ctx, DefaultFrontier)
	if err != nil || len(defStats) != 2 || !sameProto(t, defStats[0], wantStats[0]) || !sameProto(t, defStats[1], wantStats[1]) {
		t.Errorf("Stats(default) = %v, %v; want %v in id order", defStats, err, wantStats)
	}
	// A nil state writes only stats and keeps the stored state; of two
	// stats of one task, the later wins.
	if err := s.Commit(ctx, DefaultFrontier, nil, []*records.TaskStats{
		{TaskId: "a", Alpha: 8, Attempts: 8, Successes: 8},
		{TaskId: "a", Alpha: 9, Attempts: 9, Successes: 9},
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, DefaultFrontier); got.GetPolicyVersion() != 7 {
		t.Errorf("state after stats-only commit: version %d, want 7", got.GetPolicyVersion())
	}
	if st, _ := statsOf(DefaultFrontier, "a"); st.GetAlpha() != 9 {
		t.Errorf("stats a after commit: alpha %v, want 9", st.GetAlpha())
	}
	if defStats, err := s.Stats(ctx, DefaultFrontier); err != nil || !slices.Equal(statsIDs(defStats), []string{"a", "b"}) {
		t.Errorf("Stats(default) after a stats-only commit = %v, %v", statsIDs(defStats), err)
	}
	// Another estimator (a training run's) keeps its own stats of the
	// same task; the default one's are untouched.
	run := "run-20261130-140000.001"
	if err := s.Commit(ctx, run, &records.FrontierState{PolicyVersion: 0}, []*records.TaskStats{
		{TaskId: "z", Attempts: 2}, {TaskId: "a", Alpha: 3, Attempts: 1, Successes: 1},
	}); err != nil {
		t.Fatal(err)
	}
	if st, _ := statsOf(DefaultFrontier, "a"); st.GetAlpha() != 9 {
		t.Errorf("the default estimator's stats of a: alpha %v after another's commit, want 9", st.GetAlpha())
	}
	if _, err := statsOf(DefaultFrontier, "z"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another estimator's stats of z are the default one's: %v", err)
	}
	runStats, err := s.Stats(ctx, run)
	if err != nil || !slices.Equal(statsIDs(runStats), []string{"a", "z"}) || runStats[0].GetAlpha() != 3 {
		t.Errorf("Stats(%s) = %v, %v", run, runStats, err)
	}
	// An estimator whose name extends another's shares none of its stats.
	if st, err := s.Stats(ctx, run+"0"); err != nil || len(st) != 0 {
		t.Errorf("Stats(%s0) = %v, %v", run, st, err)
	}
	if none, err := s.Stats(ctx, "nobody"); err != nil || len(none) != 0 {
		t.Errorf("Stats(nobody) = %v, %v", none, err)
	}
	if _, err := s.Stats(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Stats(\"\") = %v, want ErrInvalid", err)
	}
	// Stats without a state make no state record: Names lists only
	// estimators with one, sorted.
	if err := s.Commit(ctx, "alpha", nil, []*records.TaskStats{{TaskId: "a"}}); err != nil {
		t.Fatal(err)
	}
	if names, err := s.Names(ctx); err != nil || !slices.Equal(names, []string{DefaultFrontier, run}) {
		t.Errorf("Names = %v, %v; want [default %s]", names, err, run)
	}
	if _, err := s.Get(ctx, "alpha"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(alpha) after a stats-only commit = %v, want ErrNotFound", err)
	}
	if err := s.Commit(ctx, "alpha", &records.FrontierState{}, nil); err != nil {
		t.Fatal(err)
	}
	if names, err := s.Names(ctx); err != nil || !slices.Equal(names, []string{"alpha", DefaultFrontier, run}) {
		t.Errorf("Names = %v, %v; want [alpha default %s]", names, err, run)
	}
	// Returned records are copies.
	got.Counters["unknown_task"] = 100
	if again, _ := s.Get(ctx, DefaultFrontier); again.GetCounters()["unknown_task"] != 2 {
		t.Errorf("Get returned a shared record")
	}
	runStats[0].Alpha = 100
	if again, _ := s.Stats(ctx, run); again[0].GetAlpha() != 3 {
		t.Errorf("Stats returned shared records")
	}
}

func statsIDs(xs []*records.TaskStats) []string {
	out := []string{}
	for _, x := range xs {
		out = append(out, x.GetTaskId())
	}
	return out
}

// testFrontierConcurrentCommits: each commit writes its state and its task
// stats together, so after concurrent commits the state and every task's
// stats come from the same one.
func testFrontierConcurrentCommits(t *testing.T, s Stores) {
	ctx := context.Background()
	const workers, each = 4, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				v := int64(w*each + i + 1)
				for _, name := range []string{DefaultFrontier, "run-x"} {
					errs <- s.Frontier().Commit(ctx, name, &records.FrontierState{PolicyVersion: v}, []*records.TaskStats{
						{TaskId: "a", PolicyVersion: v}, {TaskId: "b", PolicyVersion: v},
					})
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	for _, name := range []string{DefaultFrontier, "run-x"} {
		st, err := s.Frontier().Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		stats, err := s.Frontier().Stats(ctx, name)
		if err != nil || len(stats) != 2 {
			t.Fatalf("Stats(%s) = %v, %v", name, stats, err)
		}
		for _, x := range stats {
			if x.GetPolicyVersion() != st.GetPolicyVersion() {
				t.Errorf("%s: state of commit %d, stats of %s from commit %d", name, st.GetPolicyVersion(), x.GetTaskId(), x.GetPolicyVersion())
			}
		}
	}
}

func testSandboxDestroys(t *testing.T, s Stores) {
	ctx := context.Background()
	d := s.SandboxDestroys()
	if got, err := d.List(ctx, "ns"); err != nil || len(got) != 0 {
		t.Errorf("List of an empty store = %v, %v", got, err)
	}
	since := time.Unix(1700000000, 5).In(time.FixedZone("CET", 3600))
	now := time.Now() // with a monotonic reading, which no store keeps
	for i, bad := range []PendingDestroy{
		{Namespace: "ns"},
		{ID: "fn-a"},
		{Namespace: "n\x00s", ID: "fn-a"},
		{Namespace: "ns", ID: "fn\x00a"},
	} {
		if err := d.Put(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put(bad %d) = %v, want ErrInvalid", i, err)
		}
	}
	// A time JSON cannot hold is refused.
	if err := d.Put(ctx, PendingDestroy{Namespace: "ns", ID: "fn-y", Since: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Errorf("Put with a year-10000 Since succeeded")
	}
	if _, err := d.List(ctx, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("List(\"\") = %v, want ErrInvalid", err)
	}
	if err := d.Delete(ctx, "", "fn-a"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Delete without a namespace = %v, want ErrInvalid", err)
	}
	if err := d.Delete(ctx, "ns", ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Delete without an id = %v, want ErrInvalid", err)
	}
	for _, p := range []PendingDestroy{
		{Namespace: "ns", ID: "fn-b", Since: since, Attempts: 1, LastError: "unavailable"},
		{Namespace: "ns", ID: "fn-c", Since: now, Attempts: 1},
		{Namespace: "ns", ID: "fn-a", Since: since, Attempts: 1},
		{Namespace: "other", ID: "fn-d", Since: since, Attempts: 3},
		{Namespace: "ns2", ID: "fn-e", Since: since, Attempts: 1}, // its prefix is ns's
		{Namespace: "ns", ID: "fn-b", Since: since, Attempts: 2, LastError: "still unavailable"},
	} {
		if err := d.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := d.List(ctx, "ns")
	if err != nil {
		t.Fatal(err)
	}
	want := []PendingDestroy{
		{Namespace: "ns", ID: "fn-a", Since: since, Attempts: 1},
		{Namespace: "ns", ID: "fn-b", Since: since, Attempts: 2, LastError: "still unavailable"},
		{Namespace: "ns", ID: "fn-c", Since: now, Attempts: 1},
	}
	same := func(a, b PendingDestroy) bool {
		return a.Namespace == b.Namespace && a.ID == b.ID && a.Since.Equal(b.Since) && a.Attempts == b.Attempts && a.LastError == b.LastError
	}
	if !slices.EqualFunc(got, want, same) {
		t.Errorf("List(ns) = %+v, want %+v", got, want)
	}
	for _, g := range got {
		if g.Since != g.Since.Round(0) {
			t.Errorf("List(ns) returned %s with a monotonic clock reading", g.ID)
		}
	}
	if err := d.Delete(ctx, "ns", "fn-a"); err != nil {
		t.Fatal(err)
	}
	for _, m := range [][2]string{{"ns", "fn-a"}, {"ns", "fn-missing"}, {"nowhere", "fn-a"}} {
		if err := d.Delete(ctx, m[0], m[1]); err != nil {
			t.Errorf("Delete(%s, %s) of a missing record = %v, want nil", m[0], m[1], err)
		}
	}
	if got, err := d.List(ctx, "ns"); err != nil || len(got) != 2 || got[0].ID != "fn-b" || got[1].ID != "fn-c" {
		t.Errorf("List(ns) after Delete = %+v, %v", got, err)
	}
	for ns, id := range map[string]string{"other": "fn-d", "ns2": "fn-e"} {
		if got, err := d.List(ctx, ns); err != nil || len(got) != 1 || got[0].ID != id {
			t.Errorf("List(%s) = %+v, %v; want only %s", ns, got, err, id)
		}
	}
}

func testEnvironments(t *testing.T, s Stores) {
	ctx := context.Background()
	e := s.Environments()
	if _, err := e.Get(ctx, "attrs"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	if err := e.Delete(ctx, "attrs"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete(missing) = %v, want ErrNotFound", err)
	}
	if err := e.Put(ctx, &records.Environment{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Put without name = %v, want ErrInvalid", err)
	}
	for _, name := range []string{"sortedcontainers", "attrs"} {
		env := &records.Environment{Name: name, SourceKind: "pypi", Source: name + "==1.0", Language: "python",
			TestCommand: []string{"python3", "-m", "pytest"}, TestFiles: []string{"tests/test_a.py"},
			Baseline: &records.TestReport{Results: []*records.TestResult{{Name: "tests/test_a.py::test_x", Status: records.TestStatus_TEST_STATUS_PASS}}}}
		if err := e.Put(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.Get(ctx, "attrs")
	if err != nil || got.Source != "attrs==1.0" || len(got.Baseline.GetResults()) != 1 || got.TestCommand[2] != "pytest" {
		t.Fatalf("Get = %v, %v", got, err)
	}
	all, err := e.List(ctx)
	if err != nil || len(all) != 2 || all[0].Name != "attrs" || all[1].Name != "sortedcontainers" {
		t.Fatalf("List = %v, %v", all, err)
	}
	if err := e.Delete(ctx, "attrs"); err != nil {
		t.Fatal(err)
	}
	if all, _ := e.List(ctx); len(all) != 1 {
		t.Fatalf("after Delete, List = %v", all)
	}
}
