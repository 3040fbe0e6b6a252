// Package placement runs jobs on actors of a named kind spread over the
// cluster's members. It spawns one worker per member by kind name (remote
// spawning), watches each worker, and when a worker or its whole node dies it
// hands the worker's unfinished jobs to a surviving member. Callers see each job
// finish exactly once.
package placement

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// Submit asks the pool to run Job on a worker and reply Done or Failed to the sender.
type Submit struct {
	ID  string
	Job any // a protobuf message the kind understands
}

// Done is the reply for a finished job.
type Done struct {
	ID       string
	Result   any
	Node     string // remoting address of the member that ran it
	Attempts int
}

// Failed is the reply for a job that could not be run.
type Failed struct {
	ID       string
	Err      error
	Attempts int
}

// ErrUnknownKind means no live member offers the requested actor kind.
var ErrUnknownKind = errors.New("unknown actor kind")

// Config shapes a pool.
type Config struct {
	Kind string
	// Members lists the live members with their address, kinds,
	// capabilities and load (node.Node.MemberInfos).
	Members func() []*rtmsg.NodeInfo
	Remote  *remote.Remote
	// Requirements are what a worker needs of its member (Pick); Self,
	// Exclude and Rotate are the pool's own.
	Requirements Requirements
	// PreferRemote places work on other nodes before this one.
	PreferRemote bool
	MaxAttempts  int
	SpawnTimeout time.Duration
	JobTimeout   time.Duration
	Logger       *slog.Logger
}

// Retries counts jobs handed to another member after a worker was lost.
var Retries = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "frognano",
	Name:      "placement_retries_total",
	Help:      "Jobs re-dispatched after their worker or node was lost, by kind.",
}, []string{"kind"})

// Props returns the pool actor's props.
func Props(cfg Config) *actor.Props {
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.SpawnTimeout <= 0 {
		cfg.SpawnTimeout = 5 * time.Second
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &pool{cfg: cfg, workers: map[string]*worker{}, jobs: map[string]*job{}}
	})
}

type worker struct {
	member string // member address
	pid    *actor.PID
	queue  []string // job ids waiting for the spawn to finish
	ready  bool
}

type job struct {
	submit    Submit
	requester *actor.PID
	attempt   int
	member    string
	tried     []string
}

type pool struct {
	cfg     Config
	workers map[string]*worker // by member address
	jobs    map[string]*job
	next    uint64
}

func (p *pool) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *Submit:
		if _, dup := p.jobs[m.ID]; dup {
			ctx.Respond(&Failed{ID: m.ID, Err: fmt.Errorf("placement: job %q already running", m.ID)})
			return
		}
		j := &job{submit: *m, requester: ctx.Sender()}
		p.jobs[m.ID] = j
		p.dispatch(ctx, j)
	case *actor.Terminated:
		p.lost(ctx, m.Who, m.Why)
	}
}

// candidates are the members that may run the kind, in preference order
// (Pick).
func (p *pool) candidates(ctx actor.Context, exclude []string) ([]string, error) {
	r := p.cfg.Requirements
	r.Exclude = append(slices.Clone(r.Exclude), exclude...)
	r.Self, r.PreferRemote, r.Rotate = ctx.ActorSystem().Address(), p.cfg.PreferRemote, p.next
	p.next++
	return Pick(p.cfg.Members(), p.cfg.Kind, r)
}

func (p *pool) dispatch(ctx actor.Context, j *job) {
	if j.attempt >= p.cfg.MaxAttempts {
		p.finish(ctx, j, &Failed{ID: j.submit.ID, Err: fmt.Errorf("placement: job %q failed after %d attempts on %s", j.submit.ID, j.attempt, strings.Join(j.tried, ", ")), Attempts: j.attempt})
		return
	}
	cands, err := p.candidates(ctx, j.tried)
	if err != nil {
		p.finish(ctx, j, &Failed{ID: j.submit.ID, Err: err, Attempts: j.attempt})
		return
	}
	// Prefer a member whose worker already exists.
	member := cands[0]
	j.attempt++
	j.member = member
	j.tried = append(j.tried, member)
	w := p.workers[member]
	if w == nil {
		w = &worker{member: member}
		p.workers[member] = w
		p.spawn(ctx, w)
	}
	if !w.ready {
		w.queue = append(w.queue, j.submit.ID)
		return
	}
	p.send(ctx, w, j)
}

