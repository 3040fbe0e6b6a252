package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// ExecRequest is one command to run in a sandbox.
type ExecRequest struct {
	Argv []string
	// Timeout kills the command and everything it started (default
	// DefaultExecTimeout).
	Timeout time.Duration
	// OutputLimit caps stdout and stderr each; the rest is read and dropped,
	// so a chatty command never blocks (default DefaultOutputLimit).
	OutputLimit int64
	// Workdir defaults to the sandbox's RepoDir.
	Workdir string
	// Env is added to the sandbox's environment for this command.
	Env   []string
	Stdin io.Reader
	// KillOrphans also kills, once the command exits, whatever it left
	// running in the background. The test runner sets it so that nothing the
	// code under test started can touch the report after the run.
	KillOrphans bool
}

// ExecResult is what a command did. A failing command is a result, not an
// error: Exec returns an error only when the sandbox itself is broken.
type ExecResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// Truncated: stdout or stderr went past OutputLimit.
	Truncated bool
	// TimedOut: the command hit its timeout and was killed with its tree.
	TimedOut bool
	// QuotaExceeded: the writable layer went past DiskBytes (StorageSnapshot
	// only; with StorageTmpfs writes fail with ENOSPC instead) and every
	// process but init was killed.
	QuotaExceeded bool
	Duration      time.Duration
}

// ioGrace is how long output may keep flowing after the command exits (from
// children that inherited its stdout) before the streams are cut.
const ioGrace = 200 * time.Millisecond

// Exec runs argv in the sandbox with the sandbox's limits. On timeout (or
// when ctx ends) the command's whole process tree is killed, including what
// it daemonised: by the exec agent inside the sandbox, pass after pass until
// nothing is left; or, for runc exec (and as the backstop when the agent
// does not report in time), from the host with the sandbox frozen, so a
// fork loop cannot outrun the kill.
func (s *Sandbox) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	if len(req.Argv) == 0 {
		return ExecResult{}, errors.New("exec: empty argv")
	}
	if !s.Alive() {
		return ExecResult{}, fmt.Errorf("exec in %s: %w", s.id, ErrSandboxDead)
	}
	ctx = s.rt.ctx(ctx)
	timeout := deadline(req.Timeout, DefaultExecTimeout)
	limit := req.OutputLimit
	if limit <= 0 {
		limit = DefaultOutputLimit
	}
	proc := s.process
	proc.Args = req.Argv
	proc.Env = append(slices.Clone(s.process.Env), req.Env...)
	proc.Cwd = req.Workdir
	if proc.Cwd == "" {
		proc.Cwd = s.opts.RepoDir
	}
	proc.Terminal = false

	if s.agent != nil {
		res, ok, err := s.execAgent(ctx, &req, proc.Env, proc.Cwd, timeout, limit)
		if ok {
			return res, err
		}
		// Not for the agent (stdin too large): req.Stdin was rewound into
		// a reader of the whole input; fall through to runc exec.
	}

	stdout, stderr := &capBuffer{limit: limit}, &capBuffer{limit: limit}
	var stdin io.Reader
	stdinDone := make(chan struct{})
	if req.Stdin != nil {
		stdin = &eofSignal{r: req.Stdin, done: stdinDone}
	}
	execID := fmt.Sprintf("x%d", s.execSeq.Add(1))
	p, err := s.task.Exec(ctx, execID, &proc, cio.NewCreator(cio.WithStreams(stdin, stdout, stderr)))
	if err != nil {
		return ExecResult{}, s.brokenErr("exec", err)
	}
	cleanupCtx := context.WithoutCancel(ctx)
	defer func() {
		if _, err := p.Delete(cleanupCtx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			s.rt.cfg.Logger.Debug("delete exec'd process", "sandbox", s.id, "exec", execID, "err", err)
		}
	}()
	statusC, err := p.Wait(cleanupCtx)
	if err != nil {
		return ExecResult{}, s.brokenErr("wait", err)
	}
	since := uptimeTicks()
	start := time.Now()
	if err := p.Start(ctx); err != nil {
		if !s.Alive() || errdefs.IsUnavailable(err) {
			return ExecResult{}, s.brokenErr("start", err)
		}
		// runc could not start argv (no such file, not executable): the
		// caller's mistake, reported like a shell would.
		return ExecResult{ExitCode: 127, Stderr: []byte(err.Error() + "\n"), Duration: time.Since(start)}, nil
	}
	root := int(p.Pid())
	s.mu.Lock()
	s.roots[root] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.roots, root)
		s.mu.Unlock()
	}()

	execDone := make(chan struct{})
	defer close(execDone)
	if req.Stdin != nil {
		// The shim holds the stdin fifo open for writing itself; the command
		// sees EOF only once both it and we have closed our ends. Closing
		// the shim's end before our copy is done could cut the input short.
		go func() {
			select {
			case <-stdinDone:
				_ = p.CloseIO(cleanupCtx, containerd.WithStdinCloser)
			case <-execDone:
			case <-s.exited:
			}
		}()
	}

	var quotaHit atomic.Bool
	stopQuota := s.watchQuota(ctx, &quotaHit)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var (
		res    ExecResult
		status containerd.ExitStatus
		ctxErr error
	)
	select {
	case status = <-statusC:
	case <-timer.C:
		res.TimedOut = true
		s.killTree(cleanupCtx, root, since)
		status = <-statusC
	case <-ctx.Done():
		ctxErr = ctx.Err()
		s.killTree(cleanupCtx, root, since)
		status = <-statusC
	case <-s.exited:
		stopQuota()
		return ExecResult{}, fmt.Errorf("exec in %s: %w", s.id, ErrSandboxDead)
	}
	res.Duration = time.Since(start)
	stopQuota()
	if req.KillOrphans {
		s.killTree(cleanupCtx, root, since)
	}
	waitIO(p.IO(), ioGrace)
	if ctxErr != nil {
		return ExecResult{}, ctxErr
	}
	code, _, err := status.Result()
	if err != nil {
		return ExecResult{}, s.brokenErr("exit status", err)
	}
	res.ExitCode = int(code)
	res.Stdout, res.Stderr = stdout.Bytes(), stderr.Bytes()
	res.Truncated = stdout.Truncated() || stderr.Truncated()
	res.QuotaExceeded = quotaHit.Load()
	return res, nil
}

