package diag

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
	"github.com/frognano/frognano/runtime/placement"
)

// MaxJobs bounds a DigestBatchRequest.
const MaxJobs = 100000

// NodeOptions returns opts with diag added, as every frognano node has it:
// the diag kind (NodeKind) and the manager's answer to DigestBatchRequest
// (Batches), which `frognano diag digest` and a run's cluster check send.
func NodeOptions(opts node.Options) node.Options {
	opts.Kinds = append([]node.Kind{NodeKind()}, opts.Kinds...)
	opts.Manager = append(slices.Clip(opts.Manager), Batches)
	return opts
}

// NodeKind is the diag kind as a node registers it.
func NodeKind() node.Kind {
	return node.Kind{Name: Kind, Props: func(n *node.Node) *actor.Props { return Props(n.Info) }}
}

// Batches is the node manager's handler of DigestBatchRequest: a child of
// the manager spreads the batch's jobs over the members offering the diag
// kind through a placement pool and answers a DigestBatchReport; the
// digests are left for the asker to check (Digest).
func Batches(n *node.Node, ctx actor.Context) bool {
	req, ok := ctx.Message().(*rtmsg.DigestBatchRequest)
	if !ok {
		return false
	}
	if req.Jobs <= 0 || req.Jobs > MaxJobs || req.Rounds < 0 || req.Rounds > MaxRounds {
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST, fmt.Errorf("jobs must be in [1, %d] and rounds in [0, %d]", MaxJobs, MaxRounds)))
		return true
	}
	requester := ctx.Sender()
	ctx.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &batch{n: n, req: req, requester: requester}
	}))
	return true
}

// batch runs one DigestBatchRequest through a placement pool.
type batch struct {
	n         *node.Node
	req       *rtmsg.DigestBatchRequest
	requester *actor.PID
	pool      *actor.PID
	data      map[string][]byte
	report    *rtmsg.DigestBatchReport
	started   time.Time
}

func (b *batch) Receive(ctx actor.Context) {
	switch res := ctx.Message().(type) {
	case *actor.Started:
		b.started = time.Now()
		b.report = &rtmsg.DigestBatchReport{}
		b.data = map[string][]byte{}
		b.pool = ctx.Spawn(placement.Props(placement.Config{
			Kind:         Kind,
			Members:      b.n.MemberInfos,
			Remote:       b.n.Remote(),
			PreferRemote: b.req.PreferRemote,
			MaxAttempts:  3,
			JobTimeout:   10 * time.Minute,
			Logger:       b.n.Logger().With("component", "placement"),
		}))
		for i := 0; i < int(b.req.Jobs); i++ {
			id := fmt.Sprintf("digest-%d", i)
			var seed [16]byte
			binary.LittleEndian.PutUint64(seed[:8], b.req.Seed)
			binary.LittleEndian.PutUint64(seed[8:], uint64(i))
			sum := sha256.Sum256(seed[:])
			b.data[id] = sum[:]
			ctx.Request(b.pool, &placement.Submit{ID: id, Job: &rtmsg.DigestJob{Id: id, Data: sum[:], Rounds: b.req.Rounds}})
		}
	case *placement.Done:
		out := &rtmsg.DigestOutcome{Id: res.ID, Data: b.data[res.ID], Node: res.Node, Attempts: int32(res.Attempts)}
		if r, ok := res.Result.(*rtmsg.DigestResult); ok {
			out.Digest = r.Digest
		} else {
			out.Error = fmt.Sprintf("unexpected reply %T", res.Result)
		}
		b.add(ctx, out)
	case *placement.Failed:
		b.add(ctx, &rtmsg.DigestOutcome{Id: res.ID, Data: b.data[res.ID], Attempts: int32(res.Attempts), Error: res.Err.Error()})
	}
}

func (b *batch) add(ctx actor.Context, o *rtmsg.DigestOutcome) {
	b.report.Outcomes = append(b.report.Outcomes, o)
	if len(b.report.Outcomes) == int(b.req.Jobs) {
		b.report.Seconds = time.Since(b.started).Seconds()
		ctx.Send(b.requester, b.report)
		ctx.Stop(ctx.Self())
	}
}
