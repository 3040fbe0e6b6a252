package persistence

import (
	"context"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"google.golang.org/protobuf/proto"
)

type badgerCurriculumStore struct{ db *DB }

var _ CurriculumStore = (*badgerCurriculumStore)(nil)

func checkStats(s *messages.TaskStats) error {
	if s == nil {
		return fmt.Errorf("nil task stats: %w", ErrInvalid)
	}
	return checkID("task id", s.GetTaskId())
}

func (s *badgerCurriculumStore) Get(ctx context.Context, taskID string) (*messages.TaskStats, error) {
	if err := checkID("task id", taskID); err != nil {
		return nil, err
	}
	st := &messages.TaskStats{}
	if err := s.db.view(ctx, func(txn *badger.Txn) error { return getProto(txn, statsKey(taskID), st) }); err != nil {
		return nil, fmt.Errorf("get stats of task %q: %w", taskID, err)
	}
	return st, nil
}

func (s *badgerCurriculumStore) Put(ctx context.Context, st *messages.TaskStats) error {
	if err := checkStats(st); err != nil {
		return err
	}
	raw, err := marshal(st)
	if err != nil {
		return err
	}
	if err := s.db.update(ctx, func(txn *badger.Txn) error { return txn.Set(statsKey(st.GetTaskId()), raw) }); err != nil {
		return fmt.Errorf("put stats of task %q: %w", st.GetTaskId(), err)
	}
	return nil
}

// errFromUpdateFn marks an error returned by the caller's function, so it is
// passed back unwrapped rather than as a storage failure.
type errFromUpdateFn struct{ err error }

func (e errFromUpdateFn) Error() string { return e.err.Error() }

func (s *badgerCurriculumStore) Update(ctx context.Context, taskID string, fn func(*messages.TaskStats) error) (*messages.TaskStats, error) {
	if err := checkID("task id", taskID); err != nil {
		return nil, err
	}
	var result *messages.TaskStats
	err := s.db.update(ctx, func(txn *badger.Txn) error {
		st := &messages.TaskStats{}
		switch err := getProto(txn, statsKey(taskID), st); {
		case errors.Is(err, ErrNotFound):
			st = &messages.TaskStats{TaskId: taskID}
		case err != nil:
			return err
		}
		if err := fn(st); err != nil {
			return errFromUpdateFn{err}
		}
		if st.GetTaskId() != taskID {
			return fmt.Errorf("update changed task id %q to %q: %w", taskID, st.GetTaskId(), ErrInvalid)
		}
		raw, err := marshal(st)
		if err != nil {
			return err
		}
		result = st
		return txn.Set(statsKey(taskID), raw)
	})
	var fnErr errFromUpdateFn
	if errors.As(err, &fnErr) {
		return nil, fnErr.err
	}
	if err != nil {
		return nil, fmt.Errorf("update stats of task %q: %w", taskID, err)
	}
	return proto.Clone(result).(*messages.TaskStats), nil
}

func (s *badgerCurriculumStore) List(ctx context.Context) ([]*messages.TaskStats, error) {
	out, err := s.db.listStats(ctx, []byte(prefixStats))
	if err != nil {
		return nil, fmt.Errorf("list task stats: %w", err)
	}
	return out, nil
}

// listStats reads every TaskStats under prefix.
func (db *DB) listStats(ctx context.Context, prefix []byte) ([]*messages.TaskStats, error) {
	var out []*messages.TaskStats
	err := db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, prefix, false, func(item *badger.Item) error {
			st := &messages.TaskStats{}
			if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, st) }); err != nil {
				return err
			}
			out = append(out, st)
			return nil
		})
	})
	return out, err
}
