package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// SandboxDestroyStore keeps the sandboxes whose destruction failed (containerd
// was restarting, its socket did not answer, ...), so that they are retried
// until they are gone, by the process that made them or, after it died, by
// the next one to open the node's store. A sandbox is recorded only once its
// destruction has been asked for: everything it names is to be removed.
//
// Key layout (since schema version 1, beside those in keys.go):
//
//	v1/sandbox-destroy/<containerd namespace>\x00<sandbox id>   PendingDestroy as JSON
type SandboxDestroyStore interface {
	// Put records (or updates) a pending destruction.
	Put(ctx context.Context, d PendingDestroy) error
	// Delete forgets it; deleting a missing one is not an error.
	Delete(ctx context.Context, namespace, id string) error
	// List returns the pending destructions of a containerd namespace,
	// ordered by sandbox id.
	List(ctx context.Context, namespace string) ([]PendingDestroy, error)
}

// PendingDestroy is a sandbox still to be destroyed.
type PendingDestroy struct {
	// Namespace and ID name the sandbox: its container, lease and snapshot
	// in that containerd namespace share the id.
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	// Since is when its first destruction failed; Attempts counts the
	// failed ones, LastError is the newest failure.
	Since     time.Time `json:"since"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error,omitempty"`
}

const prefixSandboxDestroy = "v1/sandbox-destroy/"

func sandboxDestroyPrefix(namespace string) []byte { return join(prefixSandboxDestroy, namespace, sep) }

func sandboxDestroyKey(namespace, id string) []byte {
	return join(prefixSandboxDestroy, namespace, sep, id)
}

// SandboxDestroys returns the store of pending sandbox destructions.
func (db *DB) SandboxDestroys() SandboxDestroyStore { return &badgerSandboxDestroys{db: db} }

type badgerSandboxDestroys struct{ db *DB }

var _ SandboxDestroyStore = (*badgerSandboxDestroys)(nil)

func (s *badgerSandboxDestroys) Put(ctx context.Context, d PendingDestroy) error {
	if err := checkID("containerd namespace", d.Namespace); err != nil {
		return err
	}
	if err := checkID("sandbox id", d.ID); err != nil {
		return err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode pending destroy: %w", err)
	}
	if err := s.db.update(ctx, func(txn *badger.Txn) error { return txn.Set(sandboxDestroyKey(d.Namespace, d.ID), raw) }); err != nil {
		return fmt.Errorf("record pending destroy of sandbox %s: %w", d.ID, err)
	}
	return nil
}

func (s *badgerSandboxDestroys) Delete(ctx context.Context, namespace, id string) error {
	if err := checkID("containerd namespace", namespace); err != nil {
		return err
	}
	if err := checkID("sandbox id", id); err != nil {
		return err
	}
	if err := s.db.update(ctx, func(txn *badger.Txn) error { return txn.Delete(sandboxDestroyKey(namespace, id)) }); err != nil {
		return fmt.Errorf("forget pending destroy of sandbox %s: %w", id, err)
	}
	return nil
}

func (s *badgerSandboxDestroys) List(ctx context.Context, namespace string) ([]PendingDestroy, error) {
	if err := checkID("containerd namespace", namespace); err != nil {
		return nil, err
	}
	var out []PendingDestroy
	err := s.db.view(ctx, func(txn *badger.Txn) error {
		return scan(ctx, txn, sandboxDestroyPrefix(namespace), false, func(item *badger.Item) error {
			var d PendingDestroy
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &d) }); err != nil {
				return fmt.Errorf("decode %q: %v: %w", item.Key(), err, ErrCorrupt)
			}
			out = append(out, d)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list pending sandbox destroys: %w", err)
	}
	return out, nil
}
