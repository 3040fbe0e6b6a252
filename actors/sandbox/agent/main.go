//go:build linux

// Command agent is PID 1 of every frognano sandbox. It does three things:
//
//   - it stays alive: every signal a process in the sandbox can send it is
//     dropped (catatonit dies of SIGTERM, and a sandbox that an agent
//     can kill at will is a way to turn a failing episode into a "sandbox
//     failure" that is left out of the reward statistics);
//   - it reaps every orphan, so zombies never eat the pids limit;
//   - it runs commands for frognano, which talks to it over its stdin and
//     stdout (containerd's fifos for the init process). Starting a process
//     this way takes a fork, not a runc exec (~30 ms), which is what makes
//     an agent's tool call cheap.
//
// It is built by package sandbox on the host (CGO_ENABLED=0, so it runs in
// any image) from this file, which is embedded in package sandbox; it
// imports only the standard library. It is not dumpable, so processes in the
// sandbox cannot ptrace it or open its file descriptors through /proc.
//
// Protocol: frames of a 4-byte big-endian length and a JSON document, a
// request on stdin, a response on stdout, matched by id. Requests run
// concurrently.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// request and response mirror agentRequest and agentResponse in package
// sandbox.
type request struct {
	ID          int64    `json:"id"`
	Op          string   `json:"op"` // "exec", "cancel" (of ID Target) or "ping"
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

type response struct {
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

// maxFrame bounds one frame; frognano sends large inputs through runc exec.
const maxFrame = 256 << 20

// ioGrace is how long output may keep flowing after a command exits, from
// children that inherited its stdout, before the pipes are cut.
const ioGrace = 200 * time.Millisecond

func main() {
	// Its kill logic treats everything adopted by PID 1 as the sandbox's:
	// run anywhere else (on the host, by mistake), it must do nothing.
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "agent: not PID 1 of a sandbox; refusing to run")
		os.Exit(2)
	}
	// Catch every signal and drop it. Caught, not ignored: an ignored
	// signal stays ignored across execve, and the commands must start with
	// default dispositions (a test suite that sends itself SIGTERM must die
	// of it). KILL and STOP cannot be caught, and from inside the PID
	// namespace they do not reach its init; CHLD stays at its default so
	// children can be waited for; URG, PROF, 32 and 33 belong to the runtime.
	var catch []os.Signal
	for sig := syscall.Signal(1); sig < 65; sig++ {
		switch sig {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF, 32, 33:
		default:
			catch = append(catch, sig)
		}
	}
	dropped := make(chan os.Signal, 64)
	signal.Notify(dropped, catch...)
	go func() {
		for range dropped {
		}
	}()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "agent: prctl(PR_SET_DUMPABLE): %v\n", errno)
	}
	go reap()
	warmThreads(16)

	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	for {
		var req request
		if err := readFrame(in, &req); err != nil {
			if !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "agent: read request: %v\n", err)
			}
			break
		}
		go handle(req)
	}
	// frognano went away: keep the sandbox alive (and reaped) until it is
	// destroyed or swept.
	select {}
}

// warmThreads makes the Go runtime start n OS threads now, while the pids
// limit has room. Threads count against that limit; under a fork bomb the
// runtime could not clone a new one, and a Go program that cannot create a
// thread dies — PID 1 dying ends the sandbox. Threads the runtime has made
// stay parked and are reused, so later blocking syscalls find one ready.
func warmThreads(n int) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := syscall.Timespec{Nsec: 20_000_000}
			// A raw blocking syscall holds its thread, so each goroutine
			// needs its own.
			syscall.Syscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
		}()
	}
	wg.Wait()
}

var outMu sync.Mutex

func send(r response) {
	b, err := json.Marshal(r)
	if err != nil {
		b, _ = json.Marshal(response{ID: r.ID, Exit: -1, StartError: "agent: " + err.Error()})
	}
	outMu.Lock()
	defer outMu.Unlock()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := os.Stdout.Write(append(n[:], b...)); err != nil {
		fmt.Fprintf(os.Stderr, "agent: write response %d: %v\n", r.ID, err)
	}
}

func readFrame(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxFrame {
		return fmt.Errorf("frame of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Reaping. One goroutine waits for every child of PID 1, ours and adopted;
// a command's exit status goes to whoever started it.
var (
	procMu  sync.Mutex
	waiters = map[int]chan syscall.WaitStatus{}
	started = make(chan struct{}, 1)
	running = map[int64]*command{} // by request id, for cancel
	roots   = map[int]bool{}       // pids of running commands
)

func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			// No children: none can appear before a command starts.
			<-started
			continue
		case err != nil:
			time.Sleep(10 * time.Millisecond)
			continue
		}
		procMu.Lock()
		ch := waiters[pid]
		delete(waiters, pid)
		procMu.Unlock()
		if ch != nil {
			ch <- ws
		}
	}
}

type command struct {
	pid       int
	since     uint64
	cancelled chan struct{}
	once      sync.Once
}

func handle(req request) {
	switch req.Op {
	case "ping":
		send(response{ID: req.ID})
	case "cancel":
		procMu.Lock()
		c := running[req.Target]
		procMu.Unlock()
		if c != nil {
			c.once.Do(func() { close(c.cancelled) })
		}
		send(response{ID: req.ID})
	case "exec":
		send(run(req))
	default:
		send(response{ID: req.ID, Exit: -1, StartError: "agent: unknown op " + req.Op})
	}
}

