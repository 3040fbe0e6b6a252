package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// countKeys counts the keys under prefix.
func countKeys(t *testing.T, db *DB, prefix []byte) int {
	t.Helper()
	n := 0
	err := db.bdb.View(func(txn *badger.Txn) error {
		return scan(context.Background(), txn, prefix, true, func(*badger.Item) error { n++; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func rawSet(t *testing.T, db *DB, key, val []byte) {
	t.Helper()
	if err := db.bdb.Update(func(txn *badger.Txn) error { return txn.Set(key, val) }); err != nil {
		t.Fatal(err)
	}
}

func rawDelete(t *testing.T, db *DB, key []byte) {
	t.Helper()
	if err := db.bdb.Update(func(txn *badger.Txn) error { return txn.Delete(key) }); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointChunks(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		txnBytes int
		elems    int
	}{
		// 8 KiB transactions: a new transaction every 8 chunks.
		{"byte-limited transactions", 8 << 10, 25_000},
		// No byte limit: 1 KiB chunks stay in the LSM tree and 4 MB of them
		// exceed Badger's 2.4 MB batch limit, so ErrTxnTooBig must be handled.
		{"ErrTxnTooBig", 1 << 30, 1_000_003},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTestDB(t)
			db.ckptTxnBytes = tc.txnBytes
			w := f32Tensor("w", 1, tc.elems)
			if err := db.Checkpoints().Save(ctx, &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{w}, nil); err != nil {
				t.Fatalf("Save: %v", err)
			}
			m, err := db.Checkpoints().Load(ctx, "r", 1)
			if err != nil {
				t.Fatal(err)
			}
			wantChunks := (4*tc.elems + 1023) / 1024
			if got := m.GetTensors()[0].GetChunks(); int(got) != wantChunks {
				t.Errorf("manifest says %d chunks, want %d", got, wantChunks)
			}
			if got := countKeys(t, db, chunkTensorPrefix("r", 1, "w")); got != wantChunks {
				t.Errorf("%d chunk keys stored, want %d", got, wantChunks)
			}
			got, err := db.Checkpoints().ReadTensor(ctx, "r", 1, "w")
			if err != nil || !bytes.Equal(got, w.Data) {
				t.Errorf("ReadTensor: %v, equal %v", err, bytes.Equal(got, w.Data))
			}
		})
	}
}

func TestReadTensorDetectsCorruption(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, db *DB)
	}{
		{"flipped byte", func(t *testing.T, db *DB) {
			key := chunkKey("r", 1, "w", 3)
			var v []byte
			db.bdb.View(func(txn *badger.Txn) error {
				item, err := txn.Get(key)
				if err == nil {
					v, err = item.ValueCopy(nil)
				}
				return err
			})
			v[17] ^= 1
			rawSet(t, db, key, v)
		}},
		{"missing chunk", func(t *testing.T, db *DB) { rawDelete(t, db, chunkKey("r", 1, "w", 2)) }},
		{"missing last chunk", func(t *testing.T, db *DB) { rawDelete(t, db, chunkKey("r", 1, "w", 4)) }},
		{"extra chunk", func(t *testing.T, db *DB) { rawSet(t, db, chunkKey("r", 1, "w", 5), []byte("more")) }},
		{"short chunk", func(t *testing.T, db *DB) { rawSet(t, db, chunkKey("r", 1, "w", 0), []byte("short")) }},
		{"chunks swapped", func(t *testing.T, db *DB) {
			a, b := f32Tensor("w", 1, 1200).Data[0:1024], f32Tensor("w", 1, 1200).Data[1024:2048]
			rawSet(t, db, chunkKey("r", 1, "w", 0), b)
			rawSet(t, db, chunkKey("r", 1, "w", 1), a)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTestDB(t)
			// 4800 bytes: chunks 0-3 full, chunk 4 partial.
			w := f32Tensor("w", 1, 1200)
			if err := db.Checkpoints().Save(ctx, &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{w}, nil); err != nil {
				t.Fatal(err)
			}
			if err := db.CheckConsistency(ctx); err != nil {
				t.Fatalf("CheckConsistency before damage: %v", err)
			}
			tc.damage(t, db)
			if _, err := db.Checkpoints().ReadTensor(ctx, "r", 1, "w"); !errors.Is(err, ErrCorrupt) {
				t.Errorf("ReadTensor = %v, want ErrCorrupt", err)
			}
			if err := db.CheckConsistency(ctx); !errors.Is(err, ErrCorrupt) {
				t.Errorf("CheckConsistency = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestCheckpointOrphanChunks(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t)
	cs := db.Checkpoints()
	// An interrupted save at step 5 left more chunks than the next save at
	// step 5 writes; they must not be read as part of the new tensor.
	for i := range 9 {
		rawSet(t, db, chunkKey("r", 5, "w", i), bytes.Repeat([]byte{0xee}, 1024))
	}
	// An interrupted save at step 3 that is never retried.
	rawSet(t, db, chunkKey("r", 3, "w", 0), []byte("orphan"))
	if _, err := cs.Latest(ctx, "r"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("orphan chunks made a checkpoint visible: %v", err)
	}
	w := f32Tensor("w", 5, 600)
	if err := cs.Save(ctx, &records.Checkpoint{RunId: "r", Step: 5}, []Tensor{w}, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := cs.ReadTensor(ctx, "r", 5, "w"); err != nil || !bytes.Equal(got, w.Data) {
		t.Fatalf("ReadTensor after saving over orphans: %v", err)
	}
	if err := cs.Save(ctx, &records.Checkpoint{RunId: "r", Step: 6}, []Tensor{f32Tensor("w", 6, 600)}, nil); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, db, chunkStepPrefix("r", 3)); n != 1 {
		t.Fatalf("setup: %d orphan chunks at step 3", n)
	}
	if _, err := cs.Prune(ctx, "r", 2); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		step int64
		want int
	}{{3, 0}, {5, 3}, {6, 3}} {
		if n := countKeys(t, db, chunkStepPrefix("r", tc.step)); n != tc.want {
			t.Errorf("after Prune: %d chunks at step %d, want %d", n, tc.step, tc.want)
		}
	}
}

func TestCheckConsistencyFindsBrokenIndexes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, db *DB)
		want   string
	}{
		{"task missing from its index", func(t *testing.T, db *DB) { rawDelete(t, db, taskEnvKey("env", "t1")) }, "missing from the index"},
		{"index names a missing task", func(t *testing.T, db *DB) { rawSet(t, db, taskEnvKey("env", "ghost"), nil) }, "ghost"},
		{"index names the wrong environment", func(t *testing.T, db *DB) { rawSet(t, db, taskEnvKey("other", "t1"), nil) }, "of environment"},
		{"undecodable task", func(t *testing.T, db *DB) { rawSet(t, db, taskKey("t2"), []byte{0xff, 0xff}) }, "decode"},
		{"trajectory missing from id index", func(t *testing.T, db *DB) { rawDelete(t, db, trajIDKey("j1")) }, "id index"},
		{"trajectory missing from task index", func(t *testing.T, db *DB) { rawDelete(t, db, trajTaskKey("t1", "r", "j1")) }, "task index"},
		{"successes above attempts", func(t *testing.T, db *DB) {
			raw, _ := marshal(&records.TaskStats{TaskId: "t1", Attempts: 1, Successes: 2})
			rawSet(t, db, frontierStatsKey(DefaultFrontier, "t1"), raw)
		}, "successes"},
		{"stats under another task's key", func(t *testing.T, db *DB) {
			raw, _ := marshal(&records.TaskStats{TaskId: "t2"})
			rawSet(t, db, frontierStatsKey("run-1", "t1"), raw)
		}, "are for task"},
		{"a version-1 stats record", func(t *testing.T, db *DB) {
			raw, _ := marshal(&records.TaskStats{TaskId: "t1"})
			rawSet(t, db, []byte(prefixStatsV1+"t1"), raw)
		}, "schema-version-1 record"},
		{"an unfinished migration", func(t *testing.T, db *DB) { rawSet(t, db, migrationKey, []byte("1")) }, "did not finish"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTestDB(t)
			if err := db.Tasks().PutMany(ctx, []*records.Task{sampleTask("t1", "env"), sampleTask("t2", "env")}); err != nil {
				t.Fatal(err)
			}
			if err := db.Trajectories().Append(ctx, sampleTrajectory("j1", "r", "t1")); err != nil {
				t.Fatal(err)
			}
			if err := db.CheckConsistency(ctx); err != nil {
				t.Fatalf("CheckConsistency before damage: %v", err)
			}
			tc.damage(t, db)
			err := db.CheckConsistency(ctx)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckConsistency = %v, want ErrCorrupt mentioning %q", err, tc.want)
			}
		})
	}
}

