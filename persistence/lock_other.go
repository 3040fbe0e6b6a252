//go:build !unix

package persistence

import "io/fs"

// probeLock is a no-op where flock is unavailable; badger.Open still refuses a
// directory in use, and Open maps that refusal to ErrLocked.
func probeLock(path, dir string) (release func(), err error) {
	return func() {}, nil
}

// dirRemoved cannot tell without link counts; where an open directory can
// be deleted at all, check's path comparison still notices.
func dirRemoved(fs.FileInfo) bool { return false }
