package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/ui"
)

func runsExportCmd(a *app) *cobra.Command {
	var format, dir string
	export := &cobra.Command{
		Use:   "export ID",
		Short: "Write a run's curve points (every metric, held-out pass@1 per hint level) as csv or jsonl on standard output, or as a TensorBoard event file",
		Long: `export writes every point of the run's curve: csv has one row per point
(phase, step, policy version, wall and CPU seconds, each metric, held-out
pass@1 with its 95% interval and task count per hint level; an empty cell
where a point has no value); jsonl has one JSON object per point. The node's
dashboard serves the same at /ui/run/export?id=ID&format=csv|jsonl.

--format tensorboard writes the curve as a TensorBoard event file into --dir
(default DATA_DIR/runs/ID/tensorboard): train/<metric>, held_out/pass1_<level>
with its interval, run/policy_version and the clocks, one event per point at
its step. Exporting again replaces the file; tensorboard --logdir DIR plots it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "csv" && format != "jsonl" && format != "tensorboard" {
				return fmt.Errorf("--format %q: want csv, jsonl or tensorboard", format)
			}
			run, err := getRun(a, cmd, args[0])
			if err != nil {
				return err
			}
			switch format {
			case "csv":
				return ui.WriteCSV(cmd.OutOrStdout(), run)
			case "jsonl":
				return ui.WriteJSONL(cmd.OutOrStdout(), run)
			}
			if dir == "" {
				cfg, err := a.load()
				if err != nil {
					return err
				}
				dir = filepath.Join(cfg.Node.DataDir, "runs", run.GetId(), "tensorboard")
			}
			path, err := ui.WriteTensorBoard(dir, run)
			if err != nil {
				return fmt.Errorf("tensorboard events: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d points written to %s (tensorboard --logdir %s)\n", len(run.GetCurve()), path, dir)
			return nil
		},
	}
	export.Flags().StringVar(&format, "format", "csv", "csv, jsonl or tensorboard")
	export.Flags().StringVar(&dir, "dir", "", "with --format tensorboard: the log directory (default DATA_DIR/runs/ID/tensorboard)")
	return export
}
