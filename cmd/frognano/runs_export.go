package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/actors/ui"
)

func runsExportCmd(a *app) *cobra.Command {
	var format string
	export := &cobra.Command{
		Use:   "export ID",
		Short: "Write a run's curve points (every metric, held-out pass@1 per hint level) as csv or jsonl on standard output",
		Long: `export writes every point of the run's curve: csv has one row per point
(phase, step, policy version, wall and CPU seconds, each metric, held-out
pass@1 with its 95% interval and task count per hint level; an empty cell
where a point has no value); jsonl has one JSON object per point. The node's
dashboard serves the same at /ui/run/export?id=ID&format=csv|jsonl.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "csv" && format != "jsonl" {
				return fmt.Errorf("--format %q: want csv or jsonl", format)
			}
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
			if format == "csv" {
				return ui.WriteCSV(cmd.OutOrStdout(), run)
			}
			return ui.WriteJSONL(cmd.OutOrStdout(), run)
		},
	}
	export.Flags().StringVar(&format, "format", "csv", "csv or jsonl")
	return export
}
