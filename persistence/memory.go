package persistence

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// Memory holds every store in process memory. Actor tests use it instead of
// a *DB: it has the same semantics (checked by the same conformance suite)
// but nothing survives the process. It does not split tensors into chunks.
type Memory struct {
	mu    sync.Mutex
	tasks map[string]*records.Task
	runs  map[string]*records.Run
	evals map[string]*records.Evaluation
	envs  map[string]*records.Environment
	trajs map[string]*records.Trajectory
	ckpts map[string]map[int64]*memCheckpoint
	cover map[string]*records.CoverageMap
	// front holds the estimators' state records, frontStats their task
	// stats (estimator name → task id → stats).
	front      map[string]*records.FrontierState
	frontStats map[string]map[string]*records.TaskStats
	// destroys holds each pending destruction (namespace → sandbox id) as
	// the JSON Badger keeps, so that it reads back exactly as from Badger.
	destroys map[string]map[string][]byte
}

type memCheckpoint struct {
	manifest *records.Checkpoint
	data     map[string][]byte
}

var _ Stores = (*Memory)(nil)

// NewMemory returns empty in-memory stores.
func NewMemory() *Memory {
	return &Memory{
		tasks:      map[string]*records.Task{},
		runs:       map[string]*records.Run{},
		evals:      map[string]*records.Evaluation{},
		envs:       map[string]*records.Environment{},
		trajs:      map[string]*records.Trajectory{},
		ckpts:      map[string]map[int64]*memCheckpoint{},
		cover:      map[string]*records.CoverageMap{},
		front:      map[string]*records.FrontierState{},
		frontStats: map[string]map[string]*records.TaskStats{},
		destroys:   map[string]map[string][]byte{},
	}
}

// Tasks returns the in-memory task store.
func (m *Memory) Tasks() TaskStore { return memTaskStore{m} }

// Environments returns the in-memory environment store.
func (m *Memory) Environments() EnvironmentStore { return memEnvironmentStore{m} }

// Runs returns the in-memory run store.
func (m *Memory) Runs() RunStore {
	return memIDStore[records.Run, *records.Run]{m, m.runs, "run"}
}

// Evaluations returns the in-memory evaluation store.
func (m *Memory) Evaluations() EvaluationStore {
	return memIDStore[records.Evaluation, *records.Evaluation]{m, m.evals, "evaluation"}
}

// Trajectories returns the in-memory trajectory store.
func (m *Memory) Trajectories() TrajectoryStore { return memTrajectoryStore{m} }

// Checkpoints returns the in-memory checkpoint store.
func (m *Memory) Checkpoints() CheckpointStore { return memCheckpointStore{m} }

// Coverage returns the in-memory coverage store.
func (m *Memory) Coverage() CoverageStore { return memCoverageStore{m} }

// Frontier returns the in-memory frontier store. A Commit holds the
// Memory's lock throughout, so no reader sees half of it.
func (m *Memory) Frontier() FrontierStore { return memFrontierStore{m} }

// SandboxDestroys returns the in-memory store of pending sandbox
// destructions.
func (m *Memory) SandboxDestroys() SandboxDestroyStore { return memSandboxDestroys{m} }

// NewMemoryCoverage returns an in-memory CoverageStore, for callers that
// need no other store.
func NewMemoryCoverage() CoverageStore { return NewMemory().Coverage() }

func clone[T proto.Message](x T) T { return proto.Clone(x).(T) }

// sortedValues returns clones of the values whose key satisfies keep, in key
// order, as the Badger stores return them.
func sortedValues[T proto.Message](m map[string]T, keep func(T) bool) []T {
	var out []T
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if keep == nil || keep(m[k]) {
			out = append(out, clone(m[k]))
		}
	}
	return out
}

type memTaskStore struct{ m *Memory }

var _ TaskStore = memTaskStore{}

func (s memTaskStore) Put(ctx context.Context, t *records.Task) error {
	return s.PutMany(ctx, []*records.Task{t})
}

func (s memTaskStore) PutMany(ctx context.Context, tasks []*records.Task) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, t := range tasks {
		if err := checkTask(t); err != nil {
			return fmt.Errorf("task %d of %d: %w", i, len(tasks), err)
		}
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	for _, t := range tasks {
		s.m.tasks[t.GetId()] = clone(t)
	}
	return nil
}

func (s memTaskStore) Get(ctx context.Context, id string) (*records.Task, error) {
	return memGet(ctx, s.m, s.m.tasks, id, "task id", "task")
}

func (s memTaskStore) Delete(ctx context.Context, id string) error {
	return memDelete(ctx, s.m, s.m.tasks, id, "task id")
}

func (s memTaskStore) List(ctx context.Context, f TaskFilter) ([]*records.Task, error) {
	return memList(ctx, s.m, s.m.tasks, checkEnv(f.Environment), func(t *records.Task) bool {
		return f.Environment == "" || t.GetEnvironment() == f.Environment
	})
}

func (s memTaskStore) Count(ctx context.Context, f TaskFilter) (int, error) {
	ts, err := s.List(ctx, f)
	return len(ts), err
}

