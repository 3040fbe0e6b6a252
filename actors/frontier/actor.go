package frontier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// ActorName is the well-known name of a node's frontier actor.
const ActorName = "frontier"

// SynthesizerName is the name of the synthesizer actor on the same node
// (actors/synth.ActorName; not imported, to keep the packages apart).
const SynthesizerName = "synthesizer"

// ActorConfig is what the frontier actor needs from its node.
type ActorConfig struct {
	// Name is the default estimator's name, for requests that name no run
	// (default persistence.DefaultFrontier).
	Name  string
	Tasks persistence.TaskStore
	State persistence.FrontierStore
	// Environments, when set, names the environments synthesis may use when
	// neither Params nor the pool name any.
	Environments persistence.EnvironmentStore
	Params       Params
	// Exclude names environments no estimator trains on (Config.Exclude).
	Exclude func(env string) bool
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
// fails). Each training run has its own Estimator, named after the run
// (requests without a run use the default one): posteriors and policy
// versions belong to one policy's lineage, so a new run at version 0 starts
// its own frontier rather than being refused as stale by another run's.
// After every batch and report, and on a timer, the estimator concerned
// asks the Synthesizer for tasks when its pool is short of frontier tasks
// (while batches or reports keep arriving; an idle estimator synthesizes
// nothing). All its state is in the stores: a restarted actor continues
// where the last one stopped.
func Props(cfg ActorConfig) *actor.Props {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Minute
	}
	if cfg.Name == "" {
		cfg.Name = persistence.DefaultFrontier
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &frontierActor{cfg: cfg, est: map[string]*Estimator{}, active: map[string]time.Time{}}
	})
}

type frontierActor struct {
	cfg ActorConfig
	est map[string]*Estimator // by name, opened on first need
	// active is when a batch or report for an estimator last arrived:
	// synthesis control runs while its run trains, not on an idle node.
	active map[string]time.Time
}

// synthAnswer is a request child's report to the frontier actor.
type synthAnswer struct {
	estimator string
	id        string
	tasks     []string
	err       error
}

func code(err error) rtmsg.FailureCode {
	switch {
	case errors.Is(err, ErrBadRequest):
		return rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST
	case errors.Is(err, persistence.ErrNotFound):
		return rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND
	}
	return rtmsg.FailureCode_FAILURE_CODE_ERROR
}

// nameOf is the estimator a request's run names.
func (a *frontierActor) nameOf(run string) (string, error) {
	if run == "" {
		return a.cfg.Name, nil
	}
	if strings.ContainsRune(run, 0) {
		return "", fmt.Errorf("%w: run %q contains a NUL byte", ErrBadRequest, run)
	}
	return run, nil
}

// estimator opens the named estimator on first need, so a store that fails
// is retried on the next message.
func (a *frontierActor) estimator(name string) (*Estimator, error) {
	est, err := a.transient(name)
	if err != nil {
		return nil, err
	}
	a.est[name] = est
	return est, nil
}

// forRun is the estimator of a request's run.
func (a *frontierActor) forRun(run string) (string, *Estimator, error) {
	name, err := a.nameOf(run)
	if err != nil {
		return "", nil, err
	}
	est, err := a.estimator(name)
	return name, est, err
}

// latest is the name of the estimator with the newest activity in the store
// (the default one when none has any).
func (a *frontierActor) latest() (string, error) {
	bg := context.Background()
	names, err := a.cfg.State.Names(bg)
	if err != nil {
		return "", err
	}
	best, newest := a.cfg.Name, int64(-1)
	for _, n := range names {
		st, err := a.cfg.State.Get(bg, n)
		if err != nil {
			return "", err
		}
		if st.GetActiveUnixNano() > newest {
			best, newest = n, st.GetActiveUnixNano()
		}
	}
	return best, nil
}

