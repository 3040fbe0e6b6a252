package persistence

import (
	"context"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

type badgerTaskStore struct{ db *DB }

var _ TaskStore = (*badgerTaskStore)(nil)

func checkTask(t *records.Task) error {
	if t == nil {
		return fmt.Errorf("nil task: %w", ErrInvalid)
	}
	if err := checkID("task id", t.GetId()); err != nil {
		return err
	}
	if err := checkEnv(t.GetEnvironment()); err != nil {
		return err
	}
	return nil
}

func checkEnv(env string) error {
	if env != "" {
		return checkID("environment", env)
	}
	return nil
}

// putTask writes the record and keeps the environment index pointing at it.
func putTask(txn *badger.Txn, t *records.Task, raw []byte) error {
	var old records.Task
	switch err := getProto(txn, taskKey(t.GetId()), &old); {
	case err == nil:
		if old.GetEnvironment() != t.GetEnvironment() {
			if err := txn.Delete(taskEnvKey(old.GetEnvironment(), t.GetId())); err != nil {
				return err
			}
		}
	case errors.Is(err, ErrNotFound):
	default:
		return err
	}
	if err := txn.Set(taskKey(t.GetId()), raw); err != nil {
		return err
	}
	return txn.Set(taskEnvKey(t.GetEnvironment(), t.GetId()), nil)
}

func (s *badgerTaskStore) Put(ctx context.Context, t *records.Task) error {
	if err := checkTask(t); err != nil {
		return err
	}
	raw, err := marshal(t)
	if err != nil {
		return err
	}
	if err := s.db.update(ctx, func(txn *badger.Txn) error { return putTask(txn, t, raw) }); err != nil {
		return fmt.Errorf("put task %q: %w", t.GetId(), err)
	}
	return nil
}

func (s *badgerTaskStore) PutMany(ctx context.Context, tasks []*records.Task) error {
	raws := make([][]byte, len(tasks))
	for i, t := range tasks {
		if err := checkTask(t); err != nil {
			return fmt.Errorf("task %d of %d: %w", i, len(tasks), err)
		}
		raw, err := marshal(t)
		if err != nil {
			return err
		}
		raws[i] = raw
	}
	return s.putBatch(ctx, tasks, raws)
}

// putBatch writes tasks in one transaction, halving the batch whenever it is
// too big for Badger.
func (s *badgerTaskStore) putBatch(ctx context.Context, tasks []*records.Task, raws [][]byte) error {
	if len(tasks) == 0 {
		return nil
	}
	err := s.db.update(ctx, func(txn *badger.Txn) error {
		for i, t := range tasks {
			if err := putTask(txn, t, raws[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, badger.ErrTxnTooBig) && len(tasks) > 1 {
		half := len(tasks) / 2
		if err := s.putBatch(ctx, tasks[:half], raws[:half]); err != nil {
			return err
		}
		return s.putBatch(ctx, tasks[half:], raws[half:])
	}
	if err != nil {
		return fmt.Errorf("put %d tasks: %w", len(tasks), err)
	}
	return nil
}

func (s *badgerTaskStore) Get(ctx context.Context, id string) (*records.Task, error) {
	if err := checkID("task id", id); err != nil {
		return nil, err
	}
	t := &records.Task{}
	err := s.db.view(ctx, func(txn *badger.Txn) error { return getProto(txn, taskKey(id), t) })
	if err != nil {
		return nil, fmt.Errorf("get task %q: %w", id, err)
	}
	return t, nil
}

func (s *badgerTaskStore) Delete(ctx context.Context, id string) error {
	if err := checkID("task id", id); err != nil {
		return err
	}
	err := s.db.update(ctx, func(txn *badger.Txn) error {
		var old records.Task
		switch err := getProto(txn, taskKey(id), &old); {
		case errors.Is(err, ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		if err := txn.Delete(taskEnvKey(old.GetEnvironment(), id)); err != nil {
			return err
		}
		return txn.Delete(taskKey(id))
	})
	if err != nil {
		return fmt.Errorf("delete task %q: %w", id, err)
	}
	return nil
}

func (s *badgerTaskStore) List(ctx context.Context, f TaskFilter) ([]*records.Task, error) {
	if err := checkEnv(f.Environment); err != nil {
		return nil, err
	}
	var out []*records.Task
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		if f.Environment == "" {
			return scan(ctx, txn, []byte(prefixTask), false, func(item *badger.Item) error {
				t := &records.Task{}
				if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, t) }); err != nil {
					return err
				}
				out = append(out, t)
				return nil
			})
		}
		prefix := taskEnvPrefix(f.Environment)
		return scan(ctx, txn, prefix, true, func(item *badger.Item) error {
			id := string(item.Key()[len(prefix):])
			t := &records.Task{}
			if err := getProto(txn, taskKey(id), t); err != nil {
				if errors.Is(err, ErrNotFound) {
					return fmt.Errorf("environment index names task %q, which is missing: %w", id, ErrCorrupt)
				}
				return err
			}
			out = append(out, t)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

func (s *badgerTaskStore) Count(ctx context.Context, f TaskFilter) (int, error) {
	if err := checkEnv(f.Environment); err != nil {
		return 0, err
	}
	prefix := []byte(prefixTask)
	if f.Environment != "" {
		prefix = taskEnvPrefix(f.Environment)
	}
	n := 0
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, prefix, true, func(*badger.Item) error { n++; return nil })
	})
	if err != nil {
		return 0, fmt.Errorf("count tasks: %w", err)
	}
	return n, nil
}
