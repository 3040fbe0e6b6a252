package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandboxworker"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/placement"
)

// Workers makes every episode's workspace from its own SandboxWorker
// actor (kind sandboxworker.Kind), the way DESIGN.md draws the loop: per
// episode it spawns a worker (in this actor system, or on a cluster member
// that has containerd), has it create a sandbox of the task's environment
// and prepare the episode (SandboxPrepareEpisode), runs the tools through
// it (WorkerSandbox) and grades through it (SandboxGrade), on the node that
// holds the container. Close destroys the sandbox and stops the worker.
//
// A worker that dies during the episode (its actor stopped or crashed, its
// node gone) is noticed at once through a watch: the tool call or grading
// in flight fails with ErrWorker, the episode ends as a sandbox failure,
// and the Runner retries it once in a fresh worker.
//
// Workers is what the rollout actor and frognano eval use. Containerd (a
// pool of ready sandboxes per image, driven in this process) remains as
// the in-process baseline the benchmark measures: it can hide a
// container's start behind the previous episode, but only on the machine
// that runs the episodes, without supervision. Measured on a 2-core
// machine, a group of 8 scripted agent episodes takes the same time either
// way (11–15 s wall, 1–1.6 s setup per episode, run to run noise larger
// than the difference), so nothing chooses the pool by default.
type Workers struct {
	// Root sends the requests and watches the workers.
	Root *actor.RootContext
	// Spawn starts one worker for an episode: LocalWorkers, or a
	// ClusterWorkers' Spawn.
	Spawn func(ctx context.Context) (*actor.PID, error)
	// Environments is where Check looks the task's environment up.
	Environments persistence.EnvironmentStore
	// Runtime, when this process reaches containerd, lets Check see that an
	// image is gone before any episode starts; nil (or failing) leaves that
	// to the worker, which refuses to create the sandbox with the same error
	// (ErrImageGone) and the request fails then.
	Runtime func(ctx context.Context) (*sandbox.Runtime, error)
	// TestPatches maps task ids to patches applied for grading only
	// (SWE-bench instances' test_patch).
	TestPatches map[string]string
	// TestTimeout bounds a grading run (0: the harness's default from the
	// task's validation time, at most 15 minutes).
	TestTimeout time.Duration
	// SetupTimeout bounds creating and preparing the sandbox (default 5
	// minutes); Slack is WorkerSandbox.Slack.
	SetupTimeout time.Duration
	Slack        time.Duration
	Logger       *slog.Logger

	closing sync.WaitGroup
}

var _ Sandboxes = (*Workers)(nil)

// LocalWorkers spawns workers from props (sandboxworker.Props) in root's
// actor system, for Workers.Spawn. A worker that crashes is stopped, not
// restarted: its sandbox went with it, so the episode is retried in a
// fresh worker instead.
func LocalWorkers(root *actor.RootContext, props *actor.Props) func(context.Context) (*actor.PID, error) {
	props = props.Configure(actor.WithGuardian(actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })))
	return func(context.Context) (*actor.PID, error) {
		pid, err := root.SpawnNamed(props, sandboxworker.Kind+"-"+root.ActorSystem().ProcessRegistry.NextId())
		if err != nil {
			return nil, fmt.Errorf("spawn a sandbox worker: %w", err)
		}
		return pid, nil
	}
}

// ClusterWorkers spawns workers by kind name on cluster members through a
// node's manager (SpawnRequest, remote spawning). Members that report
// containerd come first, taken in turn so that episodes spread over them;
// then members whose facts have not reached this node yet (they joined a
// moment ago); members that offer the kind without reporting containerd
// are tried last (containerd may have started after the member did). A
// member that refuses is skipped for the next one.
type ClusterWorkers struct {
	Root    *actor.RootContext
	Manager *actor.PID // a node's manager (node.ManagerName)
	// Members lists the live members with their address, kinds and
	// capabilities (node.Node.MemberInfos: the cluster's member list with
	// the facts each member gossiped).
	Members func() []*rtmsg.NodeInfo
	// Timeout bounds one spawn request (default 30s).
	Timeout time.Duration

	next atomic.Uint64
}

// candidates are the members offering the worker kind, in preference
// order (placement.Pick: containerd preferred, spread in turn).
func (c *ClusterWorkers) candidates() ([]string, error) {
	return placement.Pick(c.Members(), sandboxworker.Kind, placement.Requirements{Containerd: placement.Prefer, Rotate: c.next.Add(1)})
}

// Spawn starts a worker on the most preferred member that accepts.
func (c *ClusterWorkers) Spawn(ctx context.Context) (*actor.PID, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	cands, err := c.candidates()
	if err != nil {
		return nil, fmt.Errorf("%w (start a node where containerd runs)", err)
	}
	var errs []error
	for _, member := range cands {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		res, err := c.Root.RequestFuture(c.Manager, &rtmsg.SpawnRequest{Kind: sandboxworker.Kind, Member: member}, timeout).Result()
		if err == nil {
			switch r := res.(type) {
			case *rtmsg.SpawnReply:
				return actor.NewPID(r.Address, r.Id), nil
			case *rtmsg.Failure:
				err = fmt.Errorf("%s: %s", r.GetCode().Short(), r.GetMessage())
			default:
				err = fmt.Errorf("answered %T", res)
			}
		}
		errs = append(errs, fmt.Errorf("member %s: %w", member, err))
	}
	return nil, fmt.Errorf("spawn a sandbox worker: %w", errors.Join(errs...))
}

