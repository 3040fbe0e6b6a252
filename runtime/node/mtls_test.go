package node

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/mtls"
)

// pki is a CA in a directory of its own and node certificates it issued.
type pki struct{ dir string }

func newPKI(t *testing.T) pki {
	t.Helper()
	p := pki{dir: t.TempDir()}
	if err := mtls.NewCA(filepath.Join(p.dir, "ca"), mtls.CAOptions{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	return p
}

// node issues a certificate for name, valid for hosts, and returns the
// remote.tls_* settings that use it.
func (p pki) node(t *testing.T, name string, hosts ...string) config.Remote {
	t.Helper()
	out := filepath.Join(p.dir, name)
	if err := mtls.IssueNode(out, mtls.NodeOptions{CADir: filepath.Join(p.dir, "ca"), Name: name, Hosts: hosts}); err != nil {
		t.Fatal(err)
	}
	return config.Remote{
		TLSCA:   filepath.Join(out, mtls.CACertFile),
		TLSCert: filepath.Join(out, mtls.NodeCertFile),
		TLSKey:  filepath.Join(out, mtls.NodeKeyFile),
	}
}

// canary counts what reaches a node: instances of the "canary" kind
// spawned (by anyone, through remoting's activator) and messages that
// reach its "canary-inbox" actor. Both answer a Ping that asks for an
// answer.
type canary struct {
	spawned  atomic.Int64
	received atomic.Int64
}

const canaryKind, canaryInbox = "canary", "canary-inbox"

func (c *canary) options() Options {
	counter := func(n *atomic.Int64, onStart bool) func(*Node) *actor.Props {
		return func(*Node) *actor.Props {
			return actor.PropsFromFunc(func(ctx actor.Context) {
				switch ctx.Message().(type) {
				case *actor.Started:
					if onStart {
						n.Add(1)
					}
				case *rtmsg.Ping:
					if !onStart {
						n.Add(1)
					}
					if ctx.Sender() != nil {
						ctx.Respond(&rtmsg.Pong{Node: ctx.ActorSystem().Address()})
					}
				}
			})
		}
	}
	return Options{Version: "test", Logger: quiet,
		Kinds:  []Kind{{Name: canaryKind, Props: counter(&c.spawned, true)}},
		Actors: []NamedActor{{Name: canaryInbox, Props: counter(&c.received, false)}},
	}
}

// TestMutualTLSClusterSpawnsRemotely: two nodes with certificates of one
// CA form a cluster over mutual TLS; each spawns an actor on the other
// through remoting and asks it a question.
func TestMutualTLSClusterSpawnsRemotely(t *testing.T) {
	p := newPKI(t)
	var ca, cb canary
	cfgA := testConfig(t)
	cfgA.Remote = p.node(t, "node-a", "127.0.0.1")
	a := startWith(t, cfgA, ca.options())
	cfgB := testConfig(t)
	cfgB.Remote = p.node(t, "node-b", "127.0.0.1")
	cfgB.Cluster.Seeds = []string{a.HTTPAddr()}
	b := startWith(t, cfgB, cb.options())
	waitMembers(t, 2, a, b)

	res := ask(t, a, &rtmsg.SpawnRequest{Kind: canaryKind, Member: b.Address()})
	spawned, ok := res.(*rtmsg.SpawnReply)
	if !ok || spawned.Address != b.Address() {
		t.Fatalf("A spawning on B over mutual TLS answered %v", res)
	}
	res = ask(t, b, &rtmsg.SpawnRequest{Kind: canaryKind, Member: a.Address()})
	if r, ok := res.(*rtmsg.SpawnReply); !ok || r.Address != a.Address() {
		t.Fatalf("B spawning on A over mutual TLS answered %v", res)
	}
	// A canary counts itself on Started, a moment after the spawn's reply.
	for deadline := time.Now().Add(10 * time.Second); (ca.spawned.Load() < 1 || cb.spawned.Load() < 1) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if ca.spawned.Load() != 1 || cb.spawned.Load() != 1 {
		t.Errorf("canaries spawned: A %d, B %d, want 1 each", ca.spawned.Load(), cb.spawned.Load())
	}

	// A's question to the canary A spawned on B, and B's answer.
	pong, err := a.System().Root.RequestFuture(actor.NewPID(spawned.Address, spawned.Id), &rtmsg.Ping{Seq: 1}, 10*time.Second).Result()
	if p, ok := pong.(*rtmsg.Pong); err != nil || !ok || p.Node != b.Address() {
		t.Fatalf("A asking its canary on B over mutual TLS: %v, %v", pong, err)
	}
}

// outsider is an actor system of its own on loopback, as the CLI or an
// attacker runs one, with the given remoting options.
type outsider struct {
	system *actor.ActorSystem
	remote *remote.Remote
	mu     sync.Mutex
	gone   map[string]bool // addresses whose endpoint was given up
}

func newOutsider(t *testing.T, opts ...remote.ConfigOption) *outsider {
	t.Helper()
	o := &outsider{gone: map[string]bool{}}
	o.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	o.system.EventStream.Subscribe(func(ev any) {
		if e, ok := ev.(*remote.EndpointTerminatedEvent); ok {
			o.mu.Lock()
			o.gone[e.Address] = true
			o.mu.Unlock()
		}
	})
	o.remote = remote.NewRemote(o.system, remote.Configure("127.0.0.1", 0, opts...))
	o.remote.Start()
	t.Cleanup(func() { o.remote.Shutdown(false); o.system.Shutdown() })
	return o
}

// givenUp waits until the outsider's endpoint to addr has stopped trying.
func (o *outsider) givenUp(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		o.mu.Lock()
		done := o.gone[addr]
		o.mu.Unlock()
		if done {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the outsider's endpoint to %s still tries after 60s", addr)
}

func tlsOptions(t *testing.T, r config.Remote) []remote.ConfigOption {
	t.Helper()
	opts, _, err := mtls.RemoteOptions(r)
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// bundle writes a CA file trusting both CAs: an outsider that knows the
// cluster's (public) CA certificate, so that only its own certificate can
// be what the node refuses.
func bundle(t *testing.T, a, b config.Remote) string {
	t.Helper()
	x, err := os.ReadFile(a.TLSCA)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b.TLSCA)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bundle.crt")
	if err := os.WriteFile(path, append(x, y...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// handshakeError opens protoactor's remoting stream to addr with creds, as
// an endpoint writer does, and returns the error it ends with.
func handshakeError(t *testing.T, addr string, creds grpc.DialOption) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, addr, creds)
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := remote.NewRemotingClient(conn).Receive(ctx)
	if err != nil {
		return err
	}
	if err := stream.Send(&remote.RemoteMessage{MessageType: &remote.RemoteMessage_ConnectRequest{ConnectRequest: &remote.ConnectRequest{
		ConnectionType: &remote.ConnectRequest_ServerConnection{ServerConnection: &remote.ServerConnection{SystemId: "outsider", Address: "127.0.0.1:1"}}}}}); err != nil {
		return err
	}
	_, err = stream.Recv()
	return err
}

// TestRemotingRefusesOutsiders: a node with mutual TLS refuses, at the
// gRPC handshake, an actor system that presents no certificate or one of
// another CA: its remote spawn fails, nothing is spawned, and its messages
// never arrive. A client with a certificate of the node's CA spawns and
// sends through the same calls, and the same outsider without TLS against
// a node without TLS (what every node was before) spawns and sends too,
// so the probes do detect an outsider that gets in.
func TestRemotingRefusesOutsiders(t *testing.T) {
	p := newPKI(t)
	evil := newPKI(t)
	var c canary
	cfg := testConfig(t)
	cfg.Remote = p.node(t, "node-a", "127.0.0.1")
	a := startWith(t, cfg, c.options())
	// A fresh PID for every send: a PID caches the process it resolved to,
	// and one resolved by the member would carry an outsider's message
	// through the member's connection.
	inbox := func() *actor.PID { return actor.NewPID(a.Address(), canaryInbox) }

	// The control: a client of the cluster's CA gets in.
	member := newOutsider(t, tlsOptions(t, p.node(t, "cli", "127.0.0.1"))...)
	if _, err := member.remote.SpawnNamed(a.Address(), "member-probe", canaryKind, 10*time.Second); err != nil {
		t.Fatalf("a client with a certificate of the cluster's CA cannot spawn: %v", err)
	}
	if _, err := member.system.Root.RequestFuture(actor.NewPID(a.Address(), ManagerName), &rtmsg.Ping{Seq: 1}, 10*time.Second).Result(); err != nil {
		t.Fatalf("a client with a certificate of the cluster's CA gets no answer: %v", err)
	}
	member.system.Root.Send(inbox(), &rtmsg.Ping{})
	for deadline := time.Now().Add(10 * time.Second); c.received.Load() != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the member's message did not arrive")
		}
	}
	if _, ok := a.System().ProcessRegistry.GetLocal(activated("member-probe")); !ok || c.spawned.Load() != 1 {
		t.Fatalf("spawned %d canaries for the member, want 1 named %s", c.spawned.Load(), activated("member-probe"))
	}

	evilCert := evil.node(t, "evil", "127.0.0.1")
	cheat := evilCert
	cheat.TLSCA = bundle(t, evilCert, cfg.Remote) // trusts the node, presents another CA's certificate
	cases := []struct {
		name   string
		opts   []remote.ConfigOption
		dial   grpc.DialOption
		reason string // in the handshake's error
	}{
		{"no certificate", nil, grpc.WithTransportCredentials(insecure.NewCredentials()), ""},
		// The node refuses the certificate after the client's side of the
		// TLS 1.3 handshake is done: the stream fails with a bad
		// certificate alert or a closed connection, whichever comes first.
		{"certificate of another CA, trusting the node's CA", tlsOptions(t, cheat), dialOption(t, cheat), ""},
		{"certificate and trust of another CA", tlsOptions(t, evilCert), dialOption(t, evilCert), "certificate"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := handshakeError(t, a.Address(), tc.dial)
			if err == nil || !strings.Contains(err.Error(), "Unavailable") || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("the remoting stream opened or failed otherwise: %v", err)
			}
			t.Logf("handshake: %v", err)

			o := newOutsider(t, tc.opts...)
			name := "outsider-probe-" + string(rune('a'+i))
			if r, err := o.remote.SpawnNamed(a.Address(), name, canaryKind, 5*time.Second); err == nil {
				t.Errorf("the outsider spawned %v", r)
			}
			if _, err := o.system.Root.RequestFuture(actor.NewPID(a.Address(), ManagerName), &rtmsg.Ping{Seq: 2}, 3*time.Second).Result(); err == nil {
				t.Error("the node's manager answered the outsider")
			}
			o.system.Root.Send(inbox(), &rtmsg.Ping{})
			// Once the endpoint has given up, nothing it held can still arrive.
			o.givenUp(t, a.Address())
			if _, ok := a.System().ProcessRegistry.GetLocal(activated(name)); ok {
				t.Errorf("%s exists on the node", name)
			}
		})
	}
	if n := c.spawned.Load(); n != 1 {
		t.Errorf("%d canaries spawned, want only the member's", n)
	}
	if n := c.received.Load(); n != 1 {
		t.Errorf("%d messages reached the inbox, want only the member's", n)
	}

	t.Run("control: a node without TLS lets the same outsider in", func(t *testing.T) {
		var open canary
		b := startWith(t, testConfig(t), open.options())
		o := newOutsider(t)
		if _, err := o.remote.SpawnNamed(b.Address(), "outsider-probe", canaryKind, 10*time.Second); err != nil {
			t.Fatalf("outsider's spawn on a plaintext node: %v", err)
		}
		o.system.Root.Send(actor.NewPID(b.Address(), canaryInbox), &rtmsg.Ping{})
		for deadline := time.Now().Add(10 * time.Second); open.received.Load() != 1; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the outsider's message did not reach a plaintext node")
			}
		}
		if _, ok := b.System().ProcessRegistry.GetLocal(activated("outsider-probe")); !ok || open.spawned.Load() != 1 {
			t.Fatalf("outsider's spawn on a plaintext node left no actor (spawned %d)", open.spawned.Load())
		}
	})
}

