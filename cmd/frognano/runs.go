package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/trainer"
)

func runsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "Training runs recorded in the node's store"}
	var plotPath string
	show := &cobra.Command{
		Use:   "show ID",
		Short: "A run's settings, totals and learning curve (held-out pass@1 at each evaluation point), and its curve plotted",
		Long: `show prints what frognano run prints at its end for the run ID: its totals,
the learning curve (held-out pass@1 per hint level at each evaluation point,
with 95% intervals over tasks, the training solve rate between points) and
the paired start-to-end gain; then it draws the curve as a PNG (--plot, by
default DATA_DIR/runs/ID/curve.png).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			runs := &trainer.Runs{Root: c.system.Root, PID: c.pid(trainer.HostName)}
			run, err := runs.Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("run %s: %w", args[0], err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "run %s: %s\n", run.GetId(), run.GetStatus())
			s, err := trainer.DecodeSettings(run)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "settings:\n%s\n", s.Encode())
			printSummary(out, trainer.SummaryOf(run, s.Steps), run)
			writePlot(a, out, run, plotPath)
			return nil
		},
	}
	show.Flags().StringVar(&plotPath, "plot", "", "write the learning curve as a PNG here (default DATA_DIR/runs/ID/curve.png)")
	cmd.AddCommand(show)
	return cmd
}
