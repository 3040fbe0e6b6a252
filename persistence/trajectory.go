package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

type badgerTrajectoryStore struct{ db *DB }

var _ TrajectoryStore = (*badgerTrajectoryStore)(nil)

func checkTrajectory(t *records.Trajectory) error {
	if t == nil {
		return fmt.Errorf("nil trajectory: %w", ErrInvalid)
	}
	for _, p := range []struct{ what, id string }{
		{"trajectory id", t.GetId()}, {"task id", t.GetTaskId()}, {"run id", t.GetRunId()},
	} {
		if err := checkID(p.what, p.id); err != nil {
			return err
		}
	}
	return nil
}

func (s *badgerTrajectoryStore) Append(ctx context.Context, t *records.Trajectory) error {
	if err := checkTrajectory(t); err != nil {
		return err
	}
	if err := fault("store/trajectory-append"); err != nil {
		return err
	}
	raw, err := marshal(t)
	if err != nil {
		return err
	}
	id, runID, taskID := t.GetId(), t.GetRunId(), t.GetTaskId()
	err = s.db.update(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(trajIDKey(id))
		switch {
		case err == nil:
			loc, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			prev, err := txn.Get(join(prefixTraj, string(loc), sep, id))
			if err != nil {
				return fmt.Errorf("trajectory %q: id index points at %q: %v: %w", id, loc, err, ErrCorrupt)
			}
			old, err := prev.ValueCopy(nil)
			if err != nil {
				return err
			}
			if bytes.Equal(old, raw) {
				return nil
			}
			return fmt.Errorf("trajectory %q: %w", id, ErrExists)
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
		if err := txn.Set(trajKey(runID, taskID, id), raw); err != nil {
			return err
		}
		if err := txn.Set(trajIDKey(id), join(runID, sep, taskID)); err != nil {
			return err
		}
		return txn.Set(trajTaskKey(taskID, runID, id), nil)
	})
	if err != nil {
		return fmt.Errorf("append trajectory: %w", err)
	}
	return nil
}

func (s *badgerTrajectoryStore) Get(ctx context.Context, id string) (*records.Trajectory, error) {
	if err := checkID("trajectory id", id); err != nil {
		return nil, err
	}
	t := &records.Trajectory{}
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		item, err := txn.Get(trajIDKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		loc, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		err = getProto(txn, join(prefixTraj, string(loc), sep, id), t)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("id index points at %q, which is missing: %w", loc, ErrCorrupt)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get trajectory %q: %w", id, err)
	}
	return t, nil
}

func (s *badgerTrajectoryStore) ListByRun(ctx context.Context, runID string) ([]*records.Trajectory, error) {
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	var out []*records.Trajectory
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, trajRunPrefix(runID), false, func(item *badger.Item) error {
			t := &records.Trajectory{}
			if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, t) }); err != nil {
				return err
			}
			out = append(out, t)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list trajectories of run %q: %w", runID, err)
	}
	return out, nil
}

func (s *badgerTrajectoryStore) ListByTask(ctx context.Context, taskID string) ([]*records.Trajectory, error) {
	if err := checkID("task id", taskID); err != nil {
		return nil, err
	}
	prefix := trajTaskPrefix(taskID)
	var out []*records.Trajectory
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, prefix, true, func(item *badger.Item) error {
			runID, id, ok := strings.Cut(string(item.Key()[len(prefix):]), sep)
			if !ok {
				return fmt.Errorf("malformed task index key %q: %w", item.Key(), ErrCorrupt)
			}
			t := &records.Trajectory{}
			err := getProto(txn, trajKey(runID, taskID, id), t)
			if errors.Is(err, ErrNotFound) {
				return fmt.Errorf("task index names trajectory %q, which is missing: %w", id, ErrCorrupt)
			}
			if err != nil {
				return err
			}
			out = append(out, t)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list trajectories of task %q: %w", taskID, err)
	}
	return out, nil
}
