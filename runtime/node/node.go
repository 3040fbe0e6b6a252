// Package node boots a frognano node: the protoactor-go actor system with
// remoting and cluster membership, the registered actor kinds, the node's
// durable store, and its HTTP surface (/healthz, /readyz, /metrics, the node
// API and membership). One machine is a one-node cluster; more nodes join
// through seed addresses.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/frognano/frognano/persistence"
	"github.com/frognano/frognano/runtime/capabilities"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/membership"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/mtls"
	"github.com/frognano/frognano/runtime/supervise"
)

// Kind is an actor kind a node can spawn by name, locally or for a remote node.
type Kind struct {
	Name  string
	Props func(n *Node) *actor.Props
}

// Options are what a caller adds to the configuration.
type Options struct {
	Logger  *slog.Logger
	Version string
	// Kinds are the actor kinds the node offers; the node registers none
	// of its own (cmd/internal/services adds actors/diag's).
	Kinds []Kind
	// Manager are handlers of the requests the node's manager answers
	// beyond its own (actors/diag's DigestBatchRequest), asked in order.
	Manager []ManagerHandler
	// Actors are spawned at start under well-known names, supervised by the
	// node's policy; other nodes and the CLI reach them at PID{address, Name}.
	Actors []NamedActor
	// Handlers are mounted on the node's HTTP server beside its own paths
	// (a node serving a model adds the OpenAI API).
	Handlers []Handler
	// Collectors are registered on the node's /metrics beside its own.
	Collectors []prometheus.Collector
	// HTTP bounds what one client of the HTTP server can hold (zero fields:
	// DefaultHTTPLimits).
	HTTP HTTPLimits
}

// Handler is an HTTP handler mounted on the node's server at Pattern, an
// http.ServeMux pattern that should name its method ("POST
// /v1/chat/completions"), so that the server answers others 405. Like
// every path but the probes it needs the API token when one is configured.
type Handler struct {
	Pattern string
	Handler func(n *Node) http.Handler
	// MaxBody bounds the request body (0: HTTPLimits.MaxBody).
	MaxBody int64
}

// ManagerHandler answers at the node's manager a request the manager does
// not answer itself (it answers Ping, NodeInfoRequest, MembersRequest and
// SpawnRequest; lifecycle messages reach no handler) and reports whether
// it took it. It runs in the manager's Receive, so a request that takes
// long is answered by a child it spawns (ctx.Spawn). A request no handler
// takes is answered with a Failure FAILURE_CODE_UNKNOWN_REQUEST.
type ManagerHandler func(n *Node, ctx actor.Context) bool

// NamedActor is a long-lived actor of the node.
type NamedActor struct {
	Name  string
	Props func(n *Node) *actor.Props
	// Ready: the node serves HTTP only once this actor has handled its
	// Started message (at most ReadyTimeout), for a service that resumes
	// its jobs there: a client that follows a job the moment the node
	// answers finds it running, not yet to be resumed.
	Ready bool
}

// ReadyTimeout bounds the wait for a Ready named actor's start; past it
// the node serves HTTP anyway, with a warning.
var ReadyTimeout = 30 * time.Second

// Node is a running frognano node.
type Node struct {
	cfg     config.Config
	log     *slog.Logger
	version string

	db         *persistence.DB
	system     *actor.ActorSystem
	remote     *remote.Remote
	cluster    *cluster.Cluster
	membership membership.Membership
	manager    *actor.PID
	httpLn     net.Listener
	http       *http.Server
	metrics    *prometheus.Registry
	collectors []prometheus.Collector
	started    time.Time
	kinds      []string
	handlers   []Handler
	requests   []ManagerHandler
	limits     HTTPLimits

	mu   sync.Mutex
	caps *rtmsg.Capabilities
	load nodeLoad // NodeInfo.load (load.go)
	// topology is the cluster's member list as its last ClusterTopology
	// event gave it (members.go); topologySub that subscription.
	topology    []Member
	topologySub *eventstream.Subscription
	// gossipOn: the cluster's gossip runs and holds the members' facts;
	// factsStop and factsDone end this node's publishing of its own.
	gossipOn  bool
	factsStop context.CancelFunc
	factsDone chan struct{}
	// named are the long-lived actors of Options.Actors, in spawn order;
	// Stop stops them before the store closes.
	named []*actor.PID

	stopOnce sync.Once
	stopErr  error
	// gcStop ends the store's garbage collector; gcDone closes when it has.
	gcStop context.CancelFunc
	gcDone chan struct{}
}

