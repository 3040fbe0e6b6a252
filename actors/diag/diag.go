// Package diag is the diagnostic actor kind every node offers: it answers
// pings (for liveness and message-rate benchmarks), reports its node's facts,
// and computes iterated SHA-256 digests — CPU work with a checkable answer that
// cluster checks and fault-injection tests spread over nodes. Batches spreads
// them: it answers DigestBatchRequest at the node's manager. NodeOptions
// adds both to a node.
package diag

import (
	"crypto/sha256"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// Kind is the name under which nodes register this actor.
const Kind = "diag"

// MaxRounds bounds a DigestJob so one request cannot pin a core for hours.
const MaxRounds = 1 << 28

// Props builds a diag actor; info returns the current facts of its node.
func Props(info func() *rtmsg.NodeInfo) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &diag{info: info} })
}

type diag struct {
	info func() *rtmsg.NodeInfo
}

func (d *diag) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *rtmsg.Ping:
		ctx.Respond(&rtmsg.Pong{Seq: m.Seq, Node: ctx.ActorSystem().Address(), Payload: m.Payload})
	case *rtmsg.NodeInfoRequest:
		ctx.Respond(d.info())
	case *rtmsg.DigestJob:
		if m.Rounds < 0 || m.Rounds > MaxRounds {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, fmt.Errorf("rounds %d outside [0, %d]", m.Rounds, MaxRounds)))
			return
		}
		ctx.Respond(&rtmsg.DigestResult{Id: m.Id, Digest: Digest(m.Data, m.Rounds), Node: ctx.ActorSystem().Address()})
	}
}

// Digest is SHA-256 applied rounds times (rounds 0 hashes once).
func Digest(data []byte, rounds int64) []byte {
	sum := sha256.Sum256(data)
	for i := int64(0); i < rounds; i++ {
		sum = sha256.Sum256(sum[:])
	}
	return sum[:]
}
