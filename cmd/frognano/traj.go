package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/rollout"
	records "github.com/frognano/frognano/persistence/records/v1"
)

func trajCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "traj", Short: "List and show stored trajectories (episodes)"}
	var run, task string
	ls := &cobra.Command{
		Use:   "ls (--run RUN | --task TASK)",
		Short: "List the trajectories of a run (frognano eval prints its run id) or of a task",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (run == "") == (task == "") {
				return fmt.Errorf("give --run RUN or --task TASK (one of the two; frognano eval prints its run id)")
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.askActor(c.pid(rollout.ActorName), &messages.TrajectoryListRequest{RunId: run, TaskId: task}, 5*time.Minute)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTASK\tENDING\tREWARD\tTURNS\tTOKENS\tGEN S\tSANDBOX S\tCREATED")
			for _, t := range res.(*messages.TrajectoryList).Trajectories {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%g\t%d\t%d\t%.1f\t%.1f\t%s\n", t.Id, t.TaskId, t.Termination, t.Reward, t.Turns, t.Tokens,
					t.GenerationSeconds, t.SandboxSeconds, time.Unix(0, t.CreatedUnixNano).Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	ls.Flags().StringVar(&run, "run", "", "run id")
	ls.Flags().StringVar(&task, "task", "", "task id")

	var asJSON bool
	var width int
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Print one trajectory readably: turns, tool calls, observations, reward, ending, timings",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.askActor(c.pid(rollout.ActorName), &messages.TrajectoryGetRequest{Id: args[0]}, time.Minute)
			if err != nil {
				return err
			}
			t := res.(*messages.TrajectoryGetReply).Trajectory
			if asJSON {
				b, _ := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(t)
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return nil
			}
			writeTrajectory(cmd.OutOrStdout(), t, width)
			return nil
		},
	}
	show.Flags().BoolVar(&asJSON, "json", false, "print the whole record as JSON (token ids, mask and log-probs included)")
	show.Flags().IntVar(&width, "max-chars", 4000, "cut each turn's text to this many characters (0: no limit)")
	cmd.AddCommand(ls, show)
	return cmd
}

// writeTrajectory prints a trajectory for a person.
func writeTrajectory(w io.Writer, t *records.Trajectory, maxChars int) {
	policy := 0
	for _, m := range t.PolicyMask {
		if m {
			policy++
		}
	}
	fmt.Fprintf(w, "trajectory %s\n", t.Id)
	fmt.Fprintf(w, "  task %s, run %s, policy version %d, seed %d\n", t.TaskId, t.RunId, t.PolicyVersion, t.Seed)
	fmt.Fprintf(w, "  ending %s, reward %g\n", t.Termination, t.Reward)
	fmt.Fprintf(w, "  %d tokens (%d from the policy), %.1fs generating, %.1fs in the sandbox, created %s\n", len(t.TokenIds), policy,
		t.GenerationSeconds, t.SandboxSeconds, time.Unix(0, t.CreatedUnixNano).Format(time.DateTime))
	cut := func(s string) string {
		if maxChars > 0 && len(s) > maxChars {
			return s[:maxChars] + fmt.Sprintf("\n[... %d more characters; --max-chars 0 shows all]", len(s)-maxChars)
		}
		return s
	}
	turn := 0
	for _, m := range t.Turns {
		role := strings.ToLower(strings.TrimPrefix(m.Role.String(), "ROLE_"))
		head := role
		switch m.Role {
		case records.Role_ROLE_ASSISTANT:
			turn++
			head = fmt.Sprintf("assistant, turn %d", turn)
		case records.Role_ROLE_TOOL:
			if m.ToolCallId != "" {
				head = "result of " + m.ToolCallId
			} else {
				head = "result"
			}
		}
		if m.Seconds > 0 {
			head += fmt.Sprintf(" (%.2fs)", m.Seconds)
		}
		fmt.Fprintf(w, "\n── %s ──\n%s\n", head, strings.TrimRight(cut(m.Content), "\n"))
		for _, c := range m.ToolCalls {
			fmt.Fprintf(w, "  → %s %s %s\n", c.Id, c.Name, cut(c.ArgumentsJson))
		}
	}
	if r := t.Report; r != nil {
		fail := 0
		var failing []string
		for _, res := range r.Results {
			if res.Status != records.TestStatus_TEST_STATUS_PASS {
				fail++
				if len(failing) < 10 {
					failing = append(failing, res.Name)
				}
			}
		}
		fmt.Fprintf(w, "\n── grading ──\n%d tests run in %.1fs, %d not passing, report valid %v", len(r.Results), r.DurationSeconds, fail, r.Valid)
		if r.Problem != "" {
			fmt.Fprintf(w, " (%s)", r.Problem)
		}
		fmt.Fprintln(w)
		for _, f := range failing {
			fmt.Fprintf(w, "  not passing: %s\n", f)
		}
	} else {
		fmt.Fprintf(w, "\n── grading ──\nnot graded (%s)\n", notGradedWhy(t.Termination))
	}
}

func notGradedWhy(ending string) string {
	switch ending {
	case "sandbox_failure", "policy_error":
		return "an infrastructure failure, left out of reward statistics"
	}
	return "nothing could have changed the repository: reward 0"
}
