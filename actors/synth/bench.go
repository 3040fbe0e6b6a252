package synth

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	messages "github.com/frognano/frognano/actors/messages/v1"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// BenchMode is one side of the synthesis benchmark.
type BenchMode struct {
	Name       string
	Tasks      int
	Candidates int
	TestRuns   int
	Wall       float64 // seconds
	CPU        float64 // seconds: sandboxes' cgroups plus the synthesizing process
	Rejected   map[string]int
}

// TasksPerCPUMinute is validated tasks per minute of CPU time.
func (m BenchMode) TasksPerCPUMinute() float64 {
	if m.CPU <= 0 {
		return 0
	}
	return float64(m.Tasks) / m.CPU * 60
}

// Yield is validated tasks per candidate judged.
func (m BenchMode) Yield() float64 {
	if m.Candidates == 0 {
		return 0
	}
	return float64(m.Tasks) / float64(m.Candidates)
}

// BenchModeFromProto reads a SynthesizeResult.
func BenchModeFromProto(name string, r *messages.SynthesizeResult) BenchMode {
	m := BenchMode{Name: name, Tasks: len(r.GetTaskIds()), Candidates: int(r.GetProgress().GetCandidates()),
		TestRuns: int(r.GetTestRuns()), Wall: r.GetWallSeconds(), CPU: r.GetCpuSeconds(), Rejected: map[string]int{}}
	for k, v := range r.GetProgress().GetRejected() {
		m.Rejected[k] = int(v)
	}
	return m
}

// BenchRequests are the two runs of the benchmark: the same candidates
// (same seed, same budget, nothing stored), screened by their covering
// tests and by the whole suite.
func BenchRequests(env string, candidates int, seed uint64, hint int32) (coverage, full *messages.SynthesizeRequest) {
	base := func(fullSuite bool) *messages.SynthesizeRequest {
		return &messages.SynthesizeRequest{Environment: env, Count: 1 << 30, Seed: seed, DryRun: true,
			MaxCandidates: int32(candidates), FullSuiteScreening: fullSuite, Target: &records.DifficultyFeatures{HintLevel: hint}}
	}
	return base(false), base(true)
}

// Bench runs both sides in this process (the CLI runs them through the
// node's synthesizer actor, with the same requests).
func Bench(ctx context.Context, s *Synthesizer, env *records.Environment, candidates int, seed uint64) (coverage, full BenchMode, err error) {
	if _, err := s.CoverageOf(ctx, env); err != nil {
		return coverage, full, err
	}
	cr, fr := BenchRequests(env.GetName(), candidates, seed, HintLocation)
	for _, side := range []struct {
		req *messages.SynthesizeRequest
		out *BenchMode
		nm  string
	}{{cr, &coverage, "coverage-guided"}, {fr, &full, "full-suite"}} {
		res, err := s.Synthesize(ctx, env, RequestFromProto(side.req), nil)
		if err != nil {
			return coverage, full, err
		}
		*side.out = BenchModeFromProto(side.nm, res.Proto())
	}
	return coverage, full, nil
}

// WriteBench prints the two sides side by side.
func WriteBench(w io.Writer, modes ...BenchMode) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "screening\ttasks\tcandidates\tyield\ttest runs\twall s\tCPU s\ttasks/CPU-min\t")
	for _, m := range modes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f%%\t%d\t%.1f\t%.1f\t%.1f\t\n", m.Name, m.Tasks, m.Candidates, 100*m.Yield(), m.TestRuns, m.Wall, m.CPU, m.TasksPerCPUMinute())
	}
	tw.Flush()
	for _, m := range modes {
		fmt.Fprintf(w, "%s rejections: %s\n", m.Name, FormatReasons(m.Rejected))
	}
	if len(modes) == 2 && modes[1].TasksPerCPUMinute() > 0 {
		fmt.Fprintf(w, "speed-up of %s over %s (tasks per CPU-minute): %.2fx\n", modes[0].Name, modes[1].Name, modes[0].TasksPerCPUMinute()/modes[1].TasksPerCPUMinute())
	}
}

// FormatReasons prints rejection counts largest first.
func FormatReasons(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if v > 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
