package node

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/diag"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/runtime/placement"
)

// ManagerName is the well-known actor every node runs; the CLI and other
// nodes address it as PID{Address: <remoting address>, Id: ManagerName}.
const ManagerName = "node"

// manager answers questions about the node and the cluster, and turns
// cluster-wide requests into placement pools.
type manager struct{ n *Node }

func (m *manager) Receive(ctx actor.Context) {
	switch req := ctx.Message().(type) {
	case *messages.Ping:
		ctx.Respond(&messages.Pong{Seq: req.Seq, Node: ctx.ActorSystem().Address(), Payload: req.Payload})
	case *messages.NodeInfoRequest:
		ctx.Respond(m.n.Info())
	case *messages.MembersRequest:
		ctx.Respond(&messages.MembersReply{Members: m.n.MemberInfos()})
	case *messages.SpawnRequest:
		m.spawn(ctx, req)
	case *messages.DigestBatchRequest:
		if req.Jobs <= 0 || req.Jobs > 100000 || req.Rounds < 0 || req.Rounds > diag.MaxRounds {
			ctx.Respond(&messages.Failure{Code: "bad_request", Message: fmt.Sprintf("jobs must be in [1, 100000] and rounds in [0, %d]", diag.MaxRounds)})
			return
		}
		requester := ctx.Sender()
		ctx.Spawn(actor.PropsFromProducer(func() actor.Actor {
			return &digestBatch{n: m.n, req: req, requester: requester}
		}))
	}
}

func (m *manager) spawn(ctx actor.Context, req *messages.SpawnRequest) {
	member := req.Member
	if member == "" {
		for _, mem := range m.n.Members() {
			if slices.Contains(mem.Kinds, req.Kind) {
				member = mem.Address()
				break
			}
		}
	}
	if member == "" || !m.n.offers(member, req.Kind) {
		ctx.Respond(&messages.Failure{Code: "unknown_kind", Message: m.n.unknownKind(req.Kind, req.Member).Error()})
		return
	}
	sender := ctx.Sender()
	f := m.n.remote.SpawnFuture(member, "", req.Kind, 5*time.Second)
	ctx.ReenterAfter(f, func(res any, err error) {
		var reply any
		if r, ok := res.(interface{ GetPid() *actor.PID }); ok && err == nil && r.GetPid() != nil {
			reply = &messages.SpawnReply{Address: r.GetPid().Address, Id: r.GetPid().Id}
		} else {
			if err == nil {
				err = fmt.Errorf("member %s refused to spawn kind %q", member, req.Kind)
			}
			reply = &messages.Failure{Code: "spawn_failed", Message: err.Error()}
		}
		ctx.Send(sender, reply)
	})
}

// digestBatch runs one DigestBatchRequest through a placement pool.
type digestBatch struct {
	n         *Node
	req       *messages.DigestBatchRequest
	requester *actor.PID
	pool      *actor.PID
	data      map[string][]byte
	report    *messages.DigestBatchReport
	started   time.Time
}

func (b *digestBatch) Receive(ctx actor.Context) {
	switch res := ctx.Message().(type) {
	case *actor.Started:
		b.started = time.Now()
		b.report = &messages.DigestBatchReport{}
		b.data = map[string][]byte{}
		b.pool = ctx.Spawn(placement.Props(placement.Config{
			Kind:         diag.Kind,
			Members:      b.n.Members,
			Remote:       b.n.remote,
			PreferRemote: b.req.PreferRemote,
			MaxAttempts:  3,
			JobTimeout:   10 * time.Minute,
			Logger:       b.n.log.With("component", "placement"),
		}))
		for i := 0; i < int(b.req.Jobs); i++ {
			id := fmt.Sprintf("digest-%d", i)
			var seed [16]byte
			binary.LittleEndian.PutUint64(seed[:8], b.req.Seed)
			binary.LittleEndian.PutUint64(seed[8:], uint64(i))
			sum := sha256.Sum256(seed[:])
			b.data[id] = sum[:]
			ctx.Request(b.pool, &placement.Submit{ID: id, Job: &messages.DigestJob{Id: id, Data: sum[:], Rounds: b.req.Rounds}})
		}
	case *placement.Done:
		out := &messages.DigestOutcome{Id: res.ID, Data: b.data[res.ID], Node: res.Node, Attempts: int32(res.Attempts)}
		if r, ok := res.Result.(*messages.DigestResult); ok {
			out.Digest = r.Digest
		} else {
			out.Error = fmt.Sprintf("unexpected reply %T", res.Result)
		}
		b.add(ctx, out)
	case *placement.Failed:
		b.add(ctx, &messages.DigestOutcome{Id: res.ID, Data: b.data[res.ID], Attempts: int32(res.Attempts), Error: res.Err.Error()})
	}
}

func (b *digestBatch) add(ctx actor.Context, o *messages.DigestOutcome) {
	b.report.Outcomes = append(b.report.Outcomes, o)
	if len(b.report.Outcomes) == int(b.req.Jobs) {
		b.report.Seconds = time.Since(b.started).Seconds()
		ctx.Send(b.requester, b.report)
		ctx.Stop(ctx.Self())
	}
}
