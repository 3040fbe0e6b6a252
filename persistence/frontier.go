package persistence

import (
	"context"
	"fmt"
	"sync"

	badger "github.com/dgraph-io/badger/v4"
	messages "github.com/frognano/frognano/actors/messages/v1"
)

// FrontierStore keeps the FrontierEstimator's own state (its difficulty
// model, policy version, batch counters, metrics and synthesis requests),
// one record per estimator name. Commit writes that record together with the
// task posteriors an outcome report changed, in one transaction, so a crash
// never leaves the model having learned from outcomes the posteriors have
// not (or the reverse).
//
// Key layout (schema version 1, beside those in keys.go):
//
//	v1/frontier/<estimator name>   FrontierState
type FrontierStore interface {
	// Get returns the state of the named estimator, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, name string) (*messages.FrontierState, error)
	// Commit stores state under name and replaces the TaskStats of each of
	// stats (keyed by their TaskId), atomically. state may be nil to write
	// only stats.
	Commit(ctx context.Context, name string, state *messages.FrontierState, stats []*messages.TaskStats) error
}

const prefixFrontier = "v1/frontier/"

func frontierKey(name string) []byte { return join(prefixFrontier, name) }

// Frontier returns the frontier state store.
func (db *DB) Frontier() FrontierStore { return &badgerFrontierStore{db: db} }

type badgerFrontierStore struct{ db *DB }

var _ FrontierStore = (*badgerFrontierStore)(nil)

func checkCommit(name string, stats []*messages.TaskStats) error {
	if err := checkID("estimator name", name); err != nil {
		return err
	}
	for _, st := range stats {
		if err := checkStats(st); err != nil {
			return err
		}
		if st.GetAttempts() < 0 || st.GetSuccesses() < 0 || st.GetSuccesses() > st.GetAttempts() {
			return fmt.Errorf("stats of task %q: %d successes in %d attempts: %w", st.GetTaskId(), st.GetSuccesses(), st.GetAttempts(), ErrInvalid)
		}
	}
	return nil
}

func (s *badgerFrontierStore) Get(ctx context.Context, name string) (*messages.FrontierState, error) {
	if err := checkID("estimator name", name); err != nil {
		return nil, err
	}
	st := &messages.FrontierState{}
	if err := s.db.view(ctx, func(txn *badger.Txn) error { return getProto(txn, frontierKey(name), st) }); err != nil {
		return nil, fmt.Errorf("get frontier state %q: %w", name, err)
	}
	return st, nil
}

func (s *badgerFrontierStore) Commit(ctx context.Context, name string, state *messages.FrontierState, stats []*messages.TaskStats) error {
	if err := checkCommit(name, stats); err != nil {
		return err
	}
	type kv struct{ k, v []byte }
	var writes []kv
	if state != nil {
		raw, err := marshal(state)
		if err != nil {
			return err
		}
		writes = append(writes, kv{frontierKey(name), raw})
	}
	for _, st := range stats {
		raw, err := marshal(st)
		if err != nil {
			return err
		}
		writes = append(writes, kv{statsKey(st.GetTaskId()), raw})
	}
	err := s.db.update(ctx, func(txn *badger.Txn) error {
		for _, w := range writes {
			if err := txn.Set(w.k, w.v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("commit frontier state %q with %d task stats: %w", name, len(stats), err)
	}
	return nil
}

// NewMemoryFrontier returns an in-memory FrontierStore that writes task
// stats into curriculum (normally the Curriculum of the same Memory), for
// tests and simulations. Writes are atomic with respect to its own readers.
func NewMemoryFrontier(curriculum CurriculumStore) FrontierStore {
	return &memFrontierStore{curriculum: curriculum, states: map[string]*messages.FrontierState{}}
}

type memFrontierStore struct {
	mu         sync.Mutex
	curriculum CurriculumStore
	states     map[string]*messages.FrontierState
}

var _ FrontierStore = (*memFrontierStore)(nil)

func (s *memFrontierStore) Get(ctx context.Context, name string) (*messages.FrontierState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID("estimator name", name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[name]
	if !ok {
		return nil, fmt.Errorf("get frontier state %q: %w", name, ErrNotFound)
	}
	return clone(st), nil
}

func (s *memFrontierStore) Commit(ctx context.Context, name string, state *messages.FrontierState, stats []*messages.TaskStats) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkCommit(name, stats); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range stats {
		if err := s.curriculum.Put(ctx, st); err != nil {
			return fmt.Errorf("commit frontier state %q: %w", name, err)
		}
	}
	if state != nil {
		s.states[name] = clone(state)
	}
	return nil
}
