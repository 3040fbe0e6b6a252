//go:build linux

package persistence

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// The replaced-directory test reproduces a lost benchmark run. A script
// deleted the store of a running process A (rm -rf), copied a fresh store to
// the same path and started process B on it. A, on its way out, flushed its
// memtable and deleted its memtable WAL by path: "db/00001.mem", which by then
// was B's WAL, the only copy of everything B wrote until its first flush. B
// went on acknowledging writes into an unlinked file for 28 minutes; when it
// was killed, a new process found none of them. Badger names every file by
// path, and A's directory lock is on the deleted directory, so nothing stopped
// A. Open therefore hands Badger a path through a descriptor of the directory
// it opened, which a new directory at the same path cannot capture.
const replacedDirEnv = "FROGNANO_PERSISTENCE_REPLACED_DIR"

// replacedTensor is B's checkpoint: one 192 KiB chunk, so it goes to the
// value log rather than the memtable.
func replacedTensor() Tensor { return f32Tensor("w", 7, 48<<10) }

// TestReplacedDirChild is not a test: it is process B of
// TestReplacedDirectoryCannotDestroyNewStore. It writes, reports each
// acknowledged write, and waits to be killed.
func TestReplacedDirChild(t *testing.T) {
	dir := os.Getenv(replacedDirEnv)
	if dir == "" {
		t.Skip("helper process for TestReplacedDirectoryCannotDestroyNewStore")
	}
	time.AfterFunc(60*time.Second, func() { os.Exit(3) }) // if the parent is gone
	fail := func(err error) {
		fmt.Println("E", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(2)
	}
	ctx := context.Background()
	db, err := Open(dir, WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		fail(err)
	}
	for i := range 40 {
		id := fmt.Sprintf("run-b-%02d", i)
		if err := db.Runs().Put(ctx, &records.Run{Id: id, Status: "running", Step: int64(i)}); err != nil {
			fail(err)
		}
		fmt.Println("A", id)
	}
	man := &records.Checkpoint{RunId: "run-b-00", Step: 1, PolicyVersion: 1}
	if err := db.Checkpoints().Save(ctx, man, []Tensor{replacedTensor()}, nil); err != nil {
		fail(err)
	}
	fmt.Println("A ckpt")
	fmt.Println("written")
	select {}
}

func TestReplacedDirectoryCannotDestroyNewStore(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "db")

	// Process A (this one) opens the store and writes: its memtable and
	// its WAL, dir/00001.mem, hold the write.
	// A's Badger retries its flush into the deleted directory every second
	// for as long as this test binary runs: its log must outlive the test.
	var aLog lockedBuffer
	a, err := Open(dir, WithLogger(slog.New(slog.NewTextHandler(&aLog, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Runs().Put(ctx, &records.Run{Id: "run-a", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	// The store is deleted under A, and a new one starts at the same path.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}

	// A write A acknowledges now could never be read back: it must fail.
	errA := a.Runs().Put(ctx, &records.Run{Id: "run-a2", Status: "running"})
	t.Logf("A's write after its directory was removed: %v", errA)

	// Process B opens a new store at the same path and writes.
	cmd := exec.Command(os.Args[0], "-test.run=^TestReplacedDirChild$", "-test.count=1", "-test.timeout=90s")
	cmd.Env = append(os.Environ(), replacedDirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	written := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			switch kind {
			case "A":
				acked = append(acked, rest)
			case "written":
				close(written)
			case "E":
				t.Errorf("B failed: %s", rest)
			}
		}
	}()
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		err := cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("B did not die by SIGKILL (%v); stderr:\n%s", err, stderr.String())
		}
	}
	select {
	case <-written:
	case <-done:
		kill()
		t.Fatalf("B exited early; stderr:\n%s", stderr.String())
	case <-time.After(60 * time.Second):
		kill()
		t.Fatalf("B did not finish writing in 60s; stderr:\n%s", stderr.String())
	}
	before := dirNames(t, dir)

	// A's writes through its stores fail now, before they reach Badger.
	// Bypassing that check, fill A's memtable so Badger rotates it and
	// flushes it in the background: creating a table, a new WAL, and
	// deleting the flushed WAL, 00001.mem, which is also the name of B's
	// WAL. Through the pinned directory, creating the new WAL fails, and
	// that write fails (later writes would trip Badger's assertion that a
	// memtable exists, so there are none); the flush retries forever, never
	// reaching B's directory.
	val := bytes.Repeat([]byte{'a'}, 48<<10) // under the value threshold: it goes to the memtable
	var errRotate error
	for i := 0; i < 400 && errRotate == nil; i++ {
		txn := a.bdb.NewTransaction(true)
		if errRotate = txn.Set(fmt.Appendf(nil, "a/%03d", i), val); errRotate == nil {
			errRotate = txn.Commit()
		}
		txn.Discard()
	}
	t.Logf("A's Badger writing past a full memtable: %v", errRotate)
	time.Sleep(3 * time.Second) // Badger flushes and retries every second
	if now := dirNames(t, dir); !slices.Equal(before, now) {
		t.Errorf("A's memtable flush changed B's directory: files %v before, %v after", before, now)
	}
	if err := a.Ping(ctx); !errors.Is(err, ErrRemoved) {
		t.Errorf("A's Ping = %v, want ErrRemoved", err)
	}

	// A shuts down while B runs. It must neither hang nor touch B's files.
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	var errClose error
	select {
	case errClose = <-closed:
	case <-time.After(30 * time.Second):
		kill()
		t.Fatal("A's Close hung for 30s after its directory was removed")
	}
	t.Logf("A's Close: %v", errClose)
	after := dirNames(t, dir)
	// B is killed as the kernel killed the benchmark run: no flush.
	kill()

	if !slices.Equal(before, after) {
		t.Errorf("A's Close changed B's directory: files %v before, %v after", before, after)
	}
	b, err := Open(dir, WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var lost []string
	for _, id := range acked {
		if id == "ckpt" {
			data, err := b.Checkpoints().ReadTensor(ctx, "run-b-00", 1, "w")
			if err != nil || !bytes.Equal(data, replacedTensor().Data) {
				lost = append(lost, fmt.Sprintf("checkpoint (%v)", err))
			}
			continue
		}
		if _, err := b.Runs().Get(ctx, id); err != nil {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		t.Errorf("B acknowledged %d writes; after A closed and B was killed, %d are lost: %v", len(acked), len(lost), lost)
	}
	if _, err := b.Runs().Get(ctx, "run-a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("A's record appeared in B's store: %v", err)
	}

	if l := aLog.String(); l != "" {
		t.Logf("A's log:\n%.2000s", l)
	}
	if errA == nil {
		t.Error("A acknowledged a write after its directory was removed; no process can ever read it")
	}
	if errClose == nil {
		t.Error("A's Close reported success, though what A held in memory was lost with its directory")
	}
}

// dirNames lists dir, LOCK excepted (Badger's advisory pid file).
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != "LOCK" {
			names = append(names, e.Name())
		}
	}
	return names
}

// lockedBuffer is an io.Writer for a logger that goroutines use after the
// test has ended.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 64<<10 {
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMovedDirectoryKeepsItsWrites: a store directory moved while open keeps
// working where it went (Badger reaches it through the pinned descriptor, not
// the old path, which names nothing now); Ping reports that a restart would
// not find it; Close flushes into the moved directory, where every write is.
func TestMovedDirectoryKeepsItsWrites(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dir, moved := filepath.Join(root, "db"), filepath.Join(root, "moved")
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(ctx); err != nil {
		t.Fatalf("Ping of a fresh database: %v", err)
	}
	if err := db.Runs().Put(ctx, &records.Run{Id: "before"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := db.Runs().Put(ctx, &records.Run{Id: "after"}); err != nil {
		t.Fatalf("write after the move: %v", err)
	}
	man := &records.Checkpoint{RunId: "after", Step: 1, PolicyVersion: 1}
	if err := db.Checkpoints().Save(ctx, man, []Tensor{replacedTensor()}, nil); err != nil {
		t.Fatalf("checkpoint after the move: %v", err)
	}
	if err := db.Ping(ctx); !errors.Is(err, ErrRemoved) {
		t.Errorf("Ping after the move = %v, want ErrRemoved", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close after the move: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close hung for 30s after the directory was moved")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Close wrote at the old path: %v", err)
	}
	db, err = Open(moved, WithLogger(testLogger(t)), smallFiles)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, id := range []string{"before", "after"} {
		if _, err := db.Runs().Get(ctx, id); err != nil {
			t.Errorf("run %s in the moved directory: %v", id, err)
		}
	}
	if data, err := db.Checkpoints().ReadTensor(ctx, "after", 1, "w"); err != nil || !bytes.Equal(data, replacedTensor().Data) {
		t.Errorf("checkpoint in the moved directory: %v", err)
	}
}
