package placement

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// Need says how much a placement cares for a capability.
type Need int

// Needs of a capability.
const (
	Indifferent Need = iota // any member
	Prefer                  // members that have it first, the others after
	Require                 // only members that have it
)

// Requirements are what an actor of a kind needs of the member it is
// placed on, and how the members that qualify are ordered.
type Requirements struct {
	// Containerd: the member reports a reachable containerd (sandboxes).
	Containerd Need
	// GPU: the member reports at least one GPU (the Learner's kernels).
	GPU Need
	// MinMemoryAvailable: the member's MemAvailable, where it reports one,
	// is at least this many bytes (a model to load).
	MinMemoryAvailable uint64
	// Exclude: members (remoting addresses) not to use, e.g. those that
	// failed this work already.
	Exclude []string
	// Self is the asking node's address; PreferRemote puts it last,
	// otherwise it comes first among equals (no network hop).
	Self         string
	PreferRemote bool
	// Rotate spreads work over equally good members: the k-th placement
	// starts at the k-th of them (a counter the caller increments).
	Rotate uint64
}

// Pick is the one placement rule of the cluster: the members (addresses)
// that offer kind and meet r, best first. Members that lack a preferred
// capability come after those that have it; among the rest, the asking
// node comes first (last with PreferRemote), then members with fewer
// running actors of the kind (their load as they last gossiped it), then
// the least busy CPU; the members tied for best are rotated by r.Rotate
// so that a burst of placements spreads. No member: an error that wraps
// ErrUnknownKind when none offers the kind at all, and names what the
// others lacked otherwise.
//
// A member whose facts have not arrived (no capabilities: it joined a
// moment ago and its gossip has not reached this node) is refused where r
// requires containerd, a GPU or free memory; where r prefers one it comes
// after the members known to have it and before those known to lack it;
// otherwise it is ranked as an idle member (it has just joined).
func Pick(members []*rtmsg.NodeInfo, kind string, r Requirements) ([]string, error) {
	type cand struct {
		addr   string
		class  int // unmet preferences and the self rule: lower is better
		actors int32
		busy   float64
	}
	var (
		cands   []cand
		offered []string
		why     []string
	)
	for _, m := range members {
		offered = append(offered, m.GetKinds()...)
		addr := m.GetAddress()
		if !slices.Contains(m.GetKinds(), kind) {
			continue
		}
		caps, load := m.GetCapabilities(), m.GetLoad()
		hasCtrd, hasGPU := caps.GetContainerd(), len(caps.GetGpus()) > 0
		unknown := caps == nil
		switch {
		case slices.Contains(r.Exclude, addr):
			why = append(why, addr+": excluded after a failure")
			continue
		case unknown && (r.Containerd == Require || r.GPU == Require || r.MinMemoryAvailable > 0):
			why = append(why, addr+": its facts have not arrived yet")
			continue
		case r.Containerd == Require && !hasCtrd:
			why = append(why, addr+": no containerd")
			continue
		case r.GPU == Require && !hasGPU:
			why = append(why, addr+": no GPU")
			continue
		case r.MinMemoryAvailable > 0 && load != nil && load.MemoryAvailableBytes != nil && load.GetMemoryAvailableBytes() < r.MinMemoryAvailable:
			why = append(why, fmt.Sprintf("%s: %d MiB available, %d needed", addr, load.GetMemoryAvailableBytes()>>20, r.MinMemoryAvailable>>20))
			continue
		}
		c := cand{addr: addr, actors: load.GetKindActors()[kind], busy: load.GetCpuBusy()}
		switch {
		case unknown:
			// It may have what is preferred: after the members known to
			// have it, before those known to lack it.
			if r.Containerd == Prefer || r.GPU == Prefer {
				c.class += 2
			}
		default:
			if r.Containerd == Prefer && !hasCtrd {
				c.class += 4
			}
			if r.GPU == Prefer && !hasGPU {
				c.class += 4
			}
		}
		if r.Self != "" && (addr == r.Self) == r.PreferRemote {
			c.class++
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		sort.Strings(offered)
		offered = slices.Compact(offered)
		if !slices.Contains(offered, kind) {
			return nil, fmt.Errorf("%w %q: no live member offers it (kinds offered: %s)", ErrUnknownKind, kind, strings.Join(offered, ", "))
		}
		return nil, fmt.Errorf("placement: no live member that offers kind %q qualifies (%s)", kind, strings.Join(why, "; "))
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.class != b.class {
			return a.class < b.class
		}
		if a.actors != b.actors {
			return a.actors < b.actors
		}
		if a.busy != b.busy {
			return a.busy < b.busy
		}
		return a.addr < b.addr
	})
	// The best are those of the first class with the fewest actors.
	tied := 1
	for tied < len(cands) && cands[tied].class == cands[0].class && cands[tied].actors == cands[0].actors {
		tied++
	}
	if tied > 1 {
		k := int(r.Rotate % uint64(tied))
		best := append(slices.Clone(cands[k:tied]), cands[:k]...)
		copy(cands, best)
	}
	out := make([]string, len(cands))
	for i, c := range cands {
		out[i] = c.addr
	}
	return out, nil
}