func dialOption(t *testing.T, r config.Remote) grpc.DialOption {
	t.Helper()
	c, err := mtls.Load(r)
	if err != nil {
		t.Fatal(err)
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(c.ClientConfig()))
}

// activated is the process name remoting's activator gives an actor
// spawned remotely under name.
func activated(name string) string { return "activator/Remote$" + name }

// TestNodeOfAnotherCACannotSpawn: real nodes that joined the membership
// (over HTTP, on loopback) but hold no certificate of the cluster's CA,
// one with another CA's and one with none, cannot spawn on a node with
// mutual TLS; the node spawns nothing.
func TestNodeOfAnotherCACannotSpawn(t *testing.T) {
	p := newPKI(t)
	evil := newPKI(t)
	var c canary
	cfgA := testConfig(t)
	cfgA.Remote = p.node(t, "node-a", "127.0.0.1")
	a := startWith(t, cfgA, c.options())

	cheat := evil.node(t, "node-x", "127.0.0.1")
	cheat.TLSCA = bundle(t, cheat, cfgA.Remote)
	for _, tc := range []struct {
		name   string
		remote config.Remote
	}{{"another CA's certificate", cheat}, {"no certificate", config.Remote{}}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Remote = tc.remote
			cfg.Cluster.Seeds = []string{a.HTTPAddr()}
			x := startWith(t, cfg, Options{Version: "test", Logger: quiet})
			waitMembers(t, 2, x)
			res := ask(t, x, &rtmsg.SpawnRequest{Kind: canaryKind, Member: a.Address()})
			if !rtmsg.IsFailure(res, rtmsg.FailureCode_FAILURE_CODE_SPAWN_FAILED) {
				t.Fatalf("spawn on the TLS node from a node with %s answered %v", tc.name, res)
			}
		})
	}
	time.Sleep(time.Second) // a spawn that got through would have started by now
	if n := c.spawned.Load(); n != 0 {
		t.Fatalf("%d canaries spawned on the TLS node by nodes outside its CA", n)
	}
}

