package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/encoding/protojson"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/ui"
	"github.com/frognano/frognano/cmd/internal/nodeflags"
	"github.com/frognano/frognano/cmd/internal/services"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/mtls"
	"github.com/frognano/frognano/runtime/node"
)

// client reaches a node's manager actor: a running node over actor remoting,
// or a node embedded in this process.
type client struct {
	system    *actor.ActorSystem
	manager   *actor.PID
	embedded  *node.Node
	sandboxes *services.Sandboxes
	policy    *services.Policy
	remote    *remote.Remote
	log       *slog.Logger
	// tls: the client's remoting uses mutual TLS (remote.tls_*).
	tls bool
	// answered: the node has answered once (so remoting works).
	answered atomic.Bool
}

// connect uses the node at httpAddr, or starts an embedded one when it is empty.
func connect(ctx context.Context, httpAddr string, load func() (config.Config, error), embedDefaults func(*config.Config)) (*client, error) {
	cfg, err := load()
	if err != nil {
		return nil, err
	}
	log := nodeflags.Logger(cfg, os.Stderr)
	if httpAddr == "" {
		if embedDefaults != nil {
			embedDefaults(&cfg)
		}
		sandboxes := services.NewSandboxes(cfg, log)
		kinds, actors := sandboxes.Options(io.Discard)
		policy := services.NewPolicy(services.PolicyConfig{Model: cfg.Policy.Model, Quantization: cfg.Policy.Quantization, Logger: log})
		pk, pa, handlers := policy.Options()
		n, err := node.Start(ctx, cfg, node.Options{Logger: log, Version: node.Version(),
			Kinds: append(kinds, pk...), Actors: append(actors, pa...), Handlers: append(handlers, ui.NodeHandler())})
		if err != nil {
			return nil, err
		}
		sandboxes.Start(ctx, n)
		return &client{system: n.System(), manager: n.Manager(), embedded: n, sandboxes: sandboxes, policy: policy, log: log}, nil
	}
	info, err := fetchInfo(ctx, httpAddr, cfg.Node.APIToken)
	if err != nil {
		return nil, err
	}
	// The client joins the actor system with the node's remoting settings:
	// with remote.tls_* set it presents that certificate and accepts only
	// a node whose certificate the same CA signed (and the node answers
	// through this client's loopback listener, which then requires one too).
	tlsOpts, _, err := mtls.RemoteOptions(cfg.Remote)
	if err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	r := remote.NewRemote(system, remote.Configure("127.0.0.1", 0, tlsOpts...))
	r.Start()
	return &client{system: system, manager: actor.NewPID(info.Address, node.ManagerName), remote: r, log: log, tls: cfg.Remote.TLS()}, nil
}

// nodeURL is the base URL of a node's HTTP API given as HOST:PORT or as
// an http(s) URL (what the node prints), without a trailing slash.
func nodeURL(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	switch {
	case err != nil:
		return "", fmt.Errorf("--node %q is not HOST:PORT or an http:// URL", config.Clip(addr, 80))
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("--node %q: want HOST:PORT or an http:// URL", config.Clip(addr, 80))
	case u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil:
		return "", fmt.Errorf("--node %q: want HOST:PORT or http://HOST:PORT, without a path or user", config.Clip(addr, 80))
	}
	return u.Scheme + "://" + u.Host, nil
}

// fetchInfo reads a node's facts from its HTTP API, with the API token
// (node.api_token) when one is configured.
func fetchInfo(ctx context.Context, httpAddr, token string) (*messages.NodeInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	base, err := nodeURL(httpAddr)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+node.InfoPath, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no frognano node answers at %s: %w", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized && token == "":
		return nil, fmt.Errorf("node at %s needs its API token: set %s (or node.api_token in --config)", base, config.EnvName("node.api_token"))
	case resp.StatusCode == http.StatusUnauthorized:
		return nil, fmt.Errorf("node at %s refused the API token (%s): it is not the node's node.api_token", base, config.EnvName("node.api_token"))
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("node at %s: %s", base, resp.Status)
	}
	info := &messages.NodeInfo{}
	if err := protojson.Unmarshal(body, info); err != nil {
		return nil, fmt.Errorf("node at %s answered something that is not a frognano node: %w", base, err)
	}
	return info, nil
}

// ask sends req to the manager and returns its reply, turning a Failure into an error.
func (c *client) ask(req any, timeout time.Duration) (any, error) {
	return c.askActor(c.manager, req, timeout)
}

// askActor is ask for any actor of the node.
func (c *client) askActor(pid *actor.PID, req any, timeout time.Duration) (any, error) {
	res, err := c.system.Root.RequestFuture(pid, req, timeout).Result()
	if err != nil {
		return nil, fmt.Errorf("node %s did not answer: %w%s", c.manager.Address, err, c.tlsHint())
	}
	c.answered.Store(true)
	if f, ok := res.(*messages.Failure); ok {
		return nil, fmt.Errorf("%s", f.Message)
	}
	return res, nil
}

// tlsHint says which remoting settings to check when a remote node does
// not answer: a TLS handshake that fails looks like silence from here.
func (c *client) tlsHint() string {
	if c.embedded != nil || c.answered.Load() {
		return ""
	}
	if c.tls {
		return fmt.Sprintf(" (this client uses mutual TLS from remote.tls_ca, remote.tls_cert and remote.tls_key: the node must use a certificate "+
			"of the same CA that names the host in %s, and this client's certificate must name 127.0.0.1, where the node answers it)", c.manager.Address)
	}
	return fmt.Sprintf(" (if the node's remoting uses mutual TLS, set remote.tls_ca, remote.tls_cert and remote.tls_key: %s, %s, %s)",
		config.EnvName("remote.tls_ca"), config.EnvName("remote.tls_cert"), config.EnvName("remote.tls_key"))
}

// pid is a named actor of the node the client talks to.
func (c *client) pid(name string) *actor.PID { return actor.NewPID(c.manager.Address, name) }

func (c *client) close() {
	if c.embedded != nil {
		_ = c.embedded.Stop(context.Background())
		_ = c.sandboxes.Close()
		_ = c.policy.Close()
		return
	}
	c.remote.Shutdown(false)
	c.system.Shutdown()
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
