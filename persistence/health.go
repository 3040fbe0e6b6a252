package persistence

import (
	"context"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
)

// Dir is the directory the database lives in.
func (db *DB) Dir() string { return db.dir }

// Ping proves the database answers reads: it reads the schema version key,
// which every open database has. Readiness checks call it.
func (db *DB) Ping(ctx context.Context) error {
	return db.view(ctx, func(txn *badger.Txn) error {
		if _, err := txn.Get(schemaKey); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		return nil
	})
}