// TestRemotingOffLoopbackNeedsTLS: a node refuses to bind remoting off
// loopback without mutual TLS, naming the settings, and starts with TLS or
// the explicit remote.allow_insecure. A certificate that does not name the
// node's host, or files that do not fit, stop it too.
func TestRemotingOffLoopbackNeedsTLS(t *testing.T) {
	p := newPKI(t)
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", ":0"} {
		cfg := testConfig(t)
		cfg.Node.RemoteAddr = addr
		_, err := Start(context.Background(), cfg, Options{Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "remote.tls_ca, remote.tls_cert, remote.tls_key: required") ||
			!strings.Contains(err.Error(), "FROGNANO_REMOTE_TLS_CA") || !strings.Contains(err.Error(), "remote.allow_insecure") {
			t.Fatalf("remoting on %s without TLS: %v", addr, err)
		}
		if _, statErr := os.Stat(cfg.Node.DataDir); !errors.Is(statErr, fs.ErrNotExist) {
			t.Errorf("data dir created by a node refused for %s: %v", addr, statErr)
		}
	}

	cfg := testConfig(t)
	cfg.Node.RemoteAddr = "0.0.0.0:0"
	cfg.Remote = p.node(t, "wild", "127.0.0.1")
	startWith(t, cfg, Options{Version: "test", Logger: quiet}).Stop(context.Background())

	cfg = testConfig(t)
	cfg.Node.RemoteAddr = "0.0.0.0:0"
	cfg.Remote.AllowInsecure = true
	startWith(t, cfg, Options{Version: "test", Logger: quiet}).Stop(context.Background())

	cfg = testConfig(t)
	cfg.Remote = p.node(t, "elsewhere", "10.9.9.9")
	if _, err := Start(context.Background(), cfg, Options{Logger: quiet}); err == nil || !strings.Contains(err.Error(), "remote.tls_cert") ||
		!strings.Contains(err.Error(), "does not name 127.0.0.1") {
		t.Errorf("a certificate for another host: %v", err)
	}
	cfg = testConfig(t)
	cfg.Remote = p.node(t, "advertised", "127.0.0.1")
	cfg.Node.Advertise = "node-b.internal:7071"
	if _, err := Start(context.Background(), cfg, Options{Logger: quiet}); err == nil || !strings.Contains(err.Error(), "does not name node-b.internal") {
		t.Errorf("a certificate that does not name the advertised host: %v", err)
	}
	// A name in node.remote_addr is advertised, and so dialled, as the IP
	// it resolved to: a certificate for the name alone would be refused.
	cfg = testConfig(t)
	cfg.Node.RemoteAddr = "localhost:0"
	cfg.Remote = p.node(t, "by-name", "localhost")
	if _, err := Start(context.Background(), cfg, Options{Logger: quiet}); err == nil || !strings.Contains(err.Error(), "remote.tls_cert") || !strings.Contains(err.Error(), "does not name") {
		t.Errorf("a certificate naming localhost for a node advertised at its loopback IP: %v", err)
	}
	cfg = testConfig(t)
	cfg.Remote = p.node(t, "broken", "127.0.0.1")
	if err := os.WriteFile(cfg.Remote.TLSKey, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(context.Background(), cfg, Options{Logger: quiet}); err == nil || !strings.Contains(err.Error(), "remote.tls_key") {
		t.Errorf("a broken key: %v", err)
	}
}
