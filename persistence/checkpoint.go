package persistence

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	records "github.com/frognano/frognano/persistence/records/v1"
)

type badgerCheckpointStore struct{ db *DB }

var _ CheckpointStore = (*badgerCheckpointStore)(nil)

// Save writes every chunk first, in as many transactions as their size
// needs, and the manifest last in a transaction of its own. A crash before
// the manifest commits leaves only orphan chunks, which no reader can reach
// and which the next Save of that step or the next Prune removes.
func (s *badgerCheckpointStore) Save(ctx context.Context, manifest *records.Checkpoint, weights, optimizer []Tensor) error {
	if err := checkManifestArg(manifest); err != nil {
		return err
	}
	db := s.db
	wMeta, oMeta, err := tensorMetas(weights, optimizer, db.chunkSize)
	if err != nil {
		return err
	}
	runID, step := manifest.GetRunId(), manifest.GetStep()
	m := proto.Clone(manifest).(*records.Checkpoint)
	m.Tensors, m.Optimizer = wMeta, oMeta
	raw, err := marshal(m)
	if err != nil {
		return err
	}

	db.ckptMu.Lock()
	defer db.ckptMu.Unlock()
	latest, found, err := s.latestStep(ctx, runID)
	if err != nil {
		return fmt.Errorf("save checkpoint %s@%d: %w", runID, step, err)
	}
	if found && step <= latest {
		return fmt.Errorf("save checkpoint %s@%d: latest step is %d: %w", runID, step, latest, ErrStepNotIncreasing)
	}
	// Chunks already at this step belong to a save that never finished.
	if err := db.deletePrefix(ctx, chunkStepPrefix(runID, step)); err != nil {
		return fmt.Errorf("save checkpoint %s@%d: remove chunks of an interrupted save: %w", runID, step, err)
	}

	w := chunkWriter{db: db, limit: db.ckptTxnBytes}
	for _, t := range append(append([]Tensor(nil), weights...), optimizer...) {
		for i, off := 0, 0; off < len(t.Data); i, off = i+1, off+db.chunkSize {
			end := min(off+db.chunkSize, len(t.Data))
			if err := w.set(ctx, chunkKey(runID, step, t.Name, i), t.Data[off:end]); err != nil {
				w.discard()
				return fmt.Errorf("save checkpoint %s@%d: tensor %q: %w", runID, step, t.Name, err)
			}
		}
	}
	if err := w.commit(); err != nil {
		return fmt.Errorf("save checkpoint %s@%d: %w", runID, step, err)
	}
	err = db.update(ctx, func(txn *badger.Txn) error { return txn.Set(ckptKey(runID, step), raw) })
	if err != nil {
		return fmt.Errorf("save checkpoint %s@%d: write manifest: %w", runID, step, err)
	}
	return nil
}

// chunkWriter spreads writes over transactions: a new one starts when the
// current one carries limit bytes or Badger says it is too big. The writes
// read nothing, so they cannot conflict.
type chunkWriter struct {
	db      *DB
	limit   int
	txn     *badger.Txn
	pending int
}

func (w *chunkWriter) set(ctx context.Context, key, val []byte) error {
	if err := w.db.usable(ctx); err != nil {
		return err
	}
	if w.txn != nil && w.pending > 0 && w.pending+len(val) > w.limit {
		if err := w.commit(); err != nil {
			return err
		}
	}
	if w.txn == nil {
		w.txn = w.db.bdb.NewTransaction(true)
	}
	err := w.txn.Set(key, val)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := w.commit(); err != nil {
			return err
		}
		w.txn = w.db.bdb.NewTransaction(true)
		err = w.txn.Set(key, val)
	}
	if err != nil {
		return err
	}
	w.pending += len(val)
	return nil
}

func (w *chunkWriter) commit() error {
	if w.txn == nil {
		return nil
	}
	err := w.db.commit(w.txn)
	w.txn.Discard()
	w.txn, w.pending = nil, 0
	return err
}

func (w *chunkWriter) discard() {
	if w.txn != nil {
		w.txn.Discard()
		w.txn, w.pending = nil, 0
	}
}

// deletePrefix deletes every key under prefix, a batch at a time.
func (db *DB) deletePrefix(ctx context.Context, prefix []byte) error {
	for {
		var keys [][]byte
		err := db.view(ctx, func(txn *badger.Txn) error {
			return scan(ctx, txn, prefix, true, func(item *badger.Item) error {
				keys = append(keys, item.KeyCopy(nil))
				if len(keys) == 10_000 {
					return errBatchFull
				}
				return nil
			})
		})
		if err != nil && !errors.Is(err, errBatchFull) {
			return err
		}
		if len(keys) == 0 {
			return nil
		}
		if err := db.deleteKeys(ctx, keys); err != nil {
			return err
		}
	}
}

var errBatchFull = errors.New("batch full")

// deleteKeys deletes keys in as few transactions as Badger allows.
func (db *DB) deleteKeys(ctx context.Context, keys [][]byte) error {
	for len(keys) > 0 {
		if err := db.usable(ctx); err != nil {
			return err
		}
		txn := db.bdb.NewTransaction(true)
		n := 0
		for ; n < len(keys); n++ {
			if err := txn.Delete(keys[n]); err != nil {
				if errors.Is(err, badger.ErrTxnTooBig) && n > 0 {
					break
				}
				txn.Discard()
				return err
			}
		}
		err := db.commit(txn)
		txn.Discard()
		if err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// latestStep finds the highest checkpoint step of a run by seeking to the
// end of its key range.
func (s *badgerCheckpointStore) latestStep(ctx context.Context, runID string) (step int64, found bool, err error) {
	prefix := ckptPrefix(runID)
	err = s.db.view(ctx, func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true})
		defer it.Close()
		it.Seek(append(bytes.Clone(prefix), bytes.Repeat([]byte{0xff}, 9)...))
		if !it.Valid() {
			return nil
		}
		st, ok := stepFromCkptKey(runID, it.Item().Key())
		if !ok {
			return fmt.Errorf("malformed checkpoint key %q: %w", it.Item().Key(), ErrCorrupt)
		}
		step, found = st, true
		return nil
	})
	return step, found, err
}