// GCEvery is how often a node reclaims the store's value-log space left by
// pruned checkpoints and publications (a full checkpoint of SmolLM2 is
// 1.6 GB: without this, a run that checkpoints every step fills the disk).
var GCEvery = 2 * time.Minute

// collectGarbage runs the store's value-log GC every GCEvery until ctx
// ends.
func (n *Node) collectGarbage(ctx context.Context) {
	defer close(n.gcDone)
	t := time.NewTicker(GCEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := n.db.CollectGarbage(ctx); err != nil && ctx.Err() == nil {
				n.log.Warn("store garbage collection failed", "err", err)
			}
		}
	}
}

// ErrAddressInUse means another process already listens on a configured address.
var ErrAddressInUse = errors.New("address already in use")

// Start brings a node up. On any error everything already started is stopped
// again and nothing on disk is left half-done.
func Start(ctx context.Context, cfg config.Config, opts Options) (n *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	n = &Node{cfg: cfg, log: log, version: opts.Version, started: time.Now(), handlers: opts.Handlers, collectors: opts.Collectors, requests: opts.Manager, limits: opts.HTTP.withDefaults()}
	partial := n
	defer func() {
		if err != nil {
			partial.Stop(context.Background())
			n = nil
		}
	}()

	// Listen for HTTP first: it also proves the port is ours.
	if n.httpLn, err = net.Listen("tcp", cfg.Node.HTTPAddr); err != nil {
		return nil, fmt.Errorf("node.http_addr %s: %w (is another node running?)", cfg.Node.HTTPAddr, ErrAddressInUse)
	}
	if ip := n.httpLn.Addr().(*net.TCPAddr).IP; cfg.Node.APIToken == "" && !ip.IsLoopback() {
		// Validate read the name; this is where it really bound.
		return nil, fmt.Errorf("node.api_token: required because node.http_addr %s bound to %s, which is not a loopback address: set node.api_token or %s",
			cfg.Node.HTTPAddr, ip, config.EnvName("node.api_token"))
	}
	remoteHost, remotePort, remoteIP, err := reserveRemote(cfg.Node.RemoteAddr)
	if err != nil {
		return nil, err
	}
	// Remoting off loopback needs mutual TLS: Validate read the name; this
	// is where it really bound.
	if !cfg.Remote.TLS() && !cfg.Remote.AllowInsecure && !remoteIP.IsLoopback() {
		return nil, config.RemoteTLSRequired(cfg.Node.RemoteAddr, remoteIP.String())
	}
	tlsOpts, creds, err := mtls.RemoteOptions(cfg.Remote)
	if err != nil {
		return nil, err
	}
	if h := dialledHost(remoteIP, cfg.Node.Advertise); creds != nil && h != "" {
		if err := creds.CheckHost(h); err != nil {
			return nil, err
		}
	}

	if err := os.MkdirAll(cfg.Node.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("node.data_dir: %w", err)
	}
	if n.db, err = persistence.Open(StoreDir(cfg), persistence.WithLogger(log.With("component", "badger"))); err != nil {
		return nil, fmt.Errorf("node.data_dir %s: %w", cfg.Node.DataDir, err)
	}
	var gcCtx context.Context
	gcCtx, n.gcStop = context.WithCancel(context.Background())
	n.gcDone = make(chan struct{})
	go n.collectGarbage(gcCtx)

	n.caps = capabilities.Probe(ctx, capabilities.Options{
		ContainerdAddress:   cfg.Containerd.Address,
		ContainerdNamespace: cfg.Containerd.Namespace,
		Logger:              log.With("component", "capabilities"),
	})
	if err := applyMemoryLimit(cfg.Node.MemoryLimit, os.Getenv("GOMEMLIMIT"), n.caps.GetMemoryBytes(), log); err != nil {
		return nil, err
	}

	policy := supervise.Policy{
		MaxRestarts: cfg.Supervision.MaxRestarts,
		Window:      cfg.Supervision.Window,
		BackoffMin:  cfg.Supervision.BackoffMin,
		BackoffMax:  cfg.Supervision.BackoffMax,
		Logger:      log.With("component", "supervisor"),
	}
	actorLog := log.With("component", "actor")
	if cfg.Log.Level != "debug" {
		// protoactor narrates every endpoint and topology change at info.
		actorLog = slog.New(levelFloor{log.Handler(), slog.LevelWarn})
	}
	n.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return actorLog }))

	var remoteKinds []*remote.Kind
	var clusterKinds []*cluster.Kind
	for _, k := range opts.Kinds {
		props := n.load.counted(k.Name, k.Props(n))
		remoteKinds = append(remoteKinds, remote.NewKind(k.Name, props))
		clusterKinds = append(clusterKinds, cluster.NewKind(k.Name, props))
		n.kinds = append(n.kinds, k.Name)
	}
	sort.Strings(n.kinds)

	remoteOpts := append([]remote.ConfigOption{remote.WithKinds(remoteKinds...)}, tlsOpts...)
	if cfg.Node.Advertise != "" {
		remoteOpts = append(remoteOpts, remote.WithAdvertisedHost(cfg.Node.Advertise))
	}
	remoteCfg := remote.Configure(remoteHost, remotePort, remoteOpts...)

	switch cfg.Cluster.Provider {
	case config.ProviderEtcd:
		// Connecting checks etcd answers: a wrong endpoint, certificate,
		// user or password is one error here.
		e, err := membership.NewEtcd(ctx, n.httpLn.Addr().String(), membership.EtcdOptions{
			Endpoints:      cfg.Cluster.EtcdEndpoints,
			Prefix:         cfg.Cluster.EtcdPrefix,
			Cluster:        cfg.Cluster.Name,
			FailureTimeout: cfg.Cluster.FailureTimeout,
			Heartbeat:      cfg.Cluster.Heartbeat,
			Refresh:        cfg.Cluster.EtcdRefresh,
			Security: membership.EtcdSecurity{
				CAFile:       cfg.Cluster.EtcdTLSCA,
				CertFile:     cfg.Cluster.EtcdTLSCert,
				KeyFile:      cfg.Cluster.EtcdTLSKey,
				Username:     cfg.Cluster.EtcdUsername,
				Password:     cfg.Cluster.EtcdPassword,
				PasswordFile: cfg.Cluster.EtcdPasswordFile,
			},
			Logger: log.With("component", "membership"),
		})
		if err != nil {
			return nil, err
		}
		n.membership = e
	default:
		n.membership = membership.New(n.httpLn.Addr().String(), membership.Options{
			Seeds:          cfg.Cluster.Seeds,
			Heartbeat:      cfg.Cluster.Heartbeat,
			FailureTimeout: cfg.Cluster.FailureTimeout,
			Token:          cfg.Node.APIToken,
			Logger:         log.With("component", "membership"),
		})
	}
	// The provider is the one liveness mechanism: gossip's heartbeat
	// expiry is off (members.go).
	clusterCfg := cluster.Configure(cfg.Cluster.Name, n.membership, disthash.New(), remoteCfg,
		cluster.WithKinds(clusterKinds...),
		cluster.WithHeartbeatExpiration(noGossipExpiry))
	n.cluster = cluster.New(n.system, clusterCfg)
	n.watchTopology()
	if err := startCluster(n.cluster); err != nil {
		return nil, err
	}
	n.mu.Lock() // Info reads it, from the facts publisher too
	n.remote = n.cluster.Remote
	n.mu.Unlock()
	n.startFacts()

	n.manager, err = n.system.Root.SpawnNamed(
		actor.PropsFromProducer(func() actor.Actor { return &manager{n: n} },
			actor.WithGuardian(policy.Strategy()),
			actor.WithSupervisor(policy.Strategy())),
		ManagerName)
	if err != nil {
		return nil, fmt.Errorf("spawn node manager: %w", err)
	}

	for _, a := range opts.Actors {
		props := a.Props(n).Configure(actor.WithGuardian(policy.Strategy()))
		pid, err := n.system.Root.SpawnNamed(props, a.Name)
		if err != nil {
			return nil, fmt.Errorf("spawn %s: %w", a.Name, err)
		}
		n.named = append(n.named, pid)
	}
	// A Touch is answered once the actor's mailbox reaches it, after its
	// Started message (system messages go first).
	for i, a := range opts.Actors {
		if a.Ready {
			if _, err := n.system.Root.RequestFuture(n.named[i], &actor.Touch{}, ReadyTimeout).Result(); err != nil {
				log.Warn("a named actor did not start in time; serving HTTP anyway", "actor", a.Name, "err", err)
			}
		}
	}

	n.serveHTTP()
	tlsDesc := "off"
	if creds != nil {
		tlsDesc = "mutual (" + creds.Leaf.Subject.CommonName + ")"
	}
	log.Info("node started", "id", n.ID(), "remote", n.system.Address(), "remote_tls", tlsDesc, "http", n.HTTPAddr(),
		"data_dir", cfg.Node.DataDir, "kinds", strings.Join(n.kinds, ","), "cores", n.caps.Cores,
		"memory_bytes", n.caps.MemoryBytes, "containerd", n.caps.Containerd, "gpus", len(n.caps.Gpus))
	return n, nil
}

