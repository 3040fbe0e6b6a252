package persistence

import (
	"context"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// CoverageStore keeps one coverage map per environment: which tests execute
// which source lines. Measuring it runs the whole suite under a coverage
// tool, which is the most expensive step of synthesis for a new environment;
// it depends only on the environment's image, so it is measured once and
// kept. A map whose Image is not the environment's current image is stale,
// and the Synthesizer measures it again and replaces it.
//
// Key layout (since schema version 1, beside those in keys.go):
//
//	v1/coverage/<environment name>   CoverageMap
type CoverageStore interface {
	// Put replaces the map of m.Environment.
	Put(ctx context.Context, m *records.CoverageMap) error
	// Get returns an environment's map, or an error wrapping ErrNotFound.
	Get(ctx context.Context, environment string) (*records.CoverageMap, error)
	// Delete removes it; deleting a missing map is not an error.
	Delete(ctx context.Context, environment string) error
}

const prefixCoverage = "v1/coverage/"

func coverageKey(env string) []byte { return join(prefixCoverage, env) }

func checkCoverage(m *records.CoverageMap) error {
	if m == nil {
		return fmt.Errorf("nil coverage map: %w", ErrInvalid)
	}
	if err := checkID("environment name", m.GetEnvironment()); err != nil {
		return err
	}
	n := int32(len(m.GetTests()))
	for _, f := range m.GetFiles() {
		for _, l := range f.GetLines() {
			for _, t := range l.GetTests() {
				if t < 0 || t >= n {
					return fmt.Errorf("coverage of %s line %d names test %d of %d: %w", f.GetPath(), l.GetLine(), t, n, ErrInvalid)
				}
			}
		}
	}
	return nil
}

// Coverage returns the coverage store.
func (db *DB) Coverage() CoverageStore { return &badgerCoverageStore{db: db} }

type badgerCoverageStore struct{ db *DB }

var _ CoverageStore = (*badgerCoverageStore)(nil)

func (s *badgerCoverageStore) Put(ctx context.Context, m *records.CoverageMap) error {
	if err := checkCoverage(m); err != nil {
		return err
	}
	raw, err := marshal(m)
	if err != nil {
		return err
	}
	if err := s.db.update(ctx, func(txn *badger.Txn) error { return txn.Set(coverageKey(m.GetEnvironment()), raw) }); err != nil {
		return fmt.Errorf("put coverage of %q: %w", m.GetEnvironment(), err)
	}
	return nil
}

func (s *badgerCoverageStore) Get(ctx context.Context, env string) (*records.CoverageMap, error) {
	if err := checkID("environment name", env); err != nil {
		return nil, err
	}
	m := &records.CoverageMap{}
	if err := s.db.view(ctx, func(txn *badger.Txn) error { return getProto(txn, coverageKey(env), m) }); err != nil {
		return nil, fmt.Errorf("get coverage of %q: %w", env, err)
	}
	return m, nil
}

func (s *badgerCoverageStore) Delete(ctx context.Context, env string) error {
	if err := checkID("environment name", env); err != nil {
		return err
	}
	err := s.db.update(ctx, func(txn *badger.Txn) error {
		err := txn.Delete(coverageKey(env))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("delete coverage of %q: %w", env, err)
	}
	return nil
}
