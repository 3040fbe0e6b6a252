// Package nodeask asks a node's named actors from code that runs on the
// node (a training run, an evaluation): a reply, a Failure as an error, and
// progress stages written as lines.
package nodeask

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	messages "github.com/frognano/frognano/actors/messages/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// Asker asks the actors of Node. It implements environment.Asker.
type Asker struct{ Node *node.Node }

// PID is the node's actor called name.
func (a Asker) PID(name string) *actor.PID { return actor.NewPID(a.Node.Address(), name) }

// Ask sends req to the node's actor name and returns its reply, a Failure
// as an error.
func (a Asker) Ask(ctx context.Context, name string, req any, timeout time.Duration) (any, error) {
	return a.AskPID(ctx, a.PID(name), req, timeout)
}

// AskStages is Ask for a request answered with progress messages first:
// each new stage is a line of out; done accepts the final reply.
func (a Asker) AskStages(ctx context.Context, name string, req any, timeout time.Duration, out io.Writer, done func(any) bool) (any, error) {
	return a.AskStagesPID(ctx, a.PID(name), req, timeout, out, done)
}

// AskPID sends req to pid and waits for the reply (a Failure as an error),
// or for ctx to end.
func (a Asker) AskPID(ctx context.Context, pid *actor.PID, req any, timeout time.Duration) (any, error) {
	f := a.Node.System().Root.RequestFuture(pid, req, timeout)
	type answer struct {
		res any
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := f.Result()
		got <- answer{res, err}
	}()
	var res any
	select {
	case a := <-got:
		if a.err != nil {
			return nil, fmt.Errorf("%s did not answer: %w", pid.Id, a.err)
		}
		res = a.res
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if f, ok := res.(*rtmsg.Failure); ok {
		return nil, errors.New(f.GetMessage())
	}
	return res, nil
}

// AskStagesPID sends req to pid from a short-lived actor that writes each new
// stage of the progress messages it receives to out ("==> stage") and
// returns the first reply done accepts (a Failure as an error).
func (a Asker) AskStagesPID(ctx context.Context, pid *actor.PID, req any, timeout time.Duration, out io.Writer, done func(any) bool) (any, error) {
	replies := make(chan any, 1)
	stage := ""
	me := a.Node.System().Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		var s string
		switch m := c.Message().(type) {
		case *actor.Started:
			c.Request(pid, req)
			return
		case *messages.EnvProgress:
			s = m.GetStage()
		case *messages.SynthesizeProgress:
			s = m.GetStage()
		case *rtmsg.Failure:
			replies <- m
			return
		default:
			if done(m) {
				replies <- m
			}
			return
		}
		if s != "" && s != stage {
			fmt.Fprintln(out, "==>", s)
			stage = s
		}
	}))
	defer a.Node.System().Root.Stop(me)
	select {
	case res := <-replies:
		if f, ok := res.(*rtmsg.Failure); ok {
			return nil, errors.New(f.GetMessage())
		}
		return res, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-time.After(timeout):
		return nil, fmt.Errorf("no answer from %s within %v", pid.Id, timeout)
	}
}
