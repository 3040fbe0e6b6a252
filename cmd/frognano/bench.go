package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/frontier/sim"
)

// benchCmd groups benchmarks that need no node.
func benchCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks compared side by side"}
	cmd.AddCommand(benchFrontierCmd())
	return cmd
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
