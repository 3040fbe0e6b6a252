package persistence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

type badgerEnvironmentStore struct{ db *DB }

var _ EnvironmentStore = (*badgerEnvironmentStore)(nil)

func (s *badgerEnvironmentStore) Put(ctx context.Context, e *records.Environment) error {
	if e == nil {
		return fmt.Errorf("nil environment: %w", ErrInvalid)
	}
	if err := checkID("environment name", e.GetName()); err != nil {
		return err
	}
	raw, err := marshal(e)
	if err != nil {
		return err
	}
	if err := s.db.update(ctx, func(txn *badger.Txn) error { return txn.Set(envKey(e.GetName()), raw) }); err != nil {
		return fmt.Errorf("put environment %q: %w", e.GetName(), err)
	}
	return nil
}

func (s *badgerEnvironmentStore) Get(ctx context.Context, name string) (*records.Environment, error) {
	if err := checkID("environment name", name); err != nil {
		return nil, err
	}
	e := &records.Environment{}
	if err := s.db.view(ctx, func(txn *badger.Txn) error { return getProto(txn, envKey(name), e) }); err != nil {
		return nil, fmt.Errorf("get environment %q: %w", name, err)
	}
	return e, nil
}

func (s *badgerEnvironmentStore) Delete(ctx context.Context, name string) error {
	if err := checkID("environment name", name); err != nil {
		return err
	}
	err := s.db.update(ctx, func(txn *badger.Txn) error {
		if _, err := txn.Get(envKey(name)); errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		return txn.Delete(envKey(name))
	})
	if err != nil {
		return fmt.Errorf("delete environment %q: %w", name, err)
	}
	return nil
}

func (s *badgerEnvironmentStore) List(ctx context.Context) ([]*records.Environment, error) {
	var out []*records.Environment
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, []byte(prefixEnv), false, func(item *badger.Item) error {
			e := &records.Environment{}
			if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, e) }); err != nil {
				return err
			}
			out = append(out, e)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list environments: %w", err)
	}
	return out, nil
}

type memEnvironmentStore struct{ m *Memory }

var _ EnvironmentStore = memEnvironmentStore{}

func (s memEnvironmentStore) Put(ctx context.Context, e *records.Environment) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if e == nil {
		return fmt.Errorf("nil environment: %w", ErrInvalid)
	}
	if err := checkID("environment name", e.GetName()); err != nil {
		return err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.m.envs[e.GetName()] = clone(e)
	return nil
}

func (s memEnvironmentStore) Get(ctx context.Context, name string) (*records.Environment, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID("environment name", name); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	e, ok := s.m.envs[name]
	if !ok {
		return nil, fmt.Errorf("get environment %q: %w", name, ErrNotFound)
	}
	return clone(e), nil
}

func (s memEnvironmentStore) Delete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID("environment name", name); err != nil {
		return err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if _, ok := s.m.envs[name]; !ok {
		return fmt.Errorf("delete environment %q: %w", name, ErrNotFound)
	}
	delete(s.m.envs, name)
	return nil
}

func (s memEnvironmentStore) List(ctx context.Context) ([]*records.Environment, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	out := make([]*records.Environment, 0, len(s.m.envs))
	for _, name := range slices.Sorted(maps.Keys(s.m.envs)) {
		out = append(out, clone(s.m.envs[name]))
	}
	return out, nil
}
