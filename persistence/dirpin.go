package persistence

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// dirPin holds the database directory open for as long as the DB is, and
// gives Badger a path that reaches the directory through that descriptor
// (pinnedPath; see dirpin_linux.go). Badger names every file by path: the
// memtable WALs it deletes after a flush, the tables it creates, its LOCK
// file. Opened by its plain path, a Badger whose directory is deleted and
// recreated (rm -rf, then a copy of another store) goes on creating and
// deleting files in the new directory, which another process may be using
// under a lock of its own: our lock is on the deleted directory. A Badger
// closing that way deleted the new store's 00001.mem, the only copy of
// everything its owner had acknowledged (TestReplacedDirectoryCannotDestroyNewStore).
// Through the pin, its file operations stay in its own directory, and fail
// once that directory is gone.
type dirPin struct {
	f    *os.File
	dir  string // the path the caller gave
	abs  string // dir made absolute when it was opened
	path string // what Badger is given: pinnedPath(f), or dir where that is unavailable
}

// pinDir opens dir, which must exist.
func pinDir(dir string) (*dirPin, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open database %q: %w", dir, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open database %q: %w", dir, err)
	}
	if !st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("open database %q: not a directory: %w", dir, ErrInvalid)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open database %q: %w", dir, err)
	}
	p := &dirPin{f: f, dir: dir, abs: abs, path: dir}
	if pp, ok := pinnedPath(f); ok {
		if pst, err := os.Stat(pp); err == nil && os.SameFile(st, pst) {
			p.path = pp
		}
	}
	return p, nil
}

// removed reports whether the directory has been deleted since it was
// opened. It costs one fstat.
func (p *dirPin) removed() bool {
	st, err := p.f.Stat()
	return err == nil && dirRemoved(st)
}

// check reports ErrRemoved when the directory was deleted, or when its path
// no longer names it (moved, or deleted and recreated): a restart would then
// open another store.
func (p *dirPin) check() error {
	if p.removed() {
		return fmt.Errorf("database directory %q: %w", p.dir, ErrRemoved)
	}
	st, err := p.f.Stat()
	if err != nil {
		return fmt.Errorf("database directory %q: %w", p.dir, err)
	}
	if now, err := os.Stat(p.abs); err != nil || !os.SameFile(st, now) {
		return fmt.Errorf("database directory %q now names another directory or none (moved or replaced while open): %w", p.dir, ErrRemoved)
	}
	return nil
}

// close releases the directory. Only once Badger is closed: a descriptor
// number closed under a running Badger may be reused for another directory,
// which its pinned path would then reach.
func (p *dirPin) close() error { return p.f.Close() }

// unpin rewrites the pinned path in a message (Badger's logs and errors) as
// the directory the caller named.
func (p *dirPin) unpin(s string) string {
	if p == nil || p.path == p.dir {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, p.path)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(p.path)
		b.WriteString(s[:i])
		if end < len(s) && s[end] >= '0' && s[end] <= '9' {
			b.WriteString(p.path) // another descriptor's path (fd/12 after fd/1)
		} else {
			b.WriteString(p.dir)
		}
		s = s[end:]
	}
}

// unpinnedError shows an error with the caller's directory, and unwraps to
// the original.
type unpinnedError struct {
	err error
	pin *dirPin
}

func (e unpinnedError) Error() string { return e.pin.unpin(e.err.Error()) }
func (e unpinnedError) Unwrap() error { return e.err }
