package trainer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/learner"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/kernels/grpo"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/optim"
	"github.com/frognano/frognano/persistence"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// HostName is the well-known name of a node's learner host: the named actor
// the loop asks for a run's Learner (its child). Run records are the run
// service's (service.go), written to the node's store.
const HostName = "learner-host"

// HostConfig is what a learner host needs from its node.
type HostConfig struct {
	Checkpoints persistence.CheckpointStore
	// LoadModel loads the model a run trains, by model store name or path
	// ("" is the store's default), on the backend the Learner should use.
	LoadModel func(ctx context.Context, name string) (*model.Model, error)
	// Supervisor restarts a crashed Learner (which resumes from its newest
	// checkpoint); nil is protoactor's default strategy.
	Supervisor actor.SupervisorStrategy
	Logger     *slog.Logger
}

// HostProps builds a learner host. It answers LearnerOpen with
// LearnerOpened once the run's Learner has opened (a Failure when it
// cannot). The Learner is a child
// actor (actors/learner): a crash restarts it from its newest checkpoint.
// A host keeps one Learner open; opening another run stops the open one
// first, and a stopping Learner writes its final checkpoint.
func HostProps(cfg HostConfig) *actor.Props {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	opts := []actor.PropsOption{}
	if cfg.Supervisor != nil {
		opts = append(opts, actor.WithSupervisor(cfg.Supervisor))
	}
	return actor.PropsFromProducer(func() actor.Actor { return &host{cfg: cfg} }, opts...)
}

type host struct {
	cfg  HostConfig
	open *messages.LearnerOpen // settings of the open run
	pid  *actor.PID            // its Learner
}

// openFailed tells the host that the Learner it spawned could not open, so
// that the next LearnerOpen tries again.
type openFailed struct{ pid *actor.PID }

func (h *host) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.LearnerOpen:
		h.openRun(ctx, m)
	case *openFailed:
		if h.pid != nil && h.pid.Equal(m.pid) {
			ctx.Stop(h.pid)
			h.pid, h.open = nil, nil
		}
	}
}

func (h *host) openRun(ctx actor.Context, m *messages.LearnerOpen) {
	switch {
	case m.GetRunId() == "":
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("learner host: LearnerOpen without a run id")))
		return
	case !(m.GetLr() > 0):
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, fmt.Errorf("learner host: learning rate %v: want > 0", m.GetLr())))
		return
	case m.GetCheckpointEvery() < 0 || m.GetMicroBatchTokens() < 0 || m.GetTrainLayers() < 0:
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("learner host: negative checkpoint interval, micro-batch size or trained layers")))
		return
	}
	if h.open != nil && h.open.GetRunId() == m.GetRunId() && !proto.Equal(h.open, m) {
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_CONFLICT, fmt.Errorf("learner host: run %s is open with other settings (%v); stop the node to change them", m.GetRunId(), h.open)))
		return
	}
	if h.open == nil || h.open.GetRunId() != m.GetRunId() {
		if h.pid != nil {
			h.cfg.Logger.Info("learner host: closing the open run for another", "open", h.open.GetRunId(), "next", m.GetRunId())
			// Stopping lets the running step finish and writes the final
			// checkpoint; the next Learner must not load beside it.
			if err := ctx.StopFuture(h.pid).Wait(); err != nil {
				h.cfg.Logger.Warn("learner host: the previous Learner did not stop in time", "run", h.open.GetRunId(), "err", err)
			}
		}
		cfg, o := h.cfg, proto.Clone(m).(*messages.LearnerOpen)
		open := func(ctx context.Context) (*learner.Learner, error) {
			mdl, err := cfg.LoadModel(ctx, o.GetModel())
			if err != nil {
				return nil, err
			}
			oc := optim.DefaultConfig()
			oc.LR = o.GetLr()
			return learner.Open(ctx, learner.Config{
				RunID: o.GetRunId(), Model: mdl, Store: cfg.Checkpoints, Optim: oc, GRPO: grpo.DefaultOptions(),
				MicroBatchTokens: int(o.GetMicroBatchTokens()), CheckpointEvery: int(o.GetCheckpointEvery()), Seed: o.GetSeed(),
				Train: model.TrainOptions{TrainLayers: int(o.GetTrainLayers())}, Logger: cfg.Logger,
			})
		}
		h.pid = ctx.Spawn(learner.Props(learner.ActorConfig{Open: open, Logger: h.cfg.Logger}))
		h.open = o
		h.cfg.Logger.Info("learner host: opening", "run", o.GetRunId(), "model", o.GetModel(), "learner", h.pid)
	}
	// The Learner opens (loads the model and its checkpoint) in its Started
	// handler; its first answer comes after that.
	sender, self, root, pid := ctx.Sender(), ctx.Self(), ctx.ActorSystem().Root, h.pid
	if sender == nil {
		return
	}
	go func() {
		res, err := root.RequestFuture(pid, &messages.LearnerStatusRequest{}, 30*time.Minute).Result()
		var reply any
		switch r := res.(type) {
		case *messages.LearnerStatus:
			reply = &messages.LearnerOpened{Address: pid.GetAddress(), Id: pid.GetId(), Status: r}
		case *rtmsg.Failure:
			reply = r
			root.Send(self, &openFailed{pid: pid})
		default:
			if err == nil {
				err = fmt.Errorf("the Learner answered %T", res)
			}
			reply = rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_ERROR, fmt.Errorf("learner host: run %s: %w", m.GetRunId(), err))
			root.Send(self, &openFailed{pid: pid})
		}
		root.Send(sender, reply)
	}()
}
