package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/trainer"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
)

func runsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "Training runs the node owns: list, follow, stop, resume, show, compare, export"}
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
			trainer.WriteSummary(out, trainer.SummaryOf(run, s.Steps), run)
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
			var arms [2]*records.Run
			for i, path := range args {
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				arms[i] = &records.Run{}
				if err := protojson.Unmarshal(b, arms[i]); err != nil {
					return fmt.Errorf("%s: not a run record (frognano runs show ID --json writes one): %w", path, err)
				}
			}
			return trainer.WriteComparison(cmd.OutOrStdout(), arms[0], arms[1])
		},
	}
	cmd.AddCommand(show, compare, runsExportCmd(a))
	cmd.AddCommand(runsControlCmds(a)...)
	return cmd
}

// getRun reads run id's record from the node's HTTP API (embedded or
// --node).
func getRun(a *app, cmd *cobra.Command, id string) (*records.Run, error) {
	var run *records.Run
	err := a.withAPI(cmd, func(p *api) (err error) {
		run, _, err = p.run(cmd.Context(), id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return run, nil
}

// withAPI runs fn with the node's HTTP API (the node at --node, or an
// embedded one for the command's duration).
func (a *app) withAPI(cmd *cobra.Command, fn func(p *api) error) error {
	p, err := a.openAPI(cmd, a.embedDefaults(cmd))
	if err != nil {
		return err
	}
	defer p.close()
	return fn(p)
}

// runsControlCmds are the commands that list, follow, stop and resume the
// runs a node owns, over its HTTP API.
func runsControlCmds(a *app) []*cobra.Command {
	ls := &cobra.Command{
		Use:   "ls",
		Short: "The runs the node's store records: id, status, step, whether it runs now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withAPI(cmd, func(p *api) error {
				runs, err := p.list(cmd.Context())
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATUS\tSTEP\tRUNNING NOW\tSTARTED\tUPDATED\tERROR")
				for _, r := range runs {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%s\t%s\t%s\n", r.ID, r.Status, r.Step, r.Active, r.Started.Format(time.DateTime), r.Updated.Format(time.DateTime), config.Clip(r.Error, 80))
				}
				return tw.Flush()
			})
		},
	}
	var follow bool
	logs := &cobra.Command{
		Use:   "logs ID",
		Short: "What a run printed on its node; -f follows it until it ends",
		Long: `logs prints what run ID has printed on the node that owns it (its log,
kept over its resumes in DATA_DIR/runs/ID/log on the node). With -f it goes
on printing as the run goes, until the run ends; an interrupt leaves the
run running.

  frognano --node 10.0.0.5:7070 runs logs run-20261202-060000.000 -f`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAPI(cmd, func(p *api) error {
				_, err := p.follow(cmd.Context(), args[0], 0, follow, cmd.OutOrStdout())
				return err
			})
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the run ends")
	stop := &cobra.Command{
		Use:   "stop ID",
		Short: "Stop a run on its node (recorded stopped; runs resume ID continues it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAPI(cmd, func(p *api) error {
				if _, err := p.runAction(cmd.Context(), args[0], "stop"); err != nil {
					return err
				}
				p.waitInactive(cmd.Context(), args[0], 10*time.Minute)
				run, active, err := p.run(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if active {
					return fmt.Errorf("run %s is still stopping (its step in flight ends first): frognano runs logs %s -f shows when", args[0], args[0])
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s %s after step %d\n", run.GetId(), run.GetStatus(), run.GetStep())
				return nil
			})
		},
	}
	var detach bool
	resume := &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a stopped, failed or interrupted run on its node, with the job it was given",
		Long: `resume starts run ID again on the node that holds its record, with the job
(settings, environments, evaluation) it was started with, after its last
recorded step, and follows its log like frognano run does (--detach
returns at once). To change its length, use frognano run --run ID --steps N.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAPI(cmd, func(p *api) error {
				sub, err := p.runAction(context.WithoutCancel(cmd.Context()), args[0], "resume")
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s resumed on the node\n", sub.ID)
				if detach && p.embedded == nil {
					return nil
				}
				return followRun(cmd.Context(), p, sub.ID, sub.LogOffset, cmd.OutOrStdout(), cmd.ErrOrStderr(), "")
			})
		},
	}
	resume.Flags().BoolVar(&detach, "detach", false, "with --node: return once the node has resumed it")
	return []*cobra.Command{ls, logs, stop, resume}
}
