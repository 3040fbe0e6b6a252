package persistence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// CheckConsistency reads the whole database and reports every broken
// invariant: an index entry without its record or a record without its index
// entry, a record that does not decode, task stats whose counters contradict
// each other, a record an unfinished schema migration left, a checkpoint
// manifest whose tensors are not fully readable with matching checksums. Run
// it after a crash (the fault-injection suite does) or from an operator's
// "fsck". The error wraps ErrCorrupt and lists each problem. Chunks no
// manifest names are not a problem: an interrupted Save leaves them, and Save
// or Prune removes them.
func (db *DB) CheckConsistency(ctx context.Context) error {
	var problems []error
	report := func(format string, args ...any) {
		problems = append(problems, fmt.Errorf(format, args...))
	}
	err := db.view(ctx, func(txn *badger.Txn) error {
		if _, err := txn.Get(schemaKey); err != nil {
			report("schema key: %v", err)
		}
		if err := checkTaskIndex(ctx, txn, report); err != nil {
			return err
		}
		if err := checkTrajectoryIndexes(ctx, txn, report); err != nil {
			return err
		}
		checkStatsAt := func(key []byte, st *records.TaskStats, want []byte) {
			if string(key) != string(want) {
				report("stats under %q are for task %q", key, st.GetTaskId())
			}
			if st.GetAttempts() < 0 || st.GetSuccesses() < 0 || st.GetSuccesses() > st.GetAttempts() {
				report("stats under %q: %d successes in %d attempts", key, st.GetSuccesses(), st.GetAttempts())
			}
		}
		// Open migrates a database before anyone can check it, so a
		// version-1 record or a migration marker is a broken migration.
		if _, err := txn.Get(migrationKey); err == nil {
			report("%q is set: a schema migration did not finish", migrationKey)
		}
		err := scan(ctx, txn, []byte(prefixStatsV1), true, func(item *badger.Item) error {
			report("%q is a schema-version-1 record the migration left", item.Key())
			return nil
		})
		if err != nil {
			return err
		}
		return scan(ctx, txn, []byte(prefixFrontierStats), false, func(item *badger.Item) error {
			st := &records.TaskStats{}
			if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, st) }); err != nil {
				report("%v", err)
				return nil
			}
			name, _, ok := strings.Cut(string(item.Key()[len(prefixFrontierStats):]), sep)
			if !ok {
				report("frontier stats key %q has no task id", item.Key())
				return nil
			}
			checkStatsAt(item.Key(), st, frontierStatsKey(name, st.GetTaskId()))
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("check consistency: %w", err)
	}
	if err := db.checkCheckpoints(ctx, report); err != nil {
		return fmt.Errorf("check consistency: %w", err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("check consistency: %d problems: %w: %w", len(problems), ErrCorrupt, errors.Join(problems...))
	}
	return nil
}

func checkTaskIndex(ctx context.Context, txn *badger.Txn, report func(string, ...any)) error {
	err := scan(ctx, txn, []byte(prefixTask), false, func(item *badger.Item) error {
		id := string(item.Key()[len(prefixTask):])
		t := &records.Task{}
		if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, t) }); err != nil {
			report("%v", err)
			return nil
		}
		if t.GetId() != id {
			report("task under %q has id %q", id, t.GetId())
		}
		if _, err := txn.Get(taskEnvKey(t.GetEnvironment(), id)); err != nil {
			report("task %q is missing from the index of environment %q: %v", id, t.GetEnvironment(), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return scan(ctx, txn, []byte(prefixTaskEnv), true, func(item *badger.Item) error {
		env, id, ok := strings.Cut(string(item.Key()[len(prefixTaskEnv):]), sep)
		if !ok {
			report("malformed environment index key %q", item.Key())
			return nil
		}
		t := &records.Task{}
		if err := getProto(txn, taskKey(id), t); err != nil {
			report("environment index %q names task %q: %v", env, id, err)
		} else if t.GetEnvironment() != env {
			report("environment index %q names task %q of environment %q", env, id, t.GetEnvironment())
		}
		return nil
	})
}

func checkTrajectoryIndexes(ctx context.Context, txn *badger.Txn, report func(string, ...any)) error {
	err := scan(ctx, txn, []byte(prefixTraj), false, func(item *badger.Item) error {
		parts := strings.Split(string(item.Key()[len(prefixTraj):]), sep)
		if len(parts) != 3 {
			report("malformed trajectory key %q", item.Key())
			return nil
		}
		runID, taskID, id := parts[0], parts[1], parts[2]
		t := &records.Trajectory{}
		if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, t) }); err != nil {
			report("%v", err)
			return nil
		}
		if t.GetRunId() != runID || t.GetTaskId() != taskID || t.GetId() != id {
			report("trajectory under %q has run %q task %q id %q", item.Key(), t.GetRunId(), t.GetTaskId(), t.GetId())
		}
		loc, err := txn.Get(trajIDKey(id))
		if err != nil {
			report("trajectory %q is missing from the id index: %v", id, err)
		} else if v, err := loc.ValueCopy(nil); err != nil || string(v) != runID+sep+taskID {
			report("id index of trajectory %q points at %q (%v)", id, v, err)
		}
		if _, err := txn.Get(trajTaskKey(taskID, runID, id)); err != nil {
			report("trajectory %q is missing from the task index: %v", id, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = scan(ctx, txn, []byte(prefixTrajID), false, func(item *badger.Item) error {
		id := string(item.Key()[len(prefixTrajID):])
		loc, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if _, err := txn.Get(join(prefixTraj, string(loc), sep, id)); err != nil {
			report("id index names trajectory %q at %q: %v", id, loc, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return scan(ctx, txn, []byte(prefixTrajTask), true, func(item *badger.Item) error {
		parts := strings.Split(string(item.Key()[len(prefixTrajTask):]), sep)
		if len(parts) != 3 {
			report("malformed task index key %q", item.Key())
			return nil
		}
		if _, err := txn.Get(trajKey(parts[1], parts[0], parts[2])); err != nil {
			report("task index names trajectory %q: %v", parts[2], err)
		}
		return nil
	})
}

// checkCheckpoints reads every tensor of every manifest back through
// ReadTensor, which checks chunk order, length and CRC32C.
func (db *DB) checkCheckpoints(ctx context.Context, report func(string, ...any)) error {
	type ref struct {
		runID string
		step  int64
	}
	var refs []ref
	err := db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, []byte(prefixCkpt), false, func(item *badger.Item) error {
			m := &records.Checkpoint{}
			if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, m) }); err != nil {
				report("%v", err)
				return nil
			}
			if string(item.Key()) != string(ckptKey(m.GetRunId(), m.GetStep())) {
				report("manifest under %q is for %s@%d", item.Key(), m.GetRunId(), m.GetStep())
				return nil
			}
			refs = append(refs, ref{m.GetRunId(), m.GetStep()})
			return nil
		})
	})
	if err != nil {
		return err
	}
	store := db.Checkpoints()
	for _, r := range refs {
		m, err := store.Load(ctx, r.runID, r.step)
		if err != nil {
			report("%v", err)
			continue
		}
		for _, group := range [][]*records.TensorMeta{m.GetTensors(), m.GetOptimizer()} {
			for _, t := range group {
				if _, err := store.ReadTensor(ctx, r.runID, r.step, t.GetName()); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					report("%v", err)
				}
			}
		}
	}
	return nil
}
