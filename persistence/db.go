package persistence

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/table"
	"google.golang.org/protobuf/proto"
)

// SchemaVersion is the key layout this build reads and writes. Bump it (and
// add a migration, migrate.go) whenever the meaning of an existing key
// changes; older builds then refuse the directory instead of misreading it.
// Version 2 moved the default estimator's task stats out of v1/stats/
// (keys.go).
const SchemaVersion = 2

// DefaultChunkSize is how many tensor bytes go into one Badger value. 1 MiB
// keeps values in the value log (out of the LSM tree) while a 1.5 GB
// checkpoint is still only ~1,500 keys.
const DefaultChunkSize = 1 << 20

const (
	// maxConflictRetries bounds read-modify-write retries; conflicts only
	// happen between goroutines of this process, so a few retries suffice.
	maxConflictRetries = 64
	// defaultCkptTxnBytes bounds the tensor bytes one checkpoint transaction
	// carries, so a large checkpoint never sits in memory twice.
	defaultCkptTxnBytes = 64 << 20
	manifestName        = "MANIFEST"
)

// Option configures Open.
type Option func(*config)

type config struct {
	logger    *slog.Logger
	chunkSize int
	// vlogFileSize is unexported: only tests shrink it, so that hashing a
	// database directory does not read 512 MiB of preallocated zeros.
	vlogFileSize int64
	// diskReserve is the free space writes must leave (WithDiskReserve).
	diskReserve int64
	// migrateBatch is how many records one migration transaction moves;
	// tests shrink it to interrupt a migration between transactions.
	migrateBatch int
}

// WithLogger sends the database's warnings and Badger's own warnings and
// errors to l. Badger's info and debug chatter is dropped. The default is
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithChunkSize sets how many bytes of a tensor go into one key. Tests use a
// few KiB to exercise multi-chunk and multi-transaction saves with small data.
// Chunk size is recorded per tensor (by its chunk count), so it may change
// between runs.
func WithChunkSize(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.chunkSize = n
		}
	}
}

// DB is one open Badger database holding every store. It is safe for
// concurrent use; Close it only after all users are done.
type DB struct {
	bdb    *badger.DB
	dir    string
	pin    *dirPin
	log    *slog.Logger
	closed atomic.Bool
	// disk refuses writes on a nearly full file system (diskspace.go).
	disk *diskGuard

	chunkSize    int
	ckptTxnBytes int
	vlogFileSize int64
	migrateBatch int
	// ckptMu serialises checkpoint saves and prunes, so a prune never
	// mistakes the chunks of an in-flight save for orphans.
	ckptMu sync.Mutex
	// dropMu: Badger refuses every write (ErrBlockedWrites) while a
	// DropPrefix runs, so commits and value-log rewrites hold it for
	// reading and dropPrefixes for writing: they wait for a drop instead.
	dropMu sync.RWMutex
}

// Stores is what an actor's Config takes when it needs more than one store;
// both *DB and *Memory provide it.
type Stores interface {
	Tasks() TaskStore
	Runs() RunStore
	Evaluations() EvaluationStore
	Environments() EnvironmentStore
	Trajectories() TrajectoryStore
	Checkpoints() CheckpointStore
	Coverage() CoverageStore
	Frontier() FrontierStore
	SandboxDestroys() SandboxDestroyStore
}

var _ Stores = (*DB)(nil)

