package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
)

// Runs reads and writes a node's run records through its learner host, so
// that a run on another machine is recorded in that node's store.
type Runs struct {
	Root    *actor.RootContext
	PID     *actor.PID
	Timeout time.Duration // per request (default 1 minute)
	// Stored, when set, is called with the run after every Put that
	// stored it, in the goroutine that called Put (frognano run
	// --tensorboard appends the record's new points to an event file).
	Stored func(*messages.Run)
}

func (r *Runs) ask(msg any) (*messages.Run, error) {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	res, err := r.Root.RequestFuture(r.PID, msg, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("learner host %s did not answer: %w", r.PID, err)
	}
	switch m := res.(type) {
	case *messages.RunReply:
		return m.GetRun(), nil
	case *messages.Failure:
		err := errors.New(m.GetMessage())
		switch m.GetCode() {
		case "not_found":
			err = fmt.Errorf("%s: %w", m.GetMessage(), persistence.ErrNotFound)
		case "bad_request":
			err = fmt.Errorf("%s: %w", m.GetMessage(), persistence.ErrInvalid)
		}
		return nil, err
	}
	return nil, fmt.Errorf("learner host %s answered %T", r.PID, res)
}

// Put stores run, replacing the record with its id.
func (r *Runs) Put(_ context.Context, run *messages.Run) error {
	if _, err := r.ask(&messages.RunPutRequest{Run: run}); err != nil {
		return err
	}
	if r.Stored != nil {
		r.Stored(run)
	}
	return nil
}

// Get returns the run, or an error wrapping persistence.ErrNotFound.
func (r *Runs) Get(_ context.Context, id string) (*messages.Run, error) {
	return r.ask(&messages.RunGetRequest{Id: id})
}
