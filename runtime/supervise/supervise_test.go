package supervise

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

func TestBackoff(t *testing.T) {
	p := Policy{BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second}
	tests := []struct {
		n    int
		want time.Duration
	}{
		{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond}, {5, time.Second}, {50, time.Second},
	}
	for _, tt := range tests {
		if got := p.Backoff(tt.n); got != tt.want {
			t.Errorf("Backoff(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		reason any
		want   actor.Directive
	}{
		{errors.New("containerd hiccup"), actor.RestartDirective},
		{"a string panic", actor.RestartDirective},
		{Permanent(errors.New("malformed task")), actor.StopDirective},
		{errors.Join(errors.New("ctx"), Permanent(errors.New("bad"))), actor.StopDirective},
	}
	for _, tt := range tests {
		if got := Decide(tt.reason); got != tt.want {
			t.Errorf("Decide(%v) = %v, want %v", tt.reason, got, tt.want)
		}
	}
}

// crasher panics with the error it is sent and counts its starts.
type crasher struct{ starts *atomic.Int32 }

func (c *crasher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		c.starts.Add(1)
	case error:
		panic(m)
	}
}

// parent spawns one crasher under the policy and reports its termination.
type parent struct {
	starts     *atomic.Int32
	child      chan *actor.PID
	terminated chan struct{}
	once       sync.Once
}

func (p *parent) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		pid := ctx.Spawn(actor.PropsFromProducer(func() actor.Actor { return &crasher{starts: p.starts} }))
		p.child <- pid
	case *actor.Terminated:
		p.once.Do(func() { close(p.terminated) }) // a parent hears of its child's end more than once
	}
}

func startTree(t *testing.T, pol Policy) (*actor.ActorSystem, *actor.PID, *atomic.Int32, chan struct{}) {
	t.Helper()
	sys := actor.NewActorSystem()
	t.Cleanup(sys.Shutdown)
	starts := &atomic.Int32{}
	p := &parent{starts: starts, child: make(chan *actor.PID, 1), terminated: make(chan struct{})}
	sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }, actor.WithSupervisor(pol.Strategy())))
	return sys, <-p.child, starts, p.terminated
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRestartWithBackoffThenStop(t *testing.T) {
	pol := Policy{MaxRestarts: 3, Window: time.Minute, BackoffMin: 40 * time.Millisecond, BackoffMax: time.Second}
	sys, child, starts, terminated := startTree(t, pol)
	waitFor(t, "first start", func() bool { return starts.Load() == 1 })

	// Each failure is followed by a restart after a doubling delay.
	for i := 1; i <= 3; i++ {
		failed := time.Now()
		sys.Root.Send(child, errors.New("transient"))
		waitFor(t, "restart", func() bool { return starts.Load() == int32(i+1) })
		took := time.Since(failed)
		if want := pol.Backoff(i); took < want {
			t.Errorf("restart %d after %v, want at least the backoff %v", i, took, want)
		}
	}
	// The fourth failure within the window exceeds MaxRestarts: stopped for good.
	sys.Root.Send(child, errors.New("transient"))
	select {
	case <-terminated:
	case <-time.After(5 * time.Second):
		t.Fatal("child not stopped after exceeding MaxRestarts")
	}
	if got := starts.Load(); got != 4 {
		t.Fatalf("child started %d times, want 4", got)
	}
}

func TestPermanentFailureStops(t *testing.T) {
	pol := Policy{MaxRestarts: 10, Window: time.Minute, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond}
	sys, child, starts, terminated := startTree(t, pol)
	waitFor(t, "first start", func() bool { return starts.Load() == 1 })
	sys.Root.Send(child, Permanent(errors.New("malformed task")))
	select {
	case <-terminated:
	case <-time.After(5 * time.Second):
		t.Fatal("child not stopped on a permanent failure")
	}
	if got := starts.Load(); got != 1 {
		t.Fatalf("child restarted after a permanent failure (%d starts)", got)
	}
}