// Open opens (or creates) the database in dir. It refuses, without changing
// any file, a directory held by another process (ErrLocked) and a directory
// that is not a Badger database or whose MANIFEST is damaged (ErrCorrupt). It
// refuses a database written by a newer schema (ErrSchemaVersion) only after
// Badger has opened it, so Badger's crash recovery may have run, but no record
// is changed. A database of an older schema is migrated before Open returns
// (migrate.go); a migration a crash or an error interrupted is finished by the
// next Open. The one repair Open makes is deleting the empty log files a
// crash can leave (see removeEmptyLogs); any other recovery after a crash is
// Badger's own.
//
// The DB keeps the directory it opened, not its path (see dirPin): deleting
// or replacing the directory while the DB is open cannot make it touch the
// files of another database, and its writes then fail with ErrRemoved.
func Open(dir string, opts ...Option) (_ *DB, err error) {
	cfg := config{logger: slog.Default(), chunkSize: DefaultChunkSize, vlogFileSize: 256 << 20,
		diskReserve: DefaultDiskReserve, migrateBatch: defaultMigrateBatch}
	for _, o := range opts {
		o(&cfg)
	}
	if dir == "" {
		return nil, fmt.Errorf("open database: empty directory: %w", ErrInvalid)
	}
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	pin, err := pinDir(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			pin.close() // Badger, if it opened, is closed by now
		}
	}()
	if err := preflight(pin, cfg.logger); err != nil {
		return nil, err
	}
	// Opening replays the memtable WALs a crash (or a Close on a full disk)
	// left, and flushes them into tables: writes through mmap like any other.
	disk := &diskGuard{pin: pin, dir: dir, log: cfg.logger, reserve: cfg.diskReserve}
	if err := disk.check(0); err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}

	bopts := badger.DefaultOptions(pin.path).
		WithLogger(slogBadger{l: cfg.logger, pin: pin}).
		// An acknowledged write must survive a crash: it may be a validated
		// task that took minutes of sandbox time, or a checkpoint.
		WithSyncWrites(true).
		// Sized for a 2-core, 24 GiB node that also runs sandboxes and a
		// sampler: small memtables, a small block cache, two compactors.
		WithMemTableSize(16 << 20).
		WithNumMemtables(3).
		WithBlockCacheSize(32 << 20).
		WithNumCompactors(2).
		WithValueLogFileSize(cfg.vlogFileSize).
		// Tensor chunks and long patches go to the value log, keeping the
		// LSM tree (and its compactions) small.
		WithValueThreshold(64 << 10).
		WithMetricsEnabled(false)
	bdb, err := badger.Open(bopts)
	if err != nil {
		return nil, classifyOpenError(dir, unpinnedError{err: err, pin: pin})
	}
	db := &DB{
		bdb:          bdb,
		dir:          dir,
		pin:          pin,
		log:          cfg.logger,
		chunkSize:    cfg.chunkSize,
		ckptTxnBytes: defaultCkptTxnBytes,
		vlogFileSize: cfg.vlogFileSize,
		migrateBatch: cfg.migrateBatch,
		disk:         disk,
	}
	if err := db.checkSchema(); err != nil {
		_ = bdb.Close()
		return nil, err
	}
	return db, nil
}

// Close flushes and closes the database. Stores obtained from it return
// ErrClosed afterwards. When the directory was deleted while open, nothing can
// be flushed: Close returns ErrRemoved at once and leaves Badger open, as
// Badger's own Close would retry forever to write tables into a directory that
// is gone. On a file system with less free space than the reserve it does not
// flush either (ErrDiskFull; see diskspace.go): acknowledged writes are
// already in the synced WALs and value log, and the next Open replays them.
func (db *DB) Close() error {
	if db.closed.Swap(true) {
		return nil
	}
	if db.pin.removed() {
		// The descriptor stays open too: Badger's goroutines still name
		// files through it (see dirPin.close).
		return fmt.Errorf("close database %q: writes not yet flushed to a table are lost: %w", db.dir, ErrRemoved)
	}
	if err := db.checkDiskSpace(0); err != nil {
		// Closing flushes the memtables into new tables, written through
		// mmap like everything else: on a full disk that is a SIGBUS. Every
		// acknowledged write is already synced in the WALs and the value
		// log, which the next Open replays, so the store is left as a
		// crash would leave it; Badger's lock goes with the process.
		return fmt.Errorf("close database %q without flushing its memtables (the next Open replays them): %w", db.dir, err)
	}
	if err := db.bdb.Close(); err != nil {
		return fmt.Errorf("close database %q: %w", db.dir, unpinnedError{err: err, pin: db.pin})
	}
	return db.pin.close()
}

