package persistence

import (
	"context"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

type badgerEvalStore struct{ db *DB }

var _ EvaluationStore = (*badgerEvalStore)(nil)

func (s *badgerEvalStore) Put(ctx context.Context, e *records.Evaluation) error {
	if e == nil {
		return fmt.Errorf("nil evaluation: %w", ErrInvalid)
	}
	if err := checkID("evaluation id", e.GetId()); err != nil {
		return err
	}
	if err := fault("store/eval-put"); err != nil {
		return err
	}
	raw, err := marshal(e)
	if err != nil {
		return err
	}
	if err := s.db.update(ctx, func(txn *badger.Txn) error { return txn.Set(evalKey(e.GetId()), raw) }); err != nil {
		return fmt.Errorf("put evaluation %q: %w", e.GetId(), err)
	}
	return nil
}

func (s *badgerEvalStore) Get(ctx context.Context, id string) (*records.Evaluation, error) {
	if err := checkID("evaluation id", id); err != nil {
		return nil, err
	}
	e := &records.Evaluation{}
	if err := s.db.view(ctx, func(txn *badger.Txn) error { return getProto(txn, evalKey(id), e) }); err != nil {
		return nil, fmt.Errorf("get evaluation %q: %w", id, err)
	}
	return e, nil
}

func (s *badgerEvalStore) List(ctx context.Context) ([]*records.Evaluation, error) {
	var out []*records.Evaluation
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, []byte(prefixEval), false, func(item *badger.Item) error {
			e := &records.Evaluation{}
			if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, e) }); err != nil {
				return err
			}
			out = append(out, e)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list evaluations: %w", err)
	}
	return out, nil
}