// memIDStore is a store of records keyed by their id, with nothing more to
// it than Put, Get and List: the runs and the evaluations.
type memIDStore[M any, T interface {
	*M
	proto.Message
	GetId() string
}] struct {
	m    *Memory
	rows map[string]T
	noun string // "run": "nil run", "run id", "get run"
}

var (
	_ RunStore        = memIDStore[records.Run, *records.Run]{}
	_ EvaluationStore = memIDStore[records.Evaluation, *records.Evaluation]{}
)

func (s memIDStore[M, T]) Put(ctx context.Context, x T) error {
	return memPut(ctx, s.m, s.rows, x.GetId(), x, checkIDOf(x, s.noun))
}

func (s memIDStore[M, T]) Get(ctx context.Context, id string) (T, error) {
	return memGet(ctx, s.m, s.rows, id, s.noun+" id", s.noun)
}

func (s memIDStore[M, T]) List(ctx context.Context) ([]T, error) {
	return memList(ctx, s.m, s.rows, nil, nil)
}

type memTrajectoryStore struct{ m *Memory }

var _ TrajectoryStore = memTrajectoryStore{}

func (s memTrajectoryStore) Append(ctx context.Context, t *records.Trajectory) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkTrajectory(t); err != nil {
		return err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if old, ok := s.m.trajs[t.GetId()]; ok {
		if proto.Equal(old, t) {
			return nil
		}
		return fmt.Errorf("append trajectory: trajectory %q: %w", t.GetId(), ErrExists)
	}
	s.m.trajs[t.GetId()] = clone(t)
	return nil
}

func (s memTrajectoryStore) Get(ctx context.Context, id string) (*records.Trajectory, error) {
	return memGet(ctx, s.m, s.m.trajs, id, "trajectory id", "trajectory")
}

// listTrajs returns the trajectories whose key (named what) is id, ordered
// like the Badger key that serves the query.
func (s memTrajectoryStore) listTrajs(ctx context.Context, what, id string, key func(*records.Trajectory) string, order func(a, b *records.Trajectory) int) ([]*records.Trajectory, error) {
	out, err := memList(ctx, s.m, s.m.trajs, checkID(what, id), func(t *records.Trajectory) bool { return key(t) == id })
	slices.SortFunc(out, order)
	return out, err
}

func (s memTrajectoryStore) ListByTask(ctx context.Context, taskID string) ([]*records.Trajectory, error) {
	return s.listTrajs(ctx, "task id", taskID, (*records.Trajectory).GetTaskId,
		func(a, b *records.Trajectory) int {
			return cmp.Or(cmp.Compare(a.GetRunId(), b.GetRunId()), cmp.Compare(a.GetId(), b.GetId()))
		})
}

func (s memTrajectoryStore) ListByRun(ctx context.Context, runID string) ([]*records.Trajectory, error) {
	return s.listTrajs(ctx, "run id", runID, (*records.Trajectory).GetRunId,
		func(a, b *records.Trajectory) int {
			return cmp.Or(cmp.Compare(a.GetTaskId(), b.GetTaskId()), cmp.Compare(a.GetId(), b.GetId()))
		})
}

type memCheckpointStore struct{ m *Memory }

var _ CheckpointStore = memCheckpointStore{}

func (s memCheckpointStore) Save(ctx context.Context, manifest *records.Checkpoint, weights, optimizer []Tensor) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkManifestArg(manifest); err != nil {
		return err
	}
	w, o, err := tensorMetas(weights, optimizer, DefaultChunkSize)
	if err != nil {
		return err
	}
	runID, step := manifest.GetRunId(), manifest.GetStep()
	m := clone(manifest)
	m.Tensors, m.Optimizer = w, o
	data := map[string][]byte{}
	for _, t := range append(append([]Tensor(nil), weights...), optimizer...) {
		data[t.Name] = slices.Clone(t.Data)
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	run := s.m.ckpts[runID]
	if len(run) > 0 {
		if latest := slices.Max(slices.Collect(maps.Keys(run))); step <= latest {
			return fmt.Errorf("save checkpoint %s@%d: latest step is %d: %w", runID, step, latest, ErrStepNotIncreasing)
		}
	}
	if run == nil {
		run = map[int64]*memCheckpoint{}
		s.m.ckpts[runID] = run
	}
	run[step] = &memCheckpoint{manifest: m, data: data}
	return nil
}

func (s memCheckpointStore) Load(ctx context.Context, runID string, step int64) (*records.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	c, ok := s.m.ckpts[runID][step]
	if !ok {
		return nil, fmt.Errorf("load checkpoint %s@%d: %w", runID, step, ErrNotFound)
	}
	return clone(c.manifest), nil
}

func (s memCheckpointStore) Latest(ctx context.Context, runID string) (*records.Checkpoint, error) {
	steps, err := s.Steps(ctx, runID)
	if err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("latest checkpoint of %s: %w", runID, ErrNotFound)
	}
	return s.Load(ctx, runID, steps[len(steps)-1])
}

