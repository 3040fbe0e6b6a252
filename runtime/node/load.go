package node

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/frognano/frognano/runtime/capabilities"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// nodeLoad is what NodeInfo.load reports: the machine's figures from a
// capabilities.LoadMeter and the node's running actors per kind. It rides
// on NodeInfo, which the node publishes in the cluster's gossip state every
// heartbeat (members.go): no other exchange reports it.
type nodeLoad struct {
	once  sync.Once
	meter *capabilities.LoadMeter

	mu    sync.Mutex
	kinds map[string]int32
}

// sample is the node's load now; memoryCap is its Capabilities.memory_bytes.
func (l *nodeLoad) sample(memoryCap uint64) *rtmsg.Load {
	l.once.Do(func() { l.meter = capabilities.NewLoadMeter(capabilities.LoadOptions{}) })
	s := l.meter.Sample(memoryCap)
	l.mu.Lock()
	for k, n := range l.kinds {
		if n > 0 {
			if s.KindActors == nil {
				s.KindActors = map[string]int32{}
			}
			s.KindActors[k] = n
		}
	}
	l.mu.Unlock()
	return s
}

// KindActorsStarted counts the actors of each kind started on this node
// (remote spawns included), for /metrics: where a run's episodes ran.
var KindActorsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "frognano",
	Name:      "kind_actors_started_total",
	Help:      "Actors of each kind started on this node (by remote spawning or locally).",
}, []string{"kind"})

// counted makes props count their running actors under kind: one from
// Started to Stopped, none while an actor restarts.
func (l *nodeLoad) counted(kind string, props *actor.Props) *actor.Props {
	return props.Configure(actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(ctx actor.ReceiverContext, env *actor.MessageEnvelope) {
			switch env.Message.(type) {
			case *actor.Started:
				l.add(kind, 1)
				KindActorsStarted.WithLabelValues(kind).Inc()
			case *actor.Restarting, *actor.Stopped:
				l.add(kind, -1)
			}
			next(ctx, env)
		}
	}))
}

func (l *nodeLoad) add(kind string, d int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kinds == nil {
		l.kinds = map[string]int32{}
	}
	l.kinds[kind] += d
}
