package persistence

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// schema1Fixture is every key and value of a version-1 database, written
// through the stores of the last version-1 build (testdata/gen).
const schema1Fixture = "testdata/schema1.kv"

// The default estimator's records in the fixture, as testdata/gen wrote them.
var (
	schema1State = &records.FrontierState{PolicyVersion: 4, BatchSeq: 2, Counters: map[string]int64{"unknown_task": 1},
		Model: &records.DifficultyModel{Weights: map[string]float64{"bias": -0.5}}}
	schema1Stats = []*records.TaskStats{ // in task id order
		{TaskId: "gone", Alpha: 1, Beta: 2, Attempts: 1},
		{TaskId: "t1", Alpha: 2.5, Beta: 1.5, Attempts: 3, Successes: 2, PolicyVersion: 4},
		{TaskId: "t2", Alpha: 0.5, Beta: 9, Attempts: 8, Retired: true, RetiredReason: "hopeless", PolicyVersion: 4},
	}
)

// migrateOneByOne makes every migration transaction move one record.
func migrateOneByOne(c *config) { c.migrateBatch = 1 }

// readKV reads a key/value listing in the format of testdata/schema1.kv.
func readKV(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		key, err := strconv.Unquote(line[:i])
		if err != nil {
			t.Fatalf("%s: key of %q: %v", path, line, err)
		}
		val, err := hex.DecodeString(line[i+1:])
		if err != nil {
			t.Fatalf("%s: value of %q: %v", path, line, err)
		}
		out[key] = val
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeRaw creates a Badger database in dir holding exactly kvs.
func writeRaw(t *testing.T, dir string, kvs map[string][]byte) {
	t.Helper()
	bdb, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithValueLogFileSize(4 << 20))
	if err != nil {
		t.Fatal(err)
	}
	wb := bdb.NewWriteBatch()
	for k, v := range kvs {
		if err := wb.Set([]byte(k), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := bdb.Close(); err != nil {
		t.Fatal(err)
	}
}

// readRaw lists every key and value of the closed database in dir.
func readRaw(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	bdb, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithValueLogFileSize(4 << 20))
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	return dumpBadger(t, bdb)
}

func dumpBadger(t *testing.T, bdb *badger.DB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := bdb.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().Key())] = v
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// migrated is what a version-1 listing becomes: each v1/stats/<task> record,
// bytes unchanged, under the default estimator's key, and version 2.
func migrated(v1 map[string][]byte) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range v1 {
		if id, ok := strings.CutPrefix(k, prefixStatsV1); ok {
			k = string(frontierStatsKey(DefaultFrontier, id))
		}
		out[k] = v
	}
	out[string(schemaKey)] = []byte("2")
	return out
}

// diffKV describes how got differs from want, or returns "".
func diffKV(got, want map[string][]byte) string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("missing %q", k))
		} else if !bytes.Equal(g, want[k]) {
			d = append(d, fmt.Sprintf("%q = %x, want %x", k, g, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("unexpected %q", k))
		}
	}
	return strings.Join(d, "; ")
}

// checkSchema1Migrated checks, through the stores, that the fixture's data
// all reads back from the migrated database.
func checkSchema1Migrated(t *testing.T, db *DB) {
	t.Helper()
	ctx := context.Background()
	if got, err := db.Frontier().Get(ctx, DefaultFrontier); err != nil || !sameProto(t, got, schema1State) {
		t.Errorf("default state = %v, %v; want %v", got, err, schema1State)
	}
	got, err := db.Frontier().Stats(ctx, DefaultFrontier)
	if err != nil || len(got) != len(schema1Stats) {
		t.Fatalf("default stats = %v, %v; want %v", got, err, schema1Stats)
	}
	for i := range got {
		if !sameProto(t, got[i], schema1Stats[i]) {
			t.Errorf("default stats %d = %v, want %v", i, got[i], schema1Stats[i])
		}
	}
	if st, err := db.Frontier().Stats(ctx, "run-1"); err != nil || len(st) != 1 || st[0].GetTaskId() != "t1" || st[0].GetAttempts() != 5 {
		t.Errorf("run-1 stats = %v, %v", st, err)
	}
	if names, err := db.Frontier().Names(ctx); err != nil || !slices.Equal(names, []string{DefaultFrontier, "run-1"}) {
		t.Errorf("Names = %v, %v", names, err)
	}
	if tasks, err := db.Tasks().List(ctx, TaskFilter{Environment: "env-a"}); err != nil || !slices.Equal(ids(tasks), []string{"t1", "t3"}) {
		t.Errorf("tasks of env-a = %v, %v", ids(tasks), err)
	}
	if trajs, err := db.Trajectories().ListByTask(ctx, "t1"); err != nil || !slices.Equal(ids(trajs), []string{"j1"}) {
		t.Errorf("trajectories of t1 = %v, %v", ids(trajs), err)
	}
	last := 599
	if w, err := db.Checkpoints().ReadTensor(ctx, "run-1", 3, "w"); err != nil || len(w) != 600 || w[last] != byte(last*7+last/97) {
		t.Errorf("checkpoint tensor: %d bytes, %v", len(w), err)
	}
	if c, err := db.Coverage().Get(ctx, "env-a"); err != nil || c.GetImage() != "img:a" {
		t.Errorf("coverage = %v, %v", c, err)
	}
	if ds, err := db.SandboxDestroys().List(ctx, "ns"); err != nil || len(ds) != 1 || ds[0].Attempts != 2 {
		t.Errorf("pending destroys = %v, %v", ds, err)
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Errorf("CheckConsistency: %v", err)
	}
}

