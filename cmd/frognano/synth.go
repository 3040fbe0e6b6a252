package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/gateway"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/actors/synth/mutate"
	records "github.com/frognano/frognano/persistence/records/v1"
)

func synthCmd(a *app) *cobra.Command {
	var (
		req        messages.SynthesizeRequest
		difficulty string
		hint       int
	)
	cmd := &cobra.Command{
		Use:   "synth --env ENV --count N",
		Short: "Synthesize validated bug-fix tasks from a registered environment",
		Long: `synth plants procedural bugs in the environment's source and keeps the ones
that make a real task: at least one test goes pass→fail (FAIL_TO_PASS), every
other baseline-passing test still passes (PASS_TO_PASS), a rerun agrees, and
the gold patch makes the failing tests pass again. Each task gets a problem
statement at --hint-level that does not reveal the fix, and difficulty
features; tasks are stored in the node's database (see frognano tasks).

Targeting: the first synthesis of an environment image measures which tests
run which lines (coverage.py per pytest node id; go test -coverprofile per Go
test) and keeps the map; only covered lines of non-test files are mutated,
and each candidate is screened with just the tests that run its lines.

Hint levels: 0 names the failing tests with their error output; 1 adds an
issue-style description naming the misbehaving functions and modules; 2 also
shows the buggy functions' current source. One bug is one task, stored at the
level asked for.

Operators: ` + strings.Join(mutate.OperatorNames, ", ") + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch difficulty {
			case "single":
				req.Bugs = 1
			case "multi":
				if req.Bugs < 2 {
					req.Bugs = 2
				}
			default:
				return fmt.Errorf("--difficulty %q: want single or multi", difficulty)
			}
			if req.Count < 1 {
				return fmt.Errorf("--count must be at least 1")
			}
			if hint < synth.HintTests || hint > synth.MaxHintLevel {
				return fmt.Errorf("--hint-level %d: want %d to %d", hint, synth.HintTests, synth.MaxHintLevel)
			}
			req.Target = &records.DifficultyFeatures{HintLevel: int32(hint)}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.synthesize(&req, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			p := res.GetProgress()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "synthesized %d of %d tasks of %s from %d candidates (seed %d) in %.1fs, %.1f CPU-s",
				len(res.TaskIds), req.Count, req.Environment, p.GetCandidates(), res.Seed, res.WallSeconds, res.CpuSeconds)
			if res.CpuSeconds > 0 && len(res.TaskIds) > 0 {
				fmt.Fprintf(out, " (%.1f tasks per CPU-minute)", float64(len(res.TaskIds))/res.CpuSeconds*60)
			}
			fmt.Fprintln(out)
			if res.CoverageSeconds > 0 {
				fmt.Fprintf(out, "coverage map measured in %.1fs (kept for this environment image)\n", res.CoverageSeconds)
			}
			fmt.Fprintf(out, "rejected: %s\n", synth.FormatReasons(rejected(p)))
			for _, id := range res.TaskIds {
				fmt.Fprintln(out, id)
			}
			if len(res.TaskIds) < int(req.Count) {
				fmt.Fprintf(cmd.ErrOrStderr(), "only %d of %d tasks: the environment ran out of candidates (try another --seed or more --operators)\n", len(res.TaskIds), req.Count)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Environment, "env", "", "registered environment (see frognano env ls)")
	f.Int32Var(&req.Count, "count", 10, "validated tasks to make")
	f.StringSliceVar(&req.Operators, "operators", nil, "mutation operators to use (default: all of the language's)")
	f.StringVar(&difficulty, "difficulty", "single", "single: one bug per task; multi: several bugs (--bugs) per task")
	f.Int32Var(&req.Bugs, "bugs", 2, "bugs per task with --difficulty multi")
	f.Uint64Var(&req.Seed, "seed", 0, "seed of the candidate draw (0: from the clock; the result prints it)")
	f.IntVar(&hint, "hint-level", synth.HintLocation, "problem statement hint level: 0 tests and errors, 1 plus location, 2 plus buggy source, 3 plus the bug's lines, 4 plus the fix's first SEARCH side given in patch mode, 5 plus the replacement's start up to the word that changes")
	f.Int32Var(&req.MaxCandidates, "max-candidates", 0, "stop after judging this many candidates (0: until --count)")
	f.BoolVar(&req.FullSuiteScreening, "full-suite-screening", false, "screen candidates with the whole suite instead of their covering tests (slower; for comparison)")
	_ = cmd.MarkFlagRequired("env")
	cmd.AddCommand(synthBenchCmd(a))
	return cmd
}

func synthBenchCmd(a *app) *cobra.Command {
	var (
		env        string
		candidates int
		seed       uint64
	)
	cmd := &cobra.Command{
		Use:   "bench --env ENV",
		Short: "Compare coverage-guided screening with whole-suite screening on the same candidates",
		Long: `bench judges the same --candidates candidates (same seed, nothing stored) twice
on the node's synthesizer: screened by the tests that cover their lines, and
screened by the whole suite. It prints, side by side, validated tasks, yield
(validated per candidate), wall time, CPU time (the sandboxes' cgroups plus
the node process) and validated tasks per CPU-minute. The coverage map is
measured first if the environment has none, outside both figures.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if candidates < 1 {
				return fmt.Errorf("--candidates must be at least 1")
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			if seed == 0 {
				seed = uint64(time.Now().UnixNano())
			}
			covReq, fullReq := synth.BenchRequests(env, candidates, seed, synth.HintLocation)
			var modes []synth.BenchMode
			for _, side := range []struct {
				name string
				req  *messages.SynthesizeRequest
			}{{"coverage-guided", covReq}, {"full-suite", fullReq}} {
				res, err := c.synthesize(side.req, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				if res.CoverageSeconds > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "coverage map measured first in %.1fs (not counted below)\n", res.CoverageSeconds)
				}
				modes = append(modes, synth.BenchModeFromProto(side.name, res))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "environment %s, %d candidates, seed %d\n", env, candidates, seed)
			synth.WriteBench(cmd.OutOrStdout(), modes...)
			return nil
		},
	}
	cmd.Flags().StringVar(&env, "env", "", "registered environment")
	cmd.Flags().IntVar(&candidates, "candidates", 60, "candidates to judge in each mode")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of the candidate draw (0: from the clock)")
	_ = cmd.MarkFlagRequired("env")
	return cmd
}

func rejected(p *messages.SynthesizeProgress) map[string]int {
	out := map[string]int{}
	for k, v := range p.GetRejected() {
		out[k] = int(v)
	}
	return out
}

// synthesize sends req to the node's synthesizer from a short-lived actor
// and shows its SynthesizeProgress as a bar over validated tasks (or over
// judged candidates when the request is bounded by --max-candidates), until
// the result. Off a terminal it prints each new stage instead.
func (c *client) synthesize(req *messages.SynthesizeRequest, w io.Writer) (*messages.SynthesizeResult, error) {
	total, byCandidates := int64(req.Count), false
	if req.MaxCandidates > 0 && (req.DryRun || int64(req.MaxCandidates) < total) {
		total, byCandidates = int64(req.MaxCandidates), true
	}
	tty := isTerminal(w)
	bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("starting"),
		progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(true), progressbar.OptionSetVisibility(tty))
	stage := ""
	res, err := c.call(context.Background(), synth.ActorName, req, gateway.MaxTimeout, func(msg any) {
		m, ok := msg.(*messages.SynthesizeProgress)
		if !ok {
			return
		}
		n := int64(m.Validated)
		if byCandidates {
			n = int64(m.Candidates)
		}
		_ = bar.Set64(n)
		bar.Describe(fmt.Sprintf("%s: %d validated, %d candidates judged", m.Stage, m.Validated, m.Candidates))
		if !tty && m.Stage != stage {
			fmt.Fprintln(w, "==>", m.Stage)
		}
		stage = m.Stage
	})
	_ = bar.Finish()
	if tty {
		fmt.Fprintln(w)
	}
	if err != nil {
		return nil, err
	}
	return res.(*messages.SynthesizeResult), nil
}