// commit commits txn and acknowledges the write only if the directory it went
// to still exists: a write into a deleted directory is lost when the process
// ends, so reporting success would be a lie (ErrRemoved). Once the directory
// is gone nothing more reaches Badger, which could not create its next WAL
// there and would then abort the process at the write after.
func (db *DB) commit(txn *badger.Txn) error {
	if db.pin.removed() {
		return fmt.Errorf("database directory %q: %w", db.dir, ErrRemoved)
	}
	if err := db.checkDiskSpace(0); err != nil {
		return err
	}
	db.dropMu.RLock()
	err := txn.Commit()
	db.dropMu.RUnlock()
	if err != nil {
		return err
	}
	if db.pin.removed() {
		return fmt.Errorf("database directory %q: the write committed into a deleted directory and is lost: %w", db.dir, ErrRemoved)
	}
	return nil
}

// dropPrefixes removes every key under each prefix, every version of it,
// and tells the value log that the values they pointed to are garbage
// (Badger's DropPrefix: it flushes the memtables and compacts the tables
// that hold the prefixes, counting what it drops in the discard
// statistics). Deleting keys leaves their values uncounted until a
// compaction happens to meet them, which a store of few, large values
// (checkpoint chunks) may never see: CollectGarbage then finds nothing to
// rewrite and the disk fills with pruned checkpoints. Writes wait while it
// runs (dropMu).
func (db *DB) dropPrefixes(ctx context.Context, prefixes [][]byte) error {
	if len(prefixes) == 0 {
		return nil
	}
	if err := db.usable(ctx); err != nil {
		return err
	}
	// The flush writes tables through mmap: not on a full disk.
	if err := db.checkDiskSpace(0); err != nil {
		return err
	}
	db.dropMu.Lock()
	defer db.dropMu.Unlock()
	return db.bdb.DropPrefix(prefixes...)
}

// CollectGarbage reclaims value-log space left behind by deleted and
// overwritten values (mostly pruned checkpoint chunks). Badger never does this
// on its own; call it after Prune or periodically.
func (db *DB) CollectGarbage(ctx context.Context) error {
	if err := db.usable(ctx); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A rewrite copies a file's live values (at most half of it, at
		// this discard ratio) into the value log before the file goes.
		if err := db.checkDiskSpace(db.vlogFileSize / 2); err != nil {
			return fmt.Errorf("value log gc: %w", err)
		}
		db.dropMu.RLock()
		err := db.bdb.RunValueLogGC(0.5)
		db.dropMu.RUnlock()
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("value log gc: %w", err)
		}
	}
}

// Tasks returns the task store backed by this database.
func (db *DB) Tasks() TaskStore { return &badgerTaskStore{db: db} }

// Environments returns the environment store backed by this database.
func (db *DB) Environments() EnvironmentStore { return &badgerEnvironmentStore{db: db} }

// Runs returns the run store backed by this database.
func (db *DB) Runs() RunStore { return &badgerRunStore{db: db} }

// Evaluations returns the evaluation store backed by this database.
func (db *DB) Evaluations() EvaluationStore { return &badgerEvalStore{db: db} }

// Trajectories returns the trajectory store backed by this database.
func (db *DB) Trajectories() TrajectoryStore { return &badgerTrajectoryStore{db: db} }

// Checkpoints returns the checkpoint store backed by this database.
func (db *DB) Checkpoints() CheckpointStore { return &badgerCheckpointStore{db: db} }

// ensureDir creates dir if it does not exist and rejects a path that is not a
// directory.
func ensureDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create database directory: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("open database %q: %w", dir, err)
	case !st.IsDir():
		return fmt.Errorf("open database %q: not a directory: %w", dir, ErrInvalid)
	}
	return nil
}