func run(req request) response {
	res := response{ID: req.ID}
	if len(req.Argv) == 0 {
		res.Exit, res.StartError = -1, "empty argv"
		return res
	}
	path, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		res.Exit, res.StartError = 127, err.Error()
		return res
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		res.Exit, res.StartError = -1, err.Error()
		return res
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		res.Exit, res.StartError = -1, err.Error()
		return res
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		res.Exit, res.StartError = -1, err.Error()
		return res
	}
	limit := req.Limit
	if limit <= 0 {
		limit = 1 << 20
	}
	stdout, stderr := &capture{limit: limit}, &capture{limit: limit}
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); io.Copy(stdout, outR) }()
	go func() { defer copies.Done(); io.Copy(stderr, errR) }()

	exited := make(chan syscall.WaitStatus, 1)
	c := &command{since: uptimeTicks(), cancelled: make(chan struct{})}
	procMu.Lock()
	start := time.Now()
	pid, err := syscall.ForkExec(path, req.Argv, &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   req.Env,
		Files: []uintptr{stdinR.Fd(), outW.Fd(), errW.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err == nil {
		c.pid = pid
		waiters[pid] = exited
		running[req.ID] = c
		roots[pid] = true
	}
	procMu.Unlock()
	stdinR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		stdinW.Close()
		outR.Close()
		errR.Close()
		res.Exit, res.StartError = 127, fmt.Sprintf("exec %s: %v", req.Argv[0], err)
		return res
	}
	select {
	case started <- struct{}{}:
	default:
	}
	defer func() {
		procMu.Lock()
		delete(running, req.ID)
		delete(roots, pid)
		procMu.Unlock()
	}()
	if req.OOMScoreAdj != 0 {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(req.OOMScoreAdj)), 0)
	}
	go func() {
		stdinW.Write(req.Stdin)
		stdinW.Close()
	}()

	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var ws syscall.WaitStatus
	select {
	case ws = <-exited:
	case <-timer.C:
		res.TimedOut = true
		killTree(pid, c.since)
		ws = <-exited
	case <-c.cancelled:
		res.Cancelled = true
		killTree(pid, c.since)
		ws = <-exited
	}
	res.DurationNS = int64(time.Since(start))
	if req.KillOrphans {
		killTree(pid, c.since)
	}
	done := make(chan struct{})
	go func() { copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(ioGrace):
		outR.Close()
		errR.Close()
		<-done
	}
	outR.Close()
	errR.Close()
	switch {
	case ws.Exited():
		res.Exit = ws.ExitStatus()
	case ws.Signaled():
		res.Exit = 128 + int(ws.Signal())
	default:
		res.Exit = -1
	}
	res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
	res.Truncated = stdout.truncated || stderr.truncated
	return res
}

// lookPath finds argv[0] on the command's PATH (not the agent's).
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "PATH="); ok {
			path = p
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", file)
}

// killTree SIGKILLs root's process group, its descendants, and what init
// adopted that started after since and belongs to no other running command
// (what root daemonised). It repeats until a pass finds nothing, so children
// forked during a pass are caught by the next.
func killTree(root int, since uint64) {
	_ = syscall.Kill(-root, syscall.SIGKILL)
	for range 50 {
		procs := processes()
		procMu.Lock()
		others := map[int]bool{}
		for pid := range roots {
			if pid != root {
				others[pid] = true
			}
		}
		procMu.Unlock()
		children := map[int][]int{}
		for pid, p := range procs {
			children[p.ppid] = append(children[p.ppid], pid)
		}
		queue := []int{root}
		for pid, p := range procs {
			if p.ppid == 1 && pid != root && !others[pid] && p.start >= since {
				queue = append(queue, pid)
			}
		}
		victims := map[int]bool{}
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			if victims[pid] || others[pid] || pid <= 1 {
				continue
			}
			if _, alive := procs[pid]; !alive {
				continue
			}
			victims[pid] = true
			queue = append(queue, children[pid]...)
		}
		if len(victims) == 0 {
			return
		}
		for pid := range victims {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

type proc struct {
	ppid  int
	start uint64
}

// processes reads the sandbox's process table (this PID namespace's /proc),
// leaving out zombies, which are dead already.
func processes() map[int]proc {
	out := map[int]proc{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 20 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		start, _ := strconv.ParseUint(f[19], 10, 64)
		out[pid] = proc{ppid: ppid, start: start}
	}
	return out
}

// uptimeTicks is now in /proc/<pid>/stat start-time units, minus a tick.
func uptimeTicks() uint64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil || secs < 0.02 {
		return 0
	}
	return uint64(secs*100) - 1
}

// capture keeps the first limit bytes written to it and drops the rest.
type capture struct {
	mu        sync.Mutex
	buf       []byte
	limit     int64
	truncated bool
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.limit - int64(len(c.buf))
	switch {
	case room >= int64(len(p)):
		c.buf = append(c.buf, p...)
	case room > 0:
		c.buf = append(c.buf, p[:room]...)
		c.truncated = true
	case len(p) > 0:
		c.truncated = true
	}
	return len(p), nil
}

func (c *capture) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf
}
