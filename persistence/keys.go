package persistence

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Key layout, schema version 2 (SchemaVersion). Composite keys separate their
// parts with a NUL byte, which ids and names may not contain, so a prefix
// scan over "<a>\x00" never matches "<a>x\x00...". Steps and chunk indexes
// are big-endian so that byte order is numeric order. The "v1/" that starts
// the record keys names the first layout's key space, not the schema
// version, and stays when the version changes.
//
//	meta/schema                                    schema version, decimal
//	meta/migration                                 version the data is in, while a migration is unfinished (migrate.go)
//	v1/task/<task id>                              Task
//	v1/task-env/<environment>\x00<task id>          (empty) index by environment
//	v1/run/<run id>                                Run
//	v1/eval/<evaluation id>                        Evaluation
//	v1/env/<environment name>                      Environment
//	v1/traj/<run id>\x00<task id>\x00<traj id>      Trajectory
//	v1/traj-id/<traj id>                           <run id>\x00<task id>
//	v1/traj-task/<task id>\x00<run id>\x00<traj id> (empty) index by task
//	v1/ckpt/<run id>\x00<step u64>                  Checkpoint manifest
//	v1/chunk/<run id>\x00<step u64>\x00<tensor>\x00<chunk u32>   tensor bytes
//
// Each store's file lists its own keys: v1/frontier/, v1/frontier-stats/
// (frontier.go), v1/coverage/ (coverage.go), v1/sandbox-destroy/
// (sandboxes.go).
//
// History:
//
//	1  the default FrontierEstimator's TaskStats under v1/stats/<task id>,
//	   where the CurriculumStore read and wrote them; other estimators'
//	   under v1/frontier-stats/<estimator name>\x00<task id>.
//	2  every estimator's TaskStats under v1/frontier-stats/, the default's
//	   as v1/frontier-stats/default\x00<task id>; v1/stats/ is gone, with the
//	   CurriculumStore. Open moves a version-1 database's records
//	   (migrateDefaultStats); all other keys are unchanged.
const (
	prefixTask     = "v1/task/"
	prefixTaskEnv  = "v1/task-env/"
	prefixRun      = "v1/run/"
	prefixEval     = "v1/eval/"
	prefixEnv      = "v1/env/"
	prefixTraj     = "v1/traj/"
	prefixTrajID   = "v1/traj-id/"
	prefixTrajTask = "v1/traj-task/"
	prefixCkpt     = "v1/ckpt/"
	prefixChunk    = "v1/chunk/"
	sep            = "\x00"
)

// checkID rejects ids that would break the key layout.
func checkID(what, id string) error {
	if id == "" {
		return fmt.Errorf("empty %s: %w", what, ErrInvalid)
	}
	if strings.Contains(id, sep) {
		return fmt.Errorf("%s %q contains a NUL byte: %w", what, id, ErrInvalid)
	}
	return nil
}

func join(parts ...string) []byte { return []byte(strings.Join(parts, "")) }

func taskKey(id string) []byte { return join(prefixTask, id) }

func taskEnvKey(env, id string) []byte { return join(prefixTaskEnv, env, sep, id) }

func taskEnvPrefix(env string) []byte { return join(prefixTaskEnv, env, sep) }

func runKey(id string) []byte { return join(prefixRun, id) }

func evalKey(id string) []byte { return join(prefixEval, id) }

func envKey(name string) []byte { return join(prefixEnv, name) }

func trajKey(runID, taskID, id string) []byte { return join(prefixTraj, runID, sep, taskID, sep, id) }

func trajRunPrefix(runID string) []byte { return join(prefixTraj, runID, sep) }

func trajIDKey(id string) []byte { return join(prefixTrajID, id) }

func trajTaskKey(taskID, runID, id string) []byte {
	return join(prefixTrajTask, taskID, sep, runID, sep, id)
}

func trajTaskPrefix(taskID string) []byte { return join(prefixTrajTask, taskID, sep) }

func ckptPrefix(runID string) []byte { return join(prefixCkpt, runID, sep) }

func ckptKey(runID string, step int64) []byte {
	return binary.BigEndian.AppendUint64(ckptPrefix(runID), uint64(step))
}

func chunkRunPrefix(runID string) []byte { return join(prefixChunk, runID, sep) }

func chunkStepPrefix(runID string, step int64) []byte {
	return append(binary.BigEndian.AppendUint64(chunkRunPrefix(runID), uint64(step)), sep...)
}

func chunkTensorPrefix(runID string, step int64, name string) []byte {
	return append(append(chunkStepPrefix(runID, step), name...), sep...)
}

func chunkKey(runID string, step int64, name string, idx int) []byte {
	return binary.BigEndian.AppendUint32(chunkTensorPrefix(runID, step, name), uint32(idx))
}

// stepFromChunkKey returns the step of a key under chunkRunPrefix(runID).
func stepFromChunkKey(runID string, key []byte) (int64, bool) {
	rest := key[len(chunkRunPrefix(runID)):]
	if len(rest) < 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(rest[:8])), true
}

// stepFromCkptKey returns the step of a key under ckptPrefix(runID).
func stepFromCkptKey(runID string, key []byte) (int64, bool) {
	rest := key[len(ckptPrefix(runID)):]
	if len(rest) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(rest)), true
}
