package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/frontier/sim"
	"github.com/frognano/frognano/actors/gateway"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/kernels/cpu/kbench"
	records "github.com/frognano/frognano/persistence/records/v1"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// benchCmd groups benchmarks compared side by side.
func benchCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks compared side by side"}
	cmd.AddCommand(benchFrontierCmd(), benchEnvsCmd(a), benchKernelsCmd(), benchGradingCmd(a), benchQuantCmd())
	return cmd
}

func benchKernelsCmd() *cobra.Command {
	var (
		opt    kbench.Options
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "kernels",
		Short: "frognano's matrix products against NumPy's, side by side on SmolLM2-135M's shapes",
		Long: `kernels times the matrix products of SmolLM2-135M's decode, prefill and
training (a·bᵀ, a·b and aᵀ·b; m = 1, 16, 128, 512 and 1024 rows) with every
BLAS frognano can load here and with NumPy, installed for the comparison in
a throwaway venv under the temporary directory (pip install numpy
threadpoolctl). Each shape is timed on NumPy and right after on each of
frognano's implementations, --rounds times over all the shapes, and each
one's best round counts, so a slow spell of the machine weighs on both
sides of a ratio alike; the load average is printed with the CPU model and
flags. The implementation in use plans each large shape in its first calls
(one sgemm of OpenBLAS's parallel instance, or one single-threaded call per
core split in Go, whichever ran faster); the two ways are timed as columns
of their own, and the plan column says which one the shape took.
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for the run (frognano
re-executes itself without them), so that each library picks its kernels
for this CPU. The goal: frognano ≥ 0.9× NumPy on every shape with m ≥ 16.

--isa avx2 runs both sides on OpenBLAS's AVX2 (Haswell) kernels, the code
path of an AVX2-only machine, on a machine that also has AVX-512
(FROGNANO_SIMD=avx2 and FROGNANO_BLAS_CORETYPE=Haswell for frognano,
OPENBLAS_CORETYPE=Haswell for NumPy).

  frognano bench kernels
  frognano bench kernels --isa avx2
  frognano bench kernels --go --rounds 1   # with the Go loops too (slow)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			core, err := kbench.ISACoreType(opt.ISA)
			if err != nil {
				return err
			}
			env := kbench.CleanEnv(os.Environ())
			reexec := len(env) != len(os.Environ())
			if core != "" && os.Getenv("FROGNANO_BLAS_CORETYPE") != core {
				env = append(env, "FROGNANO_BLAS_CORETYPE="+core, "FROGNANO_SIMD=avx2")
				reexec = true
			}
			if reexec {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				return syscall.Exec(exe, os.Args, env)
			}
			opt.Log = cmd.ErrOrStderr()
			rep, err := kbench.Run(cmd.Context(), opt)
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), rep)
				return nil
			}
			return rep.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.IntVar(&opt.Rounds, "rounds", 3, "turns NumPy and frognano take; each shape's best counts")
	f.DurationVar(&opt.Seconds, "time", 200*time.Millisecond, "time per shape and implementation in a round")
	f.BoolVar(&opt.Go, "go", false, "also time frognano's Go loops")
	f.StringVar(&opt.Venv, "venv", "", "a venv that has numpy and threadpoolctl (default: a throwaway one)")
	f.StringVar(&opt.Python, "python", "python3", "the Python that makes the throwaway venv")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&opt.ISA, "isa", "", "native (default: each library's widest kernels for this CPU) or avx2 (both sides on OpenBLAS's AVX2 kernels)")
	return cmd
}

func benchEnvsCmd(a *app) *cobra.Command {
	cfg := synth.EnvBenchConfig{Candidates: synth.EnvBenchCandidates, Seed: 1, Hint: synth.HintLocation}
	var (
		jsonFile    string
		markdown    bool
		resultFiles []string
	)
	cmd := &cobra.Command{
		Use:   "envs [--packages SOURCE,...]",
		Short: "The generalization suite: register real packages nothing else uses and synthesize from each",
		Long: `envs is the generalization suite of issue 14. For each package it does what a
new user would: ` + "`frognano env add SOURCE`" + ` with the defaults (at least ` + fmt.Sprint(environment.DefaultMinTests) + `
passing tests, no test file failing to collect), then judges --candidates
candidates from it as ` + "`frognano synth --max-candidates`" + ` does (coverage-guided
screening, one bug per task, nothing stored, the same --seed for every
package). An environment already registered under the package's default name
(by an earlier run against the same --data-dir or --node) is reused, so an
interrupted run can be resumed; remove it with ` + "`frognano env rm`" + ` to measure
registration again.

The default packages (--packages) are PyPI sdists and Go modules that no test
or example of frognano uses, chosen for how differently their tests are
written:
  ` + strings.Join(synth.EnvBenchDefaultSources, "\n  ") + `
They exclude the packages kept for training and held-out evaluation.

It prints a line per stage while it runs (on stderr), then a table (stdout):
the package; registered, or refused with the reason; baseline tests passing;
tasks made from the candidates judged; yield (tasks per candidate); tasks per
CPU-minute of synthesis (sandbox cgroups plus the node process; the one-off
coverage map is not counted); the three largest rejection reasons among the
judged candidates; and a flag where a reason other than survived or
duplicate took more than half of them. A summary checks the issue's goals:
every package registers and yields tasks or is refused with a reason, the
median yield is at least 30%, and no unexplained reason dominates.

It takes a while: registering is about half a minute to two minutes per
package, judging 60 candidates one to two minutes. Run it on its own data
directory so its environments stay out of the main store:

  frognano bench envs --data-dir /tmp/envs-bench --json envs.json 2>progress.log

--results a.json,b.json prints the table of saved runs (e.g. of a run split
over several invocations with --packages) without running anything.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(resultFiles) > 0 {
				var results []synth.EnvBenchResult
				for _, f := range resultFiles {
					b, err := os.ReadFile(f)
					if err != nil {
						return err
					}
					var rs []synth.EnvBenchResult
					if err := json.Unmarshal(b, &rs); err != nil {
						return fmt.Errorf("%s: %w", f, err)
					}
					results = append(results, rs...)
				}
				synth.WriteEnvBench(cmd.OutOrStdout(), results, markdown)
				return nil
			}
			if cfg.Candidates < 1 {
				return fmt.Errorf("--candidates must be at least 1")
			}
			if len(cfg.Sources) == 0 {
				return fmt.Errorf("--packages is empty")
			}
			for _, s := range cfg.Sources {
				if _, err := environment.ParseSource(s); err != nil {
					return err
				}
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			cfg.Progress = cmd.ErrOrStderr()
			results, err := synth.RunEnvBench(cmd.Context(), envBenchNode{c}, cfg)
			if jsonFile != "" && len(results) > 0 {
				b, jerr := json.MarshalIndent(results, "", "  ")
				if jerr == nil {
					jerr = os.WriteFile(jsonFile, append(b, '\n'), 0o644)
				}
				if jerr != nil {
					return errors.Join(err, fmt.Errorf("--json: %w", jerr))
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d candidates per package, seed %d, hint level %d\n\n", cfg.Candidates, cfg.Seed, cfg.Hint)
			synth.WriteEnvBench(cmd.OutOrStdout(), results, markdown)
			return err
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&cfg.Sources, "packages", synth.EnvBenchDefaultSources, "sources to register and synthesize from, as for frognano env add")
	f.IntVar(&cfg.Candidates, "candidates", cfg.Candidates, "candidates to judge per package")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of every package's candidate draw")
	f.StringVar(&jsonFile, "json", "", "also write the raw results (every rejection reason, times) to this file as JSON")
	f.BoolVar(&markdown, "markdown", false, "print the table as Markdown (as in docs/synthesis.md)")
	f.StringSliceVar(&resultFiles, "results", nil, "print the table of earlier runs' --json files (joined in order) instead of running; starts no node")
	return cmd
}

// envBenchNode is the suite's view of a node, through the CLI's client.
type envBenchNode struct{ c *client }

func (n envBenchNode) Environment(_ context.Context, name string) (*records.Environment, error) {
	res, err := n.c.askActor(n.c.pid(environment.ActorName), &messages.EnvGetRequest{Name: name}, time.Minute)
	if err != nil {
		if gateway.HasCode(err, rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND) {
			return nil, nil
		}
		return nil, err
	}
	return res.(*messages.EnvAddReply).Environment, nil
}

func (n envBenchNode) Register(ctx context.Context, source string, stage func(string)) (*records.Environment, error) {
	req := &messages.EnvAddRequest{Source: source, SuiteTimeoutSeconds: (10 * time.Minute).Seconds(), MinTests: environment.DefaultMinTests}
	res, err := n.c.stream(ctx, n.c.pid(environment.ActorName), req, func(m any) bool {
		switch m := m.(type) {
		case *messages.EnvProgress:
			stage(m.Stage)
		case *messages.EnvAddReply:
			return true
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return res.(*messages.EnvAddReply).Environment, nil
}

func (n envBenchNode) Synthesize(ctx context.Context, req *messages.SynthesizeRequest, progress func(*messages.SynthesizeProgress)) (*messages.SynthesizeResult, error) {
	res, err := n.c.stream(ctx, n.c.pid(synth.ActorName), req, func(m any) bool {
		switch m := m.(type) {
		case *messages.SynthesizeProgress:
			progress(m)
		case *messages.SynthesizeResult:
			return true
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	return res.(*messages.SynthesizeResult), nil
}

// stream sends req to an actor of the node and hands every message that
// comes back to on, the reply last (a Failure is an error).
func (c *client) stream(ctx context.Context, to *actor.PID, req any, on func(any) bool) (any, error) {
	res, err := c.call(ctx, to.Id, req, gateway.MaxTimeout, func(m any) { on(m) })
	if err != nil {
		return nil, err
	}
	on(res)
	return res, nil
}

func benchFrontierCmd() *cobra.Command {
	cfg := sim.DefaultConfig()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "frontier",
		Short: "Simulate training with uniform, DAPO and FrontierEstimator task sampling at an equal rollout budget",
		Long: `frontier runs a seeded, deterministic simulation (package actors/frontier/sim)
of a synthetic learner whose skill on each task feature grows, with
diminishing returns, with the learning signal it receives (the total absolute
group-relative advantage of its groups). Three samplers train it side by side
with the same rollout budget:

  uniform   tasks drawn uniformly from a static pool
  dapo      the same pool, groups with all-equal rewards discarded and
            resampled until the batch is full (discarded rollouts count)
  frontier  the FrontierEstimator (the actor's own code, on in-memory stores)
            with online synthesis from a simulated Synthesizer

It prints the effective-batch fraction (groups whose rewards are not all
equal, over all groups rolled out), skill, rollouts per unit of skill gained,
the evaluation solve rate, the rollouts each arm needed to reach the uniform
arm's final skill, the fewest rollouts in which any sampler could reach it in
this world (every group solved half the time, signal spread evenly over the
skill components), and whether the issue's goals are met. No node is started.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Budget < 1 {
				return fmt.Errorf("--budget must be positive")
			}
			rep, err := sim.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), rep)
				return nil
			}
			return rep.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report as JSON (an effective_batch_fraction per arm)")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the world, the pool, the episodes and every sampler")
	f.Int64Var(&cfg.Budget, "budget", cfg.Budget, "rollouts (episodes) per arm")
	f.IntVar(&cfg.BatchTasks, "batch", cfg.BatchTasks, "tasks per batch")
	f.IntVar(&cfg.Group, "group", cfg.Group, "episodes per task (G)")
	f.IntVar(&cfg.PoolSize, "pool", cfg.PoolSize, "static pool size (the frontier arm's initial pool)")
	return cmd
}
