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
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/gateway"
	"github.com/frognano/frognano/cmd/internal/nodeflags"
	"github.com/frognano/frognano/cmd/internal/services"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// client reaches a node's actors through the node's HTTP API (the actor
// gateway, actors/gateway): a running node at --node, or a node embedded
// in this process, reached the same way. The CLI never joins the node's
// actor system; system is this process's own (the embedded node's, or a
// local one for the actors eval spawns here).
type client struct {
	gw        *gateway.Client
	manager   *actor.PID // the node's manager: its address names the node
	embedded  *node.Node
	wiring    *services.Wiring
	sandboxes *services.Sandboxes
	log       *slog.Logger

	localOnce sync.Once
	system    *actor.ActorSystem
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
		// The embedded node's run service resumes no run by itself: the
		// CLI runs what it is asked to (frognano run --run ID resumes).
		w, opts := services.NewWiring(cfg, log, io.Discard, false)
		n, err := node.Start(ctx, cfg, opts)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.Start(ctx, n)
		return &client{gw: &gateway.Client{Base: "http://" + n.HTTPAddr(), Token: cfg.Node.APIToken}, system: n.System(), manager: n.Manager(),
			embedded: n, wiring: w, sandboxes: w.Sandboxes, log: log}, nil
	}
	info, err := fetchInfo(ctx, httpAddr, cfg.Node.APIToken)
	if err != nil {
		return nil, err
	}
	base, err := nodeURL(httpAddr)
	if err != nil {
		return nil, err
	}
	return &client{gw: &gateway.Client{Base: base, Token: cfg.Node.APIToken}, manager: actor.NewPID(info.Address, node.ManagerName), log: log}, nil
}

// local is this process's actor system: the embedded node's, or one of its
// own (not remoting) for the actors a command spawns here.
func (c *client) local() *actor.ActorSystem {
	c.localOnce.Do(func() {
		if c.system == nil {
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			c.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
		}
	})
	return c.system
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
func fetchInfo(ctx context.Context, httpAddr, token string) (*rtmsg.NodeInfo, error) {
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
	info := &rtmsg.NodeInfo{}
	if err := protojson.Unmarshal(body, info); err != nil {
		return nil, fmt.Errorf("node at %s answered something that is not a frognano node: %w", base, err)
	}
	return info, nil
}

// ask sends req to the manager and returns its reply, turning a Failure into an error.
func (c *client) ask(req any, timeout time.Duration) (any, error) {
	return c.askActor(c.manager, req, timeout)
}

// askActor is ask for any actor of the node (through its gateway).
func (c *client) askActor(pid *actor.PID, req any, timeout time.Duration) (any, error) {
	return c.call(context.Background(), pid.Id, req, timeout, nil)
}

// call sends req to the node's actor name through the gateway; progress,
// when set, sees each progress message before the reply.
func (c *client) call(ctx context.Context, name string, req any, timeout time.Duration, progress func(any)) (any, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a message the node's gateway carries", req)
	}
	var on func(proto.Message)
	if progress != nil {
		on = func(p proto.Message) { progress(p) }
	}
	res, err := c.gw.Ask(ctx, name, m, timeout, on)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Ask implements environment.Asker through the node's gateway.
func (c *client) Ask(ctx context.Context, name string, req any, timeout time.Duration) (any, error) {
	return c.call(ctx, name, req, timeout, nil)
}

// AskStages implements environment.Asker: a spinner over the stages on a
// terminal, a line per stage elsewhere.
func (c *client) AskStages(_ context.Context, name string, req any, timeout time.Duration, out io.Writer, _ func(any) bool) (any, error) {
	return c.askWithProgress(c.pid(name), req, timeout, out)
}

// pid is a named actor of the node the client talks to.
func (c *client) pid(name string) *actor.PID { return actor.NewPID(c.manager.Address, name) }

func (c *client) close() {
	if c.embedded != nil {
		_ = c.embedded.Stop(context.Background())
		c.wiring.Close()
		return
	}
	if c.system != nil {
		c.system.Shutdown()
	}
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
