//go:build unix

package persistence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// probeLock takes the same flock Badger takes on the directory, without
// writing anything, so a directory held by another process is reported as
// ErrLocked before any other check reads files that process may be writing.
// The returned release must be called before badger.Open, which takes the lock
// for itself.
func probeLock(path, dir string) (release func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open directory %q: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("open database %q: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("lock directory %q: %w", dir, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// dirRemoved reports whether st, from an open directory, says the directory
// was deleted: a deleted directory has no links left.
func dirRemoved(st fs.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && sys.Nlink == 0
}
