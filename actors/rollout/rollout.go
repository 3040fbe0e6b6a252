// Package rollout drives episodes: for a task, G episodes run concurrently,
// each in a fresh sandbox of the task's image, through the agent harness
// (actors/harness) with a Policy (a Sampler Engine, or a Client of a remote
// Sampler); each is graded and written, whole, to the trajectory store.
// The Runner is plain Go; the rollout actor (actor.go) translates messages
// into Runner calls and serves stored trajectories.
//
// An episode whose sandbox dies or whose policy fails (an infrastructure
// ending) is retried once in a fresh sandbox with the same seed; if it fails
// again it is recorded as an infrastructure failure, and left out of the
// group's rewards. A task whose environment or image is gone fails the
// request before any episode runs.
package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Config is what a Runner needs.
type Config struct {
	Policy    policy.Policy
	Tokenizer *tokenizer.Tokenizer
	Sandboxes Sandboxes
	// Trajectories receives every episode; nil keeps them in the results
	// only.
	Trajectories persistence.TrajectoryStore
	// MaxEpisodes bounds the episodes running at once across all requests
	// (sandboxes alive together); default 16.
	MaxEpisodes int
	// Tools bounds each tool call.
	Tools  harness.Options
	Logger *slog.Logger
}

// Runner runs groups of episodes. It is safe for concurrent use.
type Runner struct {
	cfg  Config
	slot chan struct{}
}

// New returns a Runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Policy == nil || cfg.Tokenizer == nil || cfg.Sandboxes == nil {
		return nil, errors.New("rollout: a Runner needs a Policy, a Tokenizer and Sandboxes")
	}
	if cfg.MaxEpisodes <= 0 {
		cfg.MaxEpisodes = 16
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Runner{cfg: cfg, slot: make(chan struct{}, cfg.MaxEpisodes)}, nil
}

// Request is one group.
type Request struct {
	Task     *records.Task
	Group    int // G, episodes of the task
	Mode     harness.Mode
	Limits   harness.Limits
	Sampling sample.Params
	// PolicyVersion, when positive, is the oldest policy version the
	// episodes may use (GenerateRequest.MinPolicyVersion).
	PolicyVersion int64
	// Seed seeds the group; episode i's seed derives from (Seed, task, i).
	Seed  uint64
	RunID string
	// Reuse names runs (RunID among them, or earlier attempts of the same
	// evaluation) whose stored episode of the same task and seed stands for
	// this one, so that a resumed evaluation does not play again what it
	// finished before it stopped. A stored episode is taken when it was
	// played at PolicyVersion or later; it is not stored again, and its
	// Episode says Reused. Config.Trajectories must be set.
	Reuse []string
}

// reused is episode i of req read back from the store, if one of the
// runs req.Reuse names holds it (played at req.PolicyVersion or later);
// nil when none does.
func (r *Runner) reused(ctx context.Context, req Request, i int) (*Episode, error) {
	seed := EpisodeSeed(req.Seed, req.Task.GetId(), i)
	for _, run := range req.Reuse {
		id := TrajectoryID(run, req.Task.GetId(), seed)
		t, err := r.cfg.Trajectories.Get(ctx, id)
		if errors.Is(err, persistence.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading stored episode %s: %w", id, err)
		}
		if t.GetTaskId() != req.Task.GetId() || t.GetSeed() != seed || t.GetPolicyVersion() < req.PolicyVersion {
			continue
		}
		res := harness.ResultOf(t, req.Mode)
		return &Episode{Index: i, Seed: seed, TrajectoryID: id, Attempts: 1, Infra: res.Ending.Infrastructure(), Result: res,
			WallSeconds: t.GetGenerationSeconds() + t.GetSandboxSeconds(), Reused: true}, nil
	}
	return nil, nil
}

// Episode is one episode of a group.
type Episode struct {
	Index        int
	TrajectoryID string
	Seed         uint64
	Attempts     int
	// Infra: both attempts ended in an infrastructure failure.
	Infra bool
	// Result is the last attempt's; for a sandbox that could not even be
	// created it holds only the ending.
	Result *harness.EpisodeResult
	// SetupSeconds is the time to get and prepare the sandbox(es).
	SetupSeconds float64
	WallSeconds  float64
	// Reused: read back from the stored trajectory TrajectoryID (see
	// Request.Reuse), not played by this request.
	Reused bool
}

// Summary is the episode as a message.
func (e *Episode) Summary() *messages.EpisodeSummary {
	r := e.Result
	s := &messages.EpisodeSummary{
		TrajectoryId: e.TrajectoryID, Termination: string(r.Ending), Detail: r.Detail, Reward: r.Reward,
		Resolved: r.Grade != nil && r.Grade.Resolved, InfrastructureFailure: e.Infra, Attempts: int32(e.Attempts),
		PolicyTokens: int32(r.PolicyTokens()), TotalTokens: int32(len(r.TokenIDs)),
		GenerationSeconds: r.GenerationSeconds, SandboxSeconds: r.SandboxSeconds + e.SetupSeconds,
		WallSeconds: e.WallSeconds, Seed: e.Seed,
	}
	for _, t := range r.Turns {
		if t.Role == records.Role_ROLE_ASSISTANT {
			s.Turns++
		}
	}
	return s
}

// Result is a finished group.
type Result struct {
	TaskID   string
	Episodes []*Episode
	Wall     time.Duration
}

