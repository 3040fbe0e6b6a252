// Package sandboxworker is the SandboxWorker actor: one actor owns one
// containerd sandbox for one episode or validation run, and turns the
// Sandbox* messages into calls on package sandbox. It is a kind every node
// with containerd registers, so it can be spawned on remote nodes by name.
//
// For an agent episode the worker also holds the episode's workspace
// (harness.SandboxWorkspace): SandboxPrepareEpisode applies the task's bug
// and hides the history, the tools run through the plain requests, and
// SandboxGrade grades what the agent left, all on the node that holds the
// container (restoring the protected files reads the image there).
//
// A tool error (a file that does not exist, a patch that does not apply) is
// an ordinary reply with a Failure; a sandbox that broke answers Failure
// FAILURE_CODE_SANDBOX_BROKEN, which ends the episode and keeps it out of the
// reward statistics. However the actor ends — destroyed, stopped, crashed
// and restarted — its container is destroyed with it; and when the cluster
// member that asked for the sandbox leaves the cluster (its process died),
// the worker destroys the sandbox and stops (owner.go).
package sandboxworker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// Kind is the actor kind name nodes register.
const Kind = "sandbox-worker"

// Config is what a worker needs from its node.
type Config struct {
	Runtime      func(ctx context.Context) (*sandbox.Runtime, error)
	Environments persistence.EnvironmentStore
	// Fetch, when set, brings an environment's image this node's
	// containerd lacks from the member (remoting address) that asked for
	// the sandbox (Fetcher.Fetch); nil refuses such a sandbox with
	// FAILURE_CODE_IMAGE_GONE.
	Fetch  func(ctx context.Context, member, ref string) error
	Logger *slog.Logger
}

// fetchWait is the longest a SandboxCreate waits for its image to arrive
// from another member: less than the requester's default setup timeout
// (five minutes, rollout.Workers.SetupTimeout), so that it is answered.
const fetchWait = 4 * time.Minute

// Props builds a worker.
func Props(cfg Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &worker{cfg: cfg} })
}

type worker struct {
	cfg  Config
	sb   *sandbox.Sandbox
	spec sandbox.TestSpec
	// ws is the episode prepared in sb (SandboxPrepareEpisode).
	ws *harness.SandboxWorkspace
	// owner destroys sb when the member that asked for it leaves the
	// cluster (owner.go); nil for a local requester.
	owner *ownerWatch
}

// toolFailure classifies an error from a sandbox call.
func toolFailure(err error) *rtmsg.Failure {
	var pathErr *fs.PathError
	var patchErr *sandbox.PatchError
	switch {
	case errors.Is(err, sandbox.ErrSandboxDead):
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_SANDBOX_BROKEN, err)
	case errors.As(err, &patchErr):
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_PATCH_FAILED, err)
	case errors.As(err, &pathErr):
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_FILE_ERROR, err)
	}
	return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_ERROR, err)
}

func (w *worker) Receive(ctx actor.Context) {
	bctx := context.Background()
	switch m := ctx.Message().(type) {
	case *actor.Stopping, *actor.Restarting:
		w.destroy()
	case *messages.SandboxCreate:
		if w.sb != nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("this worker already owns a sandbox; destroy it first")))
			return
		}
		rt, err := w.cfg.Runtime(bctx)
		if err != nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_CONTAINERD, err))
			return
		}
		image, opts := m.Image, sandbox.Options{Labels: m.Labels}
		envImage := ""
		if m.Environment != "" {
			env, err := w.cfg.Environments.Get(bctx, m.Environment)
			if errors.Is(err, persistence.ErrNotFound) && m.GetEnvironmentRecord().GetName() == m.Environment {
				// Registered on the node that asked, not on this one.
				env, err = m.GetEnvironmentRecord(), nil
			}
			if errors.Is(err, persistence.ErrNotFound) {
				ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_NO_ENVIRONMENT, fmt.Errorf("environment %q is not registered on this node: %w", m.Environment, err)))
				return
			}
			if err != nil {
				ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, err))
				return
			}
			if image == "" {
				image = env.Image
			}
			envImage = env.Image
			opts.RepoDir = env.RepoDir
			w.spec = environment.Spec(env)
		}
		if image == "" {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("SandboxCreate needs an image or an environment")))
			return
		}
		if ok, err := rt.Images().Exists(bctx, image); err == nil && !ok {
			if image != envImage || ctx.Sender() == nil || w.cfg.Fetch == nil {
				ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_IMAGE_GONE, fmt.Errorf("image %s is not in containerd namespace %s", image, rt.Namespace())))
				return
			}
			// An environment's image, built on the member that asked:
			// fetch it from there, waiting less than the asker's setup
			// timeout (the transfer goes on for the next episodes).
			fctx, cancel := context.WithTimeout(bctx, fetchWait)
			err := w.cfg.Fetch(fctx, ctx.Sender().GetAddress(), image)
			cancel()
			if err != nil {
				ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_IMAGE_GONE, fmt.Errorf("image %s is not in containerd namespace %s, and fetching it failed: %w", image, rt.Namespace(), err)))
				return
			}
		}
		sb, err := rt.Create(bctx, image, opts)
		if err != nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_CREATE_FAILED, err))
			return
		}
		w.sb = sb
		w.owner = watchOwner(ctx, sb, w.cfg.Logger)
		ctx.Respond(&messages.SandboxCreated{SandboxId: sb.ID()})
	case *messages.SandboxDestroy:
		id := ""
		if w.sb != nil {
			id = w.sb.ID()
		}
		w.destroy()
		ctx.Respond(&messages.SandboxDestroyed{SandboxId: id})
		ctx.Stop(ctx.Self())
	default:
		if reply, handled := w.call(bctx, ctx.Message()); handled {
			ctx.Respond(reply)
		}
	}
}

