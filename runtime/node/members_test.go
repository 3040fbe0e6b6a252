package node

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/frognano/frognano/runtime/membership"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/placement"
)

// member is n's view of the member at addr (ok false: not listed).
func member(n *Node, addr string) (Member, bool) {
	for _, m := range n.Members() {
		if m.Address() == addr {
			return m, true
		}
	}
	return Member{}, false
}

// waitFacts waits until n's member list shows the member at addr with
// facts that satisfy ok.
func waitFacts(t *testing.T, n *Node, addr string, what string, ok func(*rtmsg.NodeInfo) bool) *rtmsg.NodeInfo {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, listed := member(n, addr)
		if listed && m.Info != nil && ok(m.Info) {
			return m.Info
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: node %s sees member %s (listed %v) with facts %v", what, n.ID(), addr, listed, m.Info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMemberFactsArriveByGossip: what a node is (its id, capabilities,
// HTTP address, load) reaches the other members through the cluster's
// gossip state (the provider's records carry none), follows the node as
// its load changes, and placement.Pick over the member list read from the
// cluster places work by it.
func TestMemberFactsArriveByGossip(t *testing.T) {
	cfgA := testConfig(t)
	cfgA.Node.ID = "node-a"
	a := startNode(t, cfgA)
	cfgB := testConfig(t)
	cfgB.Node.ID, cfgB.Cluster.Seeds = "node-b", []string{a.HTTPAddr()}
	b := startNode(t, cfgB)
	cfgC := testConfig(t)
	cfgC.Node.ID, cfgC.Cluster.Seeds = "node-c", []string{a.HTTPAddr()}
	c := startNode(t, cfgC)
	waitMembers(t, 3, a, b, c)

	// The provider's records are addresses and kinds only.
	_, view := get(t, "http://"+a.HTTPAddr()+"/cluster/v1/members")
	for _, fact := range []string{"capabilities", "node_info", "load"} {
		if strings.Contains(view, fact) {
			t.Errorf("the provider's member view carries %q: %s", fact, view)
		}
	}

	bFacts := b.Info()
	got := waitFacts(t, a, b.Address(), "b's facts", func(i *rtmsg.NodeInfo) bool { return i.GetId() == "node-b" })
	if got.GetCapabilities().GetCores() != bFacts.GetCapabilities().GetCores() || got.GetCapabilities().GetMemoryBytes() != bFacts.GetCapabilities().GetMemoryBytes() ||
		got.GetHttpAddress() != b.HTTPAddr() || got.GetStartedUnixNano() != bFacts.GetStartedUnixNano() || got.GetLoad().GetSampledUnixNano() == 0 ||
		!slices.Contains(got.GetKinds(), echoKind) {
		t.Errorf("a sees b's facts %v; b's own are %v", got, bFacts)
	}
	if self, _ := member(a, a.Address()); self.Info.GetId() != "node-a" {
		t.Errorf("a's own entry: %v", self.Info)
	}

	// b's load changes: two echo actors start there, then one stops.
	var pids []*actor.PID
	for range 2 {
		r, ok := ask(t, a, &rtmsg.SpawnRequest{Kind: echoKind, Member: b.Address()}).(*rtmsg.SpawnReply)
		if !ok {
			t.Fatal("spawn on b refused")
		}
		pids = append(pids, actor.NewPID(r.Address, r.Id))
	}
	echoes := func(n int32) func(*rtmsg.NodeInfo) bool {
		return func(i *rtmsg.NodeInfo) bool { return i.GetLoad().GetKindActors()[echoKind] == n }
	}
	waitFacts(t, a, b.Address(), "b's two echo actors", echoes(2))
	waitFacts(t, c, b.Address(), "b's two echo actors, on c", echoes(2))

	// Placement over the cluster's members: asked from a for another
	// member, the one without echo actors (c) comes before b; GPU
	// preferred (none has one) changes nothing.
	for _, r := range []placement.Requirements{
		{Self: a.Address(), PreferRemote: true},
		{Self: a.Address(), PreferRemote: true, GPU: placement.Prefer},
	} {
		order, err := placement.Pick(a.MemberInfos(), echoKind, r)
		if want := []string{c.Address(), b.Address(), a.Address()}; err != nil || !slices.Equal(order, want) {
			t.Errorf("Pick(%+v) = %v %v, want %v", r, order, err, want)
		}
	}

	a.System().Root.Stop(pids[0])
	a.System().Root.Stop(pids[1])
	waitFacts(t, a, b.Address(), "b's echo actors stopped", echoes(0))
	// With b's load back to c's, the two take turns.
	seen := map[string]bool{}
	for rot := range uint64(2) {
		order, err := placement.Pick(a.MemberInfos(), echoKind, placement.Requirements{Self: a.Address(), PreferRemote: true, Rotate: rot})
		if err != nil {
			t.Fatal(err)
		}
		seen[order[0]] = true
	}
	if !seen[b.Address()] || !seen[c.Address()] {
		t.Errorf("b and c with equal loads: first picks %v, want both", seen)
	}
}

// TestTheProviderAloneSaysWhoIsAlive: a member whose gossip falls silent
// stays a member while the provider reaches it (protoactor's gossip
// heartbeat expiry, 2 s under the old configuration, would have blocked
// it for good), also across topology changes; a member leaves the member
// list when, and only when, the provider drops it, whether it stops
// answering the provider while its gossip goes on or stops altogether.
func TestTheProviderAloneSaysWhoIsAlive(t *testing.T) {
	a, b := startPair(t)
	waitFacts(t, a, b.Address(), "b's facts", func(i *rtmsg.NodeInfo) bool { return i.GetCapabilities() != nil })
	bID := b.System().ID

	// b's gossip stops: no heartbeat, no facts; its provider still answers.
	if err := b.System().Root.StopFuture(actor.NewPID(b.Address(), cluster.DefaultGossipActorName)).Wait(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3*a.cfg.Cluster.FailureTimeout + time.Second)
	cfgC := testConfig(t)
	cfgC.Cluster.Seeds = []string{a.HTTPAddr()}
	c := startNode(t, cfgC)
	// A topology change on a (c joins) is when a blocked member would drop
	// out of its member list.
	waitMembers(t, 3, a)
	if _, ok := member(a, b.Address()); !ok {
		t.Fatal("b left a's member list while the provider still reached it")
	}
	if a.cluster.Remote.BlockList().IsBlocked(bID) {
		t.Fatal("a blocked b while the provider still reached it")
	}

	// gone follows x on a until it leaves a's member list, checking at
	// every step that a's member list (read first) lists x whenever the
	// provider (read second) does: the member list never drops a member
	// the provider still has.
	gone := func(x *Node, what string) {
		t.Helper()
		id := x.System().ID
		deadline := time.Now().Add(3*a.cfg.Cluster.FailureTimeout + 5*time.Second)
		for {
			inCluster := slices.ContainsFunc(a.Members(), func(m Member) bool { return m.ID == id })
			inProvider := slices.ContainsFunc(a.membership.Members(), func(m membership.Member) bool { return m.ID == id })
			if !inCluster && inProvider {
				t.Fatalf("%s: a's member list dropped it while the provider still lists it", what)
			}
			if !inCluster {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still a member of a after %v", what, 3*a.cfg.Cluster.FailureTimeout+5*time.Second)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// c stops answering the provider; its remoting and gossip go on.
	if err := c.http.Close(); err != nil {
		t.Fatal(err)
	}
	gone(c, "c, silent to the provider")
	if _, ok := member(a, b.Address()); !ok {
		t.Fatal("b, gossip silent, left a's member list when c left")
	}

	// b stops.
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	gone(b, "b, stopped")
	waitMembers(t, 1, a)
}

// TestMembersJoinTheirFacts: the member list is the cluster's records,
// each with the facts gossiped under its id (address and kinds always the
// record's), this node's own from itself, nil for a member whose facts
// have not arrived; MemberInfos gives that member address and kinds only,
// and Pick does not place work that needs free memory there.
func TestMembersJoinTheirFacts(t *testing.T) {
	members := []Member{
		{ID: "self", Host: "h", Port: 1, Kinds: []string{"w"}},
		{ID: "b", Host: "h", Port: 2, Kinds: []string{"w"}},
		{ID: "new", Host: "h", Port: 3, Kinds: []string{"w"}},
	}
	facts := map[string]*rtmsg.NodeInfo{
		"self": {Id: "stale-self"},
		"b":    {Id: "node-b", Address: "elsewhere:9", Kinds: []string{"x"}, Capabilities: &rtmsg.Capabilities{Cores: 4}},
		"gone": {Id: "node-gone", Capabilities: &rtmsg.Capabilities{Cores: 4}},
	}
	got := joinFacts(members, facts, "self", &rtmsg.NodeInfo{Id: "node-self", Capabilities: &rtmsg.Capabilities{Cores: 2}})
	if len(got) != 3 {
		t.Fatalf("%d members, want 3", len(got))
	}
	if i := got[0].Info; i.GetId() != "node-self" || i.GetAddress() != "h:1" {
		t.Errorf("own entry %v", i)
	}
	if i := got[1].Info; i.GetId() != "node-b" || i.GetAddress() != "h:2" || !slices.Equal(i.GetKinds(), []string{"w"}) {
		t.Errorf("b's entry %v: want its facts under its record's address and kinds", i)
	}
	if facts["b"].GetAddress() != "elsewhere:9" {
		t.Errorf("joining changed the gossiped facts themselves: %v", facts["b"])
	}
	if got[2].Info != nil {
		t.Errorf("a member without gossiped facts has %v", got[2].Info)
	}
	infos := nodeInfos(got)
	if i := infos[2]; i.GetAddress() != "h:3" || !slices.Equal(i.GetKinds(), []string{"w"}) || i.GetCapabilities() != nil {
		t.Errorf("MemberInfos of a member without facts: %v", i)
	}
	order, err := placement.Pick(infos, "w", placement.Requirements{})
	if want := []string{"h:1", "h:2", "h:3"}; err != nil || !slices.Equal(order, want) {
		t.Errorf("Pick = %v %v, want %v", order, err, want)
	}
	if order, err := placement.Pick(infos, "w", placement.Requirements{MinMemoryAvailable: 1}); err != nil || slices.Contains(order, "h:3") {
		t.Errorf("Pick needing memory = %v %v: the member without facts qualified", order, err)
	}
}

// TestAMemberSeenGoneStaysGone: a member the provider dropped (silent for
// longer than the failure timeout) that answers again under the same id
// stays out of the provider's members as well as the cluster's, which
// blocks that id for good: the two never disagree, and the member must
// restart (a new id) to rejoin.
func TestAMemberSeenGoneStaysGone(t *testing.T) {
	var silent atomic.Bool
	var peer *counter
	peer = newCounter(t, "127.0.0.1", func(w http.ResponseWriter) {
		if silent.Load() {
			http.Error(w, "paused", http.StatusServiceUnavailable)
			return
		}
		host, port, _ := net.SplitHostPort(peer.addr)
		p, _ := strconv.Atoi(port)
		self := membership.Member{ID: "paused-peer", Cluster: "frognano", Host: host, Port: p, HTTP: peer.addr, Kinds: []string{echoKind}}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"self": self, "members": []membership.Member{self}})
	})
	cfg := testConfig(t)
	cfg.Cluster.Seeds = []string{peer.addr}
	n := startNode(t, cfg)
	listed := func() (inCluster, inProvider bool) {
		inCluster = slices.ContainsFunc(n.Members(), func(m Member) bool { return m.ID == "paused-peer" })
		inProvider = slices.ContainsFunc(n.membership.Members(), func(m membership.Member) bool { return m.ID == "paused-peer" })
		return
	}
	wait := func(want bool, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			c, p := listed()
			if c == want && p == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the peer in the cluster's members %v, in the provider's %v; want %v", what, c, p, want)
			}
		}
	}
	wait(true, "joined")
	silent.Store(true)
	wait(false, "silent")
	polls := len(peer.seen())
	silent.Store(false)
	time.Sleep(3 * cfg.Cluster.FailureTimeout)
	if c, p := listed(); c || p {
		t.Fatalf("answering again: the peer in the cluster's members %v, in the provider's %v; want neither", c, p)
	}
	if len(peer.seen()) <= polls {
		t.Fatal("the peer was not polled again (the test proves nothing)")
	}
}
