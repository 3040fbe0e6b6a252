// Package nodeflags binds a node's configuration to command-line flags and
// builds its logger, shared by frognano-node and the CLI's embedded node.
package nodeflags

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/frognano/frognano/runtime/config"
)

// flag maps a command-line flag onto a configuration key.
type flag struct {
	name, key, usage string
}

var flags = []flag{
	{"node-id", "node.id", "node name in logs and membership (default: hostname-port)"},
	{"data-dir", "node.data_dir", "directory for the node's Badger store and other state"},
	{"http-addr", "node.http_addr", "HOST:PORT for /healthz, /readyz, /metrics, the node API and membership; off loopback it needs node.api_token (env FROGNANO_NODE_API_TOKEN; no flag, so that it does not show in ps)"},
	{"remote-addr", "node.remote_addr", "HOST:PORT for actor remoting (gRPC); port 0 picks a free port; off loopback it needs mutual TLS (--remote-tls-ca, --remote-tls-cert, --remote-tls-key; see frognano cert --help)"},
	{"advertise", "node.advertise", "remoting HOST:PORT other nodes should dial, if not remote-addr"},
	{"remote-tls-ca", "remote.tls_ca", "`FILE` of the PEM CA certificate(s) for mutual TLS on actor remoting (from frognano cert ca or your own); with --remote-tls-cert and --remote-tls-key, required when --remote-addr is not loopback"},
	{"remote-tls-cert", "remote.tls_cert", "`FILE` of the PEM certificate this node or client presents on actor remoting (from frognano cert node)"},
	{"remote-tls-key", "remote.tls_key", "`FILE` of the PEM private key of --remote-tls-cert"},
	{"cluster-name", "cluster.name", "cluster name; nodes of one cluster must agree"},
	{"seeds", "cluster.seeds", "comma-separated HTTP addresses of nodes to join through"},
	{"memory-limit", "node.memory_limit", "fixed soft limit on the process's memory, kept by the Go garbage collector: a size (12GiB, 800MiB), a share of the memory the process may use (45%: of MemTotal or the cgroup's limit) or off (default: GOMEMLIMIT if set, else 70% raised after each collection to 1.25x the live heap, up to 85%)"},
	{"containerd-address", "containerd.address", "containerd socket"},
	{"debian-mirror", "image.debian_mirror", "Debian archive the sandboxes' base image is bootstrapped from (default: the host's apt sources)"},
	{"log-level", "log.level", "debug, info, warn or error"},
	{"log-format", "log.format", "text or json"},
}

// Bind registers the node flags on fs (all strings, so that "unset" is
// distinguishable from a default) and returns a function that loads the
// configuration: defaults < file (--config or FROGNANO_CONFIG) < environment < flags.
func Bind(fs *pflag.FlagSet) func() (config.Config, error) {
	path := fs.String("config", "", "YAML configuration file (env FROGNANO_CONFIG)")
	values := make([]*string, len(flags))
	for i, f := range flags {
		values[i] = fs.String(f.name, "", f.usage+" [key "+f.key+", env "+config.EnvName(f.key)+"]")
	}
	return func() (config.Config, error) {
		p := *path
		if p == "" {
			p = os.Getenv(config.EnvPrefix + "CONFIG")
		}
		cfg, err := config.Load(p, os.Environ())
		if err != nil {
			return cfg, err
		}
		for i, f := range flags {
			if fs.Changed(f.name) {
				if err := cfg.Set(f.key, *values[i]); err != nil {
					return cfg, fmt.Errorf("--%s: %w", f.name, err)
				}
			}
		}
		return cfg, cfg.Validate()
	}
}

// Logger builds the slog logger a configuration asks for.
func Logger(cfg config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
