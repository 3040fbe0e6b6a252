// Package supervise is frognano's supervision policy: one-for-one restarts
// with exponential backoff for infrastructure failures, a stop for failures
// that a restart cannot cure (bad input), and a cap on restarts per window so
// a child that keeps dying is given up on instead of spinning.
package supervise

import (
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"
)

// Permanent marks a failure that restarting will not fix (a malformed task, an
// unknown kind). Panic with Permanent(err) to have the child stopped.
type permanent struct{ err error }

func (p permanent) Error() string { return "permanent: " + p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so the decider stops the child instead of restarting it.
func Permanent(err error) error { return permanent{err} }

// IsPermanent reports whether err (or a panic value) was marked Permanent.
func IsPermanent(reason any) bool {
	err, ok := reason.(error)
	if !ok {
		return false
	}
	var p permanent
	return errors.As(err, &p)
}

// Decide is the decider: stop on permanent failures, restart otherwise.
func Decide(reason any) actor.Directive {
	if IsPermanent(reason) {
		return actor.StopDirective
	}
	return actor.RestartDirective
}

// Policy bounds restarts.
type Policy struct {
	MaxRestarts int           // within Window; more and the child is stopped
	Window      time.Duration //
	BackoffMin  time.Duration // delay before the first restart
	BackoffMax  time.Duration // cap on the doubling delay
	Logger      *slog.Logger
}

// Restarts counts supervisor decisions by directive, for /metrics.
var Restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "frognano",
	Name:      "supervisor_decisions_total",
	Help:      "Supervisor decisions about failed actors, by directive.",
}, []string{"directive"})

// Strategy returns a protoactor SupervisorStrategy implementing p.
func (p Policy) Strategy() actor.SupervisorStrategy { return &strategy{p: p} }

type strategy struct{ p Policy }

// Backoff is the delay before restart number n (1-based).
func (p Policy) Backoff(n int) time.Duration {
	d := p.BackoffMin
	for i := 1; i < n && d < p.BackoffMax; i++ {
		d *= 2
	}
	if d > p.BackoffMax {
		d = p.BackoffMax
	}
	return d
}

func (s *strategy) HandleFailure(system *actor.ActorSystem, sup actor.Supervisor, child *actor.PID, rs *actor.RestartStatistics, reason any, msg any) {
	log := s.p.Logger
	if log == nil {
		log = system.Logger()
	}
	directive := Decide(reason)
	if directive == actor.RestartDirective {
		rs.Fail()
		n := rs.NumberOfFailures(s.p.Window)
		if n > s.p.MaxRestarts {
			rs.Reset()
			directive = actor.StopDirective
			log.Error("actor failed too often; stopping it", "child", child.String(), "failures", n, "window", s.p.Window, "reason", reason)
		} else {
			delay := s.p.Backoff(n)
			log.Warn("actor failed; restarting", "child", child.String(), "attempt", n, "backoff", delay, "reason", reason)
			Restarts.WithLabelValues("restart").Inc()
			system.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: directive})
			time.AfterFunc(delay, func() { sup.RestartChildren(child) })
			return
		}
	} else {
		log.Error("actor failed permanently; stopping it", "child", child.String(), "reason", reason)
	}
	Restarts.WithLabelValues("stop").Inc()
	system.EventStream.Publish(&actor.SupervisorEvent{Child: child, Reason: reason, Directive: directive})
	sup.StopChildren(child)
}
