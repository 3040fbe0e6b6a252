package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The exec agent (agent/main.go) is each sandbox's PID 1 and runs commands
// for us over the init process's stdio: a fork in the sandbox instead of a
// runc exec, ~1 ms instead of ~30 ms per command. It is built here, on the
// host, with the host's Go toolchain (the one the base image copies too), as
// a static binary that runs in any image. Without a Go toolchain, sandboxes
// fall back to a shell loop as PID 1 and runc exec for every command.

//go:embed agent/main.go
var agentSource []byte

// agentStdinLimit is the largest stdin sent through the agent; larger inputs
// (restoring big protected trees) go through runc exec, which streams.
const agentStdinLimit = 8 << 20

// buildAgent returns the path of the agent binary for this source and Go
// toolchain, building it into cacheDir/agent on first use.
func buildAgent(ctx context.Context, cacheDir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no Go toolchain to build the sandbox agent: %w", err)
	}
	version, err := exec.CommandContext(ctx, goBin, "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	sum := sha256.Sum256(append(append([]byte{}, agentSource...), version...))
	dir := filepath.Join(cacheDir, "agent")
	bin := filepath.Join(dir, "agent-"+hex.EncodeToString(sum[:8]))
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := os.WriteFile(filepath.Join(work, "go.mod"), []byte("module frognanoagent\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(work, "main.go"), agentSource, 0o644); err != nil {
		return "", err
	}
	tmp := filepath.Join(work, "agent")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", tmp, ".")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=", "GOTOOLCHAIN=local", "GOWORK=off")
	if os.Getenv("HOME") == "" && os.Getenv("GOCACHE") == "" {
		cmd.Env = append(cmd.Env, "GOCACHE="+filepath.Join(cacheDir, "go-build"))
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the sandbox agent: %w\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// agentRequest and agentResponse mirror request and response in
// agent/main.go.
type agentRequest struct {
	ID          int64    `json:"id"`
	Op          string   `json:"op"`
	Target      int64    `json:"target,omitempty"`
	Argv        []string `json:"argv,omitempty"`
	Env         []string `json:"env,omitempty"`
	Dir         string   `json:"dir,omitempty"`
	Stdin       []byte   `json:"stdin,omitempty"`
	TimeoutMS   int64    `json:"timeout_ms,omitempty"`
	Limit       int64    `json:"limit,omitempty"`
	KillOrphans bool     `json:"kill_orphans,omitempty"`
	OOMScoreAdj int      `json:"oom_score_adj,omitempty"`
}

type agentResponse struct {
	ID         int64  `json:"id"`
	Exit       int    `json:"exit"`
	Stdout     []byte `json:"stdout,omitempty"`
	Stderr     []byte `json:"stderr,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	TimedOut   bool   `json:"timed_out,omitempty"`
	Cancelled  bool   `json:"cancelled,omitempty"`
	DurationNS int64  `json:"duration_ns"`
	StartError string `json:"start_error,omitempty"`
}

// agentConn is our end of one sandbox's agent: requests go into the init
// process's stdin, responses come from its stdout.
type agentConn struct {
	w      io.WriteCloser
	wmu    sync.Mutex
	nextID atomic.Int64

	mu      sync.Mutex
	pending map[int64]chan agentResponse
	err     error // set when the response stream ended
	done    chan struct{}
}

func newAgentConn(w io.WriteCloser, r io.Reader) *agentConn {
	c := &agentConn{w: w, pending: map[int64]chan agentResponse{}, done: make(chan struct{})}
	go c.readLoop(r)
	return c
}

func (c *agentConn) readLoop(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var n [4]byte
		if _, err = io.ReadFull(br, n[:]); err != nil {
			break
		}
		size := binary.BigEndian.Uint32(n[:])
		if size > 1<<30 {
			err = fmt.Errorf("agent sent a frame of %d bytes", size)
			break
		}
		b := make([]byte, size)
		if _, err = io.ReadFull(br, b); err != nil {
			break
		}
		var resp agentResponse
		if err = json.Unmarshal(b, &resp); err != nil {
			break
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
		err = ErrSandboxDead
	}
	c.mu.Lock()
	c.err = fmt.Errorf("sandbox agent: %w", err)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

// send writes a request and returns the channel its response arrives on
// (closed without a value if the agent goes away).
func (c *agentConn) send(req agentRequest) (int64, <-chan agentResponse, error) {
	req.ID = c.nextID.Add(1)
	b, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan agentResponse, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return 0, nil, c.err
	}
	c.pending[req.ID] = ch
	c.mu.Unlock()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	c.wmu.Lock()
	_, err = c.w.Write(append(n[:], b...))
	c.wmu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return 0, nil, fmt.Errorf("write to sandbox agent: %w", err)
	}
	return req.ID, ch, nil
}

func (c *agentConn) close() { c.w.Close() }

// ping checks that the agent answers.
func (c *agentConn) ping(ctx context.Context) error {
	_, ch, err := c.send(agentRequest{Op: "ping"})
	if err != nil {
		return err
	}
	select {
	case _, ok := <-ch:
		if !ok {
			return c.err
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox agent did not answer: %w", ctx.Err())
	case <-time.After(30 * time.Second):
		return errors.New("sandbox agent did not answer within 30s")
	}
}

// agentGrace is how long past a command's own timeout we wait for the agent
// to report it before we stop trusting the agent and kill from the host.
const agentGrace = 10 * time.Second

// execAgent runs a command through the agent. It returns ok=false when the
// request is not one for the agent (stdin too large); req.Stdin then reads
// the whole input again and the caller uses runc exec.
func (s *Sandbox) execAgent(ctx context.Context, req *ExecRequest, env []string, cwd string, timeout time.Duration, limit int64) (ExecResult, bool, error) {
	var stdin []byte
	if req.Stdin != nil {
		b, err := io.ReadAll(io.LimitReader(req.Stdin, agentStdinLimit+1))
		if err != nil {
			return ExecResult{}, true, fmt.Errorf("read stdin: %w", err)
		}
		if len(b) > agentStdinLimit {
			// Too big for a frame: hand the whole stream to runc exec.
			req.Stdin = io.MultiReader(bytes.NewReader(b), req.Stdin)
			return ExecResult{}, false, nil
		}
		stdin = b
	}
	id, ch, err := s.agent.send(agentRequest{
		Op:          "exec",
		Argv:        req.Argv,
		Env:         env,
		Dir:         cwd,
		Stdin:       stdin,
		TimeoutMS:   timeout.Milliseconds(),
		Limit:       limit,
		KillOrphans: req.KillOrphans,
		OOMScoreAdj: execOOMScoreAdj,
	})
	if err != nil {
		return ExecResult{}, true, s.brokenErr("exec", err)
	}
	var quotaHit atomic.Bool
	stopQuota := s.watchQuota(ctx, &quotaHit)
	defer stopQuota()
	backstop := time.NewTimer(timeout + agentGrace)
	defer backstop.Stop()
	var ctxErr error
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				return ExecResult{}, true, s.brokenErr("exec", s.agent.err)
			}
			stopQuota()
			if ctxErr != nil {
				return ExecResult{}, true, ctxErr
			}
			return s.agentResult(resp, &quotaHit)
		case <-ctx.Done():
			if ctxErr == nil {
				ctxErr = ctx.Err()
				if _, _, err := s.agent.send(agentRequest{Op: "cancel", Target: id}); err != nil {
					return ExecResult{}, true, ctxErr
				}
				ctx = context.WithoutCancel(ctx)
			}
		case <-backstop.C:
			// The agent did not kill its command in time: do it from the
			// host, where the freezer makes it certain.
			s.KillAll(context.WithoutCancel(ctx))
			backstop.Reset(agentGrace)
		case <-s.exited:
			return ExecResult{}, true, fmt.Errorf("exec in %s: %w", s.id, ErrSandboxDead)
		}
	}
}

func (s *Sandbox) agentResult(resp agentResponse, quotaHit *atomic.Bool) (ExecResult, bool, error) {
	res := ExecResult{
		ExitCode:      resp.Exit,
		Stdout:        resp.Stdout,
		Stderr:        resp.Stderr,
		Truncated:     resp.Truncated,
		TimedOut:      resp.TimedOut,
		QuotaExceeded: quotaHit.Load(),
		Duration:      time.Duration(resp.DurationNS),
	}
	if resp.StartError != "" {
		if resp.Exit < 0 {
			return ExecResult{}, true, fmt.Errorf("sandbox agent: %s", resp.StartError)
		}
		// Like runc exec failing to start argv: the caller's mistake.
		res.Stderr = append(res.Stderr, []byte(strings.TrimSpace(resp.StartError)+"\n")...)
	}
	return res, true, nil
}
