package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/harness"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
)

// benchGradingCmd measures grading old (the full test run) against new
// (the fork server) side by side.
func benchGradingCmd(a *app) *cobra.Command {
	var (
		envs     []string
		episodes int
	)
	cmd := &cobra.Command{
		Use:   "grading [--envs NAME,...]",
		Short: "Grading seconds per episode: the full test run against the fork server, side by side",
		Long: `grading takes the first stored task of each environment (--envs, registered
on the embedded node's --data-dir) and grades --episodes episodes on each
path in alternating fresh sandboxes: old, the full run (a fresh Python and
pytest, or go test), and new, the default (the fork server started before the
episode; Go environments have none and grade as before). Even episodes
grade the task's gold fix (the whole suite passes), odd ones the untouched
bug. It prints a line per episode on stderr, then a Markdown table: mean
grading and setup seconds per path, the ratio new/old, fallbacks to the
full run, and whether every episode got the same reward on both paths (the
command fails if not).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if episodes < 1 {
				return fmt.Errorf("--episodes must be at least 1")
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			if c.embedded == nil {
				return fmt.Errorf("bench grading runs sandboxes on this machine: use the embedded node (no --node)")
			}
			cfg, err := a.load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			rt, err := sandbox.New(ctx, sandbox.Config{Address: cfg.Containerd.Address, Namespace: cfg.Containerd.Namespace})
			if err != nil {
				return err
			}
			defer rt.Close()
			db := c.embedded.DB()
			var rows []harness.GradingBench
			for _, name := range envs {
				env, err := db.Environments().Get(ctx, name)
				if err != nil {
					return fmt.Errorf("environment %s: %w", name, err)
				}
				tasks, err := db.Tasks().List(ctx, persistence.TaskFilter{Environment: name})
				if err != nil {
					return err
				}
				if len(tasks) == 0 {
					return fmt.Errorf("environment %s has no stored task (frognano synth --env %s)", name, name)
				}
				image := tasks[0].GetImage()
				if image == "" {
					image = env.GetImage()
				}
				row, err := harness.BenchGrading(ctx, rt, image, sandbox.Options{RepoDir: env.GetRepoDir()}, environment.Spec(env), name, tasks[0], episodes, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				rows = append(rows, row)
			}
			harness.WriteGradingBench(cmd.OutOrStdout(), rows)
			started, failed, fast, fallback := harness.FastGradingCounts()
			fmt.Fprintf(os.Stderr, "fork servers started %d, failed to start %d; graded fast %d, fell back %d\n", started, failed, fast, fallback)
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&envs, "envs", []string{"six-1.16.0", "go-difflib-v1.0.0"}, "environments to grade (registered names)")
	cmd.Flags().IntVar(&episodes, "episodes", 6, "episodes per path and environment")
	return cmd
}
