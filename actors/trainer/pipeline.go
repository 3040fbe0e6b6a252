package trainer

// Asynchronous steps with bounded staleness (Settings.MaxStaleness > 0).
//
// A producer goroutine plays the steps' batches and rollouts in order
// (produce) while the loop hands finished steps to the Learner in order
// (consume): the rollouts of step k+1 start as soon as step k's are done,
// so they run while the Learner trains on step k. The producer holds a
// token for every step it has started and the loop has not yet recorded;
// there are MaxStaleness+1 tokens, and each one the loop gives back
// carries the policy version it has just recorded. A step's rollouts
// therefore start at least at the version of the step MaxStaleness+1
// before it and ask the Sampler for at least that version
// (rollout.Request.PolicyVersion), and when the Learner trains on it, at
// most MaxStaleness updates have happened since: by construction no
// group is too old. The staleness filter (filterStale) still checks every
// group against the Learner's version when it is handed over, drops and
// counts one that is too old (a Sampler that served an older version than
// asked, a policy that reports its own versions) and records every
// group's staleness; nothing stale is trained on silently.
//
// The Sampler applies a publication as soon as the loop hands it on (swap,
// once the step's LearnerStep names it), between two of its
// continuations: an episode in flight may take later turns at a newer
// version. Each assistant turn records the version that
// sampled all of its tokens (Turn.policy_version), each token its
// sampler's log-prob (the behaviour policy of the GRPO ratio, under the
// Learner's trust region as in synchronous steps), and a trajectory's
// policy_version is its first, oldest, turn's, which is what staleness
// is measured from.
//
// Durability is the synchronous loop's: the record is written after each
// step, in order, by the loop alone. A run killed with steps produced but
// not recorded plays them again on resume: their stored trajectories stay
// in the store, unused and uncounted; the replay's episodes take other
// seeds (stepSeed), so no trajectory id is used twice; the frontier
// records each step's outcomes once (OutcomesReport.step). On one node
// rollouts and learning share the cores; on a cluster the Sampler and the
// SandboxWorkers run where the node placed them, the Learner on its own.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Keys of a step's curve point metrics about staleness.
const (
	PointStaleDropped = "stale_groups_dropped"
	PointMaxStaleness = "max_staleness_seen"
)

// staleness is what filterStale found in a step's groups.
type staleness struct {
	Kept, Dropped []*messages.TrajectoryGroup
	// Ages are the kept groups' staleness, in versions, in group order;
	// Max the largest of every group's, dropped ones included.
	Ages []int64
	Max  int64
}

// groupVersion is the oldest policy version that sampled a token of the
// group (its assistant turns' versions); ok is false when no policy
// sampled any of its tokens (episodes that ended before their first turn).
func groupVersion(g *messages.TrajectoryGroup) (v int64, ok bool) {
	v = math.MaxInt64
	for _, tr := range g.GetTrajectories() {
		for _, turn := range tr.GetTurns() {
			if turn.GetRole() == records.Role_ROLE_ASSISTANT {
				v, ok = min(v, turn.GetPolicyVersion()), true
			}
		}
	}
	return v, ok
}

// filterStale drops the groups whose oldest token is more than
// maxStaleness versions older than version, the one the Learner will
// train at (maxStaleness 0: synchronous steps, nothing dropped; the ages
// are still measured and recorded).
func filterStale(groups []*messages.TrajectoryGroup, version int64, maxStaleness int) staleness {
	var st staleness
	for _, g := range groups {
		v, ok := groupVersion(g)
		if !ok {
			v = version
		}
		age := max(version-v, 0)
		st.Max = max(st.Max, age)
		if maxStaleness > 0 && age > int64(maxStaleness) {
			st.Dropped = append(st.Dropped, g)
			continue
		}
		st.Kept = append(st.Kept, g)
		st.Ages = append(st.Ages, age)
	}
	return st
}

// mixedVersions says whether an episode was sampled by more than one
// policy version: turns of different versions, or a turn in flight when
// the Sampler swapped weights.
func mixedVersions(tr *records.Trajectory) bool {
	var vs []int64
	for _, turn := range tr.GetTurns() {
		if turn.GetRole() != records.Role_ROLE_ASSISTANT {
			continue
		}
		if last := turn.GetLastPolicyVersion(); last != 0 && last != turn.GetPolicyVersion() {
			return true // the Sampler swapped weights within the turn
		}
		if !slices.Contains(vs, turn.GetPolicyVersion()) {
			vs = append(vs, turn.GetPolicyVersion())
		}
	}
	return len(vs) > 1
}

// produced is the producer's answer for one step.
type produced struct {
	p   *prepared
	err error
}

// pipeline runs the run's remaining steps asynchronously (see the top of
// this file). It returns when every step is recorded, the budget is spent,
// or a step fails; the producer has stopped by then.
func (t *Trainer) pipeline(ctx context.Context, run *records.Run, s Settings, lim harness.Limits) error {
	first := int(run.GetStep()) + 1
	if first > s.Steps {
		return nil
	}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait() // no episode of this run outlives the loop
	}()
	tokens := make(chan int64, s.MaxStaleness+1)
	for range cap(tokens) {
		tokens <- int64(run.Metrics[MetricPolicyVersion])
	}
	t.evalSeconds.Store(math.Float64bits(run.Metrics[MetricEvalSeconds]))
	out := make(chan produced, s.MaxStaleness+1)
	runID := run.GetId()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(out)
		for step := first; step <= s.Steps; step++ {
			var version int64
			select {
			case version = <-tokens:
			case <-pctx.Done():
				return
			}
			// No step starts once the budget is spent (BudgetSpent's test,
			// on the clock and the evaluation time the loop last recorded).
			if s.BudgetSeconds > 0 && t.clock.wall()-math.Float64frombits(t.evalSeconds.Load()) >= s.BudgetSeconds {
				return
			}
			p, err := t.produce(pctx, runID, s, lim, step, version)
			select {
			case out <- produced{p, err}:
			case <-pctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for step := first; step <= s.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The producer decides when the budget stops the run: a step whose
		// rollouts began before it was spent is under way and finishes.
		t.clock.tick(run)
		var it produced
		var ok bool
		select {
		case it, ok = <-out:
		case <-ctx.Done():
			return ctx.Err()
		}
		if !ok { // the producer saw the budget spent, or ctx ended
			t.clock.tick(run)
			return ctx.Err()
		}
		if it.err == nil && it.p.step != step {
			it.err = fmt.Errorf("the producer made step %d", it.p.step)
		}
		if it.err == nil {
			it.err = t.consume(ctx, run, s, lim, it.p)
		}
		if it.err != nil {
			return fmt.Errorf("step %d: %w", step, it.err)
		}
		tokens <- int64(run.Metrics[MetricPolicyVersion])
	}
	return nil
}
