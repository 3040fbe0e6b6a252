package persistence

import (
	"context"
	"fmt"
	"hash/crc32"
	"math"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// TaskStore holds validated tasks. Task ids are content hashes, so Put is
// idempotent: storing the same id again replaces the record (and moves it in
// the environment index if its environment changed).
type TaskStore interface {
	// Put stores one task durably. The id must be non-empty.
	Put(ctx context.Context, task *records.Task) error
	// PutMany stores tasks in as few transactions as Badger allows. Each task
	// is stored atomically; the batch as a whole is not, so a failure may
	// leave a prefix stored. Retrying the batch is safe.
	PutMany(ctx context.Context, tasks []*records.Task) error
	// Get returns the task, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (*records.Task, error)
	// Delete removes the task; deleting a missing task is not an error.
	Delete(ctx context.Context, id string) error
	// List returns the tasks matching filter, ordered by id. Filtering by
	// environment reads only that environment's index.
	List(ctx context.Context, filter TaskFilter) ([]*records.Task, error)
	// Count returns how many tasks match filter without decoding them.
	Count(ctx context.Context, filter TaskFilter) (int, error)
}

// TaskFilter selects tasks; the zero value selects all of them.
type TaskFilter struct {
	// Environment, when set, selects tasks of that environment only.
	Environment string
}

// EnvironmentStore holds the registered environments by name. An
// environment is put only once its image is built and its baseline recorded,
// so a listed environment is always usable.
type EnvironmentStore interface {
	// Put replaces the environment with e.Name.
	Put(ctx context.Context, e *records.Environment) error
	// Get returns the environment, or an error wrapping ErrNotFound.
	Get(ctx context.Context, name string) (*records.Environment, error)
	// Delete removes it, or returns an error wrapping ErrNotFound.
	Delete(ctx context.Context, name string) error
	// List returns all environments ordered by name.
	List(ctx context.Context) ([]*records.Environment, error)
}

// RunStore holds training runs, so a restarted node can tell which runs to
// resume.
type RunStore interface {
	// Put replaces the run with run.Id.
	Put(ctx context.Context, run *records.Run) error
	// Get returns the run, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (*records.Run, error)
	// List returns all runs ordered by id.
	List(ctx context.Context) ([]*records.Run, error)
}

// EvaluationStore holds the evaluations a node's evaluation service ran
// (frognano eval), so that their reports outlive the process.
type EvaluationStore interface {
	// Put replaces the evaluation with e.Id.
	Put(ctx context.Context, e *records.Evaluation) error
	// Get returns the evaluation, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (*records.Evaluation, error)
	// List returns all evaluations ordered by id.
	List(ctx context.Context) ([]*records.Evaluation, error)
}

// TrajectoryStore is an append-only log of episodes, keyed by (run, task,
// trajectory id). Trajectories are training data: once written they never
// change.
type TrajectoryStore interface {
	// Append stores a trajectory. Id, TaskId and RunId must be set.
	// Appending an identical trajectory again is a no-op (a retry after a
	// crash); appending different content under an existing id wraps
	// ErrExists.
	Append(ctx context.Context, traj *records.Trajectory) error
	// Get returns a trajectory by id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (*records.Trajectory, error)
	// ListByTask returns a task's trajectories ordered by (run id, id).
	ListByTask(ctx context.Context, taskID string) ([]*records.Trajectory, error)
	// ListByRun returns a run's trajectories ordered by (task id, id).
	ListByRun(ctx context.Context, runID string) ([]*records.Trajectory, error)
}

// CheckpointStore holds training state. A checkpoint is visible only once all
// its tensors are stored, and steps of a run only increase, so Latest is
// always a complete state a crashed Learner can resume from.
type CheckpointStore interface {
	// Save stores a checkpoint of manifest.RunId at manifest.Step. It fills
	// the manifest's Tensors and Optimizer lists from weights and optimizer
	// (any lists already there are replaced); the caller's manifest is not
	// modified. Tensor names must be unique across both groups. A step that
	// is not greater than the run's latest step wraps ErrStepNotIncreasing.
	Save(ctx context.Context, manifest *records.Checkpoint, weights, optimizer []Tensor) error
	// Load returns the manifest at step, or an error wrapping ErrNotFound.
	Load(ctx context.Context, runID string, step int64) (*records.Checkpoint, error)
	// Latest returns the manifest with the highest step of the run, or an
	// error wrapping ErrNotFound.
	Latest(ctx context.Context, runID string) (*records.Checkpoint, error)
	// Steps returns the run's checkpoint steps in increasing order.
	Steps(ctx context.Context, runID string) ([]int64, error)
	// ReadTensor returns the bytes of one tensor (weights or optimizer)
	// after checking their length and CRC32C against the manifest; a
	// mismatch wraps ErrCorrupt.
	ReadTensor(ctx context.Context, runID string, step int64, name string) ([]byte, error)
	// Prune deletes all but the newest keep checkpoints of the run, with
	// their tensor bytes, and returns the deleted steps. keep must be at
	// least 1: the newest checkpoint is the resume point.
	Prune(ctx context.Context, runID string, keep int) ([]int64, error)
}

// Tensor is one named array to store in a checkpoint. Data is the raw
// little-endian element bytes; its length must equal the product of Shape
// times the element size of DType.
type Tensor struct {
	Name  string
	DType records.DType
	Shape []int64
	Data  []byte
}

// castagnoli is the CRC32C table: hardware-accelerated on amd64 and arm64,
// and the checksum Badger itself uses.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// elemSize returns the bytes per element of a storable dtype.
func elemSize(d records.DType) (int64, bool) {
	switch d {
	case records.DType_DTYPE_F32:
		return 4, true
	case records.DType_DTYPE_F16, records.DType_DTYPE_BF16:
		return 2, true
	}
	return 0, false
}

// tensorMetas validates the tensors of a checkpoint and describes them as
// they will be stored with the given chunk size.
func tensorMetas(weights, optimizer []Tensor, chunkSize int) (w, o []*records.TensorMeta, err error) {
	seen := map[string]bool{}
	describe := func(ts []Tensor) ([]*records.TensorMeta, error) {
		metas := make([]*records.TensorMeta, 0, len(ts))
		for _, t := range ts {
			if err := checkID("tensor name", t.Name); err != nil {
				return nil, err
			}
			if seen[t.Name] {
				return nil, fmt.Errorf("tensor %q appears twice: %w", t.Name, ErrInvalid)
			}
			seen[t.Name] = true
			size, ok := elemSize(t.DType)
			if !ok {
				return nil, fmt.Errorf("tensor %q: unsupported dtype %v: %w", t.Name, t.DType, ErrInvalid)
			}
			n := int64(1)
			for _, d := range t.Shape {
				if d < 0 || (d > 0 && n > math.MaxInt64/size/d) {
					return nil, fmt.Errorf("tensor %q: impossible shape %v: %w", t.Name, t.Shape, ErrInvalid)
				}
				n *= d
			}
			if n*size != int64(len(t.Data)) {
				return nil, fmt.Errorf("tensor %q: shape %v of %v needs %d bytes, got %d: %w",
					t.Name, t.Shape, t.DType, n*size, len(t.Data), ErrInvalid)
			}
			metas = append(metas, &records.TensorMeta{
				Name:      t.Name,
				Dtype:     t.DType,
				Shape:     append([]int64(nil), t.Shape...),
				SizeBytes: int64(len(t.Data)),
				Chunks:    int32((len(t.Data) + chunkSize - 1) / chunkSize),
				Crc32C:    crc32.Checksum(t.Data, castagnoli),
			})
		}
		return metas, nil
	}
	if w, err = describe(weights); err != nil {
		return nil, nil, err
	}
	if o, err = describe(optimizer); err != nil {
		return nil, nil, err
	}
	return w, o, nil
}

// findTensor returns the manifest entry for name in either group.
func findTensor(m *records.Checkpoint, name string) *records.TensorMeta {
	for _, group := range [][]*records.TensorMeta{m.GetTensors(), m.GetOptimizer()} {
		for _, t := range group {
			if t.GetName() == name {
				return t
			}
		}
	}
	return nil
}

// checkTensorBytes verifies bytes read back against their manifest entry.
func checkTensorBytes(meta *records.TensorMeta, data []byte) error {
	if int64(len(data)) != meta.GetSizeBytes() {
		return fmt.Errorf("tensor %q: read %d bytes, manifest says %d: %w",
			meta.GetName(), len(data), meta.GetSizeBytes(), ErrCorrupt)
	}
	if got := crc32.Checksum(data, castagnoli); got != meta.GetCrc32C() {
		return fmt.Errorf("tensor %q: crc32c %08x, manifest says %08x: %w",
			meta.GetName(), got, meta.GetCrc32C(), ErrCorrupt)
	}
	return nil
}

// checkManifestArg validates the parts of a manifest Save relies on.
func checkManifestArg(m *records.Checkpoint) error {
	if m == nil {
		return fmt.Errorf("nil checkpoint manifest: %w", ErrInvalid)
	}
	if err := checkID("run id", m.GetRunId()); err != nil {
		return err
	}
	if m.GetStep() < 0 {
		return fmt.Errorf("checkpoint step %d is negative: %w", m.GetStep(), ErrInvalid)
	}
	return nil
}