// StoreDir is where a node keeps its Badger database: a directory of its own
// inside the data directory, which also holds other state (the model store).
func StoreDir(cfg config.Config) string { return filepath.Join(cfg.Node.DataDir, "db") }

// reserveRemote checks the remoting address is free (protoactor panics when it
// is not) and resolves port 0 to a concrete free port; ip is the address
// the listener bound.
func reserveRemote(addr string) (host string, port int, ip net.IP, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", 0, nil, fmt.Errorf("node.remote_addr %s: %w (is another node running?)", addr, ErrAddressInUse)
	}
	ip = ln.Addr().(*net.TCPAddr).IP
	host, p, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	port, _ = strconv.Atoi(p)
	if h, _, _ := net.SplitHostPort(addr); h != "" {
		host = h
	}
	return host, port, ip, nil
}

// dialledHost is the host other nodes dial this node's remoting at: the
// advertised address's, else the IP the listener bound (protoactor
// advertises the listener's address, so a host name in node.remote_addr is
// dialled at the IP it resolved to); empty for an unspecified listen
// address (0.0.0.0, ::) without an advertised one, which names no host.
func dialledHost(bound net.IP, advertise string) string {
	if advertise != "" {
		if h, _, err := net.SplitHostPort(advertise); err == nil {
			return h
		}
		return advertise
	}
	if bound == nil || bound.IsUnspecified() {
		return ""
	}
	return bound.String()
}

