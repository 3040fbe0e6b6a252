package frontier

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Band names of FrontierBand.
const (
	BandRetiredMastered = "retired_mastered"
	BandRetiredHopeless = "retired_hopeless"
	BandTooHard         = "too_hard"
	BandFrontier        = "frontier"
	BandTooEasy         = "too_easy"
)

// poolBands counts the pool by band of posterior mean, each band also by
// hint level (byHint[band][level]), and counts active tasks per synthesis
// setting.
func (e *Estimator) poolBands(st *records.FrontierState) (bands map[string]int, byHint map[string]map[int]int, perSpec map[string]int, active int, untried []float64) {
	bands = map[string]int{}
	byHint = map[string]map[int]int{}
	perSpec = map[string]int{}
	count := func(band string, hint int) {
		bands[band]++
		if byHint[band] == nil {
			byHint[band] = map[int]int{}
		}
		byHint[band][hint]++
	}
	for _, id := range e.ids {
		pt := e.pool[id]
		ts := e.stats[id]
		if ts.GetRetired() {
			if ts.GetRetiredReason() == Mastered {
				count(BandRetiredMastered, pt.f.HintLevel)
			} else {
				count(BandRetiredHopeless, pt.f.HintLevel)
			}
			continue
		}
		active++
		perSpec[pt.spec]++
		a, b := e.posterior(st.Model, ts, playedIn(st, pt.f), st.PolicyVersion)
		mean := a / (a + b)
		if ts.GetAttempts() == 0 {
			untried = append(untried, mean)
		}
		switch {
		case mean < e.p.BandLow:
			count(BandTooHard, pt.f.HintLevel)
		case mean > e.p.BandHigh:
			count(BandTooEasy, pt.f.HintLevel)
		default:
			count(BandFrontier, pt.f.HintLevel)
		}
	}
	return bands, byHint, perSpec, active, untried
}

// environments the synthesis control may ask for: the configured ones, else
// those of the pool, else the caller's.
func (e *Estimator) environments(fallback []string) []string {
	if len(e.p.Environments) > 0 {
		return e.p.Environments
	}
	seen := map[string]bool{}
	var envs []string
	for _, id := range e.ids {
		if env := e.pool[id].f.Environment; env != "" && !seen[env] {
			seen[env] = true
			envs = append(envs, env)
		}
	}
	if len(envs) == 0 {
		for _, env := range fallback {
			if !e.excluded(env) {
				envs = append(envs, env)
			}
		}
	}
	slices.Sort(envs)
	return envs
}