// Check implements Sandboxes: the environment must be registered, and,
// where this process reaches containerd, its image present.
func (w *Workers) Check(ctx context.Context, task *records.Task) error {
	env, err := lookupEnvironment(ctx, w.Environments, task)
	if err != nil || w.Runtime == nil {
		return err
	}
	rt, err := w.Runtime(ctx)
	if err != nil {
		w.logger().Debug("no containerd here; the workers check the image", "err", err)
		return nil
	}
	return checkImage(ctx, rt, env, task)
}

func (w *Workers) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return w.Logger
}

// Workspace implements Sandboxes.
func (w *Workers) Workspace(ctx context.Context, task *records.Task) (Workspace, error) {
	if w.Root == nil || w.Spawn == nil {
		return nil, errors.New("rollout: Workers needs Root and Spawn")
	}
	pid, err := w.Spawn(ctx)
	if err != nil {
		return nil, err
	}
	ws := &workerWorkspace{w: w, lost: make(chan struct{})}
	ws.WorkerSandbox = WorkerSandbox{Root: w.Root, PID: pid, Slack: w.Slack, Lost: ws.lost}
	ws.watcher = w.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *actor.Started:
			c.Watch(pid)
		case *actor.Terminated:
			if m.Who.Equal(pid) {
				ws.lostOnce.Do(func() { close(ws.lost) })
			}
		}
	}))
	if err := ws.setup(ctx, task); err != nil {
		ws.Close()
		return nil, fmt.Errorf("sandbox for task %s: %w", task.GetId(), err)
	}
	return ws, nil
}

// Close waits for the workers of closed workspaces to destroy their
// sandboxes.
func (w *Workers) Close() { w.closing.Wait() }

// workerWorkspace is an episode in one SandboxWorker.
type workerWorkspace struct {
	WorkerSandbox
	w         *Workers
	sandboxID string // the worker's container, once created
	watcher   *actor.PID
	lost      chan struct{}
	lostOnce  sync.Once
	once      sync.Once
}

var _ Workspace = (*workerWorkspace)(nil)

func (ws *workerWorkspace) setup(ctx context.Context, task *records.Task) error {
	timeout := ws.w.SetupTimeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	create := &messages.SandboxCreate{Image: task.GetImage(), Environment: task.GetEnvironment()}
	if ws.w.Environments != nil && task.GetEnvironment() != "" {
		// A worker on another member may not hold the environment.
		if env, err := ws.w.Environments.Get(ctx, task.GetEnvironment()); err == nil {
			create.EnvironmentRecord = env
		}
	}
	res, err := ws.ask(ctx, create, timeout, "create", "")
	if err != nil {
		var f *workerFailure
		if errors.As(err, &f) {
			switch f.code {
			case rtmsg.FailureCode_FAILURE_CODE_NO_ENVIRONMENT:
				return fmt.Errorf("%w: %q on %s (register it with frognano env add): %s", ErrNoEnvironment, task.GetEnvironment(), ws.PID.Address, f.message)
			case rtmsg.FailureCode_FAILURE_CODE_IMAGE_GONE:
				return fmt.Errorf("%w: %s (rebuild the environment %q with frognano env add)", ErrImageGone, f.message, task.GetEnvironment())
			}
		}
		return err
	}
	created, ok := res.(*messages.SandboxCreated)
	if !ok {
		return fmt.Errorf("%w: create answered %T", ErrWorker, res)
	}
	ws.sandboxID = created.SandboxId
	res, err = ws.ask(ctx, &messages.SandboxPrepareEpisode{Task: task, TestPatch: ws.w.TestPatches[task.GetId()],
		TestTimeoutSeconds: ws.w.TestTimeout.Seconds()}, timeout, "prepare", "")
	if err != nil {
		return err
	}
	if _, ok := res.(*messages.SandboxEpisodeReady); !ok {
		return fmt.Errorf("%w: prepare answered %T", ErrWorker, res)
	}
	return nil
}

// Grade implements harness.Workspace through the worker. Its timeout is
// the grading run's bound (TestTimeout, or the harness's 15-minute cap)
// and five minutes for restoring files and starting the runner; a worker
// that dies meanwhile fails it at once.
func (ws *workerWorkspace) Grade(ctx context.Context) (harness.Grade, error) {
	timeout := ws.w.TestTimeout
	if timeout <= 0 {
		timeout = 15 * time.Minute
	}
	res, err := ws.ask(ctx, &messages.SandboxGrade{}, timeout+5*time.Minute, "grade", "")
	if err != nil {
		return harness.Grade{}, err
	}
	g, ok := res.(*messages.SandboxGraded)
	if !ok {
		return harness.Grade{}, fmt.Errorf("%w: grade answered %T", ErrWorker, res)
	}
	return harness.Grade{Report: g.Report, Resolved: g.Resolved, Reward: g.Reward, Reason: g.Reason}, nil
}

// Close has the worker destroy its sandbox and stop, in the background
// (Workers.Close waits for it); a worker that does not answer is stopped.
func (ws *workerWorkspace) Close() {
	ws.once.Do(func() {
		ws.w.closing.Add(1)
		go func() {
			defer ws.w.closing.Done()
			defer ws.w.Root.Stop(ws.watcher)
			select {
			case <-ws.lost:
				return
			default:
			}
			_, err := ws.w.Root.RequestFuture(ws.PID, &messages.SandboxDestroy{}, 2*time.Minute).Result()
			if err != nil {
				ws.w.logger().Warn("sandbox worker did not destroy its sandbox; stopping it", "worker", ws.PID.String(), "err", err)
				ws.w.Root.Stop(ws.PID)
			}
		}()
	})
}
