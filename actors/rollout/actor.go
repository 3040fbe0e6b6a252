package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// ActorName is the well-known name of a node's rollout actor.
const ActorName = "rollout"

// ActorConfig is what the rollout actor needs.
type ActorConfig struct {
	// Runner runs episodes. When it is nil the actor makes its own on the
	// first rollout request, from Policy and Sandboxes; with no Policy
	// either (a node without a policy), rollout requests fail with code
	// FAILURE_CODE_NO_POLICY (trajectories are still served).
	Runner *Runner
	// Policy returns the policy and its tokenizer (loading a model may
	// take a while: it is called off the actor's goroutine, once it
	// succeeds).
	Policy func(ctx context.Context) (policy.Policy, *tokenizer.Tokenizer, error)
	// Sandboxes are the episodes' sandboxes for the actor's own Runner:
	// Workers (a SandboxWorker actor per episode, on the cluster's
	// containerd members) on a node.
	Sandboxes   Sandboxes
	MaxEpisodes int
	Logger      *slog.Logger

	Trajectories persistence.TrajectoryStore
}

// Props builds the rollout actor. It answers RolloutGroupRequest (and the
// plain RolloutRequest, in agent mode with default limits and greedy
// sampling) with a RolloutGroupResult once every episode is stored,
// running groups concurrently in the background; TrajectoryGetRequest with
// a TrajectoryGetReply; TrajectoryListRequest with a TrajectoryList.
func Props(cfg ActorConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		ctx, cancel := context.WithCancel(context.Background())
		return &rolloutActor{cfg: cfg, ctx: ctx, cancel: cancel}
	})
}

type rolloutActor struct {
	cfg    ActorConfig
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	runner *Runner
}

// getRunner is the configured Runner, or the actor's own, made on first use.
func (a *rolloutActor) getRunner(ctx context.Context) (*Runner, error) {
	if a.cfg.Runner != nil {
		return a.cfg.Runner, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.runner != nil {
		return a.runner, nil
	}
	if a.cfg.Sandboxes == nil {
		return nil, errors.New("this node's rollout actor has a policy but no sandboxes to run episodes in")
	}
	pol, tok, err := a.cfg.Policy(ctx)
	if err != nil {
		return nil, fmt.Errorf("the node's policy: %w", err)
	}
	r, err := New(Config{Policy: pol, Tokenizer: tok, Sandboxes: a.cfg.Sandboxes, Trajectories: a.cfg.Trajectories,
		MaxEpisodes: a.cfg.MaxEpisodes, Logger: a.cfg.Logger})
	if err != nil {
		return nil, err
	}
	a.runner = r
	return r, nil
}

type groupDone struct {
	to    *actor.PID
	reply any
}

func code(err error) rtmsg.FailureCode {
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND
	case errors.Is(err, ErrImageGone):
		return rtmsg.FailureCode_FAILURE_CODE_IMAGE_GONE
	case errors.Is(err, ErrNoEnvironment):
		return rtmsg.FailureCode_FAILURE_CODE_NO_ENVIRONMENT
	case errors.Is(err, persistence.ErrInvalid):
		return rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST
	}
	return rtmsg.FailureCode_FAILURE_CODE_ERROR
}

func (a *rolloutActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Stopping:
		a.cancel()
	case *messages.RolloutRequest:
		a.rollout(ctx, &messages.RolloutGroupRequest{Request: m})
	case *messages.RolloutGroupRequest:
		a.rollout(ctx, m)
	case *groupDone:
		ctx.Send(m.to, m.reply)
	case *messages.TrajectoryGetRequest:
		if a.cfg.Trajectories == nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_NO_STORE, errors.New("this node keeps no trajectories")))
			return
		}
		t, err := a.cfg.Trajectories.Get(context.Background(), m.Id)
		if err != nil {
			ctx.Respond(rtmsg.Fail(code(err), err))
			return
		}
		ctx.Respond(&messages.TrajectoryGetReply{Trajectory: t})
	case *messages.TrajectoryListRequest:
		ctx.Respond(a.list(m))
	case *messages.TrajectoryAppendRequest:
		if a.cfg.Trajectories == nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_NO_STORE, errors.New("this node keeps no trajectories")))
			return
		}
		if err := a.cfg.Trajectories.Append(context.Background(), m.Trajectory); err != nil {
			ctx.Respond(rtmsg.Fail(code(err), err))
			return
		}
		ctx.Respond(&messages.TrajectoryAppended{Id: m.Trajectory.GetId()})
	}
}

