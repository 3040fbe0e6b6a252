package persistence

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	badger "github.com/dgraph-io/badger/v4"
)

// Schema versions and their migrations. Open reads the version a database
// records under meta/schema. A new database gets SchemaVersion; a newer one is
// refused (ErrSchemaVersion); an older one is migrated before Open returns:
//
//  1. one transaction records SchemaVersion and, under meta/migration, the
//     version the data is still in. From then on an older build refuses the
//     database instead of reading half-migrated data, and this build knows
//     there is work left;
//  2. each step (migrations[v] takes version v to v+1) runs in transactions
//     of its own, then one more moves meta/migration on to v+1, or deletes
//     it after the last step.
//
// A crash or an error anywhere leaves meta/migration in place, and the next
// Open runs the unfinished step again from the start. So a step must be
// resumable: each of its transactions leaves the data complete (here: every
// record is in its old place or its new one, never both, never neither), and
// running it on what it already did changes nothing.

var (
	schemaKey    = []byte("meta/schema")
	migrationKey = []byte("meta/migration")
)

// migrations[v] moves a database from schema version v to v+1.
var migrations = map[int]func(db *DB) error{
	1: (*DB).migrateDefaultStats,
}

// defaultMigrateBatch bounds the records one migration transaction moves,
// well below Badger's transaction limits.
const defaultMigrateBatch = 1000

// checkSchema records SchemaVersion in a new database, refuses a database
// whose recorded version this build does not know, and migrates an older one
// (or finishes a migration a crash interrupted).
func (db *DB) checkSchema() error {
	ctx := context.Background()
	from := 0 // the version the data is in, when it is not SchemaVersion
	err := db.update(ctx, func(txn *badger.Txn) error {
		from = 0
		item, err := txn.Get(schemaKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			it := txn.NewIterator(badger.IteratorOptions{})
			it.Rewind()
			empty := !it.Valid()
			it.Close()
			if !empty {
				return fmt.Errorf("open database %q: it holds data but no %q key, so it was not written by frognano: %w",
					db.dir, schemaKey, ErrCorrupt)
			}
			return txn.Set(schemaKey, []byte(strconv.Itoa(SchemaVersion)))
		}
		v, err := readVersion(item, err)
		switch {
		case err != nil:
			return fmt.Errorf("open database %q: schema version: %w", db.dir, err)
		case v > SchemaVersion:
			return fmt.Errorf("open database %q: schema version %d, this build understands up to %d: %w",
				db.dir, v, SchemaVersion, ErrSchemaVersion)
		}
		item, err = txn.Get(migrationKey)
		if !errors.Is(err, badger.ErrKeyNotFound) {
			// An interrupted migration: the data is still in an older
			// version than the one recorded.
			m, err := readVersion(item, err)
			if err != nil || m >= v {
				return fmt.Errorf("open database %q: schema version %d, unfinished migration from %d (%v): %w",
					db.dir, v, m, err, ErrCorrupt)
			}
			from = m
		} else if v < SchemaVersion {
			from = v
		}
		if from == 0 || v == SchemaVersion {
			return nil
		}
		if err := txn.Set(migrationKey, []byte(strconv.Itoa(from))); err != nil {
			return err
		}
		return txn.Set(schemaKey, []byte(strconv.Itoa(SchemaVersion)))
	})
	if err != nil || from == 0 {
		return err
	}
	return db.migrate(ctx, from)
}

// readVersion decodes a version number stored under a meta key.
func readVersion(item *badger.Item, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	raw, err := item.ValueCopy(nil)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(string(raw))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%q is not a version: %w", raw, ErrCorrupt)
	}
	return v, nil
}

// migrate runs the steps from version from up to SchemaVersion, recording
// each step's end under migrationKey.
func (db *DB) migrate(ctx context.Context, from int) error {
	db.log.Info("persistence: migrating the database", "dir", db.dir, "from", from, "to", SchemaVersion)
	for v := from; v < SchemaVersion; v++ {
		step := migrations[v]
		if step == nil {
			return fmt.Errorf("open database %q: no migration from schema version %d: %w", db.dir, v, ErrSchemaVersion)
		}
		if err := step(db); err != nil {
			return fmt.Errorf("open database %q: migrate schema version %d to %d: %w", db.dir, v, v+1, err)
		}
		err := db.update(ctx, func(txn *badger.Txn) error {
			if v+1 == SchemaVersion {
				return txn.Delete(migrationKey)
			}
			return txn.Set(migrationKey, []byte(strconv.Itoa(v+1)))
		})
		if err != nil {
			return fmt.Errorf("open database %q: record the migration to schema version %d: %w", db.dir, v+1, err)
		}
	}
	db.log.Info("persistence: migrated the database", "dir", db.dir, "version", SchemaVersion)
	return nil
}

// prefixStatsV1 is where schema version 1 kept the default estimator's task
// stats (the CurriculumStore's records): v1/stats/<task id>.
const prefixStatsV1 = "v1/stats/"

// migrateDefaultStats (version 1 to 2) moves each v1/stats/<task id> record
// to v1/frontier-stats/default\x00<task id>, its bytes unchanged, beside the
// other estimators' stats. A transaction moves up to migrateBatch records,
// each one's write and delete together, so an interrupted run leaves every
// record in exactly one place, and running it again moves the rest. A record
// already at the new key (none is: nothing writes there before the
// migration ends) is overwritten by the old one.
func (db *DB) migrateDefaultStats() error {
	ctx := context.Background()
	prefix := []byte(prefixStatsV1)
	total := 0
	for {
		// One point before each transaction, the last (which finds
		// nothing left to move) included.
		if err := fault("store/schema-migrate"); err != nil {
			return err
		}
		moved := 0
		err := db.update(ctx, func(txn *badger.Txn) error {
			type record struct{ key, val []byte }
			var batch []record
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
			for it.Seek(prefix); it.Valid() && len(batch) < db.migrateBatch; it.Next() {
				val, err := it.Item().ValueCopy(nil)
				if err != nil {
					it.Close()
					return err
				}
				batch = append(batch, record{it.Item().KeyCopy(nil), val})
			}
			it.Close()
			for _, r := range batch {
				taskID := string(r.key[len(prefix):])
				if err := txn.Set(frontierStatsKey(DefaultFrontier, taskID), r.val); err != nil {
					return err
				}
				if err := txn.Delete(r.key); err != nil {
					return err
				}
			}
			moved = len(batch)
			return nil
		})
		if err != nil {
			return fmt.Errorf("move the default estimator's task stats (%d moved): %w", total, err)
		}
		if moved == 0 {
			db.log.Info("persistence: moved the default estimator's task stats", "dir", db.dir, "records", total)
			return nil
		}
		total += moved
	}
}
