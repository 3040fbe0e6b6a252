package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/frognano/frognano/actors/environment"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/synth"
	records "github.com/frognano/frognano/persistence/records/v1"
)

func tasksCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "tasks", Short: "List, show and export synthesized tasks"}
	var env string
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List stored tasks with their difficulty features",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tasks, err := listTasks(a, cmd, env)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tOPERATORS\tF2P\tP2P\tLINES\tHINT\tDISTANCE\tCREATED")
			for _, t := range tasks {
				d := t.GetDifficulty()
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", t.Id, strings.Join(d.GetOperators(), "+"), len(t.FailToPass), len(t.PassToPass),
					d.GetLinesTouched(), d.GetHintLevel(), d.GetTestDistance(), time.Unix(0, t.CreatedUnixNano).Format(time.DateTime))
			}
			return tw.Flush()
		},
	}
	ls.Flags().StringVar(&env, "env", "", "only tasks of this environment")

	show := &cobra.Command{
		Use:   "show ID",
		Short: "Print a task as JSON: patches, problem statement, tests, difficulty, provenance",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.askActor(c.pid(synth.ActorName), &messages.TaskGetRequest{Id: args[0]}, time.Minute)
			if err != nil {
				return err
			}
			b, _ := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(res.(*messages.TaskGetReply).Task)
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	}

	var exportEnv string
	export := &cobra.Command{
		Use:   "export",
		Short: "Write tasks to stdout as SWE-smith/SWE-bench style JSONL",
		Long: `export writes one JSON object per task: instance_id, repo, base_commit, patch
(the gold fix), test_patch (empty: tests are never changed), FAIL_TO_PASS and
PASS_TO_PASS (JSON arrays), problem_statement, image_name, plus bug_patch,
environment, language, test_cmd, difficulty and provenance.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.askActor(c.pid(synth.ActorName), &messages.TaskListRequest{Environment: exportEnv}, 5*time.Minute)
			if err != nil {
				return err
			}
			envs := map[string]*records.Environment{}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			for _, t := range res.(*messages.TaskList).Tasks {
				e, seen := envs[t.Environment]
				if !seen {
					if r, err := c.askActor(c.pid(environment.ActorName), &messages.EnvGetRequest{Name: t.Environment}, time.Minute); err == nil {
						e = r.(*messages.EnvAddReply).Environment
					}
					envs[t.Environment] = e
				}
				if err := enc.Encode(synth.Export(t, e)); err != nil {
					return err
				}
			}
			return nil
		},
	}
	export.Flags().StringVar(&exportEnv, "env", "", "only tasks of this environment")
	cmd.AddCommand(ls, show, export)
	return cmd
}

func listTasks(a *app, cmd *cobra.Command, env string) ([]*records.Task, error) {
	c, err := a.connect(cmd)
	if err != nil {
		return nil, err
	}
	defer c.close()
	res, err := c.askActor(c.pid(synth.ActorName), &messages.TaskListRequest{Environment: env}, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	return res.(*messages.TaskList).Tasks, nil
}
