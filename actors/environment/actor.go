package environment

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// ActorName is the well-known name of a node's environments actor.
const ActorName = "environments"

// Config is what the environments actor needs.
type Config struct {
	Store persistence.EnvironmentStore
	// Runtime connects to containerd; it is called on first need (and again
	// after a failure), so a node starts even while containerd is down.
	Runtime  func(ctx context.Context) (*sandbox.Runtime, error)
	Logger   *slog.Logger
	BuildLog io.Writer
}

// Props builds the environments actor: it answers EnvAddRequest (building in
// the background, sending EnvProgress to the requester), EnvListRequest,
// EnvGetRequest and EnvRemoveRequest.
func Props(cfg Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &registrar{cfg: cfg} })
}

type registrar struct {
	cfg Config
	mu  sync.Mutex // serialises adds and removes: one image build at a time per node
}

type addDone struct {
	to    *actor.PID
	reply any
}

func (r *registrar) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.EnvAddRequest:
		r.add(ctx, m)
	case *addDone:
		ctx.Send(m.to, m.reply)
	case *messages.EnvListRequest:
		envs, err := r.cfg.Store.List(context.Background())
		if err != nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_STORE, err))
			return
		}
		ctx.Respond(&messages.EnvList{Environments: envs})
	case *messages.EnvGetRequest:
		env, err := r.cfg.Store.Get(context.Background(), m.Name)
		if err != nil {
			ctx.Respond(rtmsg.Fail(code(err), err))
			return
		}
		ctx.Respond(&messages.EnvAddReply{Environment: env})
	case *messages.EnvRemoveRequest:
		rt, err := r.cfg.Runtime(context.Background())
		if err != nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_CONTAINERD, err))
			return
		}
		r.mu.Lock()
		err = r.builder(rt).Remove(context.Background(), m.Name)
		r.mu.Unlock()
		if err != nil {
			ctx.Respond(rtmsg.Fail(code(err), err))
			return
		}
		ctx.Respond(&messages.EnvRemoved{Name: m.Name})
	}
}

func (r *registrar) builder(rt *sandbox.Runtime) *Builder {
	return &Builder{Runtime: rt, Store: r.cfg.Store, Log: r.cfg.Logger, BuildLog: r.cfg.BuildLog}
}

// add builds off the actor's goroutine: a build takes minutes, and the actor
// must keep answering list and show meanwhile.
func (r *registrar) add(ctx actor.Context, m *messages.EnvAddRequest) {
	requester := ctx.Sender()
	self := ctx.Self()
	system := ctx.ActorSystem()
	src, err := ParseSource(m.Source)
	if err != nil {
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, err))
		return
	}
	go func() {
		reply := func() any {
			bctx := context.Background()
			rt, err := r.cfg.Runtime(bctx)
			if err != nil {
				return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_CONTAINERD, err)
			}
			b := r.builder(rt)
			b.Progress = func(stage string) {
				if requester != nil {
					system.Root.Send(requester, &messages.EnvProgress{Stage: stage})
				}
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			env, err := b.Add(bctx, src, AddOptions{
				Name: m.Name, Language: m.Language, TestCommand: m.TestCommand, TestArgs: m.TestArgs,
				RepoDir: m.RepoDir, SuiteTimeout: time.Duration(m.SuiteTimeoutSeconds * float64(time.Second)),
				MinTests: int(m.MinTests), AllowCollectionErrors: m.AllowCollectionErrors,
			})
			if err != nil {
				return rtmsg.Fail(code(err), err)
			}
			return &messages.EnvAddReply{Environment: env}
		}()
		if requester != nil {
			system.Root.Send(self, &addDone{to: requester, reply: reply})
		}
	}()
}

func code(err error) rtmsg.FailureCode {
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND
	case errors.Is(err, ErrExists):
		return rtmsg.FailureCode_FAILURE_CODE_EXISTS
	case errors.Is(err, ErrNoTests), errors.Is(err, ErrNoLanguage), errors.Is(err, ErrNoSuchImage):
		return rtmsg.FailureCode_FAILURE_CODE_BAD_SOURCE
	case errors.Is(err, ErrInstall), errors.Is(err, ErrSuite), errors.Is(err, ErrNoPassingRun), errors.Is(err, ErrCollection), errors.Is(err, ErrTooFewTests):
		return rtmsg.FailureCode_FAILURE_CODE_REJECTED
	case errors.Is(err, sandbox.ErrContainerdNotRunning):
		return rtmsg.FailureCode_FAILURE_CODE_CONTAINERD
	}
	return rtmsg.FailureCode_FAILURE_CODE_ERROR
}
