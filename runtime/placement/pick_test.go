package placement

import (
	"errors"
	"strings"
	"testing"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

func u64(v uint64) *uint64   { return &v }
func f64(v float64) *float64 { return &v }

// TestPick is the cluster's one placement rule, case by case.
func TestPick(t *testing.T) {
	ctrd := &rtmsg.Capabilities{Containerd: true}
	none := &rtmsg.Capabilities{} // a member that reports neither
	gpu := &rtmsg.Capabilities{Containerd: true, Gpus: []*rtmsg.GPU{{Name: "H200"}}}
	load := func(actors int32, busy float64, avail uint64) *rtmsg.Load {
		return &rtmsg.Load{KindActors: map[string]int32{"w": actors}, CpuBusy: f64(busy), MemoryAvailableBytes: u64(avail)}
	}
	members := []*rtmsg.NodeInfo{
		{Address: "a:1", Kinds: []string{"w"}, Capabilities: ctrd, Load: load(3, 0.1, 8<<30)},
		{Address: "b:1", Kinds: []string{"w"}, Capabilities: none, Load: load(0, 0.9, 8<<30)},
		{Address: "c:1", Kinds: []string{"w", "x"}, Capabilities: gpu, Load: load(1, 0.5, 1<<30)},
		{Address: "d:1", Kinds: []string{"w"}, Capabilities: ctrd, Load: load(1, 0.2, 16<<30)},
		{Address: "e:1", Kinds: []string{"x"}, Capabilities: gpu},
	}
	for _, c := range []struct {
		name string
		r    Requirements
		want string
	}{
		{"fewest actors of the kind first, then the least busy CPU", Requirements{}, "b:1 d:1 c:1 a:1"},
		{"containerd preferred: members without it last", Requirements{Containerd: Prefer}, "d:1 c:1 a:1 b:1"},
		{"containerd required", Requirements{Containerd: Require}, "d:1 c:1 a:1"},
		{"a GPU required", Requirements{GPU: Require}, "c:1"},
		{"a GPU preferred", Requirements{GPU: Prefer}, "c:1 b:1 d:1 a:1"},
		{"memory available", Requirements{MinMemoryAvailable: 4 << 30}, "b:1 d:1 a:1"},
		{"excluded members", Requirements{Exclude: []string{"b:1", "d:1"}}, "c:1 a:1"},
		{"the asking node first", Requirements{Self: "a:1"}, "a:1 b:1 d:1 c:1"},
		{"the asking node last", Requirements{Self: "b:1", PreferRemote: true}, "d:1 c:1 a:1 b:1"},
	} {
		got, err := Pick(members, "w", c.r)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("%s: %v %v, want %s", c.name, got, err, c.want)
		}
	}
	// Members tied for best are taken in turn.
	tied := []*rtmsg.NodeInfo{
		{Address: "a:1", Kinds: []string{"w"}, Capabilities: none}, {Address: "b:1", Kinds: []string{"w"}, Capabilities: none},
		{Address: "c:1", Kinds: []string{"w"}, Capabilities: none, Load: load(2, 0, 0)},
	}
	for rot, want := range []string{"a:1 b:1 c:1", "b:1 a:1 c:1", "a:1 b:1 c:1"} {
		if got, _ := Pick(tied, "w", Requirements{Rotate: uint64(rot)}); strings.Join(got, " ") != want {
			t.Errorf("rotation %d: %v, want %s", rot, got, want)
		}
	}
	// No member: say why.
	if _, err := Pick(members, "nope", Requirements{}); !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), "kinds offered: w, x") {
		t.Errorf("unknown kind: %v", err)
	}
	_, err := Pick(members, "x", Requirements{Exclude: []string{"c:1", "e:1"}})
	if err == nil || errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), "c:1: excluded after a failure") {
		t.Errorf("no qualifying member: %v", err)
	}
	// e:1 reports no memory figure: it is not refused for lacking one.
	if got, err := Pick(members, "x", Requirements{MinMemoryAvailable: 1 << 40}); err != nil || strings.Join(got, " ") != "e:1" {
		t.Errorf("a member without a memory figure: %v %v", got, err)
	}
}

// TestPickAMemberWithoutFacts: a member listed by the cluster before its
// gossiped facts reached this node (address and kinds only) is refused
// where a capability or free memory is required, comes after the members
// known to have a preferred capability and before those known to lack it,
// and counts as idle where nothing is preferred.
func TestPickAMemberWithoutFacts(t *testing.T) {
	busy := &rtmsg.Load{KindActors: map[string]int32{"w": 5}, CpuBusy: f64(0.99), MemoryAvailableBytes: u64(8 << 30)}
	members := []*rtmsg.NodeInfo{
		{Address: "new:1", Kinds: []string{"w"}},
		{Address: "known:1", Kinds: []string{"w"}, Capabilities: &rtmsg.Capabilities{Containerd: true, Gpus: []*rtmsg.GPU{{Name: "H200"}}}, Load: busy},
		{Address: "bare:1", Kinds: []string{"w"}, Capabilities: &rtmsg.Capabilities{}, Load: busy},
	}
	for _, c := range []struct {
		name string
		r    Requirements
		want string
	}{
		{"indifferent: an idle member", Requirements{}, "new:1 bare:1 known:1"},
		{"indifferent, asked from another member", Requirements{Self: "known:1"}, "known:1 new:1 bare:1"},
		{"indifferent, another member preferred", Requirements{Self: "known:1", PreferRemote: true}, "new:1 bare:1 known:1"},
		{"containerd preferred: after those that have it, before those known to lack it", Requirements{Containerd: Prefer}, "known:1 new:1 bare:1"},
		{"a GPU preferred", Requirements{GPU: Prefer}, "known:1 new:1 bare:1"},
		{"containerd required", Requirements{Containerd: Require}, "known:1"},
		{"a GPU required", Requirements{GPU: Require}, "known:1"},
		{"memory required", Requirements{MinMemoryAvailable: 1 << 20}, "bare:1 known:1"},
	} {
		got, err := Pick(members, "w", c.r)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("%s: %v %v, want %s", c.name, got, err, c.want)
		}
	}
	_, err := Pick(members[:1], "w", Requirements{Containerd: Require})
	if err == nil || !strings.Contains(err.Error(), "new:1: its facts have not arrived yet") {
		t.Errorf("only a member without facts, containerd required: %v", err)
	}
	if got, err := Pick(members[:1], "w", Requirements{}); err != nil || strings.Join(got, " ") != "new:1" {
		t.Errorf("only a member without facts, nothing required: %v %v", got, err)
	}
}
