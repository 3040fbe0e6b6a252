package harness

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/frognano/frognano/actors/sandbox"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// GradingBench is one environment's grading times, old (the full run)
// against new (the default: the fork server, falling back to the full
// run), measured on the same task in alternating episodes.
type GradingBench struct {
	Environment string
	Task        string
	Episodes    int
	// Mean seconds per episode: grading (Grade, from the end of the
	// episode to the reward) and setup (NewWorkspace, which starts the
	// server on the new path).
	FullGrade, FastGrade float64
	FullSetup, FastSetup float64
	// Rewards of every episode, in order, on each path: they must agree.
	FullRewards, FastRewards []float64
	// Fallbacks counts new-path episodes graded by the full run.
	Fallbacks int64
}

// Ratio is new grading time over old.
func (b GradingBench) Ratio() float64 { return b.FastGrade / b.FullGrade }

// BenchGrading grades the task's gold fix (and, on every other episode,
// the untouched bug) in fresh sandboxes of image, alternating the full
// run and the fast path, episodes times each.
func BenchGrading(ctx context.Context, rt *sandbox.Runtime, image string, opts sandbox.Options, spec sandbox.TestSpec, env string, task *records.Task, episodes int, progress io.Writer) (GradingBench, error) {
	b := GradingBench{Environment: env, Task: task.GetId(), Episodes: episodes}
	_, _, _, fb0 := FastGradingCounts()
	for i := range episodes {
		for _, full := range []bool{true, false} {
			sb, err := rt.Create(ctx, image, opts)
			if err != nil {
				return b, err
			}
			start := time.Now()
			ws, err := NewWorkspace(ctx, sb, spec, task, WorkspaceOptions{FullGrading: full})
			if err != nil {
				sb.Destroy(context.WithoutCancel(ctx))
				return b, err
			}
			setup := time.Since(start).Seconds()
			if i%2 == 0 && task.GetGoldPatch() != "" {
				if err := sb.ApplyPatch(ctx, task.GetGoldPatch()); err != nil {
					sb.Destroy(context.WithoutCancel(ctx))
					return b, fmt.Errorf("gold patch of %s: %w", task.GetId(), err)
				}
			}
			start = time.Now()
			g, err := ws.Grade(ctx)
			grade := time.Since(start).Seconds()
			sb.Destroy(context.WithoutCancel(ctx))
			if err != nil {
				return b, err
			}
			name := "new"
			if full {
				name = "old"
				b.FullGrade += grade / float64(episodes)
				b.FullSetup += setup / float64(episodes)
				b.FullRewards = append(b.FullRewards, g.Reward)
			} else {
				b.FastGrade += grade / float64(episodes)
				b.FastSetup += setup / float64(episodes)
				b.FastRewards = append(b.FastRewards, g.Reward)
			}
			if progress != nil {
				fmt.Fprintf(progress, "%s episode %d %s: setup %.2fs, grading %.2fs, reward %v %s\n", env, i+1, name, setup, grade, g.Reward, g.Reason)
			}
		}
	}
	_, _, _, fb1 := FastGradingCounts()
	b.Fallbacks = fb1 - fb0
	if !slices.Equal(b.FullRewards, b.FastRewards) {
		return b, fmt.Errorf("%s: the fast path's rewards %v differ from the full run's %v", env, b.FastRewards, b.FullRewards)
	}
	return b, nil
}

// WriteGradingBench prints the table (Markdown).
func WriteGradingBench(w io.Writer, rows []GradingBench) {
	fmt.Fprintln(w, "| environment | episodes | old grading s | new grading s | new/old | old setup s | new setup s | old+setup → new+setup | fallbacks | rewards agree |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.2f× | %.2f | %.2f | %.2f → %.2f | %d | %v |\n", r.Environment, r.Episodes, r.FullGrade, r.FastGrade, r.Ratio(),
			r.FullSetup, r.FastSetup, r.FullGrade+r.FullSetup, r.FastGrade+r.FastSetup, r.Fallbacks, slices.Equal(r.FullRewards, r.FastRewards))
	}
}