// rankSpecs scores every setting synthesis may ask for, best first: those
// whose predicted solve rate lies in the band come first, nearest the
// band's centre, with a penalty for settings already common in the pool;
// the rest follow by their distance from the band. Settings backed off
// after a failure are left out. As the policy improves, the model's
// predictions for easy settings rise out of the band and harder settings
// (fewer hints, more bugs, harder operators) move into it.
func (e *Estimator) rankSpecs(st *records.FrontierState, envs []string, perSpec map[string]int, active int) []*records.SynthesisRecord {
	type scored struct {
		rec    *records.SynthesisRecord
		inBand bool
		score  float64
		ease   int // hint level less bugs: ties outside the band go toward it
		key    string
	}
	centre := (e.p.BandLow + e.p.BandHigh) / 2
	modes := e.p.Modes
	if st.GetMode() != "" {
		modes = []string{st.GetMode()} // predict for the mode episodes are played in
	}
	var all []scored
	for _, env := range envs {
		for _, op := range e.p.Operators {
			for _, bugs := range e.p.Bugs {
				for _, hint := range e.p.HintLevels {
					for _, mode := range modes {
						if mode == string(harness.ModeAgent) && hint > harness.HintLines {
							continue // levels 4 and 5 give part of a patch answer; an agent plays them as 3
						}
						spec := &records.SynthesisSpec{Environment: env, Operators: []string{op}, Bugs: int32(bugs), HintLevel: int32(hint), Mode: mode}
						key := SpecKey(spec)
						if st.SpecBackoff[key] > st.BatchSeq {
							continue
						}
						p := predict(st.Model, specFeatures(spec, st.Model))
						s := scored{rec: &records.SynthesisRecord{Spec: spec, Predicted: p}, key: key, ease: hint - bugs}
						s.inBand = p >= e.p.BandLow && p <= e.p.BandHigh
						if s.inBand {
							s.score = math.Abs(p - centre)
							if active > 0 {
								s.score += e.p.DiversityWeight * float64(perSpec[key]) / float64(active)
							}
						} else {
							s.score = math.Max(e.p.BandLow-p, p-e.p.BandHigh)
						}
						all = append(all, s)
					}
				}
			}
		}
	}
	slices.SortFunc(all, func(x, y scored) int {
		if x.inBand != y.inBand {
			if x.inBand {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(x.score, y.score); c != 0 {
			return c
		}
		// Settings ranked alike: above the band the harder first; in it
		// and below it the easier first. A model that has seen only
		// failures predicts every hint level at or below the one played
		// alike, and one that has seen nothing predicts every setting
		// alike, in the band: a new policy is more often too weak than too
		// strong.
		if x.ease != y.ease {
			if !x.inBand && x.rec.GetPredicted() > e.p.BandHigh {
				return cmp.Compare(x.ease, y.ease)
			}
			return cmp.Compare(y.ease, x.ease)
		}
		return cmp.Compare(x.key, y.key)
	})
	out := make([]*records.SynthesisRecord, len(all))
	for i, s := range all {
		out[i] = s.rec
	}
	return out
}

// PlanSynthesis is the synthesis control. It fails requests pending longer
// than RequestTimeout; then, when the pool holds fewer than TargetFrontier
// active tasks in the band and fewer than MaxPendingRequests requests are in
// flight, it records a new pending request for the best-ranked setting (see
// rankSpecs) and returns it for the caller to send (SynthesizeRequestOf).
// When that setting is predicted outside the band and the pool holds as
// many untried tasks at least as near the band as the request would bring,
// it waits instead (counted), for MaxDeferral at most.
// Requests are committed before they are sent: after a crash a request that
// never left times out and its setting is asked for again. environments
// are used when neither the parameters nor the pool name any.
func (e *Estimator) PlanSynthesis(ctx context.Context, environments []string) ([]*records.SynthesisRecord, error) {
	if err := e.syncPool(ctx, false); err != nil {
		return nil, err
	}
	st := e.cloneState()
	now := e.cfg.Now()
	pending := 0
	dirty := false
	for _, r := range st.Synthesis {
		if r.GetStatus() != StatusPending {
			continue
		}
		if now.Sub(timeOf(r.GetSentUnixNano())) > e.p.RequestTimeout {
			r.Status, r.Error, r.DoneUnixNano = StatusFailed, fmt.Sprintf("no answer within %v", e.p.RequestTimeout), now.UnixNano()
			st.Counters[CountSynthTimeout]++
			st.SpecBackoff[SpecKey(r.GetSpec())] = st.BatchSeq + e.p.SpecBackoff
			e.log.Warn("frontier: synthesis request timed out", "request", r.GetId(), "spec", SpecKey(r.GetSpec()))
			dirty = true
			continue
		}
		pending++
	}
	var out []*records.SynthesisRecord
	bands, _, perSpec, active, untried := e.poolBands(st)
	deficit := e.p.TargetFrontier - bands[BandFrontier]
	if deficit <= 0 && st.SynthesisDeferredUnixNano != 0 {
		st.SynthesisDeferredUnixNano = 0 // nothing is wanted: no deferral runs
		dirty = true
	}
	if deficit > 0 && pending < e.p.MaxPendingRequests {
		envs := e.environments(environments)
		ranked := e.rankSpecs(st, envs, perSpec, active)
		switch {
		case len(envs) == 0:
			st.Counters[CountSynthNoEnv]++
			dirty = true
			e.log.Warn("frontier: pool short of frontier tasks, but no environment to synthesize from", "frontier", bands[BandFrontier], "target", e.p.TargetFrontier)
		case len(ranked) > 0:
			rec := ranked[0]
			asked := min(deficit, e.p.MaxRequestTasks)
			if p := rec.GetPredicted(); p < e.p.BandLow || p > e.p.BandHigh {
				// Every setting is predicted outside the band. New tasks
				// of the best one would be no nearer it than the untried
				// tasks the pool holds already as near: while there are
				// as many of those as the request would bring, trying
				// them tells the model more, and synthesis's CPU goes to
				// rollouts instead.
				since := timeOf(st.SynthesisDeferredUnixNano)
				if st.SynthesisDeferredUnixNano == 0 {
					since = now
				}
				if n := nearerUntried(untried, p, e.p.BandLow, e.p.BandHigh); n >= asked && now.Sub(since) < e.p.MaxDeferral {
					st.SynthesisDeferredUnixNano = since.UnixNano()
					st.Counters[CountSynthDeferred]++
					if now.Sub(e.deferLogged) > time.Minute {
						e.deferLogged = now
						e.log.Info("frontier: synthesis deferred: every setting is predicted outside the band, and the pool holds untried tasks as near it",
							"best_setting", SpecKey(rec.GetSpec()), "predicted", p, "untried_as_near", n, "frontier", bands[BandFrontier], "target", e.p.TargetFrontier)
					}
					dirty = true
					break
				}
				st.Counters[CountSynthOutside]++
			}
			st.SynthesisDeferredUnixNano = 0
			st.NextRequest++
			rec.Id = fmt.Sprintf("%s-%d", e.cfg.Name, st.NextRequest)
			rec.Asked = int32(asked)
			rec.Status = StatusPending
			rec.SentUnixNano = now.UnixNano()
			rec.PolicyVersion = st.PolicyVersion
			st.Synthesis = append(st.Synthesis, rec)
			st.Counters[CountSynthRequests]++
			trimRequests(st)
			out = append(out, rec)
			dirty = true
		}
	}
	if dirty {
		if err := e.commit(ctx, st, nil); err != nil {
			return nil, fmt.Errorf("plan synthesis: %w", err)
		}
	}
	return out, nil
}

// nearerUntried counts the untried tasks (by predicted solve rate) at
// least as near the band [low, high] as a setting predicted at p.
func nearerUntried(untried []float64, p, low, high float64) int {
	dist := func(x float64) float64 { return max(low-x, x-high, 0) }
	n := 0
	for _, m := range untried {
		if dist(m) <= dist(p) {
			n++
		}
	}
	return n
}

// trimRequests keeps the newest keptRequests records, never dropping a
// pending one.
func trimRequests(st *records.FrontierState) {
	for len(st.Synthesis) > keptRequests {
		i := slices.IndexFunc(st.Synthesis, func(r *records.SynthesisRecord) bool { return r.GetStatus() != StatusPending })
		if i < 0 {
			return
		}
		st.Synthesis = slices.Delete(st.Synthesis, i, i+1)
	}
}

// SynthesizeRequestOf is the Synthesizer request for a planned record; its
// seed derives from the record's id, so a resent request draws the same
// candidates.
func SynthesizeRequestOf(r *records.SynthesisRecord) *messages.SynthesizeRequest {
	s := r.GetSpec()
	return &messages.SynthesizeRequest{
		Environment: s.GetEnvironment(), Count: r.GetAsked(), Operators: s.GetOperators(), Bugs: s.GetBugs(),
		Target: &records.DifficultyFeatures{HintLevel: s.GetHintLevel(), Mode: s.GetMode(), Operators: s.GetOperators()},
		Seed:   seedOf(r.GetId()) | 1,
	}
}

// Delivered records the answer to a synthesis request: the ids of the
// tasks it stored, or the failure. A failure, and a delivery of nothing,
// back the setting off for SpecBackoff batches; a short delivery is
// counted. An answer to a request the estimator does not know or no longer
// waits for is counted and logged. The pool is reloaded to take in the new
// tasks.
func (e *Estimator) Delivered(ctx context.Context, id string, taskIDs []string, failure error) error {
	st := e.cloneState()
	rec := findRequest(st, id)
	if rec == nil || rec.GetStatus() != StatusPending {
		st.Counters[CountSynthUnknown]++
		e.log.Warn("frontier: answer to a synthesis request not pending", "request", id, "tasks", len(taskIDs), "err", failure)
		return e.commit(ctx, st, nil)
	}
	rec.DoneUnixNano = e.cfg.Now().UnixNano()
	key := SpecKey(rec.GetSpec())
	if failure != nil {
		rec.Status, rec.Error = StatusFailed, failure.Error()
		st.Counters[CountSynthFailed]++
		st.SpecBackoff[key] = st.BatchSeq + e.p.SpecBackoff
		e.log.Warn("frontier: synthesizer could not deliver", "request", id, "spec", key, "err", failure)
	} else {
		rec.Status = StatusDone
		rec.TaskIds = slices.Clone(taskIDs)
		st.Counters[CountSynthDelivered] += int64(len(taskIDs))
		if len(taskIDs) < int(rec.GetAsked()) {
			st.Counters[CountSynthShort]++
			e.log.Info("frontier: synthesizer delivered fewer tasks than asked", "request", id, "spec", key, "asked", rec.GetAsked(), "delivered", len(taskIDs))
		}
		if len(taskIDs) == 0 {
			st.SpecBackoff[key] = st.BatchSeq + e.p.SpecBackoff
		}
	}
	for k, until := range st.SpecBackoff {
		if until <= st.BatchSeq {
			delete(st.SpecBackoff, k)
		}
	}
	if err := e.commit(ctx, st, nil); err != nil {
		return fmt.Errorf("record synthesis answer: %w", err)
	}
	for _, t := range taskIDs {
		e.requestOf[t] = id
	}
	return e.syncPool(ctx, true)
}

// Snapshot describes the estimator for the CLI: its state, the pool by
// band, and the settings it would ask the Synthesizer for next.
func (e *Estimator) Snapshot(environments []string) *messages.FrontierStateReply {
	st := e.cloneState()
	bands, byHint, perSpec, active, _ := e.poolBands(st)
	reply := &messages.FrontierStateReply{
		State: st, FrontierTasks: int32(bands[BandFrontier]), TargetFrontierTasks: int32(e.p.TargetFrontier),
		BandLow: e.p.BandLow, BandHigh: e.p.BandHigh, PoolTasks: int32(len(e.ids)), Estimator: e.cfg.Name,
	}
	for _, b := range []struct {
		name      string
		low, high float64
	}{
		{BandTooHard, 0, e.p.BandLow}, {BandFrontier, e.p.BandLow, e.p.BandHigh}, {BandTooEasy, e.p.BandHigh, 1},
		{BandRetiredHopeless, 0, e.p.HopelessBelow}, {BandRetiredMastered, e.p.MasteredAbove, 1},
	} {
		band := &messages.FrontierBand{Name: b.name, Tasks: int32(bands[b.name]), Low: b.low, High: b.high}
		for level, n := range byHint[b.name] {
			if band.HintTasks == nil {
				band.HintTasks = map[int32]int32{}
			}
			band.HintTasks[int32(level)] = int32(n)
		}
		reply.Pool = append(reply.Pool, band)
	}
	ranked := e.rankSpecs(st, e.environments(environments), perSpec, active)
	reply.NextSpecs = ranked[:min(5, len(ranked))]
	return reply
}

// EffectiveFraction is the share of graded groups whose rewards were not
// all equal, over the estimator's lifetime.
func EffectiveFraction(st *records.FrontierState) float64 {
	if st.GetTotalGroups() == 0 {
		return 0
	}
	return float64(st.GetTotalEffectiveGroups()) / float64(st.GetTotalGroups())
}

func timeOf(unixNano int64) time.Time { return time.Unix(0, unixNano) }
