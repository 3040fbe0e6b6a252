package node

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/placement"
)

// ManagerName is the well-known actor every node runs; the CLI and other
// nodes address it as PID{Address: <remoting address>, Id: ManagerName}.
const ManagerName = "node"

// manager answers questions about the node and the cluster, spawns kinds
// on members, and hands other requests to Options.Manager.
type manager struct {
	n       *Node
	spawned uint64 // placements made for SpawnRequests that name no member
}

func (m *manager) Receive(ctx actor.Context) {
	switch req := ctx.Message().(type) {
	case *rtmsg.Ping:
		ctx.Respond(&rtmsg.Pong{Seq: req.Seq, Node: ctx.ActorSystem().Address(), Payload: req.Payload})
	case *rtmsg.NodeInfoRequest:
		ctx.Respond(m.n.Info())
	case *rtmsg.MembersRequest:
		ctx.Respond(&rtmsg.MembersReply{Members: m.n.MemberInfos()})
	case *rtmsg.SpawnRequest:
		m.spawn(ctx, req)
	case actor.SystemMessage, actor.AutoReceiveMessage:
		// Lifecycle: Started, Stopping, a child's Terminated.
	default:
		for _, h := range m.n.requests {
			if h(m.n, ctx) {
				return
			}
		}
		// A request no one answers would keep its asker waiting until its
		// timeout.
		if ctx.Sender() != nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_UNKNOWN_REQUEST, fmt.Errorf("the node's manager does not answer %T", req)))
		}
	}
}

func (m *manager) spawn(ctx actor.Context, req *rtmsg.SpawnRequest) {
	member := req.Member
	if member == "" {
		// placement.Pick: this node first when it offers the kind, else the
		// least loaded member that does.
		if cands, err := placement.Pick(m.n.MemberInfos(), req.Kind, placement.Requirements{Self: m.n.Address(), Rotate: m.spawned}); err == nil {
			member = cands[0]
		}
		m.spawned++
	}
	if member == "" || !m.n.offers(member, req.Kind) {
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_UNKNOWN_KIND, m.n.unknownKind(req.Kind, req.Member)))
		return
	}
	sender := ctx.Sender()
	f := m.n.remote.SpawnFuture(member, "", req.Kind, 5*time.Second)
	ctx.ReenterAfter(f, func(res any, err error) {
		var reply any
		if r, ok := res.(interface{ GetPid() *actor.PID }); ok && err == nil && r.GetPid() != nil {
			reply = &rtmsg.SpawnReply{Address: r.GetPid().Address, Id: r.GetPid().Id}
		} else {
			if err == nil {
				err = fmt.Errorf("member %s refused to spawn kind %q", member, req.Kind)
			}
			reply = rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_SPAWN_FAILED, err)
		}
		ctx.Send(sender, reply)
	})
}
