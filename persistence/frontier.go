package persistence

import (
	"context"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
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
// Key layout (schema version 2, beside those in keys.go):
//
//	v1/frontier/<estimator name>                      FrontierState
//	v1/frontier-stats/<estimator name>\x00<task id>   TaskStats
//
// Schema version 1 kept the default estimator's TaskStats under
// v1/stats/<task id> instead, where the CurriculumStore (since removed) read
// them; Open moves them (migrate.go).
type FrontierStore interface {
	// Get returns the state of the named estimator, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, name string) (*records.FrontierState, error)
	// Commit stores state under name and replaces the named estimator's
	// TaskStats of each of stats (keyed by their TaskId), atomically. state
	// may be nil to write only stats.
	Commit(ctx context.Context, name string, state *records.FrontierState, stats []*records.TaskStats) error
	// Stats lists the named estimator's task posteriors (none: empty).
	Stats(ctx context.Context, name string) ([]*records.TaskStats, error)
	// Names lists the estimators that have a state record, sorted.
	Names(ctx context.Context) ([]string, error)
}

// DefaultFrontier is the estimator of requests that name no training run.
const DefaultFrontier = "default"

const (
	prefixFrontier      = "v1/frontier/"
	prefixFrontierStats = "v1/frontier-stats/"
)

func frontierKey(name string) []byte { return join(prefixFrontier, name) }

// frontierStatsPrefix is where the named estimator's TaskStats live.
func frontierStatsPrefix(name string) []byte { return join(prefixFrontierStats, name, sep) }

func frontierStatsKey(name, taskID string) []byte {
	return append(frontierStatsPrefix(name), taskID...)
}

// Frontier returns the frontier state store.
func (db *DB) Frontier() FrontierStore { return &badgerFrontierStore{db: db} }

type badgerFrontierStore struct{ db *DB }

var _ FrontierStore = (*badgerFrontierStore)(nil)

func checkStats(s *records.TaskStats) error {
	if s == nil {
		return fmt.Errorf("nil task stats: %w", ErrInvalid)
	}
	return checkID("task id", s.GetTaskId())
}

func checkCommit(name string, stats []*records.TaskStats) error {
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

func (s *badgerFrontierStore) Get(ctx context.Context, name string) (*records.FrontierState, error) {
	if err := checkID("estimator name", name); err != nil {
		return nil, err
	}
	st := &records.FrontierState{}
	if err := s.db.view(ctx, func(txn *badger.Txn) error { return getProto(txn, frontierKey(name), st) }); err != nil {
		return nil, fmt.Errorf("get frontier state %q: %w", name, err)
	}
	return st, nil
}

func (s *badgerFrontierStore) Commit(ctx context.Context, name string, state *records.FrontierState, stats []*records.TaskStats) error {
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

func (s *badgerFrontierStore) Stats(ctx context.Context, name string) ([]*records.TaskStats, error) {
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

// listStats reads every TaskStats under prefix.
func (db *DB) listStats(ctx context.Context, prefix []byte) ([]*records.TaskStats, error) {
	var out []*records.TaskStats
	err := db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, prefix, false, func(item *badger.Item) error {
			st := &records.TaskStats{}
			if err := item.Value(func(v []byte) error { return unmarshal(item.Key(), v, st) }); err != nil {
				return err
			}
			out = append(out, st)
			return nil
		})
	})
	return out, err
}
