package persistence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// validDBTemplate builds a closed database with a few tasks, to be copied
// and damaged by the cases of TestOpenRefusesBadDirectories.
func validDBTemplate(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "template")
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := db.Tasks().Put(context.Background(), sampleTask(fmt.Sprintf("t%d", i), "env")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatalf("template has no tables; the MANIFEST cases would not test anything")
	}
	return dir
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "db")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func overwrite(t *testing.T, path string, off int64, junk []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesBadDirectories(t *testing.T) {
	template := validDBTemplate(t)
	junk := []byte(strings.Repeat("\xaa", 16))
	for _, tc := range []struct {
		name string
		// prepare returns the path to open.
		prepare func(t *testing.T) string
		want    error
	}{
		{"locked by this process", func(t *testing.T) string {
			dir := copyDir(t, template)
			db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return dir
		}, ErrLocked},
		{"locked by another process", func(t *testing.T) string {
			dir := copyDir(t, template)
			holdInChild(t, dir)
			return dir
		}, ErrLocked},
		{"MANIFEST magic overwritten", func(t *testing.T) string {
			dir := copyDir(t, template)
			overwrite(t, filepath.Join(dir, "MANIFEST"), 0, junk[:8])
			return dir
		}, ErrCorrupt},
		{"MANIFEST entry overwritten", func(t *testing.T) string {
			dir := copyDir(t, template)
			overwrite(t, filepath.Join(dir, "MANIFEST"), 12, junk)
			return dir
		}, ErrCorrupt},
		{"MANIFEST with junk appended", func(t *testing.T) string {
			dir := copyDir(t, template)
			f, err := os.OpenFile(filepath.Join(dir, "MANIFEST"), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte(strings.Repeat("\xff", 64)))
			f.Close()
			return dir
		}, ErrCorrupt},
		{"MANIFEST empty", func(t *testing.T) string {
			dir := copyDir(t, template)
			if err := os.Truncate(filepath.Join(dir, "MANIFEST"), 0); err != nil {
				t.Fatal(err)
			}
			return dir
		}, ErrCorrupt},
		{"table named by MANIFEST missing", func(t *testing.T) string {
			dir := copyDir(t, template)
			ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
			if err := os.Remove(ssts[0]); err != nil {
				t.Fatal(err)
			}
			return dir
		}, ErrCorrupt},
		{"directory of random files", func(t *testing.T) string {
			dir := t.TempDir()
			for i, name := range []string{"notes.txt", "000001.sst", "000001.vlog", "data.bin"} {
				if err := os.WriteFile(filepath.Join(dir, name), seeded(uint64(i), name, 4096), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return dir
		}, ErrCorrupt},
		{"random files and a random MANIFEST", func(t *testing.T) string {
			dir := t.TempDir()
			for i, name := range []string{"MANIFEST", "KEYREGISTRY", "000001.sst", "00001.mem"} {
				if err := os.WriteFile(filepath.Join(dir, name), seeded(uint64(i), name, 4096), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return dir
		}, ErrCorrupt},
		{"a file, not a directory", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
				t.Fatal(err)
			}
			return path
		}, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.prepare(t)
			before := hashTree(t, path)
			db, err := Open(path, WithLogger(testLogger(t)), smallFiles)
			if err == nil {
				db.Close()
				t.Fatalf("Open succeeded, want %v", tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
			t.Logf("Open: %v", err)
			if after := hashTree(t, path); !maps.Equal(before, after) {
				t.Errorf("a failed Open changed the directory:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// holdChildEnv names the directory a TestHoldChild process keeps open.
const holdChildEnv = "FROGNANO_PERSISTENCE_HOLD_DIR"

// TestHoldChild is not a test: it is the other process of the "locked by
// another process" case, started by holdInChild.
func TestHoldChild(t *testing.T) {
	dir := os.Getenv(holdChildEnv)
	if dir == "" {
		t.Skip("helper process for TestOpenRefusesBadDirectories")
	}
	db, err := Open(dir, smallFiles)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	time.Sleep(time.Minute) // until the parent kills us
	db.Close()
	os.Exit(0)
}

// holdInChild starts a process that opens dir and keeps it open until the
// test ends.
func holdInChild(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), holdChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child did not open the database: %q, %v", line, err)
	}
}

func TestOpenSchema(t *testing.T) {
	ctx := context.Background()
	t.Run("new database records its version and reopens", func(t *testing.T) {
		dir := t.TempDir()
		for range 2 {
			db, err := Open(dir, WithLogger(testLogger(t)))
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Tasks().Put(ctx, sampleTask("t", "e")); err != nil {
				t.Fatal(err)
			}
			var v string
			err = db.bdb.View(func(txn *badger.Txn) error {
				item, err := txn.Get(schemaKey)
				if err != nil {
					return err
				}
				b, err := item.ValueCopy(nil)
				v = string(b)
				return err
			})
			if err != nil || v != "2" {
				t.Errorf("schema key = %q, %v; want \"2\"", v, err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name string
		kvs  map[string]string
		want error
	}{
		{"newer schema", map[string]string{"meta/schema": "3", "v3/task/x": "future"}, ErrSchemaVersion},
		{"newer schema mid-migration", map[string]string{"meta/schema": "3", "meta/migration": "2", "v1/stats/t": "x"}, ErrSchemaVersion},
		{"migration marker not a version", map[string]string{"meta/schema": "2", "meta/migration": "x"}, ErrCorrupt},
		{"migration marker not older", map[string]string{"meta/schema": "2", "meta/migration": "2"}, ErrCorrupt},
		{"much newer schema", map[string]string{"meta/schema": "99"}, ErrSchemaVersion},
		{"schema not a number", map[string]string{"meta/schema": "one"}, ErrCorrupt},
		{"schema zero", map[string]string{"meta/schema": "0"}, ErrCorrupt},
		{"foreign badger database", map[string]string{"users/1": "alice"}, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bdb, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
			if err != nil {
				t.Fatal(err)
			}
			err = bdb.Update(func(txn *badger.Txn) error {
				for k, v := range tc.kvs {
					if err := txn.Set([]byte(k), []byte(v)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			bdb.Close()

			db, err := Open(dir, WithLogger(testLogger(t)))
			if err == nil {
				db.Close()
				t.Fatalf("Open succeeded, want %v", tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
			t.Logf("Open: %v", err)

			// The refused database still holds exactly what it held.
			bdb, err = badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
			if err != nil {
				t.Fatalf("reopen with badger after a refused Open: %v", err)
			}
			defer bdb.Close()
			got := map[string]string{}
			err = bdb.View(func(txn *badger.Txn) error {
				it := txn.NewIterator(badger.DefaultIteratorOptions)
				defer it.Close()
				for it.Rewind(); it.Valid(); it.Next() {
					v, err := it.Item().ValueCopy(nil)
					if err != nil {
						return err
					}
					got[string(it.Item().Key())] = string(v)
				}
				return nil
			})
			if err != nil || !maps.Equal(got, tc.kvs) {
				t.Errorf("after a refused Open the database holds %v (%v), want %v", got, err, tc.kvs)
			}
		})
	}
}

func TestUseAfterClose(t *testing.T) {
	db, err := Open(t.TempDir(), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(context.Background()); err != nil {
		t.Errorf("Ping on an open database = %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if err := db.Ping(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Ping after Close = %v, want ErrClosed", err)
	}
	if err := db.Tasks().Put(context.Background(), sampleTask("t", "e")); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close = %v, want ErrClosed", err)
	}
	if _, err := db.Checkpoints().Latest(context.Background(), "r"); !errors.Is(err, ErrClosed) {
		t.Errorf("Latest after Close = %v, want ErrClosed", err)
	}
}

// TestOpenAfterCrashLeftEmptyLogFile is the scenario the crash test found: a
// SIGKILL between Badger creating a .vlog or .mem file and sizing it leaves
// an empty file that badger.Open refuses (dgraph-io/badger#2207).
func TestOpenAfterCrashLeftEmptyLogFile(t *testing.T) {
	ctx := context.Background()
	template := validDBTemplate(t)
	for _, name := range []string{"000099.vlog", "000000.vlog", "00099.mem", "00000.mem"} {
		t.Run(name, func(t *testing.T) {
			dir := copyDir(t, template)
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer db.Close()
			if n, err := db.Tasks().Count(ctx, TaskFilter{}); err != nil || n != 20 {
				t.Errorf("Count = %d, %v; want the template's 20 tasks", n, err)
			}
			if err := db.Tasks().Put(ctx, sampleTask("after", "env")); err != nil {
				t.Errorf("Put after recovery: %v", err)
			}
			if err := db.CheckConsistency(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}
