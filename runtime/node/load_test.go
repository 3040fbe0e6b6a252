package node

import (
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// A member's load (the machine's figures and its actors by kind) reaches
// the other members with its facts in the cluster's gossip state, and
// follows the member as actors start and stop there; a node's own facts
// are sampled when asked for, also where no other member is.
func TestMembersCarryTheirLoad(t *testing.T) {
	solo := startNode(t, testConfig(t))
	soloLoad := func() *rtmsg.Load { return solo.Members()[0].Info.GetLoad() }
	solo1 := soloLoad()
	a, b := startPair(t)

	var pids []*actor.PID
	for range 2 {
		res := ask(t, a, &rtmsg.SpawnRequest{Kind: echoKind, Member: b.Address()})
		r, ok := res.(*rtmsg.SpawnReply)
		if !ok {
			t.Fatalf("spawn on b answered %v", res)
		}
		pids = append(pids, actor.NewPID(r.Address, r.Id))
	}
	// An actor is counted when it has handled Started, which may come a
	// moment after the spawn's reply.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := b.Info().GetLoad().GetKindActors()[echoKind]
		if got == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b counts %d echo actors, want 2", got)
		}
	}

	// memberLoad waits for a's member list to show b with want echo actors.
	memberLoad := func(want int32) (self, other *rtmsg.Load) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			reply := ask(t, a, &rtmsg.MembersRequest{}).(*rtmsg.MembersReply)
			for _, m := range reply.GetMembers() {
				switch m.GetAddress() {
				case a.Address():
					self = m.GetLoad()
				case b.Address():
					other = m.GetLoad()
				}
			}
			if other.GetKindActors()[echoKind] == want {
				return self, other
			}
			if time.Now().After(deadline) {
				t.Fatalf("a sees b's load %v, want %d echo actors", other, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	self1, other := memberLoad(2)
	if other.Load1 == nil || other.MemoryAvailableBytes == nil || other.GetMemoryAvailableBytes() > b.Info().GetCapabilities().GetMemoryBytes() {
		t.Errorf("b's load lacks the machine's figures: %v", other)
	}
	if self1.GetSampledUnixNano() == 0 || self1.GetKindActors()[echoKind] != 0 {
		t.Errorf("a's own load %v", self1)
	}

	a.System().Root.Stop(pids[0])
	memberLoad(1)

	// Samples are reused for a second (capabilities.DefaultLoadInterval);
	// the lone node's own record must have been sampled anew since it
	// started, with the CPU share measured from the sample before.
	for time.Since(time.Unix(0, solo1.GetSampledUnixNano())) < 1200*time.Millisecond {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * testConfig(t).Cluster.Heartbeat)
	solo2 := soloLoad()
	if solo2.GetSampledUnixNano() <= solo1.GetSampledUnixNano() || solo2.CpuBusy == nil {
		t.Errorf("a lone node's own load was not refreshed: %v, then %v", solo1, solo2)
	}
}
