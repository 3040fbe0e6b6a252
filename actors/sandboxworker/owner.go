package sandboxworker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/frognano/frognano/actors/sandbox"
)

// A sandbox asked for by another cluster member (a training run on another
// node) belongs to that member's process. When that process dies — SIGKILL,
// a crash, its machine gone — nothing destroys the sandbox: its owner can
// no longer send SandboxDestroy, and this node's startup Sweep removes only
// sandboxes of dead local processes. So a worker watches its owner through
// the cluster's membership (the provider's liveness: a member silent for
// cluster.failure_timeout leaves the topology) and, when the member that
// asked for the sandbox leaves, destroys the sandbox and stops. A member
// is known by its id, new for every process: a run restarted at the same
// address is another owner, and the old one's sandboxes go.
//
// An owner this node has not (yet) seen as a member — it joined a moment
// ago, or it is a process outside the cluster — has ownerGrace to appear;
// a sandbox whose owner never does is destroyed too, since nothing could
// reclaim it if that process died.

// ownerGrace is how long a requester may take to appear in this node's
// membership.
var ownerGrace = 30 * time.Second

// ownerWatch destroys one sandbox when its owner leaves the cluster.
type ownerWatch struct {
	system *actor.ActorSystem
	self   *actor.PID
	addr   string // the owner's remoting address
	sb     *sandbox.Sandbox
	log    *slog.Logger
	cl     *cluster.Cluster

	mu    sync.Mutex
	id    string // the owner's member id, once seen
	gone  bool
	sub   *eventstream.Subscription
	timer *time.Timer
}

// clusterOf is the actor system's cluster, nil when it has none.
func clusterOf(system *actor.ActorSystem) (c *cluster.Cluster) {
	defer func() {
		if recover() != nil {
			c = nil
		}
	}()
	return cluster.GetCluster(system)
}

// watchOwner starts watching the owner of sb, the sender of its
// SandboxCreate, when that is a process other than this node's.
func watchOwner(ctx actor.Context, sb *sandbox.Sandbox, log *slog.Logger) *ownerWatch {
	sender := ctx.Sender()
	if sender == nil || sender.Address == ctx.Self().Address {
		return nil // this process's own: its end is this node's, and Sweep's
	}
	system := ctx.ActorSystem()
	c := clusterOf(system)
	if c == nil || c.MemberList == nil {
		return nil // no cluster, no remote owners
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &ownerWatch{system: system, self: ctx.Self(), addr: sender.Address, sb: sb, cl: c,
		log: log.With("sandbox", sb.ID(), "owner", sender.Address)}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sub = system.EventStream.Subscribe(func(evt any) {
		if topo, ok := evt.(*cluster.ClusterTopology); ok {
			o.update(topo.GetMembers())
		}
	})
	if ms := c.MemberList.Members(); ms != nil {
		o.updateLocked(ms.Members())
	}
	if o.id == "" && !o.gone {
		o.timer = time.AfterFunc(ownerGrace, o.expire)
	}
	return o
}

// update looks for the owner in a new topology.
func (o *ownerWatch) update(members []*cluster.Member) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.updateLocked(members)
}

func (o *ownerWatch) updateLocked(members []*cluster.Member) {
	if o.gone {
		return
	}
	if o.id == "" {
		for _, m := range members {
			if m.Address() == o.addr {
				o.id = m.Id
				if o.timer != nil {
					o.timer.Stop()
				}
				return
			}
		}
		return // not seen yet: expire decides
	}
	for _, m := range members {
		if m.Id == o.id {
			return
		}
	}
	o.log.Warn("the cluster member that asked for this sandbox left the cluster; destroying the sandbox", "member", o.id)
	o.reclaimLocked()
}

// expire reclaims a sandbox whose owner never appeared as a member.
func (o *ownerWatch) expire() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gone || o.id != "" {
		return
	}
	o.log.Warn("the process that asked for this sandbox is not a member of this node's cluster; destroying the sandbox, which nothing could reclaim if that process died",
		"waited", ownerGrace)
	o.reclaimLocked()
}

// reclaimLocked destroys the sandbox and stops the worker, off the event
// stream's goroutine. The sandbox goes at once, even while the worker is
// busy with a request (which then fails); a destroy that fails is kept and
// retried by the runtime (its Config.Destroys).
func (o *ownerWatch) reclaimLocked() {
	o.gone = true
	o.stopLocked()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := o.sb.Destroy(ctx); err != nil {
			o.log.Warn("destroy the sandbox of a departed owner", "err", err)
		}
		o.system.Root.Stop(o.self)
	}()
}

// stop ends the watch (the sandbox was destroyed by its owner's request or
// the worker stopped).
func (o *ownerWatch) stop() {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stopLocked()
}

func (o *ownerWatch) stopLocked() {
	if o.sub != nil {
		o.system.EventStream.Unsubscribe(o.sub)
		o.sub = nil
	}
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
}