// call handles the requests that need a live sandbox.
func (w *worker) call(ctx context.Context, msg any) (any, bool) {
	switch msg.(type) {
	case *messages.SandboxExec, *messages.SandboxReadFile, *messages.SandboxWriteFile,
		*messages.SandboxListFiles, *messages.SandboxApplyPatch, *messages.SandboxRunTests,
		*messages.SandboxPrepareEpisode, *messages.SandboxGrade:
	default:
		return nil, false
	}
	if w.sb == nil {
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("no sandbox: send SandboxCreate first")), true
	}
	switch m := msg.(type) {
	case *messages.SandboxExec:
		res, err := w.sb.Exec(ctx, sandbox.ExecRequest{
			Argv:        m.Argv,
			Timeout:     time.Duration(m.TimeoutSeconds * float64(time.Second)),
			OutputLimit: m.OutputLimitBytes,
			Workdir:     m.Workdir,
		})
		if err != nil {
			return toolFailure(err), true
		}
		return &messages.SandboxExecResult{ExitCode: int32(res.ExitCode), Stdout: res.Stdout, Stderr: res.Stderr,
			TimedOut: res.TimedOut, Truncated: res.Truncated, Seconds: res.Duration.Seconds(), QuotaExceeded: res.QuotaExceeded}, true
	case *messages.SandboxReadFile:
		b, err := w.sb.ReadFile(ctx, m.Path)
		if err != nil {
			return toolFailure(err), true
		}
		return &messages.SandboxFile{Path: m.Path, Content: b}, true
	case *messages.SandboxWriteFile:
		if err := w.sb.WriteFile(ctx, m.Path, m.Content); err != nil {
			return toolFailure(err), true
		}
		return &messages.SandboxOK{}, true
	case *messages.SandboxListFiles:
		paths, err := w.sb.ListFiles(ctx, m.Path, m.Glob)
		if err != nil {
			return toolFailure(err), true
		}
		return &messages.SandboxFileList{Paths: paths}, true
	case *messages.SandboxApplyPatch:
		if err := w.sb.ApplyPatch(ctx, m.Patch); err != nil {
			return toolFailure(err), true
		}
		return &messages.SandboxOK{}, true
	case *messages.SandboxRunTests:
		if w.spec.Framework == "" {
			return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("running tests needs a sandbox created from an environment")), true
		}
		spec := w.spec
		if m.TimeoutSeconds > 0 {
			spec.Timeout = time.Duration(m.TimeoutSeconds * float64(time.Second))
		}
		report, err := w.sb.RunTests(ctx, spec, m.Tests)
		if err != nil {
			return toolFailure(err), true
		}
		return &messages.SandboxTestsResult{Report: report.Proto()}, true
	case *messages.SandboxPrepareEpisode:
		return w.prepare(ctx, m), true
	case *messages.SandboxGrade:
		if w.ws == nil {
			return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("no episode to grade: send SandboxPrepareEpisode first")), true
		}
		g, err := w.ws.Grade(ctx)
		if err != nil {
			return toolFailure(err), true
		}
		return &messages.SandboxGraded{Report: g.Report, Resolved: g.Resolved, Reward: g.Reward, Reason: g.Reason}, true
	}
	return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_ERROR, fmt.Errorf("unhandled %T", msg)), true
}

// prepare makes the sandbox ready for an episode (harness.NewWorkspace).
func (w *worker) prepare(ctx context.Context, m *messages.SandboxPrepareEpisode) any {
	switch {
	case w.ws != nil:
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("this sandbox is already prepared for an episode; an episode needs a fresh sandbox"))
	case w.spec.Framework == "":
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("an episode needs a sandbox created from an environment"))
	case m.Task == nil:
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, errors.New("SandboxPrepareEpisode has no task"))
	case len(m.Task.GetFailToPass()) == 0:
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, fmt.Errorf("task %s names no FAIL_TO_PASS test", m.Task.GetId()))
	case m.TestTimeoutSeconds < 0:
		return rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, fmt.Errorf("test timeout %vs is negative", m.TestTimeoutSeconds))
	}
	ws, err := harness.NewWorkspace(ctx, w.sb, w.spec, m.Task, harness.WorkspaceOptions{
		TestPatch:   m.TestPatch,
		TestTimeout: time.Duration(m.TestTimeoutSeconds * float64(time.Second)),
	})
	if err != nil {
		return toolFailure(err)
	}
	w.ws = ws
	return &messages.SandboxEpisodeReady{SandboxId: w.sb.ID()}
}

func (w *worker) destroy() {
	w.ws = nil
	w.owner.stop()
	w.owner = nil
	if w.sb == nil {
		return
	}
	if err := w.sb.Destroy(context.Background()); err != nil && w.cfg.Logger != nil {
		w.cfg.Logger.Warn("destroy sandbox", "sandbox", w.sb.ID(), "err", err)
	}
	w.sb = nil
}
