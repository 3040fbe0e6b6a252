package node

import (
	"context"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/proto"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// The cluster, as a node reads it: who is a member comes from protoactor's
// member list, which the provider (runtime/membership: HTTP polls or etcd
// leases, cluster.provider) alone feeds; what each member is (its
// rtmsg.NodeInfo: capabilities, load, HTTP address) comes from the
// cluster's gossip state, where every node publishes its facts under
// FactsKey every cluster.heartbeat. Members joins the two.
//
// The provider is the one liveness mechanism. protoactor's gossip also
// blocks, for good, a member whose gossip heartbeat it has not heard for
// HeartbeatExpiration (a member the provider still reaches would vanish
// from the member list at the next topology change, and its connections
// be refused): a node configures that expiry as noGossipExpiry, so that it
// never fires. Gossip only carries facts.

// FactsKey is the gossip state key under which a member publishes its
// rtmsg.NodeInfo.
const FactsKey = "frognano.node-info"

// noGossipExpiry is the gossip heartbeat expiry a node configures: never.
// protoactor blocks a member whose heartbeat is older than the expiry, so
// a zero expiry would block every member; the longest duration turns the
// check off (an age can never exceed it).
const noGossipExpiry = time.Duration(math.MaxInt64)

// Member is one live member of the cluster as this node sees it: the
// cluster's member record (id, remoting address, kinds) and the facts
// the member last published in the gossip state.
type Member struct {
	ID    string // actor system id, new for every process
	Host  string // remoting host
	Port  int    // remoting port
	Kinds []string
	// Info is the member's facts as it last gossiped them (this node's
	// own: sampled now); nil while none have reached this node (a member
	// that joined a moment ago). Its address and kinds are the member
	// record's.
	Info *rtmsg.NodeInfo
}

// Address is the member's actor remoting address.
// (host:port as protoactor writes it, PIDs included).
func (m Member) Address() string { return m.Host + ":" + strconv.Itoa(m.Port) }

// watchTopology keeps n.topology as the cluster's member list: every
// change the provider publishes passes through the member list, which
// announces the live set (blocked members taken out) as a ClusterTopology
// event. Subscribed before the cluster starts, it sees the first one.
func (n *Node) watchTopology() {
	n.topologySub = n.system.EventStream.Subscribe(func(ev any) {
		t, ok := ev.(*cluster.ClusterTopology)
		if !ok {
			return
		}
		ms := make([]Member, 0, len(t.Members))
		for _, m := range t.Members {
			ms = append(ms, Member{ID: m.Id, Host: m.Host, Port: int(m.Port), Kinds: slices.Clone(m.Kinds)})
		}
		sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
		n.mu.Lock()
		n.topology = ms
		n.mu.Unlock()
	})
}

// clusterMembers is the cluster's member list without facts.
func (n *Node) clusterMembers() []Member {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.topology)
}

// Members are the live cluster members, this node included, sorted by id,
// each with the facts it gossiped (nil while they have not arrived).
func (n *Node) Members() []Member {
	return joinFacts(n.clusterMembers(), n.gossipedFacts(), n.systemID(), n.Info())
}

// systemID is this node's actor system id ("" before it has one).
func (n *Node) systemID() string {
	if n.system == nil {
		return ""
	}
	return n.system.ID
}

// joinFacts gives each member its facts: self's are own, the others' come
// from facts (by member id). A member without facts keeps a nil Info.
func joinFacts(members []Member, facts map[string]*rtmsg.NodeInfo, self string, own *rtmsg.NodeInfo) []Member {
	for i := range members {
		info := facts[members[i].ID]
		if members[i].ID == self && own != nil {
			info = own
		}
		if info != nil {
			info = proto.Clone(info).(*rtmsg.NodeInfo)
			info.Address, info.Kinds = members[i].Address(), slices.Clone(members[i].Kinds)
		}
		members[i].Info = info
	}
	return members
}

// gossipedFacts reads the other members' facts from the gossip state, by
// member id; nil while the cluster's gossip is not running. This node's
// own entry is skipped: GetState hands out the gossip actor's entries,
// and the actor rewrites this node's own in place at every SetState
// (other members' entries are replaced, never changed), so reading it
// here would race; Members uses Info for this node anyway.
func (n *Node) gossipedFacts() map[string]*rtmsg.NodeInfo {
	n.mu.Lock()
	on := n.gossipOn
	n.mu.Unlock()
	if !on {
		return nil
	}
	state, err := n.cluster.Gossip.GetState(FactsKey)
	if err != nil {
		n.log.Debug("could not read the members' facts from the gossip state", "err", err)
		return nil
	}
	self := n.systemID()
	out := make(map[string]*rtmsg.NodeInfo, len(state))
	for id, kv := range state {
		if id == self {
			continue
		}
		info := &rtmsg.NodeInfo{}
		if err := kv.GetValue().UnmarshalTo(info); err != nil {
			n.log.Debug("ignoring a member's facts that are not a NodeInfo", "member", id, "err", err)
			continue
		}
		out[id] = info
	}
	return out
}

// MemberInfos are Members as node facts, for actors that must not depend
// on this package: each member's gossiped NodeInfo with the address and
// kinds of its member record; a member whose facts have not arrived is a
// NodeInfo with only those (no capabilities: placement.Pick treats it as
// unknown). The manager answers MembersRequest with them;
// rollout.ClusterWorkers and placement pools pick members from them.
func (n *Node) MemberInfos() []*rtmsg.NodeInfo { return nodeInfos(n.Members()) }

func nodeInfos(members []Member) []*rtmsg.NodeInfo {
	out := make([]*rtmsg.NodeInfo, 0, len(members))
	for _, m := range members {
		info := m.Info
		if info == nil {
			info = &rtmsg.NodeInfo{Address: m.Address(), Kinds: m.Kinds}
		}
		out = append(out, info)
	}
	return out
}

// publishFacts sets this node's facts in the gossip state now and every
// cluster.heartbeat until ctx ends, so that its load stays current on the
// other members. Each write is a new version: a member that missed one
// gets the next.
func (n *Node) publishFacts(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(n.cfg.Cluster.Heartbeat)
	defer t.Stop()
	for {
		n.cluster.Gossip.SetState(FactsKey, n.Info())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// startFacts starts publishing this node's facts once the cluster runs.
func (n *Node) startFacts() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.mu.Lock()
	n.gossipOn = true
	n.factsStop, n.factsDone = cancel, done
	n.mu.Unlock()
	go n.publishFacts(ctx, done)
}

// stopFacts ends publishing and reading facts, before the cluster stops.
func (n *Node) stopFacts() {
	n.mu.Lock()
	n.gossipOn = false
	stop, done := n.factsStop, n.factsDone
	n.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	if n.topologySub != nil {
		n.system.EventStream.Unsubscribe(n.topologySub)
	}
}