// ActorStore is a persistence.TrajectoryStore kept by a rollout actor,
// possibly on another node.
type ActorStore struct {
	Root    *actor.RootContext
	PID     *actor.PID
	Timeout time.Duration // per request (default 1 minute)
	// Ask, when set, replaces Root and PID: how a client outside the actor
	// system (the CLI, through a node's gateway) reaches the rollout actor.
	// It returns the actor's reply, a Failure as a reply too.
	Ask func(msg any, timeout time.Duration) (any, error)
}

var _ persistence.TrajectoryStore = (*ActorStore)(nil)

func (s *ActorStore) ask(msg any) (any, error) {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	var res any
	var err error
	if s.Ask != nil {
		if res, err = s.Ask(msg, timeout); err != nil {
			return nil, err
		}
	} else if res, err = s.Root.RequestFuture(s.PID, msg, timeout).Result(); err != nil {
		return nil, fmt.Errorf("rollout actor %s did not answer: %w", s.PID, err)
	}
	if f, ok := res.(*rtmsg.Failure); ok {
		err := errors.New(f.Message)
		switch f.GetCode() {
		case rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND:
			err = fmt.Errorf("%s: %w", f.Message, persistence.ErrNotFound)
		case rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST:
			err = fmt.Errorf("%s: %w", f.Message, persistence.ErrInvalid)
		}
		return nil, err
	}
	return res, nil
}

// Append implements persistence.TrajectoryStore.
func (s *ActorStore) Append(_ context.Context, t *records.Trajectory) error {
	_, err := s.ask(&messages.TrajectoryAppendRequest{Trajectory: t})
	return err
}

// Get implements persistence.TrajectoryStore.
func (s *ActorStore) Get(_ context.Context, id string) (*records.Trajectory, error) {
	res, err := s.ask(&messages.TrajectoryGetRequest{Id: id})
	if err != nil {
		return nil, err
	}
	return res.(*messages.TrajectoryGetReply).Trajectory, nil
}

// ListByTask and ListByRun return summaries only (no turns, no tokens):
// the actor sends summaries, so a list of thousands stays small.
func (s *ActorStore) ListByTask(_ context.Context, taskID string) ([]*records.Trajectory, error) {
	return s.list(&messages.TrajectoryListRequest{TaskId: taskID})
}

func (s *ActorStore) ListByRun(_ context.Context, runID string) ([]*records.Trajectory, error) {
	return s.list(&messages.TrajectoryListRequest{RunId: runID})
}

func (s *ActorStore) list(req *messages.TrajectoryListRequest) ([]*records.Trajectory, error) {
	res, err := s.ask(req)
	if err != nil {
		return nil, err
	}
	var out []*records.Trajectory
	for _, t := range res.(*messages.TrajectoryList).Trajectories {
		out = append(out, &records.Trajectory{Id: t.Id, RunId: t.RunId, TaskId: t.TaskId, Termination: t.Termination, Reward: t.Reward,
			GenerationSeconds: t.GenerationSeconds, SandboxSeconds: t.SandboxSeconds, CreatedUnixNano: t.CreatedUnixNano, PolicyVersion: t.PolicyVersion})
	}
	return out, nil
}

