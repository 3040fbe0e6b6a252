// Command frognano-node is the frognano cluster daemon: it runs one node of
// the actor cluster until SIGTERM or SIGINT, then shuts down gracefully.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/cmd/internal/nodeflags"
	"github.com/frognano/frognano/cmd/internal/services"
	"github.com/frognano/frognano/runtime/capabilities"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

func main() {
	capabilities.SetMemoryLimit(capabilities.DefaultMemoryFraction)
	if err := command().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "frognano-node:", err)
		os.Exit(1)
	}
}

func command() *cobra.Command {
	var printConfig bool
	cmd := &cobra.Command{
		Use:   "frognano-node",
		Short: "Run a frognano cluster node",
		Long: `frognano-node runs one node of a frognano cluster: the actor system with
remoting and cluster membership, the node's Badger store, and an HTTP server
with /healthz, /readyz, /metrics and the node API.

Settings come from, in increasing priority: built-in defaults, a YAML file
(--config or FROGNANO_CONFIG), environment variables (FROGNANO_<SECTION>_<KEY>,
e.g. FROGNANO_NODE_DATA_DIR), and the flags below. The resolved configuration
is printed at start. A node with no seeds is a one-node cluster; give
--seeds HOST:PORT (another node's --http-addr) to join an existing cluster.

SIGTERM or SIGINT stops the node gracefully: it leaves the cluster, finishes
in-flight writes and closes its store.`,
		Version:       node.Version(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
	}
	load := nodeflags.Bind(cmd.Flags())
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print the resolved configuration and exit")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := load()
		if err != nil {
			return err
		}
		if printConfig {
			fmt.Fprint(cmd.OutOrStdout(), cfg.YAML())
			return nil
		}
		return run(cfg)
	}
	return cmd
}

func run(cfg config.Config) error {
	log := nodeflags.Logger(cfg, os.Stderr)
	fmt.Fprintf(os.Stderr, "# frognano-node %s, resolved configuration:\n%s", node.Version(), cfg.YAML())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	w, opts := services.NewWiring(cfg, log, os.Stderr, true)
	defer w.Close()
	n, err := node.Start(ctx, cfg, opts)
	if err != nil {
		return err
	}
	w.Start(ctx, n)
	<-ctx.Done()
	log.Info("shutting down", "signal", "received")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.Stop(sctx)
}
