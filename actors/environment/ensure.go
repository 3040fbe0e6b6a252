package environment

import (
	"context"
	"io"
	"time"

	messages "github.com/frognano/frognano/actors/messages/v1"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Asker reaches a node's named actors: code on the node (nodeask.Asker)
// or a client of it through the node's API.
type Asker interface {
	// Ask sends req to the actor name and returns its reply, a Failure as
	// an error.
	Ask(ctx context.Context, name string, req any, timeout time.Duration) (any, error)
	// AskStages is Ask for a request answered with progress messages
	// first, which it shows on out; done accepts the final reply.
	AskStages(ctx context.Context, name string, req any, timeout time.Duration, out io.Writer, done func(any) bool) (any, error)
}

// Ensure returns the environment for source, registering it first when
// the node does not have it yet (its build's stages are lines of out).
func Ensure(ctx context.Context, a Asker, source string, out io.Writer) (*records.Environment, error) {
	src, err := ParseSource(source)
	if err != nil {
		return nil, err
	}
	if res, err := a.Ask(ctx, ActorName, &messages.EnvGetRequest{Name: DefaultName(src)}, time.Minute); err == nil {
		return res.(*messages.EnvAddReply).Environment, nil
	}
	res, err := a.AskStages(ctx, ActorName, &messages.EnvAddRequest{Source: source}, 2*time.Hour, out, func(m any) bool { _, ok := m.(*messages.EnvAddReply); return ok })
	if err != nil {
		return nil, err
	}
	return res.(*messages.EnvAddReply).Environment, nil
}