// preflight rejects directories badger.Open would refuse only after writing
// to them, or would "repair" by deleting files. It writes nothing but the
// empty logs removeEmptyLogs deletes. It reads the directory through the pin,
// as Badger will.
func preflight(pin *dirPin, log *slog.Logger) error {
	dir := pin.dir
	release, err := probeLock(pin.path, dir)
	if err != nil {
		return err
	}
	defer release()

	entries, err := os.ReadDir(pin.path)
	if err != nil {
		return fmt.Errorf("open database %q: %w", dir, err)
	}
	hasManifest := false
	var foreign []string
	for _, e := range entries {
		switch e.Name() {
		case manifestName:
			hasManifest = true
		case "LOCK", "MANIFEST-REWRITE":
			// Left behind by a crash before Badger's first MANIFEST was
			// renamed into place; Badger rewrites both.
		default:
			foreign = append(foreign, e.Name())
		}
	}
	if !hasManifest {
		if len(foreign) == 0 {
			return nil // a new database
		}
		return fmt.Errorf("open database %q: directory holds %d files (e.g. %q) but no Badger %s; refusing to use it: %w",
			dir, len(foreign), foreign[0], manifestName, ErrCorrupt)
	}
	if err := checkManifest(pin, log); err != nil {
		return err
	}
	return removeEmptyLogs(pin, entries, log)
}

// removeEmptyLogs deletes zero-length value-log (.vlog) and memtable WAL
// (.mem) files. Badger creates these files and sizes them in two steps; a
// crash between the two leaves an empty file, which holds no data but makes
// badger.Open fail with "Create a new file" (dgraph-io/badger#2207; our crash
// test hits it). This is the only change Open makes to an existing directory
// before Badger itself opens it.
func removeEmptyLogs(pin *dirPin, entries []fs.DirEntry, log *slog.Logger) error {
	dir := pin.dir
	for _, e := range entries {
		name := e.Name()
		base, ok := strings.CutSuffix(name, ".vlog")
		if !ok {
			base, ok = strings.CutSuffix(name, ".mem")
		}
		if _, err := strconv.ParseUint(base, 10, 32); !ok || err != nil || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("open database %q: %w", dir, err)
		}
		if info.Size() != 0 {
			continue
		}
		log.Warn("persistence: removing an empty log file left by a crash", "dir", dir, "file", name)
		if err := os.Remove(filepath.Join(pin.path, name)); err != nil {
			return fmt.Errorf("open database %q: remove empty log file %s: %w", dir, name, err)
		}
	}
	return nil
}

// checkManifest replays the MANIFEST read-only, exactly as Badger will, and
// checks that every table it names exists. Badger itself would truncate a
// damaged tail and delete tables the MANIFEST does not name.
func checkManifest(pin *dirPin, log *slog.Logger) error {
	dir := pin.dir
	path := filepath.Join(pin.path, manifestName)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open database %q: %w", dir, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("open database %q: %w", dir, err)
	}
	bopts := badger.DefaultOptions(pin.path).WithLogger(slogBadger{l: log, pin: pin})
	m, truncOffset, err := badger.ReplayManifestFile(f, bopts.ExternalMagicVersion, bopts)
	if err != nil {
		return fmt.Errorf("open database %q: damaged %s: %v: %w", dir, manifestName, err, ErrCorrupt)
	}
	if truncOffset < st.Size() {
		// A write torn by power loss; Badger drops the partial entry, which
		// describes a table change that never completed.
		log.Warn("persistence: MANIFEST ends in a partial entry that Badger will drop",
			"dir", dir, "bytes", st.Size()-truncOffset)
	}
	for id := range m.Tables {
		name := table.IDToFilename(id)
		if _, err := os.Stat(filepath.Join(pin.path, name)); err != nil {
			return fmt.Errorf("open database %q: %s names table %s, which is missing: %v: %w",
				dir, manifestName, name, err, ErrCorrupt)
		}
	}
	return nil
}