func (s memCheckpointStore) Steps(ctx context.Context, runID string) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return slices.Sorted(maps.Keys(s.m.ckpts[runID])), nil
}

func (s memCheckpointStore) ReadTensor(ctx context.Context, runID string, step int64, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	if err := checkID("tensor name", name); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	c, ok := s.m.ckpts[runID][step]
	if !ok {
		return nil, fmt.Errorf("read tensor %s@%d/%s: %w", runID, step, name, ErrNotFound)
	}
	meta := findTensor(c.manifest, name)
	if meta == nil {
		return nil, fmt.Errorf("read tensor %s@%d/%s: no such tensor in the manifest: %w", runID, step, name, ErrNotFound)
	}
	if err := checkTensorBytes(meta, c.data[name]); err != nil {
		return nil, fmt.Errorf("read tensor %s@%d/%s: %w", runID, step, name, err)
	}
	return slices.Clone(c.data[name]), nil
}

func (s memCheckpointStore) Prune(ctx context.Context, runID string, keep int) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	if keep < 1 {
		return nil, fmt.Errorf("prune checkpoints of %s: keep %d, need at least 1: %w", runID, keep, ErrInvalid)
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	steps := slices.Sorted(maps.Keys(s.m.ckpts[runID]))
	if len(steps) <= keep {
		return nil, nil
	}
	doomed := steps[:len(steps)-keep]
	for _, st := range doomed {
		delete(s.m.ckpts[runID], st)
	}
	return doomed, nil
}

type memCoverageStore struct{ m *Memory }

var _ CoverageStore = memCoverageStore{}

func (s memCoverageStore) Put(ctx context.Context, c *records.CoverageMap) error {
	return memPut(ctx, s.m, s.m.cover, c.GetEnvironment(), c, checkCoverage(c))
}

func (s memCoverageStore) Get(ctx context.Context, env string) (*records.CoverageMap, error) {
	return memGet(ctx, s.m, s.m.cover, env, "environment name", "coverage of")
}

func (s memCoverageStore) Delete(ctx context.Context, env string) error {
	return memDelete(ctx, s.m, s.m.cover, env, "environment name")
}

type memFrontierStore struct{ m *Memory }

var _ FrontierStore = memFrontierStore{}

func (s memFrontierStore) Get(ctx context.Context, name string) (*records.FrontierState, error) {
	return memGet(ctx, s.m, s.m.front, name, "estimator name", "frontier state")
}

func (s memFrontierStore) Commit(ctx context.Context, name string, state *records.FrontierState, stats []*records.TaskStats) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkCommit(name, stats); err != nil {
		return err
	}
	// Everything is validated and copied before the lock is taken, so the
	// writes below cannot fail half-way.
	if state != nil {
		state = clone(state)
	}
	copies := make([]*records.TaskStats, len(stats))
	for i, st := range stats {
		copies[i] = clone(st)
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	dst := s.m.frontStats[name]
	if dst == nil && len(copies) > 0 {
		dst = map[string]*records.TaskStats{}
		s.m.frontStats[name] = dst
	}
	for _, st := range copies {
		dst[st.GetTaskId()] = st
	}
	if state != nil {
		s.m.front[name] = state
	}
	return nil
}

func (s memFrontierStore) Stats(ctx context.Context, name string) ([]*records.TaskStats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID("estimator name", name); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return sortedValues(s.m.frontStats[name], nil), nil
}

func (s memFrontierStore) Names(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return slices.Sorted(maps.Keys(s.m.front)), nil
}

type memSandboxDestroys struct{ m *Memory }

var _ SandboxDestroyStore = memSandboxDestroys{}

// checkDestroyKey checks the key of a pending destruction.
func checkDestroyKey(namespace, id string) error {
	if err := checkID("containerd namespace", namespace); err != nil {
		return err
	}
	return checkID("sandbox id", id)
}

func (s memSandboxDestroys) Put(ctx context.Context, d PendingDestroy) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkDestroyKey(d.Namespace, d.ID); err != nil {
		return err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode pending destroy: %w", err)
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.m.destroys[d.Namespace] == nil {
		s.m.destroys[d.Namespace] = map[string][]byte{}
	}
	s.m.destroys[d.Namespace][d.ID] = raw
	return nil
}

func (s memSandboxDestroys) Delete(ctx context.Context, namespace, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkDestroyKey(namespace, id); err != nil {
		return err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	delete(s.m.destroys[namespace], id)
	if len(s.m.destroys[namespace]) == 0 {
		delete(s.m.destroys, namespace)
	}
	return nil
}

func (s memSandboxDestroys) List(ctx context.Context, namespace string) ([]PendingDestroy, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID("containerd namespace", namespace); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	var out []PendingDestroy
	for _, id := range slices.Sorted(maps.Keys(s.m.destroys[namespace])) {
		var d PendingDestroy
		if err := json.Unmarshal(s.m.destroys[namespace][id], &d); err != nil {
			return nil, fmt.Errorf("list pending sandbox destroys: decode %s: %v: %w", id, err, ErrCorrupt)
		}
		out = append(out, d)
	}
	return out, nil
}
