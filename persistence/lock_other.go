//go:build !unix

package persistence

// probeLock is a no-op where flock is unavailable; badger.Open still refuses a
// directory in use, and Open maps that refusal to ErrLocked.
func probeLock(dir string) (release func(), err error) {
	return func() {}, nil
}
