package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// The disk-full test fills a small tmpfs with a store. Badger writes its
// value log through a sparse memory-mapped file, and a page of it that the
// file system cannot back kills the process with SIGBUS (tmpfs behaves as
// ext4 does here), so the store is driven from a child process: the test
// binary itself, run with diskFullEnv set.
const (
	diskFullEnv     = "FROGNANO_TEST_DISKFULL_DIR"
	diskFullReserve = "FROGNANO_TEST_DISKFULL_RESERVE"
	diskFullValue   = 128 << 10
)

func diskFullKey(i int) []byte { return []byte(fmt.Sprintf("v1/test-diskfull/%05d", i)) }

func diskFullValueOf(i int) []byte { return bytes.Repeat([]byte{byte(i)}, diskFullValue) }

// TestDiskFullChild is the child's side: it writes 128 KiB values (they go
// to the value log) one per transaction until a write fails, then prints
// how many were acknowledged and what the failure was, and closes the
// store. It does nothing in an ordinary test run.
func TestDiskFullChild(t *testing.T) {
	dir := os.Getenv(diskFullEnv)
	if dir == "" {
		t.Skip("the child of TestDiskFullIsAnErrorNotASIGBUS")
	}
	reserve, _ := strconv.ParseInt(os.Getenv(diskFullReserve), 10, 64)
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles, WithDiskReserve(reserve))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ctx := context.Background()
	acked := 0
	var werr error
	for i := 0; i < 4096 && werr == nil; i++ {
		werr = db.update(ctx, func(txn *badger.Txn) error { return txn.Set(diskFullKey(i), diskFullValueOf(i)) })
		if werr == nil {
			acked++
		}
	}
	fmt.Printf("ACKED %d\n", acked)
	fmt.Printf("WRITE-ERROR %v\n", werr)
	fmt.Printf("DISK-FULL %v\n", errors.Is(werr, ErrDiskFull))
	fmt.Printf("CLOSE %v\n", db.Close())
}

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory, removed
// with the test.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir, err := os.MkdirTemp("", "frognano-diskfull-")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		os.Remove(dir)
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		os.Remove(dir)
	})
	return dir
}

// runDiskFullChild runs TestDiskFullChild on dir with the given reserve.
func runDiskFullChild(t *testing.T, dir string, reserve int64) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskFullChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), diskFullEnv+"="+dir, diskFullReserve+"="+strconv.FormatInt(reserve, 10))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func childValue(out, name string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestDiskFullIsAnErrorNotASIGBUS: on a 48 MiB tmpfs, a store whose reserve
// is one byte (no guard: what every store was before the reserve existed)
// dies of SIGBUS inside Badger once the file system is full — the
// fault-injection suite's disk-full finding. With a reserve, the same
// writes end in ErrDiskFull: the process lives, Close does not flush onto
// the full disk, Open refuses the nearly full file system with the same
// error, and once space is freed the store opens with every acknowledged
// write, passes CheckConsistency and accepts writes again.
func TestDiskFullIsAnErrorNotASIGBUS(t *testing.T) {
	if os.Getenv(diskFullEnv) != "" {
		t.Skip("in the child")
	}
	if testing.Short() {
		t.Skip("fills a tmpfs; skipped with -short")
	}

	t.Run("unguarded", func(t *testing.T) {
		mnt := mountTmpfs(t, 48<<20)
		out, err := runDiskFullChild(t, filepath.Join(mnt, "db"), 1)
		if err == nil || !strings.Contains(out, "SIGBUS") {
			t.Fatalf("a store without a reserve on a full tmpfs did not die of SIGBUS (err %v); its output:\n%s", err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "SIGBUS") || strings.HasPrefix(line, "fatal error") || strings.HasPrefix(line, "ACKED") {
				t.Logf("child: %s", line)
			}
		}
	})

	mnt := mountTmpfs(t, 48<<20)
	// 8 MiB the test frees later, standing for whatever filled the disk.
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "db")
	const reserve = 12 << 20
	out, err := runDiskFullChild(t, dir, reserve)
	if err != nil {
		t.Fatalf("the child died (%v):\n%s", err, out)
	}
	acked, _ := strconv.Atoi(childValue(out, "ACKED"))
	if childValue(out, "DISK-FULL") != "true" || acked == 0 {
		t.Fatalf("want some acknowledged writes, then ErrDiskFull:\n%s", out)
	}
	if c := childValue(out, "CLOSE"); !strings.Contains(c, "disk full") {
		t.Fatalf("Close on the full disk said %q, want ErrDiskFull (no flush)", c)
	}
	t.Logf("%d writes of 128 KiB acknowledged, then: %s", acked, childValue(out, "WRITE-ERROR"))

	if _, err := Open(dir, WithLogger(testLogger(t)), smallFiles, WithDiskReserve(reserve)); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Open on the full disk: %v, want ErrDiskFull", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, WithLogger(testLogger(t)), smallFiles, WithDiskReserve(reserve))
	if err != nil {
		t.Fatalf("Open once space was freed: %v", err)
	}
	ctx := context.Background()
	err = db.view(ctx, func(txn *badger.Txn) error {
		for i := 0; i < acked; i++ {
			item, err := txn.Get(diskFullKey(i))
			if err != nil {
				return fmt.Errorf("acknowledged write %d: %w", i, err)
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return fmt.Errorf("acknowledged write %d: %w", i, err)
			}
			if !bytes.Equal(v, diskFullValueOf(i)) {
				return fmt.Errorf("acknowledged write %d reads back different bytes", i)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.CheckConsistency(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.update(ctx, func(txn *badger.Txn) error { return txn.Set(diskFullKey(acked), diskFullValueOf(acked)) }); err != nil {
		t.Fatalf("write after space was freed: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
