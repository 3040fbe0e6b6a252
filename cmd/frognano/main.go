// Command frognano is the frognano CLI. It talks to a running node
// (--node HOST:PORT, the node's --http-addr) or starts an embedded node in
// its own process for single-machine use.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/cmd/internal/nodeflags"
	"github.com/frognano/frognano/runtime/capabilities"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

func main() {
	capabilities.SetMemoryLimit(capabilities.DefaultMemoryFraction)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := root().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "frognano:", err)
		os.Exit(1)
	}
}

// app holds what every subcommand shares.
type app struct {
	nodeAddr string
	load     func() (config.Config, error)
}

// embedDefaults lets an embedded node pick free ports, so the CLI never
// collides with a daemon on the same machine, unless the user chose ports.
func (a *app) embedDefaults(cmd *cobra.Command) func(*config.Config) {
	return func(cfg *config.Config) {
		flags := cmd.Flags()
		if !flags.Changed("http-addr") && os.Getenv(config.EnvName("node.http_addr")) == "" {
			cfg.Node.HTTPAddr = "127.0.0.1:0"
		}
		if !flags.Changed("remote-addr") && os.Getenv(config.EnvName("node.remote_addr")) == "" {
			cfg.Node.RemoteAddr = "127.0.0.1:0"
		}
	}
}

func (a *app) connect(cmd *cobra.Command) (*client, error) {
	return connect(cmd.Context(), a.nodeAddr, a.load, a.embedDefaults(cmd))
}

func root() *cobra.Command {
	a := &app{}
	cmd := &cobra.Command{
		Use:   "frognano",
		Short: "Train small coding agents with RL on bug-fix tasks synthesized online",
		Long: `frognano trains small coding agents with reinforcement learning on bug-fix
tasks it synthesizes online, each calibrated to what the current checkpoint
can just barely solve.

Every command talks to a running frognano-node when --node HOST:PORT (the
node's --http-addr) is given; otherwise it starts an embedded node in this
process, configured like frognano-node (--config, FROGNANO_* variables and the
node flags below).`,
		Version:       node.Version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&a.nodeAddr, "node", "", "a running node's HTTP API (HOST:PORT or http://HOST:PORT); empty starts an embedded node")
	a.load = nodeflags.Bind(pf)
	cmd.AddCommand(runCmd(a), nodeCmd(a), clusterCmd(a), diagCmd(a), envCmd(a), modelCmd(a), generateCmd(a), chatCmd(a), synthCmd(a), tasksCmd(a), learnCmd(a), frontierCmd(a), benchCmd(a), serveCmd(a), trajCmd(a), evalCmd(a), evalsCmd(a), runsCmd(a), certCmd())
	return cmd
}

func nodeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "node", Short: "Inspect a node"}
	info := &cobra.Command{
		Use:   "info",
		Short: "Print the node's facts: addresses, kinds and capabilities (cores, memory, containerd, GPUs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.ask(&rtmsg.NodeInfoRequest{}, 10*time.Second)
			if err != nil {
				return err
			}
			b, _ := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(res.(*rtmsg.NodeInfo))
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	}
	cmd.AddCommand(info)
	return cmd
}

func clusterCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect the cluster and spawn actors on its members"}
	members := &cobra.Command{
		Use:   "members",
		Short: "List live cluster members with their kinds, capabilities and load",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.ask(&rtmsg.MembersRequest{}, 10*time.Second)
			if err != nil {
				return err
			}
			return writeMembers(cmd.OutOrStdout(), res.(*rtmsg.MembersReply))
		},
	}
	var member string
	spawn := &cobra.Command{
		Use:   "spawn KIND",
		Short: "Check that a member (by its remoting address) spawns an actor of a registered kind: spawned, then stopped",
		Long: `spawn asks the node's manager to spawn an actor of KIND on a member (any that
offers the kind, or --member ADDR) by remote spawning, prints where it was
spawned, and has it stopped: the CLI is not in the actor system, so an actor
it spawned could never be reached or stopped by it. Use it to check that a
member offers a kind and that remoting between the nodes works.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.ask(&rtmsg.SpawnRequest{Kind: args[0], Member: member}, 10*time.Second)
			if err != nil {
				return err
			}
			r := res.(*rtmsg.SpawnReply)
			fmt.Fprintf(cmd.OutOrStdout(), "spawned %s as %s/%s\n", args[0], r.Address, r.Id)
			return nil
		},
	}
	spawn.Flags().StringVar(&member, "member", "", "remoting address of the member to spawn on (default: any that offers the kind)")
	cmd.AddCommand(members, spawn)
	return cmd
}

func diagCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "diag", Short: "Diagnostics: message round trips and distributed digest jobs"}
	var count int
	ping := &cobra.Command{
		Use:   "ping",
		Short: "Send pings to the node's manager actor and report round-trip latency",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count <= 0 {
				return fmt.Errorf("--count must be positive")
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			lat := make([]time.Duration, 0, count)
			for i := 0; i < count; i++ {
				t := time.Now()
				if _, err := c.ask(&rtmsg.Ping{Seq: uint64(i)}, 5*time.Second); err != nil {
					return err
				}
				lat = append(lat, time.Since(t))
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			fmt.Fprintf(cmd.OutOrStdout(), "%d pings to %s: p50 %v p95 %v max %v\n", count, c.manager.Address,
				lat[len(lat)/2], lat[len(lat)*95/100], lat[len(lat)-1])
			return nil
		},
	}
	ping.Flags().IntVar(&count, "count", 100, "number of pings")

	var jobs int
	var rounds int64
	var preferRemote, asJSON bool
	digest := &cobra.Command{
		Use:   "digest",
		Short: "Spread iterated SHA-256 jobs over the members offering the diag kind, verify every answer",
		Long: `digest asks the node to run --jobs digest jobs on diag actors it spawns by
kind on cluster members (other members first with --prefer-remote). When a
worker or its node dies, the node's supervisor hands the unfinished jobs to a
surviving member. Every answer is checked against a digest computed here.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.ask(&rtmsg.DigestBatchRequest{Jobs: int32(jobs), Rounds: rounds, PreferRemote: preferRemote, Seed: uint64(time.Now().UnixNano())}, 30*time.Minute)
			if err != nil {
				return err
			}
			report := res.(*rtmsg.DigestBatchReport)
			bad := verifyDigests(report, rounds)
			if asJSON {
				printJSON(cmd.OutOrStdout(), report)
			} else {
				perNode := map[string]int{}
				retried := 0
				for _, o := range report.Outcomes {
					perNode[o.Node]++
					if o.Attempts > 1 {
						retried++
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d jobs in %.2fs, %d retried after a lost worker, %d wrong or failed\n", len(report.Outcomes), report.Seconds, retried, bad)
				for n, k := range perNode {
					fmt.Fprintf(cmd.OutOrStdout(), "  %-24s %d jobs\n", n, k)
				}
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d digest jobs failed or answered wrongly", bad, len(report.Outcomes))
			}
			return nil
		},
	}
	digest.Flags().IntVar(&jobs, "jobs", 16, "number of jobs")
	digest.Flags().Int64Var(&rounds, "rounds", 200000, "SHA-256 rounds per job")
	digest.Flags().BoolVar(&preferRemote, "prefer-remote", false, "place jobs on other members before this node")
	digest.Flags().BoolVar(&asJSON, "json", false, "print the full report as JSON")
	cmd.AddCommand(ping, digest)
	return cmd
}

// verifyDigests recomputes every digest and counts failures and mismatches.
func verifyDigests(r *rtmsg.DigestBatchReport, rounds int64) int {
	bad := 0
	for _, o := range r.Outcomes {
		if o.Error != "" || !bytes.Equal(o.Digest, diag.Digest(o.Data, rounds)) {
			bad++
		}
	}
	return bad
}
