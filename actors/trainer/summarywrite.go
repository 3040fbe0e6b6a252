package trainer

import (
	"fmt"
	"io"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// WriteSummary writes a run's totals, its steps and its learning curve:
// what frognano run prints at its end and frognano runs show prints.
func WriteSummary(out io.Writer, s Summary, run *records.Run) {
	loss := "none (no update yet)"
	if s.HaveLoss {
		loss = fmt.Sprintf("%+.5f", s.Loss)
	}
	fmt.Fprintf(out, "training run %s: %d of %d step(s): %d task group(s), %d episodes (%d infrastructure failures), solve rate %.3f (%d solved), %d of %d effective group(s)\n",
		s.RunID, s.Steps, s.TotalSteps, s.Tasks, s.Episodes, s.Infra, s.SolveRate(), s.Solved, s.Effective, s.Groups)
	fmt.Fprintf(out, "  learner: %d update(s), %d step(s) without signal, last loss %s, learner step %d, policy v%d\n",
		s.Updates, s.NoSignal, loss, s.LearnerStep, s.PolicyVersion)
	fmt.Fprintf(out, "  seconds: synth %.1f, frontier batches %.1f, rollouts %.1f, outcomes %.1f, learning %.1f, sampler swaps %.1f\n",
		run.GetMetrics()["seconds_synth"], s.SecondsBatch, s.SecondsRollout, s.SecondsReport, s.SecondsLearn, s.SecondsSwap)
	if st, err := DecodeSettings(run); err == nil && st.MaxStaleness > 0 {
		m := run.GetMetrics()
		fmt.Fprintf(out, "  asynchronous steps (max staleness %d): %d group(s) dropped as stale, the oldest trained on or dropped %d version(s) behind, %d episode(s) spanning versions\n",
			st.MaxStaleness, int(m[MetricStaleDropped]), int(m[MetricMaxStaleness]), int(m[MetricMixedEpisodes]))
	}
	if hasSteps(run) {
		fmt.Fprintln(out, "steps (the frontier's pool after each step's outcomes: too hard/frontier/too easy, retired, the frontier band by hint level; the share of policy tokens the trust region clipped or masked):")
		if err := WriteSteps(out, run, 20); err != nil {
			fmt.Fprintln(out, "  cannot print the steps:", err)
		}
	}
	if hasHeldOut(run) {
		fmt.Fprintln(out, "learning curve (held-out environments, never trained on):")
		if err := WriteCurve(out, run); err != nil {
			fmt.Fprintln(out, "  cannot print the curve:", err)
		}
	}
}

func hasSteps(run *records.Run) bool {
	for _, p := range run.GetCurve() {
		if p.GetPhase() == PhaseStep {
			return true
		}
	}
	return false
}

func hasHeldOut(run *records.Run) bool {
	for _, p := range run.GetCurve() {
		if len(p.GetHeldOut()) > 0 {
			return true
		}
	}
	return false
}