func (p *pool) spawn(ctx actor.Context, w *worker) {
	f := p.cfg.Remote.SpawnFuture(w.member, "", p.cfg.Kind, p.cfg.SpawnTimeout)
	ctx.ReenterAfter(f, func(res any, err error) {
		if p.workers[w.member] != w {
			return
		}
		resp, _ := res.(*remote.ActorPidResponse)
		if err == nil && (resp == nil || resp.Pid == nil || resp.StatusCode != remote.ResponseStatusCodeOK.ToInt32()) {
			code := int32(-1)
			if resp != nil {
				code = resp.StatusCode
			}
			err = fmt.Errorf("spawn of kind %q on %s refused (status %d)", p.cfg.Kind, w.member, code)
		}
		if err != nil {
			p.cfg.Logger.Warn("worker spawn failed", "kind", p.cfg.Kind, "member", w.member, "error", err)
			delete(p.workers, w.member)
			p.redispatch(ctx, w.queue)
			return
		}
		w.pid, w.ready = resp.Pid, true
		ctx.Watch(w.pid)
		p.cfg.Logger.Info("worker spawned", "kind", p.cfg.Kind, "member", w.member, "pid", w.pid.String())
		queue := w.queue
		w.queue = nil
		for _, id := range queue {
			if j := p.jobs[id]; j != nil {
				p.send(ctx, w, j)
			}
		}
	})
}

func (p *pool) send(ctx actor.Context, w *worker, j *job) {
	attempt := j.attempt
	f := ctx.RequestFuture(w.pid, j.submit.Job, p.cfg.JobTimeout)
	ctx.ReenterAfter(f, func(res any, err error) {
		cur := p.jobs[j.submit.ID]
		if cur != j || j.attempt != attempt {
			return // superseded by a retry elsewhere
		}
		if fail, ok := res.(*rtmsg.Failure); ok && err == nil {
			// The worker ran the job and refused it: another member would too.
			p.finish(ctx, j, &Failed{ID: j.submit.ID, Err: fmt.Errorf("%s: %s", fail.GetCode().Short(), fail.GetMessage()), Attempts: j.attempt})
			return
		}
		if err != nil {
			p.cfg.Logger.Warn("job attempt failed", "kind", p.cfg.Kind, "job", j.submit.ID, "member", w.member, "error", err)
			p.dispatch(ctx, j)
			return
		}
		p.finish(ctx, j, &Done{ID: j.submit.ID, Result: res, Node: w.member, Attempts: j.attempt})
	})
}

// lost handles a worker that stopped or whose node vanished.
func (p *pool) lost(ctx actor.Context, who *actor.PID, why actor.TerminatedReason) {
	for addr, w := range p.workers {
		if w.pid == nil || !w.pid.Equal(who) {
			continue
		}
		delete(p.workers, addr)
		var pending []string
		for id, j := range p.jobs {
			if j.member == addr {
				pending = append(pending, id)
			}
		}
		sort.Strings(pending)
		p.cfg.Logger.Warn("worker lost; retrying its jobs on surviving members", "kind", p.cfg.Kind, "member", addr, "reason", why.String(), "jobs", len(pending))
		Retries.WithLabelValues(p.cfg.Kind).Add(float64(len(pending)))
		p.redispatch(ctx, pending)
	}
}

func (p *pool) redispatch(ctx actor.Context, ids []string) {
	for _, id := range ids {
		if j := p.jobs[id]; j != nil {
			p.dispatch(ctx, j)
		}
	}
}

func (p *pool) finish(ctx actor.Context, j *job, reply any) {
	delete(p.jobs, j.submit.ID)
	if j.requester != nil {
		ctx.Send(j.requester, reply)
	}
}