// Rewards are the rewards of the episodes that are not infrastructure
// failures, in episode order.
func (r *Result) Rewards() []float64 {
	var out []float64
	for _, e := range r.Episodes {
		if !e.Infra {
			out = append(out, e.Result.Reward)
		}
	}
	return out
}

// Proto is the result as a message.
func (r *Result) Proto() *messages.RolloutGroupResult {
	out := &messages.RolloutGroupResult{Result: &messages.RolloutResult{TaskId: r.TaskID, Rewards: r.Rewards()}, WallSeconds: r.Wall.Seconds()}
	for _, e := range r.Episodes {
		out.Result.TrajectoryIds = append(out.Result.TrajectoryIds, e.TrajectoryID)
		out.Episodes = append(out.Episodes, e.Summary())
	}
	return out
}

// EpisodeSeed derives episode i's seed from the group's seed and the task,
// so any episode can be replayed from its record.
func EpisodeSeed(seed uint64, taskID string, i int) uint64 {
	h := sha256.New()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(i))
	h.Write(b[:])
	h.Write([]byte(taskID))
	return binary.LittleEndian.Uint64(h.Sum(nil))
}

// TrajectoryID names episode i of a group.
func TrajectoryID(runID, taskID string, seed uint64) string {
	return fmt.Sprintf("%s/%s/%016x", runID, taskID, seed)
}

// Run plays req.Group episodes of req.Task concurrently (within
// MaxEpisodes), writes each trajectory as soon as it is graded, and calls
// done (if not nil) after each, from the episode's goroutine. It fails,
// before starting anything, on a bad request or a task that cannot run
// (ErrImageGone, ErrNoEnvironment), and afterwards only when ctx ends or the
// store fails.
func (r *Runner) Run(ctx context.Context, req Request, done func(*Episode)) (*Result, error) {
	switch {
	case req.Task == nil || req.Task.GetId() == "":
		return nil, errors.New("rollout: no task")
	case req.Group < 1:
		return nil, fmt.Errorf("rollout: group size %d: want at least 1", req.Group)
	case req.RunID == "":
		return nil, errors.New("rollout: no run id")
	case len(req.Reuse) > 0 && r.cfg.Trajectories == nil:
		return nil, errors.New("rollout: Reuse needs a trajectory store")
	}
	if req.Mode == "" {
		req.Mode = harness.ModeAgent
	}
	if _, err := harness.ParseMode(string(req.Mode)); err != nil {
		return nil, err
	}
	if err := r.cfg.Sandboxes.Check(ctx, req.Task); err != nil {
		return nil, err
	}
	start := time.Now()
	res := &Result{TaskID: req.Task.GetId(), Episodes: make([]*Episode, req.Group)}
	errs := make([]error, req.Group)
	var wg sync.WaitGroup
	for i := range req.Group {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep, err := r.episode(ctx, req, i)
			if err != nil {
				errs[i] = err
				return
			}
			res.Episodes[i] = ep
			if done != nil {
				done(ep)
			}
		}()
	}
	wg.Wait()
	res.Wall = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return res, nil
}

// episode runs one episode, with its one retry.
func (r *Runner) episode(ctx context.Context, req Request, i int) (*Episode, error) {
	if ep, err := r.reused(ctx, req, i); ep != nil || err != nil {
		return ep, err
	}
	select {
	case r.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.slot }()
	seed := EpisodeSeed(req.Seed, req.Task.GetId(), i)
	ep := &Episode{Index: i, Seed: seed, TrajectoryID: TrajectoryID(req.RunID, req.Task.GetId(), seed)}
	hr := &harness.Runner{Policy: r.cfg.Policy, Tokenizer: r.cfg.Tokenizer, Limits: req.Limits, Tools: r.cfg.Tools,
		Sampling: req.Sampling, MinPolicyVersion: req.PolicyVersion}
	start := time.Now()
	for ep.Attempts < 2 {
		ep.Attempts++
		ss := time.Now()
		ws, err := r.cfg.Sandboxes.Workspace(ctx, req.Task)
		ep.SetupSeconds += sinceSeconds(ss)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, ErrImageGone) || errors.Is(err, ErrNoEnvironment) {
				return nil, err
			}
			r.cfg.Logger.Warn("episode sandbox failed", "task", req.Task.GetId(), "episode", i, "attempt", ep.Attempts, "err", err)
			ep.Result = &harness.EpisodeResult{Mode: req.Mode, Seed: seed, Ending: harness.EndSandboxFailure, Detail: harness.ValidString("sandbox setup: " + err.Error())}
			continue
		}
		res, err := hr.Run(ctx, req.Task, ws, req.Mode, seed)
		ws.Close()
		if err != nil {
			return nil, fmt.Errorf("episode %d of task %s: %w", i, req.Task.GetId(), err)
		}
		ep.Result = res
		if !res.Ending.Infrastructure() {
			break
		}
		r.cfg.Logger.Warn("episode infrastructure failure", "task", req.Task.GetId(), "episode", i, "attempt", ep.Attempts, "ending", res.Ending, "detail", res.Detail)
	}
	ep.Infra = ep.Result.Ending.Infrastructure()
	ep.WallSeconds = sinceSeconds(start)
	if r.cfg.Trajectories != nil {
		t := ep.Result.Trajectory(ep.TrajectoryID, req.RunID, req.Task.GetId())
		t.SandboxSeconds += ep.SetupSeconds
		if err := r.cfg.Trajectories.Append(ctx, t); err != nil {
			return nil, fmt.Errorf("store trajectory %s: %w", ep.TrajectoryID, err)
		}
	}
	return ep, nil
}
