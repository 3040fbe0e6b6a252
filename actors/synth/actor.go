package synth

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// ActorName is the well-known name of a node's synthesizer actor.
const ActorName = "synthesizer"

// ActorConfig is what the synthesizer actor needs from its node.
type ActorConfig struct {
	Environments persistence.EnvironmentStore
	Tasks        persistence.TaskStore
	Coverage     persistence.CoverageStore
	// Runtime connects to containerd on first need, so a node starts while
	// containerd is down.
	Runtime func(ctx context.Context) (*sandbox.Runtime, error)
	// Workers validating at once (default: the number of CPUs).
	Workers int
	Logger  *slog.Logger
}

// Props builds the synthesizer actor. It answers SynthesizeRequest
// (running in the background and sending SynthesizeProgress to the
// requester after every verdict, then SynthesizeResult or a Failure),
// TaskListRequest and TaskGetRequest. Synthesis requests run one at a time:
// each already keeps every core busy.
func Props(cfg ActorConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		ctx, cancel := context.WithCancel(context.Background())
		s := New(Config{
			Sandboxes: &Containerd{Runtime: cfg.Runtime},
			Tasks:     cfg.Tasks, Coverage: cfg.Coverage, Workers: cfg.Workers, Logger: cfg.Logger,
		})
		return &synthActor{cfg: cfg, s: s, ctx: ctx, cancel: cancel}
	})
}

type synthActor struct {
	cfg    ActorConfig
	s      *Synthesizer
	mu     sync.Mutex // one synthesis at a time
	ctx    context.Context
	cancel context.CancelFunc
	// running counts the synthesis goroutines, so that stopping waits for
	// them to destroy their sandboxes.
	running sync.WaitGroup
}

// stopWait bounds how long a stopping synthesizer waits for a cancelled
// synthesis to end (its validation runs stop, its sandboxes are destroyed).
var stopWait = 90 * time.Second

type synthDone struct {
	to    *actor.PID
	reply any
}

func (a *synthActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Stopping:
		// A running synthesis stops; its stored tasks stay. Its validation
		// sandboxes are destroyed before the actor is gone: a node stopping
		// (node.Stop) waits for this, so none outlives the process.
		a.cancel()
		a.drain()
	case *messages.SynthesizeRequest:
		a.synthesize(ctx, m)
	case *synthDone:
		ctx.Send(m.to, m.reply)
	case *messages.TaskListRequest:
		tasks, err := a.cfg.Tasks.List(context.Background(), persistence.TaskFilter{Environment: m.Environment})
		if err != nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_STORE, err))
			return
		}
		ctx.Respond(&messages.TaskList{Tasks: tasks})
	case *messages.TaskGetRequest:
		t, err := a.cfg.Tasks.Get(context.Background(), m.Id)
		if err != nil {
			ctx.Respond(rtmsg.Fail(code(err), err))
			return
		}
		ctx.Respond(&messages.TaskGetReply{Task: t})
	}
}

// synthesize runs off the actor's goroutine: a run takes minutes, and the
// actor keeps answering task queries meanwhile.
func (a *synthActor) synthesize(ctx actor.Context, m *messages.SynthesizeRequest) {
	requester, self, system := ctx.Sender(), ctx.Self(), ctx.ActorSystem()
	env, err := a.cfg.Environments.Get(context.Background(), m.Environment)
	if err != nil {
		ctx.Respond(rtmsg.Fail(code(err), err))
		return
	}
	req := RequestFromProto(m)
	a.running.Add(1)
	go func() {
		defer a.running.Done()
		a.mu.Lock()
		defer a.mu.Unlock()
		res, err := a.s.Synthesize(a.ctx, env, req, func(p Progress) {
			if requester != nil {
				system.Root.Send(requester, p.Proto())
			}
		})
		var reply any = res.Proto()
		if err != nil {
			reply = rtmsg.Fail(code(err), err)
		}
		if requester != nil {
			system.Root.Send(self, &synthDone{to: requester, reply: reply})
		}
	}()
}

// drain waits, at most stopWait, for the synthesis goroutines to end.
func (a *synthActor) drain() {
	done := make(chan struct{})
	go func() {
		a.running.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopWait):
		if a.cfg.Logger != nil {
			a.cfg.Logger.Warn("synthesizer stopping: a cancelled synthesis is still destroying its sandboxes; going on without it", "waited", stopWait)
		}
	}
}

// RequestFromProto reads a SynthesizeRequest.
func RequestFromProto(m *messages.SynthesizeRequest) Request {
	return Request{
		Count: int(m.Count), Operators: m.Operators, Bugs: int(m.Bugs), Seed: m.Seed,
		HintLevel: int(m.GetTarget().GetHintLevel()), FullSuiteScreening: m.FullSuiteScreening,
		DryRun: m.DryRun, MaxCandidates: int(m.MaxCandidates),
	}
}

func code(err error) rtmsg.FailureCode {
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND
	case errors.Is(err, ErrBadRequest):
		return rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST
	case errors.Is(err, ErrNoPassingTests):
		return rtmsg.FailureCode_FAILURE_CODE_NO_PASSING_TESTS
	case errors.Is(err, ErrCoverage):
		return rtmsg.FailureCode_FAILURE_CODE_COVERAGE
	case errors.Is(err, sandbox.ErrContainerdNotRunning):
		return rtmsg.FailureCode_FAILURE_CODE_CONTAINERD
	}
	return rtmsg.FailureCode_FAILURE_CODE_ERROR
}