func startCluster(c *cluster.Cluster) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("start cluster member: %v", r)
		}
	}()
	c.StartMember()
	return nil
}

// ID names the node: the configured id, or host-port of its remoting address.
func (n *Node) ID() string {
	if n.cfg.Node.ID != "" {
		return n.cfg.Node.ID
	}
	host, _ := os.Hostname()
	if n.system != nil {
		if _, port, err := net.SplitHostPort(n.system.Address()); err == nil {
			return host + "-" + port
		}
	}
	return host
}

// Address is the node's actor remoting address.
func (n *Node) Address() string { return n.system.Address() }

// HTTPAddr is the address the node's HTTP server listens on.
func (n *Node) HTTPAddr() string { return n.httpLn.Addr().String() }

// System is the node's actor system, for embedding callers.
func (n *Node) System() *actor.ActorSystem { return n.system }

// DB is the node's durable store.
func (n *Node) DB() *persistence.DB { return n.db }

// Manager is the PID of the node's manager actor.
func (n *Node) Manager() *actor.PID { return n.manager }

// Remote is the node's remoting, for actors that spawn on members (a
// placement pool).
func (n *Node) Remote() *remote.Remote {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.remote
}

// Logger is the node's logger.
func (n *Node) Logger() *slog.Logger { return n.log }

// Info describes the node for other nodes and the CLI.
func (n *Node) Info() *rtmsg.NodeInfo {
	n.mu.Lock()
	defer n.mu.Unlock()
	info := &rtmsg.NodeInfo{
		Id:              n.ID(),
		Version:         n.version,
		Kinds:           n.kinds,
		Capabilities:    n.caps,
		StartedUnixNano: n.started.UnixNano(),
	}
	info.Load = n.load.sample(n.caps.GetMemoryBytes())
	if n.system != nil && n.remote != nil {
		info.Address = n.system.Address()
	}
	if n.httpLn != nil {
		info.HttpAddress = n.httpLn.Addr().String()
	}
	return info
}

