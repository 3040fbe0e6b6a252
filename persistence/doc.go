// Package persistence keeps the state that must outlive a process — tasks, the
// frontier estimators' posteriors, runs, trajectories and checkpoints — in
// Badger, behind small typed stores.
//
// Actors depend on the store interfaces, never on Badger: a supervisor that
// restarts a crashed actor hands it the same *DB, and tests hand it a *Memory.
// Both implementations pass one conformance suite, so a behaviour that holds in
// a test holds on disk.
//
// Durability: every write is synchronous (Badger SyncWrites), so a method that
// returned nil survives a crash of the process. A checkpoint too large for one
// transaction is written chunk by chunk and becomes visible only when its
// manifest, written last, commits.
//
// A DB holds on to the directory it opened, not to its path: Badger reaches
// its files through a descriptor of that directory (Linux). Deleting the
// directory under a running process, then starting another on a copy at the
// same path, once let the first process delete the second's memtable WAL and
// with it every write the second had acknowledged; now the first can only
// touch its own, deleted directory, and its writes fail with ErrRemoved.
//
// A full disk is an error, not a crash: Badger writes through memory-mapped
// files, and a page the file system cannot back kills the process with
// SIGBUS, so every commit (and Open, and Close's flush) first checks that the
// store's file system keeps a reserve free, and fails with ErrDiskFull
// otherwise (diskspace.go).
//
// The database records its schema version under "meta/schema" (keys.go), so a
// newer layout is refused by older code instead of being misread, and Open
// migrates an older one (migrate.go).
package persistence
