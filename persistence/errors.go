package persistence

import "errors"

// Sentinel errors. Every error a store returns wraps at most one of these, so
// callers (and supervisors deciding whether to restart) test with errors.Is.
var (
	// ErrNotFound means the record does not exist; retrying will not help.
	ErrNotFound = errors.New("persistence: not found")
	// ErrInvalid means the caller passed a record that cannot be stored (an
	// empty id, a tensor whose shape does not match its bytes, ...).
	ErrInvalid = errors.New("persistence: invalid argument")
	// ErrExists means an append-only record already exists with different
	// content; an identical retry is not an error.
	ErrExists = errors.New("persistence: already exists with different content")
	// ErrStepNotIncreasing means a checkpoint was saved at a step that is not
	// after the run's latest checkpoint. Steps only increase, so a resumed
	// Learner can trust Latest.
	ErrStepNotIncreasing = errors.New("persistence: checkpoint step does not increase")
	// ErrLocked means another process (or another Open in this process) holds
	// the database directory. Badger allows one writer per directory.
	ErrLocked = errors.New("persistence: database directory is in use by another process")
	// ErrCorrupt means bytes on disk do not form a valid database or record:
	// a damaged MANIFEST, a directory that is not a Badger database, a tensor
	// whose checksum or length does not match its manifest. Open never repairs
	// or deletes anything when it returns this error.
	ErrCorrupt = errors.New("persistence: corrupt data")
	// ErrSchemaVersion means the database was written by newer code whose key
	// layout this build does not understand.
	ErrSchemaVersion = errors.New("persistence: schema version newer than this build understands")
	// ErrRemoved means the database directory was deleted (or moved, or
	// replaced by another) while the DB had it open. Writes no longer
	// reach a directory any later Open will find, so they fail instead of
	// being acknowledged; restarting the same process will not help.
	ErrRemoved = errors.New("persistence: database directory was removed or replaced while open")
	// ErrDiskFull means the file system holding the database has less free
	// space than the store keeps in reserve (WithDiskReserve), so the write
	// was refused before it reached Badger, which would have died of SIGBUS
	// writing its memory-mapped files on a full disk. Nothing was written;
	// the write may be retried once space is freed.
	ErrDiskFull = errors.New("persistence: disk full")
	// ErrClosed means the DB was used after Close.
	ErrClosed = errors.New("persistence: database is closed")
)
