package trainer

// Figures of a step's curve point beyond the step's own counts: what the
// Learner's trust region did to the step's tokens, and the
// FrontierEstimator's pool after the step's outcomes, by band and by hint
// level (difficulty level). The dashboard charts them, the exports carry
// them, frognano runs show prints them (WriteSteps).

import (
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/frognano/frognano/actors/frontier"
	messages "github.com/frognano/frognano/actors/messages/v1"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Keys of a step point's metrics.
const (
	// PointClipFraction is the share of the step's policy tokens the GRPO
	// trust region clipped (PPO clip) or masked out (TV mask): tokens that
	// contributed no gradient. Absent when the Learner computed no loss (no
	// group with signal, every group stale).
	PointClipFraction = "clip_fraction"
	// PointLogRatioMean and PointLogRatioMax are the mean and largest
	// |log-prob of the policy − log-prob the Sampler recorded| over the
	// step's policy tokens (a quantized Sampler's mismatch, plus the
	// policy's moves since a stale group was sampled). Present where
	// PointClipFraction is.
	PointLogRatioMean = "log_ratio_mean"
	PointLogRatioMax  = "log_ratio_max"
	// PointPoolPrefix prefixes the pool's counts: pool_<band> for every
	// band of the FrontierEstimator (too_hard, frontier, too_easy,
	// retired_hopeless, retired_mastered) and pool_hint_<N>_<band> for the
	// active bands at each hint level the active pool has.
	PointPoolPrefix = "pool_"
)

// ActiveBands are the bands of the tasks a batch may pick, easiest last.
var ActiveBands = []string{frontier.BandTooHard, frontier.BandFrontier, frontier.BandTooEasy}

// PoolKey is the metric key of a band's task count.
func PoolKey(band string) string { return PointPoolPrefix + band }

// PoolHintKey is the metric key of a band's task count at one hint level.
func PoolHintKey(level int32, band string) string {
	return fmt.Sprintf("%shint_%d_%s", PointPoolPrefix, level, band)
}

var poolHintKey = regexp.MustCompile(`^pool_hint_(\d+)_(.+)$`)

// ParsePoolHintKey reads a PoolHintKey.
func ParsePoolHintKey(key string) (level int32, band string, ok bool) {
	m := poolHintKey.FindStringSubmatch(key)
	if m == nil {
		return 0, "", false
	}
	n, err := strconv.ParseInt(m[1], 10, 32)
	if err != nil {
		return 0, "", false
	}
	return int32(n), m[2], true
}

// LearnerPointMetrics adds a GRPO step's figures to a step point's
// metrics: loss and gradient norm when the update was applied, and the
// share of policy tokens clipped or masked whenever the Learner computed
// the loss over some tokens (an update skipped as non-finite included).
func LearnerPointMetrics(m map[string]float64, ls *messages.LearnerStep) {
	if ls == nil {
		return
	}
	if ls.GetSkipped() == "" {
		m["loss"], m["grad_norm"] = ls.GetLoss(), ls.GetGradNorm()
	}
	if ls.GetPolicyTokens() > 0 {
		m[PointClipFraction] = ls.GetClipFraction()
		m[PointLogRatioMean], m[PointLogRatioMax] = ls.GetMeanAbsLogRatio(), ls.GetMaxAbsLogRatio()
	}
}

// PoolPointMetrics adds the FrontierEstimator's pool to a step point's
// metrics: every band's count, and the active bands' counts at each hint
// level any active task has (0 where a band has none at that level).
func PoolPointMetrics(m map[string]float64, pool *messages.FrontierStateReply) {
	if pool == nil {
		return
	}
	levels := map[int32]bool{}
	for _, b := range pool.GetPool() {
		m[PoolKey(b.GetName())] = float64(b.GetTasks())
		if slices.Contains(ActiveBands, b.GetName()) {
			for level := range b.GetHintTasks() {
				levels[level] = true
			}
		}
	}
	for _, b := range pool.GetPool() {
		if !slices.Contains(ActiveBands, b.GetName()) {
			continue
		}
		for level := range levels {
			m[PoolHintKey(level, b.GetName())] = float64(b.GetHintTasks()[level])
		}
	}
}

// WriteSteps prints the step points of a run's curve, one row each (at
// most maxRows, evenly spaced, the first and last always; 0: all): the
// training solve rate and effective-group fraction, the loss, the share
// of tokens clipped or masked, the pool by band and the frontier band by
// hint level. A figure a point lacks is "-".
func WriteSteps(w io.Writer, run *records.Run, maxRows int) error {
	var steps []*records.RunPoint
	for _, p := range run.GetCurve() {
		if p.GetPhase() == PhaseStep {
			steps = append(steps, p)
		}
	}
	if len(steps) == 0 {
		return nil
	}
	shown := steps
	if maxRows > 1 && len(steps) > maxRows {
		shown = nil
		for i := range maxRows {
			shown = append(shown, steps[i*(len(steps)-1)/(maxRows-1)])
		}
		fmt.Fprintf(w, "%d of %d step points (frognano runs export has every one):\n", maxRows, len(steps))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tPOLICY\tSOLVE RATE\tEFFECTIVE\tLOSS\tCLIPPED/MASKED\t|ΔLOGP| MEAN/MAX\tPOOL HARD/FRONTIER/EASY\tRETIRED\tFRONTIER BY HINT")
	for _, p := range shown {
		m := p.GetMetrics()
		num := func(k, format string) string {
			if v, ok := m[k]; ok {
				return fmt.Sprintf(format, v)
			}
			return "-"
		}
		pool, retired, byHint := "-", "-", "-"
		if _, ok := m[PoolKey(frontier.BandFrontier)]; ok {
			pool = fmt.Sprintf("%d/%d/%d", int(m[PoolKey(frontier.BandTooHard)]), int(m[PoolKey(frontier.BandFrontier)]), int(m[PoolKey(frontier.BandTooEasy)]))
			retired = fmt.Sprintf("%d", int(m[PoolKey(frontier.BandRetiredHopeless)]+m[PoolKey(frontier.BandRetiredMastered)]))
			at := map[int32]int{}
			for k, v := range m {
				if level, band, ok := ParsePoolHintKey(k); ok && band == frontier.BandFrontier {
					at[level] = int(v)
				}
			}
			var parts []string
			for _, level := range slices.Sorted(maps.Keys(at)) {
				parts = append(parts, fmt.Sprintf("h%d:%d", level, at[level]))
			}
			if len(parts) > 0 {
				byHint = strings.Join(parts, " ")
			}
		}
		mismatch := "-"
		if _, ok := m[PointLogRatioMean]; ok {
			mismatch = num(PointLogRatioMean, "%.4f") + "/" + num(PointLogRatioMax, "%.3f")
		}
		fmt.Fprintf(tw, "%d\tv%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.GetStep(), p.GetPolicyVersion(), num("solve_rate", "%.3f"), num("effective_fraction", "%.3f"),
			num("loss", "%+.5f"), num(PointClipFraction, "%.3f"), mismatch, pool, retired, byHint)
	}
	return tw.Flush()
}