func (a *frontierActor) Receive(ctx actor.Context) {
	bg := context.Background()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if _, err := a.estimator(a.cfg.Name); err != nil {
			a.cfg.Logger.Error("frontier: cannot open the estimator; will retry", "err", err)
		}
		ctx.SetReceiveTimeout(a.cfg.Tick)
	case *actor.ReceiveTimeout:
		for name, at := range a.active {
			if time.Since(at) < 10*a.cfg.Tick {
				a.plan(ctx, name)
				continue
			}
			// An idle run's estimator leaves memory; the store keeps it.
			delete(a.active, name)
			if name != a.cfg.Name {
				delete(a.est, name)
			}
		}
	case *messages.BatchRequest:
		name, est, err := a.forRun(m.GetRun())
		if err == nil {
			a.active[name] = time.Now()
			var tasks []*records.Task
			sel := est.SelectBatch
			if m.GetUniform() {
				sel = est.SelectUniform
			}
			if tasks, err = sel(bg, int(m.GetTasks()), m.GetPolicyVersion(), m.GetSeed(), m.GetMode()); err == nil {
				ctx.Respond(&messages.TaskBatch{Tasks: tasks, PolicyVersion: est.PolicyVersion()})
				a.plan(ctx, name)
				return
			}
		}
		ctx.Respond(rtmsg.Fail(code(err), err))
	case *messages.OutcomesReport:
		name, est, err := a.forRun(m.GetRun())
		if err == nil {
			a.active[name] = time.Now()
			var res RecordResult
			if res, err = est.RecordStep(bg, m.GetStep(), m.GetOutcomes()); err == nil {
				ctx.Respond(&messages.OutcomesAck{Recorded: int32(res.Recorded), Duplicate: res.Duplicate})
				a.plan(ctx, name)
				return
			}
		}
		ctx.Respond(rtmsg.Fail(code(err), err))
	case *messages.FrontierStateRequest:
		est, err := a.forState(m)
		if err != nil {
			ctx.Respond(rtmsg.Fail(code(err), err))
			return
		}
		ctx.Respond(est.Snapshot(a.environmentNames()))
	case *synthAnswer:
		est, err := a.transient(m.estimator)
		if err == nil {
			err = est.Delivered(bg, m.id, m.tasks, m.err)
		}
		if err != nil {
			a.cfg.Logger.Error("frontier: cannot record a synthesis answer", "estimator", m.estimator, "request", m.id, "err", err)
		}
	}
}

// transient is the named estimator: the one in memory, or one opened from
// the store for this message only (an idle run's estimator, evicted, gets
// the answer to a request it sent while training and stays out of memory).
func (a *frontierActor) transient(name string) (*Estimator, error) {
	if est, ok := a.est[name]; ok {
		return est, nil
	}
	return Open(context.Background(), Config{
		Name: name, Tasks: a.cfg.Tasks, State: a.cfg.State, Params: a.cfg.Params, Exclude: a.cfg.Exclude, Logger: a.cfg.Logger.With("estimator", name),
	})
}

// forState is the estimator a state request asks for: the latest active
// one, a run's (which must exist), or the default one.
func (a *frontierActor) forState(m *messages.FrontierStateRequest) (*Estimator, error) {
	name, err := a.nameOf(m.GetRun())
	if err != nil {
		return nil, err
	}
	if m.GetRun() == "" && m.GetLatest() {
		if name, err = a.latest(); err != nil {
			return nil, err
		}
	}
	if _, ok := a.est[name]; !ok && name != a.cfg.Name {
		if _, err := a.cfg.State.Get(context.Background(), name); err != nil {
			if errors.Is(err, persistence.ErrNotFound) {
				return nil, fmt.Errorf("no frontier estimator for run %q: %w", name, err)
			}
			return nil, err
		}
	}
	return a.transient(name)
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

// plan runs the named estimator's synthesis control and sends what it asks
// for, each request from a child actor that waits for the Synthesizer's
// answer.
func (a *frontierActor) plan(ctx actor.Context, name string) {
	est := a.est[name]
	if !a.cfg.Synthesis || est == nil {
		return
	}
	recs, err := est.PlanSynthesis(context.Background(), a.environmentNames())
	if err != nil {
		a.cfg.Logger.Error("frontier: synthesis planning failed", "estimator", name, "err", err)
		return
	}
	synth := a.cfg.Synthesizer
	if synth == nil {
		synth = actor.NewPID(ctx.Self().GetAddress(), SynthesizerName)
	}
	for _, rec := range recs {
		a.cfg.Logger.Info("frontier: asking for tasks", "estimator", name, "request", rec.GetId(), "spec", SpecKey(rec.GetSpec()),
			"count", rec.GetAsked(), "predicted", fmt.Sprintf("%.2f", rec.GetPredicted()))
		ctx.Spawn(requestProps(synth, name, rec.GetId(), SynthesizeRequestOf(rec), est.Params().RequestTimeout))
	}
}

// requestProps is a child that sends one SynthesizeRequest, ignores its
// progress reports and tells its parent the outcome: the tasks, a Failure,
// the synthesizer stopping, or no answer within timeout.
func requestProps(synth *actor.PID, estimator, id string, req *messages.SynthesizeRequest, timeout time.Duration) *actor.Props {
	answered := false
	return actor.PropsFromFunc(func(ctx actor.Context) {
		answer := func(tasks []string, err error) {
			if !answered {
				answered = true
				ctx.Send(ctx.Parent(), &synthAnswer{estimator: estimator, id: id, tasks: tasks, err: err})
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
		case *rtmsg.Failure:
			answer(nil, fmt.Errorf("synthesizer: %s: %s", m.GetCode().Short(), m.GetMessage()))
		case *actor.Terminated:
			answer(nil, fmt.Errorf("synthesizer %s stopped (%v)", synth, m.GetWhy()))
		case *actor.ReceiveTimeout:
			answer(nil, fmt.Errorf("no answer from the synthesizer within %v", timeout))
		}
	})
}