// brokenErr says whether a failed containerd call means the sandbox is gone.
func (s *Sandbox) brokenErr(what string, err error) error {
	if !s.Alive() {
		return fmt.Errorf("%s in %s: %w: %w", what, s.id, ErrSandboxDead, err)
	}
	return fmt.Errorf("%s in %s: %w", what, s.id, classify(err))
}

// waitIO lets the output copy finish, but not forever: a background child
// holding the command's stdout would keep it open. Deleting the process then
// closes the streams.
func waitIO(io cio.IO, grace time.Duration) {
	if io == nil {
		return
	}
	done := make(chan struct{})
	go func() { io.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
	}
}

// killTree SIGKILLs the exec'd process root, its descendants, and the
// processes init adopted that started after since and belong to no other
// running command (what root daemonised). The sandbox is frozen meanwhile,
// so nothing forks between reading the tree and killing it.
func (s *Sandbox) killTree(ctx context.Context, root int, since uint64) {
	s.killWhere(ctx, func(procs map[int]procInfo, initPid int) map[int]bool {
		s.mu.Lock()
		others := map[int]bool{}
		for pid := range s.roots {
			if pid != root {
				others[pid] = true
			}
		}
		s.mu.Unlock()
		seeds := []int{root}
		for pid, p := range procs {
			if p.ppid == initPid && pid != root && !others[pid] && p.start >= since {
				seeds = append(seeds, pid)
			}
		}
		return descendants(procs, seeds, others)
	})
}

// KillAll kills every process in the sandbox except init: whatever the agent
// left running cannot interfere with grading.
func (s *Sandbox) KillAll(ctx context.Context) {
	s.mu.Lock()
	spared := maps.Clone(s.spared)
	s.mu.Unlock()
	s.killWhere(s.rt.ctx(ctx), func(procs map[int]procInfo, initPid int) map[int]bool {
		victims := map[int]bool{}
		for pid, p := range procs {
			if start, ok := spared[pid]; ok && start == p.start {
				continue // a grading server (PytestServer), started before the episode
			}
			if pid != initPid {
				victims[pid] = true
			}
		}
		return victims
	})
}

type procInfo struct {
	ppid  int
	start uint64
}

