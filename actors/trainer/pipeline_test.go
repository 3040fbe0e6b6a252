package trainer

import (
	"slices"
	"testing"

	messages "github.com/frognano/frognano/actors/messages/v1"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// group is a group of task id whose episodes' assistant turns were
// sampled by the given versions (one episode per slice).
func group(id string, episodes ...[]int64) *messages.TrajectoryGroup {
	g := &messages.TrajectoryGroup{TaskId: id}
	for _, vs := range episodes {
		tr := &records.Trajectory{TaskId: id, Turns: []*records.Turn{{Role: records.Role_ROLE_SYSTEM}, {Role: records.Role_ROLE_USER}}}
		for i, v := range vs {
			if i == 0 {
				tr.PolicyVersion = v
			}
			tr.Turns = append(tr.Turns, &records.Turn{Role: records.Role_ROLE_ASSISTANT, PolicyVersion: v}, &records.Turn{Role: records.Role_ROLE_TOOL})
		}
		g.Trajectories = append(g.Trajectories, tr)
	}
	return g
}

func taskIDs(gs []*messages.TrajectoryGroup) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.GetTaskId())
	}
	return out
}

// TestStaleGroupsDroppedAndCounted: at version 10 with at most 3
// versions of staleness, a group of v6 (4 behind) is dropped and counted,
// one of v7 (3 behind) kept; a group is as old as its oldest token, so an
// episode begun at v6 whose later turns are v9 makes its group stale; a
// group without any policy turn is of no age; with 0 (synchronous steps)
// nothing is dropped but the ages are still measured.
func TestStaleGroupsDroppedAndCounted(t *testing.T) {
	groups := []*messages.TrajectoryGroup{
		group("fresh", []int64{10}, []int64{10}),
		group("three", []int64{7}, []int64{8}),
		group("four", []int64{6}, []int64{6}),
		group("mixed", []int64{9}, []int64{6, 9, 9}),
		group("noturn", nil, nil),
		group("newer", []int64{11}, []int64{10}), // a newer sampler than the Learner: age 0, not negative
	}
	st := filterStale(groups, 10, 3)
	if got, want := taskIDs(st.Kept), []string{"fresh", "three", "noturn", "newer"}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	if got, want := taskIDs(st.Dropped), []string{"four", "mixed"}; !slices.Equal(got, want) {
		t.Fatalf("dropped %v, want %v", got, want)
	}
	if !slices.Equal(st.Ages, []int64{0, 3, 0, 0}) || st.Max != 4 {
		t.Fatalf("ages %v max %d, want [0 3 0 0] and 4", st.Ages, st.Max)
	}
	// Every group is either trained on or counted as dropped.
	if len(st.Kept)+len(st.Dropped) != len(groups) {
		t.Fatalf("%d kept + %d dropped of %d groups", len(st.Kept), len(st.Dropped), len(groups))
	}
	sync := filterStale(groups, 10, 0)
	if len(sync.Kept) != len(groups) || len(sync.Dropped) != 0 || sync.Max != 4 {
		t.Fatalf("synchronous: kept %d dropped %d max %d", len(sync.Kept), len(sync.Dropped), sync.Max)
	}
	if !mixedVersions(groups[3].Trajectories[1]) || mixedVersions(groups[1].Trajectories[0]) {
		t.Fatalf("mixed-version episodes misread")
	}
	// One turn in flight at a Sampler swap (actors/sampler's default)
	// is sampled by two versions; its first is its age.
	crossed := group("crossed", []int64{5})
	crossed.Trajectories[0].Turns[2].LastPolicyVersion = 8
	if !mixedVersions(crossed.Trajectories[0]) {
		t.Fatal("a turn sampled across a swap is not counted as mixed")
	}
	if st := filterStale([]*messages.TrajectoryGroup{crossed}, 10, 3); len(st.Dropped) != 1 || st.Max != 5 {
		t.Fatalf("a turn begun at v5 and ended at v8, at v10: dropped %d, age %d; want dropped, age 5", len(st.Dropped), st.Max)
	}
}

// TestStepSeeds: the first process's seeds are the synchronous loop's;
// a replay after a crash keeps the batch's seed and gives the episodes
// new ones, different for every attempt and step.
func TestStepSeeds(t *testing.T) {
	s := validSettings()
	s.Seed = 7
	b1, e1 := stepSeed(s, 3, 1)
	three := uint64(3)
	if b1 != 7^three*0x9e3779b97f4a7c15 || e1 != b1 {
		t.Fatalf("first attempt: batch %x episodes %x", b1, e1)
	}
	seen := map[uint64]bool{e1: true}
	for attempt := 2; attempt < 6; attempt++ {
		for step := 1; step < 5; step++ {
			b, e := stepSeed(s, step, attempt)
			if want, _ := stepSeed(s, step, 1); b != want {
				t.Fatalf("attempt %d step %d: batch seed moved", attempt, step)
			}
			if seen[e] {
				t.Fatalf("attempt %d step %d: episode seed %x used before", attempt, step, e)
			}
			seen[e] = true
		}
	}
}
