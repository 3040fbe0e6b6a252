// This file generates ../schema1.kv, the old-format fixture of
// TestMigrateSchema1 (migrate_test.go). It does not build against the
// current package: copy it into persistence/ of a checkout of commit f598635
// (the last schema-version-1 build, which still has the CurriculumStore) and
// run
//
//	FROGNANO_SCHEMA1_OUT=$PWD/testdata/schema1.kv go test ./persistence -run '^TestGenSchema1$' -count=1
//
// It writes through that build's stores only, then lists every key and value
// the database holds. Keep the records in step with TestMigrateSchema1.
package persistence

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

func TestGenSchema1(t *testing.T) {
	out := os.Getenv("FROGNANO_SCHEMA1_OUT")
	if out == "" {
		t.Skip("set FROGNANO_SCHEMA1_OUT")
	}
	ctx := context.Background()
	db, err := Open(t.TempDir(), WithChunkSize(256))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	task := func(id, env string) *records.Task {
		return &records.Task{Id: id, Environment: env, Language: "python", BugPatch: "-a\n+b\n", GoldPatch: "-b\n+a\n",
			FailToPass: []string{"tests/test_x.py::test_" + id}, TestCommand: "pytest -q",
			Difficulty: &records.DifficultyFeatures{Operators: []string{"swap_return"}, Edits: 1, Files: 1, HintLevel: 2}}
	}
	must(db.Tasks().PutMany(ctx, []*records.Task{task("t1", "env-a"), task("t2", "env-b"), task("t3", "env-a")}))
	must(db.Runs().Put(ctx, &records.Run{Id: "run-1"}))
	must(db.Trajectories().Append(ctx, &records.Trajectory{Id: "j1", TaskId: "t1", RunId: "run-1", Reward: 1,
		TokenIds: []int32{1, 2, 3}, PolicyMask: []bool{false, true, true}}))
	data := make([]byte, 4*150) // 600 bytes: three 256-byte chunks
	for i := range data {
		data[i] = byte(i*7 + i/97)
	}
	must(db.Checkpoints().Save(ctx, &records.Checkpoint{RunId: "run-1", Step: 3, PolicyVersion: 3},
		[]Tensor{{Name: "w", DType: records.DType_DTYPE_F32, Shape: []int64{150}, Data: data}}, nil))
	must(db.Coverage().Put(ctx, &records.CoverageMap{Environment: "env-a", Image: "img:a", Tests: []string{"tests/test_x.py::test_t1"}}))
	must(db.SandboxDestroys().Put(ctx, PendingDestroy{Namespace: "ns", ID: "fn-1", Since: time.Unix(1_700_000_000, 0).UTC(), Attempts: 2}))

	// The default estimator: its state, and its posteriors, which this
	// build keeps under v1/stats/ (the CurriculumStore's records).
	must(db.Frontier().Commit(ctx, DefaultFrontier,
		&records.FrontierState{PolicyVersion: 4, BatchSeq: 2, Counters: map[string]int64{"unknown_task": 1},
			Model: &records.DifficultyModel{Weights: map[string]float64{"bias": -0.5}}},
		[]*records.TaskStats{
			{TaskId: "t1", Alpha: 2.5, Beta: 1.5, Attempts: 3, Successes: 2, PolicyVersion: 4},
			{TaskId: "t2", Alpha: 0.5, Beta: 9, Attempts: 8, Retired: true, RetiredReason: "hopeless", PolicyVersion: 4},
		}))
	// A posterior written through the CurriculumStore itself, of a task
	// that is no longer stored.
	_, err = db.Curriculum().Update(ctx, "gone", func(st *records.TaskStats) error {
		st.Alpha, st.Beta, st.Attempts, st.Successes = 1, 2, 1, 0
		return nil
	})
	must(err)
	// A run's estimator, whose posteriors are already under
	// v1/frontier-stats/, of a task the default one knows too.
	must(db.Frontier().Commit(ctx, "run-1", &records.FrontierState{PolicyVersion: 9},
		[]*records.TaskStats{{TaskId: "t1", Alpha: 6, Beta: 1, Attempts: 5, Successes: 5, PolicyVersion: 9}}))

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# frognano persistence, schema version %d: every key (Go-quoted) and value (hex)\n", SchemaVersion)
	fmt.Fprintf(&buf, "# a database holds after testdata/gen/schema1_test.go wrote it at commit f598635.\n")
	err = db.bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(&buf, "%s %s\n", strconv.Quote(string(it.Item().Key())), hex.EncodeToString(v))
		}
		return nil
	})
	must(err)
	must(os.WriteFile(out, buf.Bytes(), 0o644))
}