func (a *rolloutActor) list(m *messages.TrajectoryListRequest) any {
	if a.cfg.Trajectories == nil {
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_NO_STORE, errors.New("this node keeps no trajectories"))
	}
	var (
		ts  []*records.Trajectory
		err error
	)
	switch {
	case m.RunId != "" && m.TaskId == "":
		ts, err = a.cfg.Trajectories.ListByRun(context.Background(), m.RunId)
	case m.TaskId != "" && m.RunId == "":
		ts, err = a.cfg.Trajectories.ListByTask(context.Background(), m.TaskId)
	default:
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("list trajectories by run id or by task id (one of the two)"))
	}
	if err != nil {
		return rtmsg.Fail(code(err), err)
	}
	out := &messages.TrajectoryList{}
	for _, t := range ts {
		out.Trajectories = append(out.Trajectories, Summarize(t))
	}
	return out
}

// Summarize is a trajectory without its tokens.
func Summarize(t *records.Trajectory) *messages.TrajectorySummary {
	s := &messages.TrajectorySummary{Id: t.Id, RunId: t.RunId, TaskId: t.TaskId, Termination: t.Termination, Reward: t.Reward,
		Tokens: int32(len(t.TokenIds)), GenerationSeconds: t.GenerationSeconds, SandboxSeconds: t.SandboxSeconds,
		CreatedUnixNano: t.CreatedUnixNano, PolicyVersion: t.PolicyVersion}
	for _, turn := range t.Turns {
		if turn.Role == records.Role_ROLE_ASSISTANT {
			s.Turns++
		}
	}
	return s
}

// RequestFromProto reads a RolloutGroupRequest.
func RequestFromProto(m *messages.RolloutGroupRequest) (Request, error) {
	r := m.GetRequest()
	req := Request{Task: r.GetTask(), Group: int(r.GetGroupSize()), PolicyVersion: r.GetPolicyVersion(), Seed: r.GetSeed(), RunID: r.GetRunId(), Mode: harness.ModeAgent}
	if m.Mode != "" {
		mode, err := harness.ParseMode(m.Mode)
		if err != nil {
			return Request{}, err
		}
		req.Mode = mode
	}
	if l := m.GetLimits(); l != nil {
		req.Limits = harness.Limits{MaxTurns: int(l.MaxTurns), MaxTurnTokens: int(l.MaxTurnTokens), MaxContext: int(l.MaxContext),
			WallTime: time.Duration(l.WallSeconds * float64(time.Second))}
	}
	if s := m.GetSampling(); s != nil {
		if s.Temperature < 0 || s.TopP < 0 || s.TopP > 1 || s.TopK < 0 {
			return Request{}, fmt.Errorf("sampling %v: temperature and top-k must not be negative, top-p in [0, 1]", s)
		}
		req.Sampling = sample.Params{Temperature: s.Temperature, TopP: s.TopP, TopK: int(s.TopK)}
	}
	return req, nil
}

// rollout runs a group off the actor's goroutine: a group takes minutes,
// and the actor keeps serving meanwhile.
func (a *rolloutActor) rollout(ctx actor.Context, m *messages.RolloutGroupRequest) {
	if a.cfg.Runner == nil && a.cfg.Policy == nil {
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_NO_POLICY, errors.New("this node's rollout actor has no policy to run episodes with")))
		return
	}
	req, err := RequestFromProto(m)
	if err != nil {
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, err))
		return
	}
	requester, self, system := ctx.Sender(), ctx.Self(), ctx.ActorSystem()
	go func() {
		var reply any
		runner, err := a.getRunner(a.ctx)
		if err != nil {
			reply = rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_NO_POLICY, err)
		} else if res, err := runner.Run(a.ctx, req, nil); err != nil {
			reply = rtmsg.Fail(code(err), err)
		} else {
			reply = res.Proto()
		}
		if requester != nil {
			system.Root.Send(self, &groupDone{to: requester, reply: reply})
		}
	}()
}
