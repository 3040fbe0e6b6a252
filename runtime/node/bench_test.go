package node

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// pinger keeps window pings in flight to target until total pongs came back.
type pinger struct {
	target        *actor.PID
	total, window int
	sent, got     int
	done          chan struct{}
}

func (p *pinger) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		for p.sent < p.window && p.sent < p.total {
			p.send(ctx)
		}
	case *rtmsg.Pong:
		p.got++
		if p.got == p.total {
			close(p.done)
			return
		}
		if p.sent < p.total {
			p.send(ctx)
		}
	}
}

func (p *pinger) send(ctx actor.Context) {
	p.sent++
	ctx.Request(p.target, &rtmsg.Ping{Seq: uint64(p.sent)})
}

// BenchmarkMessages reports request/response round trips per second between
// two actors on one node, and between actors on two nodes over loopback
// (protoactor remoting: protobuf over gRPC), side by side.
//
//	go test ./runtime/node -run '^$' -bench Messages -benchtime 200000x
func BenchmarkMessages(b *testing.B) {
	a, other := startPair(b)

	for _, tc := range []struct {
		name   string
		target *actor.PID
		window int
	}{
		{"local/window=1", a.Manager(), 1},
		{"local/window=256", a.Manager(), 256},
		{"remote/window=1", actor.NewPID(other.Address(), ManagerName), 1},
		{"remote/window=256", actor.NewPID(other.Address(), ManagerName), 256},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := &pinger{target: tc.target, total: b.N, window: tc.window, done: make(chan struct{})}
			b.ResetTimer()
			start := time.Now()
			pid := a.System().Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return p }))
			<-p.done
			elapsed := time.Since(start)
			b.StopTimer()
			a.System().Root.Stop(pid)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "roundtrips/s")
			b.ReportMetric(2*float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}