func (n *Node) offers(member, kind string) bool {
	for _, m := range n.clusterMembers() {
		if m.Address() == member {
			return slices.Contains(m.Kinds, kind)
		}
	}
	return false
}

func (n *Node) unknownKind(kind, member string) error {
	var offered []string
	for _, m := range n.clusterMembers() {
		if member == "" || m.Address() == member {
			offered = append(offered, m.Kinds...)
		}
	}
	sort.Strings(offered)
	where := "any live member"
	if member != "" {
		where = "member " + member
	}
	return fmt.Errorf("unknown actor kind %q on %s (kinds offered: %s)", kind, where, strings.Join(slices.Compact(offered), ", "))
}

// ActorStopTimeout bounds how long Stop waits for the node's named actors
// to finish stopping (a synthesis cancelled at shutdown destroys its
// validation sandboxes then).
var ActorStopTimeout = 2 * time.Minute

// Stop shuts the node down: HTTP first (so load balancers see it go), then
// the node's named actors (each ends what it runs: a synthesis in flight is
// cancelled and its sandboxes destroyed; Stop waits for that, at most
// ActorStopTimeout or ctx's deadline), then the cluster (leaving
// gracefully), then the store, which is closed last so that no actor can
// lose a write.
func (n *Node) Stop(ctx context.Context) error {
	n.stopOnce.Do(func() {
		var errs []error
		if n.http != nil {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			errs = append(errs, n.http.Shutdown(sctx))
			cancel()
		} else if n.httpLn != nil {
			n.httpLn.Close()
		}
		n.stopActors(ctx)
		n.stopFacts()
		if n.cluster != nil && n.cluster.Remote != nil {
			// A graceful leave waits for remoting's streams, and so for an
			// actor still busy with a remote request (a long digest job):
			// not past ctx's deadline.
			left := make(chan error, 1)
			go func() {
				defer func() {
					if r := recover(); r != nil {
						left <- fmt.Errorf("cluster shutdown: %v", r)
					}
				}()
				n.cluster.Shutdown(true)
				left <- nil
			}()
			select {
			case err := <-left:
				errs = append(errs, err)
			case <-ctx.Done():
				n.log.Warn("the cluster was still shutting down at the stop's deadline; going on", "err", ctx.Err())
			}
		} else if n.system != nil {
			n.system.Shutdown()
		}
		if n.gcStop != nil {
			n.gcStop()
			<-n.gcDone
		}
		if n.db != nil {
			errs = append(errs, n.db.Close())
		}
		n.stopErr = errors.Join(errs...)
		n.log.Info("node stopped", "id", n.ID())
	})
	return n.stopErr
}

// stopActors stops the named actors, all at once, and waits until each has
// terminated (its Stopping handler returned and its children stopped).
// protoactor's own shutdown stops no actor: without this, a node's actors
// would be cut off mid-work when the process exits.
func (n *Node) stopActors(ctx context.Context) {
	if n.system == nil || len(n.named) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, ActorStopTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var late []string
	for _, pid := range n.named {
		terminated := make(chan struct{})
		watcher := n.system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
			switch m := c.Message().(type) {
			case *actor.Started:
				c.Watch(pid)
				c.Stop(pid)
			case *actor.Terminated:
				if m.Who.Equal(pid) {
					close(terminated)
					c.Stop(c.Self())
				}
			}
		}))
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-terminated:
			case <-ctx.Done():
				n.system.Root.Stop(watcher)
				mu.Lock()
				late = append(late, pid.Id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(late) > 0 {
		sort.Strings(late)
		n.log.Warn("actors still stopping when the node went on shutting down; what they hold (sandboxes) is left to the next start's sweep",
			"actors", strings.Join(late, ","), "waited", ActorStopTimeout)
	}
}

// Version returns the module version baked into the binary, or "dev".
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// levelFloor drops records below min, whatever the wrapped handler allows.
type levelFloor struct {
	slog.Handler
	min slog.Level
}

func (l levelFloor) Enabled(ctx context.Context, lvl slog.Level) bool {
	return lvl >= l.min && l.Handler.Enabled(ctx, lvl)
}
func (l levelFloor) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFloor{l.Handler.WithAttrs(a), l.min}
}
func (l levelFloor) WithGroup(g string) slog.Handler {
	return levelFloor{l.Handler.WithGroup(g), l.min}
}
