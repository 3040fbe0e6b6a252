package trainer

import (
	"context"

	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Runs reads and writes a node's run records: the run executes on the
// node that keeps them (the run service, service.go), so it writes them
// straight to the node's store.
type Runs struct {
	Store persistence.RunStore
	// Stored, when set, is called with the run after every Put that
	// stored it, in the goroutine that called Put (frognano run
	// --tensorboard appends the record's new points to an event file).
	Stored func(*records.Run)
}

// Put stores run, replacing the record with its id.
func (r *Runs) Put(ctx context.Context, run *records.Run) error {
	if err := r.Store.Put(ctx, run); err != nil {
		return err
	}
	if r.Stored != nil {
		r.Stored(run)
	}
	return nil
}

// Get returns the run, or an error wrapping persistence.ErrNotFound.
func (r *Runs) Get(ctx context.Context, id string) (*records.Run, error) {
	return r.Store.Get(ctx, id)
}
