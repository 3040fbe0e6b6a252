package main

import (
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/spf13/cobra"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/trainer"
)

func runsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "Training runs recorded in the node's store"}
	var plotPath, jsonPath string
	show := &cobra.Command{
		Use:   "show ID",
		Short: "A run's settings, totals and learning curve (held-out pass@1 at each evaluation point), and its curve plotted",
		Long: `show prints what frognano run prints at its end for the run ID: its totals,
the learning curve (held-out pass@1 per hint level at each evaluation point,
with 95% intervals over tasks, the training solve rate between points) and
the paired start-to-end gain; then it draws the curve as a PNG (--plot, by
default DATA_DIR/runs/ID/curve.png). --json FILE also writes the whole run
record (settings, metrics, every curve point) as JSON, which frognano runs
compare reads.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			run, err := getRun(a, cmd, args[0])
			if err != nil {
				return err
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
			if jsonPath != "" {
				b, err := protojson.MarshalOptions{Multiline: true}.Marshal(run)
				if err != nil {
					return err
				}
				if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
					return err
				}
				fmt.Fprintf(out, "run record written to %s\n", jsonPath)
			}
			return nil
		},
	}
	show.Flags().StringVar(&plotPath, "plot", "", "write the learning curve as a PNG here (default DATA_DIR/runs/ID/curve.png)")
	show.Flags().StringVar(&jsonPath, "json", "", "also write the run record as JSON to this file (for frognano runs compare)")
	compare := &cobra.Command{
		Use:   "compare A.json B.json",
		Short: "Compare two arms of the learning benchmark (run records written by runs show --json)",
		Long: `compare reads two run records written by frognano runs show ID --json
(they may come from different nodes' stores: the two arms of the learning
benchmark run side by side in stores of their own) and prints each arm's
held-out pass@1 at every evaluation point against the training rollouts and
seconds spent, each arm's paired end − start gain, A's end minus B's end
paired over the held-out tasks both measured (95% bootstrap interval over
tasks), and the training rollouts at which A first reached B's final
pass@1, as a fraction of B's. It needs no node.

  frognano runs compare frontier.json uniform.json`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var arms [2]*messages.Run
			for i, path := range args {
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				arms[i] = &messages.Run{}
				if err := protojson.Unmarshal(b, arms[i]); err != nil {
					return fmt.Errorf("%s: not a run record (frognano runs show ID --json writes one): %w", path, err)
				}
			}
			return trainer.WriteComparison(cmd.OutOrStdout(), arms[0], arms[1])
		},
	}
	cmd.AddCommand(show, compare, runsExportCmd(a))
	return cmd
}

// getRun reads run id's record from the node (embedded or --node).
func getRun(a *app, cmd *cobra.Command, id string) (*messages.Run, error) {
	c, err := a.connect(cmd)
	if err != nil {
		return nil, err
	}
	defer c.close()
	runs := &trainer.Runs{Root: c.system.Root, PID: c.pid(trainer.HostName)}
	run, err := runs.Get(cmd.Context(), id)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return run, nil
}