func TestPutManySplitsLargeBatches(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t)
	// 3000 tasks of ~3 KB: ~9 MB, well over one 2.4 MB Badger batch.
	var tasks []*records.Task
	for i := range 3000 {
		task := sampleTask(fmt.Sprintf("t%04d", i), fmt.Sprintf("env-%d", i%3))
		task.GoldPatch = strings.Repeat("+", 3000)
		tasks = append(tasks, task)
	}
	if err := db.Tasks().PutMany(ctx, tasks); err != nil {
		t.Fatalf("PutMany: %v", err)
	}
	for _, tc := range []struct {
		env  string
		want int
	}{{"", 3000}, {"env-0", 1000}, {"env-2", 1000}} {
		if n, err := db.Tasks().Count(ctx, TaskFilter{Environment: tc.env}); err != nil || n != tc.want {
			t.Errorf("Count(%q) = %d, %v; want %d", tc.env, n, err, tc.want)
		}
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Error(err)
	}
}

func TestCollectGarbageKeepsLiveData(t *testing.T) {
	ctx := context.Background()
	db, err := Open(t.TempDir(), WithLogger(testLogger(t)), WithChunkSize(64<<10), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cs := db.Checkpoints()
	// 64 KiB chunks go to the value log; pruning leaves most of it garbage.
	for step := range int64(6) {
		if err := cs.Save(ctx, &records.Checkpoint{RunId: "r", Step: step}, []Tensor{f32Tensor("w", uint64(step), 300_000)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.Prune(ctx, "r", 1); err != nil {
		t.Fatal(err)
	}
	if err := db.bdb.Flatten(1); err != nil {
		t.Fatal(err)
	}
	if err := db.CollectGarbage(ctx); err != nil {
		t.Fatalf("CollectGarbage: %v", err)
	}
	got, err := cs.ReadTensor(ctx, "r", 5, "w")
	if err != nil || !bytes.Equal(got, f32Tensor("w", 5, 300_000).Data) {
		t.Errorf("after CollectGarbage the kept checkpoint reads %v", err)
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Error(err)
	}
}

// TestPruneReclaimsDisk: a run that saves a checkpoint at every step and
// keeps the newest (Prune) holds about one checkpoint on disk once the value
// log is collected (the node does so every GCEvery), not every checkpoint it
// ever saved: pruned chunks must reach Badger's discard statistics, which
// deleting their keys alone does not do while the keys sit in a memtable.
func TestPruneReclaimsDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, WithLogger(testLogger(t)), WithChunkSize(64<<10), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cs := db.Checkpoints()
	const n = 2_000_000 // 8 MB a checkpoint
	for step := range int64(12) {
		if err := cs.Save(ctx, &records.Checkpoint{RunId: "r", Step: step}, []Tensor{f32Tensor("w", uint64(step), n)}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.Prune(ctx, "r", 1); err != nil {
			t.Fatal(err)
		}
		if err := db.CollectGarbage(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var vlog int64
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".vlog") {
			if fi, err := e.Info(); err == nil {
				vlog += fi.Size()
			}
		}
	}
	t.Logf("value log: %d MB after 12 saves of %d MB", vlog>>20, (4*n)>>20)
	if ckpt := int64(4 * n); vlog > 3*ckpt {
		t.Errorf("value log %d MB after 12 saves of %d MB, each pruning the one before: want at most 3 checkpoints' worth", vlog>>20, ckpt>>20)
	}
	got, err := cs.ReadTensor(ctx, "r", 11, "w")
	if err != nil || !bytes.Equal(got, f32Tensor("w", 11, n).Data) {
		t.Errorf("the kept checkpoint reads %v", err)
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Error(err)
	}
}
