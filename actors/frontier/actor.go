package frontier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
)

// ActorName is the well-known name of a node's frontier actor.
const ActorName = "frontier"

// SynthesizerName is the name of the synthesizer actor on the same node
// (actors/synth.ActorName; not imported, to keep the packages apart).
const SynthesizerName = "synthesizer"

// ActorConfig is what the frontier actor needs from its node.
type ActorConfig struct {
	// Name keys the estimator's state (default "default").
	Name       string
	Tasks      persistence.TaskStore
	Curriculum persistence.CurriculumStore
	State      persistence.FrontierStore
	// Environments, when set, names the environments synthesis may use when
	// neither Params nor the pool name any.
	Environments persistence.EnvironmentStore
	Params       Params
	// Synthesizer receives SynthesizeRequest (default: the node's
	// synthesizer actor). nil Synthesizer with Synthesis false disables
	// synthesis control.
	Synthesizer *actor.PID
	// Synthesis enables synthesis control.
	Synthesis bool
	// Tick is how often an idle actor checks the pool and its requests
	// (default one minute).
	Tick   time.Duration
	Logger *slog.Logger
}

// Props builds the frontier actor. It answers BatchRequest with a
// TaskBatch, OutcomesReport with an OutcomesAck and FrontierStateRequest
// with a FrontierStateReply (a Failure when the request is bad or the store
// fails); after every batch and report, and on a timer, it asks the
// Synthesizer for tasks when the pool is short of frontier tasks (while
// batches or reports keep arriving; an idle node synthesizes nothing). All its
// state is in the stores: a restarted actor continues where the last one
// stopped.
func Props(cfg ActorConfig) *actor.Props {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Minute
	}
	return actor.PropsFromProducer(func() actor.Actor { return &frontierActor{cfg: cfg} })
}

type frontierActor struct {
	cfg ActorConfig
	est *Estimator
	// active is when a batch or report last arrived: synthesis control runs
	// while training runs, not on an idle node.
	active time.Time
}

// synthAnswer is a request child's report to the frontier actor.
type synthAnswer struct {
	id    string
	tasks []string
	err   error
}

func failure(err error) *messages.Failure {
	code := "error"
	switch {
	case errors.Is(err, ErrBadRequest):
		code = "bad_request"
	case errors.Is(err, persistence.ErrNotFound):
		code = "not_found"
	}
	return &messages.Failure{Code: code, Message: err.Error()}
}

// estimator opens the estimator on first need, so a store that fails at
// start is retried on the next message.
func (a *frontierActor) estimator() (*Estimator, error) {
	if a.est != nil {
		return a.est, nil
	}
	est, err := Open(context.Background(), Config{
		Name: a.cfg.Name, Tasks: a.cfg.Tasks, Curriculum: a.cfg.Curriculum, State: a.cfg.State,
		Params: a.cfg.Params, Logger: a.cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	a.est = est
	return est, nil
}

func (a *frontierActor) Receive(ctx actor.Context) {
	bg := context.Background()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if _, err := a.estimator(); err != nil {
			a.cfg.Logger.Error("frontier: cannot open the estimator; will retry", "err", err)
		}
		ctx.SetReceiveTimeout(a.cfg.Tick)
	case *actor.ReceiveTimeout:
		if time.Since(a.active) < 10*a.cfg.Tick {
			a.plan(ctx)
		}
	case *messages.BatchRequest:
		a.active = time.Now()
		est, err := a.estimator()
		if err == nil {
			var tasks []*messages.Task
			if tasks, err = est.SelectBatch(bg, int(m.GetTasks()), m.GetPolicyVersion(), m.GetSeed(), m.GetMode()); err == nil {
				ctx.Respond(&messages.TaskBatch{Tasks: tasks, PolicyVersion: est.PolicyVersion()})
				a.plan(ctx)
				return
			}
		}
		ctx.Respond(failure(err))
	case *messages.OutcomesReport:
		a.active = time.Now()
		est, err := a.estimator()
		if err == nil {
			var res RecordResult
			if res, err = est.Record(bg, m.GetOutcomes()); err == nil {
				ctx.Respond(&messages.OutcomesAck{Recorded: int32(res.Recorded)})
				a.plan(ctx)
				return
			}
		}
		ctx.Respond(failure(err))
	case *messages.FrontierStateRequest:
		est, err := a.estimator()
		if err != nil {
			ctx.Respond(failure(err))
			return
		}
		ctx.Respond(est.Snapshot(a.environmentNames()))
	case *synthAnswer:
		est, err := a.estimator()
		if err == nil {
			err = est.Delivered(bg, m.id, m.tasks, m.err)
		}
		if err != nil {
			a.cfg.Logger.Error("frontier: cannot record a synthesis answer", "request", m.id, "err", err)
		}
	}
}

func (a *frontierActor) environmentNames() []string {
	if a.cfg.Environments == nil {
		return nil
	}
	envs, err := a.cfg.Environments.List(context.Background())
	if err != nil {
		a.cfg.Logger.Warn("frontier: cannot list environments", "err", err)
		return nil
	}
	names := make([]string, len(envs))
	for i, e := range envs {
		names[i] = e.GetName()
	}
	return names
}

// plan runs the synthesis control and sends what it asks for, each request
// from a child actor that waits for the Synthesizer's answer.
func (a *frontierActor) plan(ctx actor.Context) {
	if !a.cfg.Synthesis || a.est == nil {
		return
	}
	recs, err := a.est.PlanSynthesis(context.Background(), a.environmentNames())
	if err != nil {
		a.cfg.Logger.Error("frontier: synthesis planning failed", "err", err)
		return
	}
	synth := a.cfg.Synthesizer
	if synth == nil {
		synth = actor.NewPID(ctx.Self().GetAddress(), SynthesizerName)
	}
	for _, rec := range recs {
		a.cfg.Logger.Info("frontier: asking for tasks", "request", rec.GetId(), "spec", SpecKey(rec.GetSpec()),
			"count", rec.GetAsked(), "predicted", fmt.Sprintf("%.2f", rec.GetPredicted()))
		ctx.Spawn(requestProps(synth, rec.GetId(), SynthesizeRequestOf(rec), a.est.Params().RequestTimeout))
	}
}

// requestProps is a child that sends one SynthesizeRequest, ignores its
// progress reports and tells its parent the outcome: the tasks, a Failure,
// the synthesizer stopping, or no answer within timeout.
func requestProps(synth *actor.PID, id string, req *messages.SynthesizeRequest, timeout time.Duration) *actor.Props {
	answered := false
	return actor.PropsFromFunc(func(ctx actor.Context) {
		answer := func(tasks []string, err error) {
			if !answered {
				answered = true
				ctx.Send(ctx.Parent(), &synthAnswer{id: id, tasks: tasks, err: err})
				ctx.Stop(ctx.Self())
			}
		}
		switch m := ctx.Message().(type) {
		case *actor.Started:
			ctx.Watch(synth)
			ctx.SetReceiveTimeout(timeout)
			ctx.Request(synth, req)
		case *messages.SynthesizeResult:
			answer(m.GetTaskIds(), nil)
		case *messages.Failure:
			answer(nil, fmt.Errorf("synthesizer: %s: %s", m.GetCode(), m.GetMessage()))
		case *actor.Terminated:
			answer(nil, fmt.Errorf("synthesizer %s stopped (%v)", synth, m.GetWhy()))
		case *actor.ReceiveTimeout:
			answer(nil, fmt.Errorf("no answer from the synthesizer within %v", timeout))
		}
	})
}