func (s *Sandbox) killWhere(ctx context.Context, pick func(map[int]procInfo, int) map[int]bool) {
	frozen := s.task.Pause(ctx) == nil
	if frozen {
		defer func() {
			if err := s.task.Resume(ctx); err != nil && s.Alive() {
				s.rt.cfg.Logger.Warn("thaw sandbox", "sandbox", s.id, "err", err)
			}
		}()
	}
	initPid := int(s.task.Pid())
	// Frozen, one pass sees everything; without a freezer, repeat to catch
	// children forked while we were killing their parents.
	passes := 1
	if !frozen {
		passes = 5
	}
	for range passes {
		pids, err := s.task.Pids(ctx)
		if err != nil {
			return
		}
		procs := map[int]procInfo{}
		for _, p := range pids {
			f, err := procStat(int(p.Pid))
			if err != nil || len(f) < 20 {
				continue // already gone
			}
			ppid, _ := strconv.Atoi(f[1])
			start, _ := strconv.ParseUint(f[19], 10, 64)
			procs[int(p.Pid)] = procInfo{ppid: ppid, start: start}
		}
		victims := pick(procs, initPid)
		for pid := range victims {
			if pid != initPid && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if len(victims) == 0 {
			return
		}
	}
}

// descendants is seeds and everything below them in the process tree,
// stopping at the trees of the other running commands.
func descendants(procs map[int]procInfo, seeds []int, stop map[int]bool) map[int]bool {
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	out := map[int]bool{}
	queue := slices.Clone(seeds)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if out[pid] || stop[pid] {
			continue
		}
		out[pid] = true
		queue = append(queue, children[pid]...)
	}
	return out
}

// uptimeTicks is now in the unit of /proc/<pid>/stat start times (USER_HZ,
// 100 on Linux), minus one tick of slack.
func uptimeTicks() uint64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	secs, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil || secs < 0.02 {
		return 0
	}
	return uint64(secs*100) - 1
}

// watchQuota polls the writable snapshot's usage while a command runs
// (StorageSnapshot only) and kills everything but init when it passes
// DiskBytes. The returned func stops the polling.
func (s *Sandbox) watchQuota(ctx context.Context, hit *atomic.Bool) func() {
	if s.opts.Storage != StorageSnapshot {
		return func() {}
	}
	stop := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(quotaPoll)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if used, err := s.DiskUsage(ctx); err == nil && used > s.opts.DiskBytes {
					hit.Store(true)
					s.KillAll(context.WithoutCancel(ctx))
				}
			}
		}
	}()
	return func() { once.Do(func() { close(stop); wg.Wait() }) }
}

// quotaPoll is how often StorageSnapshot usage is checked during a command;
// the overshoot is what a process writes in that time.
const quotaPoll = 250 * time.Millisecond

// DiskUsage is the size of the sandbox's writable layer in bytes (excluding
// /tmp, which is its own tmpfs).
func (s *Sandbox) DiskUsage(ctx context.Context) (int64, error) {
	if s.opts.Storage == StorageTmpfs {
		var st unix.Statfs_t
		if err := unix.Statfs(s.upperDir, &st); err != nil {
			return 0, fmt.Errorf("statfs %s: %w", s.upperDir, err)
		}
		return int64(st.Blocks-st.Bfree) * st.Bsize, nil
	}
	u, err := s.rt.client.SnapshotService(s.rt.cfg.Snapshotter).Usage(s.rt.ctx(ctx), s.id)
	if err != nil {
		return 0, fmt.Errorf("usage of %s: %w", s.id, err)
	}
	return u.Size, nil
}

// capBuffer keeps the first limit bytes written to it and drops the rest
// while still accepting it, so the writer never blocks or fails.
type capBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	limit     int64
	truncated bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.limit - int64(c.buf.Len())
	switch {
	case room >= int64(len(p)):
		c.buf.Write(p)
	case room > 0:
		c.buf.Write(p[:room])
		c.truncated = true
	default:
		if len(p) > 0 {
			c.truncated = true
		}
	}
	return len(p), nil
}

func (c *capBuffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

func (c *capBuffer) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.truncated
}

// eofSignal closes done when its reader is exhausted (or fails).
type eofSignal struct {
	r    io.Reader
	done chan struct{}
	once sync.Once
}

func (e *eofSignal) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(func() { close(e.done) })
	}
	return n, err
}