// classifyOpenError maps badger.Open's errors, which often arrive flattened to
// text, onto the sentinels.
func classifyOpenError(dir string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Cannot acquire directory lock"):
		return fmt.Errorf("open database %q: %v: %w", dir, err, ErrLocked)
	case errors.Is(err, fs.ErrPermission), strings.Contains(msg, "permission denied"),
		strings.Contains(msg, "no space left"), strings.Contains(msg, "too many open files"),
		strings.Contains(msg, "read-only file system"):
		return fmt.Errorf("open database %q: %w", dir, err)
	case strings.Contains(strings.ToLower(msg), "checksum"),
		strings.Contains(strings.ToLower(msg), "corrupt"),
		strings.Contains(msg, "magic"), strings.Contains(msg, "MANIFEST"),
		strings.Contains(msg, "does not exist for table"),
		strings.Contains(msg, "while opening memtables"),
		strings.Contains(msg, "During db.vlog.open"),
		strings.Contains(msg, "Unable to"):
		return fmt.Errorf("open database %q: %v: %w", dir, err, ErrCorrupt)
	}
	return fmt.Errorf("open database %q: %w", dir, err)
}

// usable reports ErrClosed or the context's error before any Badger call.
func (db *DB) usable(ctx context.Context) error {
	if db.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// update runs fn in a read-write transaction and commits it, retrying the
// whole function when a concurrent transaction wrote a key fn read.
func (db *DB) update(ctx context.Context, fn func(txn *badger.Txn) error) error {
	for attempt := 0; ; attempt++ {
		if err := db.usable(ctx); err != nil {
			return err
		}
		txn := db.bdb.NewTransaction(true)
		err := fn(txn)
		if err == nil {
			err = db.commit(txn)
		}
		txn.Discard()
		if errors.Is(err, badger.ErrConflict) && attempt < maxConflictRetries {
			time.Sleep(time.Duration(attempt) * 100 * time.Microsecond)
			continue
		}
		return err
	}
}

// view runs fn in a read-only transaction.
func (db *DB) view(ctx context.Context, fn func(txn *badger.Txn) error) error {
	if err := db.usable(ctx); err != nil {
		return err
	}
	return db.bdb.View(fn)
}

// marshal encodes deterministically, so equal records have equal bytes and an
// idempotent retry can be recognised by comparing them.
func marshal(m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", m, err)
	}
	return b, nil
}

// getProto reads key into m, mapping a missing key to ErrNotFound and bytes
// that do not decode to ErrCorrupt.
func getProto(txn *badger.Txn, key []byte, m proto.Message) error {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return item.Value(func(v []byte) error { return unmarshal(key, v, m) })
}

func unmarshal(key, v []byte, m proto.Message) error {
	if err := proto.Unmarshal(v, m); err != nil {
		return fmt.Errorf("decode %q: %v: %w", key, err, ErrCorrupt)
	}
	return nil
}

// scan calls fn for every key with prefix, in key order. Values are only read
// when fn asks for them, so index scans stay in the LSM tree.
func scan(ctx context.Context, txn *badger.Txn, prefix []byte, keysOnly bool, fn func(item *badger.Item) error) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: !keysOnly, PrefetchSize: 16})
	defer it.Close()
	for it.Seek(prefix); it.Valid(); it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(it.Item()); err != nil {
			return err
		}
	}
	return nil
}

// slogBadger adapts badger.Logger to slog, keeping only warnings and errors:
// Badger logs every compaction and table open at info level.
type slogBadger struct {
	l   *slog.Logger
	pin *dirPin // its path is shown as the caller's directory
}

var _ badger.Logger = slogBadger{}

func (a slogBadger) log(level slog.Level, format string, args ...any) {
	if level < slog.LevelWarn || !a.l.Enabled(context.Background(), level) {
		return
	}
	a.l.Log(context.Background(), level, a.pin.unpin(strings.TrimSpace(fmt.Sprintf(format, args...))), "component", "badger")
}

func (a slogBadger) Errorf(f string, args ...any)   { a.log(slog.LevelError, f, args...) }
func (a slogBadger) Warningf(f string, args ...any) { a.log(slog.LevelWarn, f, args...) }
func (a slogBadger) Infof(f string, args ...any)    { a.log(slog.LevelInfo, f, args...) }
func (a slogBadger) Debugf(f string, args ...any)   { a.log(slog.LevelDebug, f, args...) }