func (s *badgerCheckpointStore) Load(ctx context.Context, runID string, step int64) (*records.Checkpoint, error) {
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	m := &records.Checkpoint{}
	err := s.db.view(ctx, func(txn *badger.Txn) error { return getProto(txn, ckptKey(runID, step), m) })
	if err != nil {
		return nil, fmt.Errorf("load checkpoint %s@%d: %w", runID, step, err)
	}
	return m, nil
}

func (s *badgerCheckpointStore) Latest(ctx context.Context, runID string) (*records.Checkpoint, error) {
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	step, found, err := s.latestStep(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("latest checkpoint of %s: %w", runID, err)
	}
	if !found {
		return nil, fmt.Errorf("latest checkpoint of %s: %w", runID, ErrNotFound)
	}
	return s.Load(ctx, runID, step)
}

func (s *badgerCheckpointStore) Steps(ctx context.Context, runID string) ([]int64, error) {
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	var steps []int64
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, ckptPrefix(runID), true, func(item *badger.Item) error {
			st, ok := stepFromCkptKey(runID, item.Key())
			if !ok {
				return fmt.Errorf("malformed checkpoint key %q: %w", item.Key(), ErrCorrupt)
			}
			steps = append(steps, st)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint steps of %s: %w", runID, err)
	}
	return steps, nil
}

func (s *badgerCheckpointStore) ReadTensor(ctx context.Context, runID string, step int64, name string) ([]byte, error) {
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	if err := checkID("tensor name", name); err != nil {
		return nil, err
	}
	var data []byte
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		m := &records.Checkpoint{}
		if err := getProto(txn, ckptKey(runID, step), m); err != nil {
			return err
		}
		meta := findTensor(m, name)
		if meta == nil {
			return fmt.Errorf("no tensor %q in the manifest: %w", name, ErrNotFound)
		}
		data = make([]byte, 0, meta.GetSizeBytes())
		prefix := chunkTensorPrefix(runID, step, name)
		next := uint32(0)
		err := scan(ctx, txn, prefix, false, func(item *badger.Item) error {
			key := item.Key()
			if len(key) != len(prefix)+4 || binary.BigEndian.Uint32(key[len(prefix):]) != next {
				return fmt.Errorf("tensor %q: expected chunk %d, found key %q: %w", name, next, key, ErrCorrupt)
			}
			next++
			return item.Value(func(v []byte) error {
				if int64(len(data)+len(v)) > meta.GetSizeBytes() {
					return fmt.Errorf("tensor %q: chunks hold more than the %d bytes in the manifest: %w",
						name, meta.GetSizeBytes(), ErrCorrupt)
				}
				data = append(data, v...)
				return nil
			})
		})
		if err != nil {
			return err
		}
		if int64(next) != int64(meta.GetChunks()) {
			return fmt.Errorf("tensor %q: found %d chunks, manifest says %d: %w", name, next, meta.GetChunks(), ErrCorrupt)
		}
		return checkTensorBytes(meta, data)
	})
	if err != nil {
		return nil, fmt.Errorf("read tensor %s@%d/%s: %w", runID, step, name, err)
	}
	return data, nil
}

// Prune deletes manifests first, so a pruned checkpoint disappears at once,
// then every chunk of the run below the newest step that no remaining
// manifest names: the pruned checkpoints' and those of interrupted saves.
func (s *badgerCheckpointStore) Prune(ctx context.Context, runID string, keep int) ([]int64, error) {
	if err := checkID("run id", runID); err != nil {
		return nil, err
	}
	if keep < 1 {
		return nil, fmt.Errorf("prune checkpoints of %s: keep %d, need at least 1: %w", runID, keep, ErrInvalid)
	}
	s.db.ckptMu.Lock()
	defer s.db.ckptMu.Unlock()
	steps, err := s.Steps(ctx, runID)
	if err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, nil
	}
	var doomed []int64
	if len(steps) > keep {
		doomed = steps[:len(steps)-keep]
	}
	keys := make([][]byte, len(doomed))
	for i, st := range doomed {
		keys[i] = ckptKey(runID, st)
	}
	if err := s.db.deleteKeys(ctx, keys); err != nil {
		return nil, fmt.Errorf("prune checkpoints of %s: %w", runID, err)
	}

	kept := map[int64]bool{}
	for _, st := range steps[len(doomed):] {
		kept[st] = true
	}
	newest := steps[len(steps)-1]
	// The chunks go by step prefix (dropPrefixes), so that the value log
	// learns their space is free.
	var drop [][]byte
	seen := map[int64]bool{}
	err = s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, chunkRunPrefix(runID), true, func(item *badger.Item) error {
			st, ok := stepFromChunkKey(runID, item.Key())
			if ok && !kept[st] && st < newest && !seen[st] {
				seen[st] = true
				drop = append(drop, chunkStepPrefix(runID, st))
			}
			return nil
		})
	})
	if err == nil {
		err = s.db.dropPrefixes(ctx, drop)
	}
	if err != nil {
		return nil, fmt.Errorf("prune checkpoints of %s: delete chunks: %w", runID, err)
	}
	return doomed, nil
}
