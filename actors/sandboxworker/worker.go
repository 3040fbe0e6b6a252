// Package sandboxworker is the SandboxWorker actor: one actor owns one
// containerd sandbox for one episode or validation run, and turns the
// Sandbox* messages into calls on package sandbox. It is a kind every node
// with containerd registers, so it can be spawned on remote nodes by name.
//
// A tool error (a file that does not exist, a patch that does not apply) is
// an ordinary reply with a Failure; a sandbox that broke answers Failure
// code "sandbox_broken", which ends the episode and keeps it out of the
// reward statistics. However the actor ends — destroyed, stopped, crashed
// and restarted — its container is destroyed with it.
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
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
)

// Kind is the actor kind name nodes register.
const Kind = "sandbox-worker"

// Config is what a worker needs from its node.
type Config struct {
	Runtime      func(ctx context.Context) (*sandbox.Runtime, error)
	Environments persistence.EnvironmentStore
	Logger       *slog.Logger
}

// Props builds a worker.
func Props(cfg Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &worker{cfg: cfg} })
}

type worker struct {
	cfg  Config
	sb   *sandbox.Sandbox
	spec sandbox.TestSpec
}

func fail(code string, err error) *messages.Failure {
	return &messages.Failure{Code: code, Message: err.Error()}
}

// toolFailure classifies an error from a sandbox call.
func toolFailure(err error) *messages.Failure {
	var pathErr *fs.PathError
	var patchErr *sandbox.PatchError
	switch {
	case errors.Is(err, sandbox.ErrSandboxDead):
		return fail("sandbox_broken", err)
	case errors.As(err, &patchErr):
		return fail("patch_failed", err)
	case errors.As(err, &pathErr):
		return fail("file_error", err)
	}
	return fail("error", err)
}

func (w *worker) Receive(ctx actor.Context) {
	bctx := context.Background()
	switch m := ctx.Message().(type) {
	case *actor.Stopping, *actor.Restarting:
		w.destroy()
	case *messages.SandboxCreate:
		if w.sb != nil {
			ctx.Respond(fail("bad_request", errors.New("this worker already owns a sandbox; destroy it first")))
			return
		}
		rt, err := w.cfg.Runtime(bctx)
		if err != nil {
			ctx.Respond(fail("containerd", err))
			return
		}
		image, opts := m.Image, sandbox.Options{Labels: m.Labels}
		if m.Environment != "" {
			env, err := w.cfg.Environments.Get(bctx, m.Environment)
			if err != nil {
				ctx.Respond(fail("bad_request", err))
				return
			}
			if image == "" {
				image = env.Image
			}
			opts.RepoDir = env.RepoDir
			w.spec = environment.Spec(env)
		}
		if image == "" {
			ctx.Respond(fail("bad_request", errors.New("SandboxCreate needs an image or an environment")))
			return
		}
		sb, err := rt.Create(bctx, image, opts)
		if err != nil {
			ctx.Respond(fail("create_failed", err))
			return
		}
		w.sb = sb
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
		*messages.SandboxListFiles, *messages.SandboxApplyPatch, *messages.SandboxRunTests:
	default:
		return nil, false
	}
	if w.sb == nil {
		return fail("bad_request", errors.New("no sandbox: send SandboxCreate first")), true
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
			return fail("bad_request", errors.New("running tests needs a sandbox created from an environment")), true
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
	}
	return fail("error", fmt.Errorf("unhandled %T", msg)), true
}

func (w *worker) destroy() {
	if w.sb == nil {
		return
	}
	if err := w.sb.Destroy(context.Background()); err != nil && w.cfg.Logger != nil {
		w.cfg.Logger.Warn("destroy sandbox", "sandbox", w.sb.ID(), "err", err)
	}
	w.sb = nil
}