// reopenIsNoOp closes db, opens it again and checks that Open wrote nothing.
func reopenIsNoOp(t *testing.T, db *DB, dir string) {
	t.Helper()
	before, version := dumpBadger(t, db.bdb), db.bdb.MaxVersion()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	defer db.Close()
	if d := diffKV(dumpBadger(t, db.bdb), before); d != "" {
		t.Errorf("second Open changed the database: %s", d)
	}
	if v := db.bdb.MaxVersion(); v != version {
		t.Errorf("second Open committed a write: version %d, was %d", v, version)
	}
}

// TestMigrateSchema1 opens the database the last version-1 build wrote: the
// default estimator's stats move from v1/stats/ to its frontier-stats keys,
// bytes unchanged; every other record stays as it was; the version becomes 2;
// a second Open changes nothing.
func TestMigrateSchema1(t *testing.T) {
	ctx := context.Background()
	v1 := readKV(t, schema1Fixture)
	if string(v1[string(schemaKey)]) != "1" {
		t.Fatalf("the fixture is of schema version %q", v1[string(schemaKey)])
	}
	dir := t.TempDir()
	writeRaw(t, dir, v1)
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatalf("Open of a version-1 database: %v", err)
	}
	if d := diffKV(dumpBadger(t, db.bdb), migrated(v1)); d != "" {
		t.Errorf("after the migration: %s", d)
	}
	checkSchema1Migrated(t, db)
	// New commits of the default estimator go to the new keys only.
	if err := db.Frontier().Commit(ctx, DefaultFrontier, nil, []*records.TaskStats{{TaskId: "t3", Attempts: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, db, []byte(prefixStatsV1)); n != 0 {
		t.Errorf("%d keys under %s", n, prefixStatsV1)
	}
	if st, err := db.Frontier().Stats(ctx, DefaultFrontier); err != nil || !slices.Equal(statsIDs(st), []string{"gone", "t1", "t2", "t3"}) {
		t.Errorf("default stats after a commit = %v, %v", statsIDs(st), err)
	}
	reopenIsNoOp(t, db, dir)
}

// TestMigrateManyStats: more records than one migration transaction moves.
func TestMigrateManyStats(t *testing.T) {
	const n = 2500 // three transactions of defaultMigrateBatch
	v1 := map[string][]byte{string(schemaKey): []byte("1")}
	for i := range n {
		raw, err := marshal(&records.TaskStats{TaskId: fmt.Sprintf("t%04d", i), Attempts: int64(i)})
		if err != nil {
			t.Fatal(err)
		}
		v1[prefixStatsV1+fmt.Sprintf("t%04d", i)] = raw
	}
	dir := t.TempDir()
	writeRaw(t, dir, v1)
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if d := diffKV(dumpBadger(t, db.bdb), migrated(v1)); d != "" {
		t.Errorf("after the migration: %.500s", d)
	}
	if st, err := db.Frontier().Stats(context.Background(), DefaultFrontier); err != nil || len(st) != n || st[n-1].GetAttempts() != n-1 {
		t.Errorf("default stats: %d, %v", len(st), err)
	}
}

// injectFault makes the point fail at its hit-th call, until restored.
func injectFault(point string, hit int) (restore func()) {
	orig, n := fault, 0
	fault = func(name string) error {
		if name == point {
			if n++; n == hit {
				return fmt.Errorf("test fault at %s (hit %d): %w", name, n, errInjected)
			}
		}
		return orig(name)
	}
	return func() { fault = orig }
}

var errInjected = errors.New("injected")

// TestMigrateSchema1Interrupted fails the migration before each of its
// transactions (one per record, then the one that finds none left): Open
// fails, the database records version 2 (so a version-1 build refuses it)
// with the migration marked unfinished, every stats record is in exactly one
// place, and the next Open finishes the job.
func TestMigrateSchema1Interrupted(t *testing.T) {
	v1 := readKV(t, schema1Fixture)
	for hit := 1; hit <= len(schema1Stats)+1; hit++ {
		t.Run(fmt.Sprintf("before transaction %d", hit), func(t *testing.T) {
			dir := t.TempDir()
			writeRaw(t, dir, v1)
			restore := injectFault("store/schema-migrate", hit)
			_, err := Open(dir, WithLogger(testLogger(t)), smallFiles, migrateOneByOne)
			restore()
			if !errors.Is(err, errInjected) {
				t.Fatalf("Open = %v, want the injected fault", err)
			}
			checkHalfMigrated(t, readRaw(t, dir), v1, hit-1)

			db, err := Open(dir, WithLogger(testLogger(t)), smallFiles, migrateOneByOne)
			if err != nil {
				t.Fatalf("Open after the interrupted migration: %v", err)
			}
			if d := diffKV(dumpBadger(t, db.bdb), migrated(v1)); d != "" {
				t.Errorf("after the finished migration: %s", d)
			}
			checkSchema1Migrated(t, db)
			reopenIsNoOp(t, db, dir)
		})
	}
}

// checkHalfMigrated checks what an interrupted migration left: version 2,
// the marker, moved of the v1/stats/ records moved and the others not.
func checkHalfMigrated(t *testing.T, got, v1 map[string][]byte, moved int) {
	t.Helper()
	if v := string(got[string(schemaKey)]); v != "2" {
		t.Errorf("schema version %q during the migration, want \"2\" (a version-1 build must refuse it)", v)
	}
	if m := string(got[string(migrationKey)]); m != "1" {
		t.Errorf("migration marker %q, want \"1\"", m)
	}
	var old, moves int
	for k, v := range v1 {
		id, ok := strings.CutPrefix(k, prefixStatsV1)
		if !ok {
			continue
		}
		o, inOld := got[k]
		n, inNew := got[string(frontierStatsKey(DefaultFrontier, id))]
		switch {
		case inOld && !inNew && bytes.Equal(o, v):
			old++
		case inNew && !inOld && bytes.Equal(n, v):
			moves++
		default:
			t.Errorf("stats of %s: old key %v, new key %v", id, inOld, inNew)
		}
	}
	if moves != moved {
		t.Errorf("%d records moved (%d not), want %d", moves, old, moved)
	}
}

const migrateKillEnv = "FROGNANO_PERSISTENCE_MIGRATE_KILL"

// TestMigrateKillChild is not a test: it is the process TestMigrateKilled
// kills in the middle of a migration.
func TestMigrateKillChild(t *testing.T) {
	spec := os.Getenv(migrateKillEnv)
	if spec == "" {
		t.Skip("helper process for TestMigrateKilled")
	}
	dir, hitStr, _ := strings.Cut(spec, ",")
	hit, _ := strconv.Atoi(hitStr)
	n := 0
	fault = func(name string) error {
		if name == "store/schema-migrate" {
			if n++; n == hit {
				fmt.Println("killing")
				p, _ := os.FindProcess(os.Getpid())
				_ = p.Kill()
				time.Sleep(time.Minute)
			}
		}
		return nil
	}
	if _, err := Open(dir, smallFiles, migrateOneByOne); err != nil {
		fmt.Println("E", err)
		os.Exit(2)
	}
	fmt.Println("opened")
	os.Exit(0)
}

// TestMigrateKilled kills the process migrating (SIGKILL, nothing flushed)
// after its first transaction and after its last move: what Badger
// acknowledged survives, and the next Open finishes the migration.
func TestMigrateKilled(t *testing.T) {
	v1 := readKV(t, schema1Fixture)
	for _, hit := range []int{2, len(schema1Stats) + 1} {
		t.Run(fmt.Sprintf("before transaction %d", hit), func(t *testing.T) {
			dir := t.TempDir()
			writeRaw(t, dir, v1)
			cmd := exec.Command(os.Args[0], "-test.run=^TestMigrateKillChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d", migrateKillEnv, dir, hit))
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "killing") {
				t.Fatalf("child: %v\n%s", err, out)
			}
			// Inspect a copy, so that Open finds the directory exactly
			// as the kill left it (memtable WALs not yet replayed).
			inspect := t.TempDir()
			if err := os.CopyFS(inspect, os.DirFS(dir)); err != nil {
				t.Fatal(err)
			}
			checkHalfMigrated(t, readRaw(t, inspect), v1, hit-1)
			db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
			if err != nil {
				t.Fatalf("Open after the kill: %v", err)
			}
			defer db.Close()
			if d := diffKV(dumpBadger(t, db.bdb), migrated(v1)); d != "" {
				t.Errorf("after the finished migration: %s", d)
			}
			checkSchema1Migrated(t, db)
		})
	}
}
