package rollout

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// WorkerSandbox runs the harness's tools in a SandboxWorker actor (kind
// sandboxworker.Kind), on this node or another: the way an episode reaches
// a container on a node other than the one running the policy. It is the
// tools' harness.Sandbox; Workers adds the episode's preparation and
// grading, which the worker does on the node that holds the container.
type WorkerSandbox struct {
	Root *actor.RootContext
	PID  *actor.PID
	// Slack is added to each request's own timeout for the round trip
	// (default 30s).
	Slack time.Duration
	// Lost, when closed, means the worker is gone (Workers closes it when
	// its watch reports the worker terminated): requests in flight and
	// later ones fail at once instead of waiting for their timeouts.
	Lost <-chan struct{}
}

var _ harness.Sandbox = (*WorkerSandbox)(nil)

// ErrWorker is a SandboxWorker that did not answer or answered with an
// error that is not the tool's: the episode ends as a sandbox failure.
var ErrWorker = errors.New("sandbox worker failed")

// workerFailure is a Failure the worker answered that is not the tool's.
type workerFailure struct {
	code    rtmsg.FailureCode
	message string
}

func (f *workerFailure) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrWorker, f.code.Short(), f.message)
}
func (f *workerFailure) Unwrap() error { return ErrWorker }

func (w *WorkerSandbox) ask(ctx context.Context, msg any, timeout time.Duration, op, path string) (any, error) {
	slack := w.Slack
	if slack <= 0 {
		slack = 30 * time.Second
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout+slack {
		timeout = max(time.Until(d)-slack/2, time.Second)
	}
	gone := fmt.Errorf("%w: %s: the worker stopped (its actor ended or its node left)", ErrWorker, w.PID)
	select {
	case <-w.Lost:
		return nil, gone
	default:
	}
	f := w.Root.RequestFuture(w.PID, msg, timeout+slack)
	var (
		res  any
		err  error
		done = make(chan struct{})
	)
	go func() {
		res, err = f.Result()
		close(done)
	}()
	select {
	case <-done:
	case <-w.Lost:
		select {
		case <-done: // answered before it stopped
		default:
			return nil, gone
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("%s %s: %w", op, path, ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrWorker, w.PID, err)
	}
	if f, ok := res.(*rtmsg.Failure); ok {
		switch f.GetCode() {
		case rtmsg.FailureCode_FAILURE_CODE_FILE_ERROR:
			return nil, &fs.PathError{Op: op, Path: path, Err: errors.New(f.Message)}
		case rtmsg.FailureCode_FAILURE_CODE_SANDBOX_BROKEN:
			return nil, fmt.Errorf("%w: %s", sandbox.ErrSandboxDead, f.Message)
		}
		return nil, &workerFailure{code: f.GetCode(), message: f.GetMessage()}
	}
	return res, nil
}

// Exec implements harness.Sandbox.
func (w *WorkerSandbox) Exec(ctx context.Context, argv []string, timeout time.Duration, limit int64) (harness.ExecResult, error) {
	res, err := w.ask(ctx, &messages.SandboxExec{Argv: argv, TimeoutSeconds: timeout.Seconds(), OutputLimitBytes: limit}, timeout, "exec", "")
	if err != nil {
		return harness.ExecResult{}, err
	}
	r, ok := res.(*messages.SandboxExecResult)
	if !ok {
		return harness.ExecResult{}, fmt.Errorf("%w: exec answered %T", ErrWorker, res)
	}
	return harness.ExecResult{ExitCode: int(r.ExitCode), Stdout: r.Stdout, Stderr: r.Stderr, Truncated: r.Truncated, TimedOut: r.TimedOut}, nil
}

const workerFileTimeout = time.Minute

// ReadFile implements harness.Sandbox.
func (w *WorkerSandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	res, err := w.ask(ctx, &messages.SandboxReadFile{Path: p}, workerFileTimeout, "read", p)
	if err != nil {
		return nil, err
	}
	f, ok := res.(*messages.SandboxFile)
	if !ok {
		return nil, fmt.Errorf("%w: read answered %T", ErrWorker, res)
	}
	return f.Content, nil
}

// WriteFile implements harness.Sandbox.
func (w *WorkerSandbox) WriteFile(ctx context.Context, p string, content []byte) error {
	res, err := w.ask(ctx, &messages.SandboxWriteFile{Path: p, Content: content}, workerFileTimeout, "write", p)
	if err != nil {
		return err
	}
	if _, ok := res.(*messages.SandboxOK); !ok {
		return fmt.Errorf("%w: write answered %T", ErrWorker, res)
	}
	return nil
}

// ListFiles implements harness.Sandbox.
func (w *WorkerSandbox) ListFiles(ctx context.Context, dir, glob string) ([]string, error) {
	res, err := w.ask(ctx, &messages.SandboxListFiles{Path: dir, Glob: glob}, workerFileTimeout, "list", dir)
	if err != nil {
		return nil, err
	}
	l, ok := res.(*messages.SandboxFileList)
	if !ok {
		return nil, fmt.Errorf("%w: list answered %T", ErrWorker, res)
	}
	return l.Paths, nil
}
