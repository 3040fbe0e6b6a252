//go:build unix

package persistence

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// probeLock takes the same flock Badger takes on the directory, without
// writing anything, so a directory held by another process is reported as
// ErrLocked before any other check reads files that process may be writing.
// The returned release must be called before badger.Open, which takes the lock
// for itself.
func probeLock(dir string) (release func(), err error) {
	f, err := os.Open(dir)
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
