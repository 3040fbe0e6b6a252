package persistence

import (
	"context"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// Dir is the directory the database lives in.
func (db *DB) Dir() string { return db.dir }

// Ping proves the database answers reads: it reads the schema version key,
// which every open database has. Readiness checks call it. It also fails with
// ErrRemoved when the directory was deleted, moved or replaced while open:
// writes then fail (deleted) or a restart would open another store.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.usable(ctx); err != nil {
		return err
	}
	if err := db.pin.check(); err != nil {
		return err
	}
	return db.view(ctx, func(txn *badger.Txn) error {
		if _, err := txn.Get(schemaKey); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		return nil
	})
}
