package persistence

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	badger "github.com/dgraph-io/badger/v4"

	messages "github.com/frognano/frognano/actors/messages/v1"
)

// FrontierStore keeps the FrontierEstimators' own state (difficulty model,
// policy version, batch counters, metrics and synthesis requests) and their
// task posteriors, per estimator name: a node runs one estimator per
// training run (its name is the run id, since posteriors and versions
// belong to one policy's lineage) plus the default one. Commit writes the
// state record together with the task posteriors an outcome report changed,
// in one transaction, so a crash never leaves the model having learned from
// outcomes the posteriors have not (or the reverse).
//
// Key layout (schema version 1, beside those in keys.go):
//
//	v1/frontier/<estimator name>                      FrontierState
//	v1/stats/<task id>                                TaskStats of the default estimator
//	v1/frontier-stats/<estimator name>\x00<task id>   TaskStats of any other
type FrontierStore interface {
	// Get returns the state of the named estimator, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, name string) (*messages.FrontierState, error)
	// Commit stores state under name and replaces the named estimator's
	// TaskStats of each of stats (keyed by their TaskId), atomically. state
	// may be nil to write only stats.
	Commit(ctx context.Context, name string, state *messages.FrontierState, stats []*messages.TaskStats) error
	// Stats lists the named estimator's task posteriors (none: empty).
	Stats(ctx context.Context, name string) ([]*messages.TaskStats, error)
	// Names lists the estimators that have a state record, sorted.
	Names(ctx context.Context) ([]string, error)
}

// DefaultFrontier is the estimator whose task posteriors live under
// v1/stats/, where the Curriculum store reads them.
const DefaultFrontier = "default"

const (
	prefixFrontier      = "v1/frontier/"
	prefixFrontierStats = "v1/frontier-stats/"
)

func frontierKey(name string) []byte { return join(prefixFrontier, name) }

// frontierStatsPrefix is where the named estimator's TaskStats live.
func frontierStatsPrefix(name string) []byte {
	if name == DefaultFrontier {
		return []byte(prefixStats)
	}
	return join(prefixFrontierStats, name, sep)
}

func frontierStatsKey(name, taskID string) []byte {
	return append(frontierStatsPrefix(name), taskID...)
}

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
	if err := fault("store/frontier-commit"); err != nil {
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
		writes = append(writes, kv{frontierStatsKey(name, st.GetTaskId()), raw})
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

func (s *badgerFrontierStore) Stats(ctx context.Context, name string) ([]*messages.TaskStats, error) {
	if err := checkID("estimator name", name); err != nil {
		return nil, err
	}
	out, err := s.db.listStats(ctx, frontierStatsPrefix(name))
	if err != nil {
		return nil, fmt.Errorf("list task stats of frontier %q: %w", name, err)
	}
	return out, nil
}

func (s *badgerFrontierStore) Names(ctx context.Context) ([]string, error) {
	var out []string
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, []byte(prefixFrontier), true, func(item *badger.Item) error {
			out = append(out, string(item.Key()[len(prefixFrontier):]))
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list frontier estimators: %w", err)
	}
	return out, nil
}

// NewMemoryFrontier returns an in-memory FrontierStore that writes the
// default estimator's task stats into curriculum (normally the Curriculum
// of a Memory) and keeps other estimators' to itself, for tests and
// simulations. Writes are atomic with respect to its own readers only: a
// reader of curriculum may see part of a Commit, and a failing curriculum
// may leave part of one written. Memory.Frontier has neither flaw.
func NewMemoryFrontier(curriculum CurriculumStore) FrontierStore {
	return &linkedFrontierStore{curriculum: curriculum, states: map[string]*messages.FrontierState{},
		stats: map[string]map[string]*messages.TaskStats{}}
}

type linkedFrontierStore struct {
	mu         sync.Mutex
	curriculum CurriculumStore
	states     map[string]*messages.FrontierState
	stats      map[string]map[string]*messages.TaskStats // estimator → task → stats, but the default's
}

var _ FrontierStore = (*linkedFrontierStore)(nil)

func (s *linkedFrontierStore) Get(ctx context.Context, name string) (*messages.FrontierState, error) {
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

func (s *linkedFrontierStore) Commit(ctx context.Context, name string, state *messages.FrontierState, stats []*messages.TaskStats) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkCommit(name, stats); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range stats {
		if name != DefaultFrontier {
			if s.stats[name] == nil {
				s.stats[name] = map[string]*messages.TaskStats{}
			}
			s.stats[name][st.GetTaskId()] = clone(st)
			continue
		}
		if err := s.curriculum.Put(ctx, st); err != nil {
			return fmt.Errorf("commit frontier state %q: %w", name, err)
		}
	}
	if state != nil {
		s.states[name] = clone(state)
	}
	return nil
}

func (s *linkedFrontierStore) Stats(ctx context.Context, name string) ([]*messages.TaskStats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkID("estimator name", name); err != nil {
		return nil, err
	}
	if name == DefaultFrontier {
		return s.curriculum.List(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*messages.TaskStats
	for _, id := range slices.Sorted(maps.Keys(s.stats[name])) {
		out = append(out, clone(s.stats[name][id]))
	}
	return out, nil
}

func (s *linkedFrontierStore) Names(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.states)), nil
}
