package main

import (
	"bytes"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/actors/environment"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/synth"
)

// runCmd is the main job. Today the pipeline is the spine: it brings up a
// node (joined to a cluster when --seeds is given), spreads verified work over
// every member through remote spawning and supervision, and records the run in
// the node's store. Later stages (environments, synthesis, rollouts, learning)
// extend this command until it trains end to end.
func runCmd(a *app) *cobra.Command {
	var jobs int
	var rounds int64
	var envSource string
	var tasks int32
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the main job on an embedded node (today: cluster check, the default environment and task synthesis)",
		Long: `run starts an embedded node (joining a cluster through --seeds if given),
records a run in the node's Badger store, spreads --jobs verified digest jobs
over every cluster member by remote spawning, and makes sure the environment
--env (default six==1.16.0, a PyPI sdist) is registered, building its image and
baseline the first time, then synthesizes --tasks validated bug-fix tasks from
it. The run's status and figures are kept in the store.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.nodeAddr != "" {
				return fmt.Errorf("run starts its own embedded node; drop --node and use --seeds to join a cluster")
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			ctx := cmd.Context()
			n := c.embedded
			out := cmd.OutOrStdout()

			info := n.Info()
			caps := info.Capabilities
			fmt.Fprintf(out, "node %s  remote %s  http %s\n", info.Id, info.Address, info.HttpAddress)
			fmt.Fprintf(out, "capabilities: %d cores, %.1f GiB, containerd %v, %d GPU(s)", caps.Cores, float64(caps.MemoryBytes)/(1<<30), caps.Containerd, len(caps.Gpus))
			if caps.GpuError != "" {
				fmt.Fprintf(out, " (%s)", caps.GpuError)
			}
			fmt.Fprintln(out)

			started := time.Now()
			run := &messages.Run{
				Id:              fmt.Sprintf("run-%s", started.UTC().Format("20060102-150405.000")),
				Status:          "running",
				StartedUnixNano: started.UnixNano(),
				UpdatedUnixNano: started.UnixNano(),
				Metrics:         map[string]float64{},
			}
			runs := n.DB().Runs()
			if err := runs.Put(ctx, run); err != nil {
				return err
			}
			finish := func(status string) {
				run.Status = status
				run.UpdatedUnixNano = time.Now().UnixNano()
				if err := runs.Put(ctx, run); err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning: could not record run:", err)
				}
			}

			members := n.Members()
			fmt.Fprintf(out, "cluster: %d member(s)\n", len(members))
			res, err := c.ask(&messages.DigestBatchRequest{Jobs: int32(jobs), Rounds: rounds, PreferRemote: true, Seed: uint64(started.UnixNano())}, 30*time.Minute)
			if err != nil {
				finish("failed")
				return err
			}
			report := res.(*messages.DigestBatchReport)
			perNode := map[string]int{}
			bad := 0
			for _, o := range report.Outcomes {
				if o.Error != "" || !bytes.Equal(o.Digest, diag.Digest(o.Data, rounds)) {
					bad++
					continue
				}
				perNode[o.Node]++
			}
			for addr, k := range perNode {
				fmt.Fprintf(out, "  %-24s %d verified jobs\n", addr, k)
			}
			run.Metrics["members"] = float64(len(members))
			run.Metrics["jobs"] = float64(len(report.Outcomes))
			run.Metrics["jobs_failed"] = float64(bad)
			run.Metrics["jobs_per_second"] = float64(len(report.Outcomes)) / report.Seconds
			if bad > 0 {
				finish("failed")
				return fmt.Errorf("%d of %d jobs failed or answered wrongly", bad, len(report.Outcomes))
			}
			if envSource != "" {
				env, err := ensureEnvironment(c, envSource, cmd.ErrOrStderr())
				if err != nil {
					finish("failed")
					return err
				}
				run.Metrics["env_baseline_tests"] = float64(len(env.Baseline.GetResults()))
				fmt.Fprintf(out, "environment %s: %s, image %s, baseline %s\n", env.Name, env.Language, env.Image, summarize(env.Baseline))
				if tasks > 0 {
					res, err := c.synthesize(&messages.SynthesizeRequest{Environment: env.Name, Count: tasks, Bugs: 1,
						Seed: uint64(started.UnixNano()), Target: &messages.DifficultyFeatures{HintLevel: int32(synth.HintLocation)}}, cmd.ErrOrStderr())
					if err != nil {
						finish("failed")
						return err
					}
					run.Metrics["tasks_synthesized"] = float64(len(res.TaskIds))
					run.Metrics["synth_candidates"] = float64(res.GetProgress().GetCandidates())
					fmt.Fprintf(out, "synthesized %d validated tasks from %d candidates in %.1fs (frognano tasks ls --env %s)\n",
						len(res.TaskIds), res.GetProgress().GetCandidates(), res.WallSeconds, env.Name)
				}
			}
			finish("done")
			fmt.Fprintf(out, "run %s done: %d jobs verified in %.2fs; recorded in %s\n", run.Id, len(report.Outcomes), report.Seconds, n.DB().Dir())
			return nil
		},
	}
	cmd.Flags().IntVar(&jobs, "jobs", 32, "digest jobs to spread over the cluster")
	cmd.Flags().Int64Var(&rounds, "rounds", 100000, "SHA-256 rounds per job")
	cmd.Flags().StringVar(&envSource, "env", "six==1.16.0", "environment source to make sure is registered (empty: skip)")
	cmd.Flags().Int32Var(&tasks, "tasks", 5, "validated tasks to synthesize from the environment (0: none)")
	return cmd
}

// ensureEnvironment returns the environment for source, registering it first
// when the node does not have it yet.
func ensureEnvironment(c *client, source string, progress io.Writer) (*messages.Environment, error) {
	src, err := environment.ParseSource(source)
	if err != nil {
		return nil, err
	}
	envs := c.pid(environment.ActorName)
	if res, err := c.askActor(envs, &messages.EnvGetRequest{Name: environment.DefaultName(src)}, time.Minute); err == nil {
		return res.(*messages.EnvAddReply).Environment, nil
	}
	res, err := c.askWithProgress(envs, &messages.EnvAddRequest{Source: source}, 2*time.Hour, progress)
	if err != nil {
		return nil, err
	}
	return res.(*messages.EnvAddReply).Environment, nil
}
