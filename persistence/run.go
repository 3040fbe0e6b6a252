package persistence

import (
	"context"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

type badgerRunStore struct{ db *DB }

var _ RunStore = (*badgerRunStore)(nil)

func (s *badgerRunStore) Put(ctx context.Context, r *records.Run) error {
	if r == nil {
		return fmt.Errorf("nil run: %w", ErrInvalid)
	}
	if err := checkID("run id", r.GetId()); err != nil {
		return err
	}
	if err := fault("store/run-put"); err != nil {
		return err
	}
	raw, err := marshal(r)
	if err != nil {
		return err
	}
	if err := s.db.update(ctx, func(txn *badger.Txn) error { return txn.Set(runKey(r.GetId()), raw) }); err != nil {
		return fmt.Errorf("put run %q: %w", r.GetId(), err)
	}
	return nil
}

func (s *badgerRunStore) Get(ctx context.Context, id string) (*records.Run, error) {
	if err := checkID("run id", id); err != nil {
		return nil, err
	}
	r := &records.Run{}
	if err := s.db.view(ctx, func(txn *badger.Txn) error { return getProto(txn, runKey(id), r) }); err != nil {
		return nil, fmt.Errorf("get run %q: %w", id, err)
	}
	return r, nil
}

func (s *badgerRunStore) List(ctx context.Context) ([]*records.Run, error) {
	var out []*records.Run
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, []byte(prefixRun), false, func(item *badger.Item) error {
			r := &records.Run{}
			if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, r) }); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return out, nil
}
