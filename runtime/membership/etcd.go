package membership

// The etcd provider: members find each other in etcd instead of polling
// seeds. Each node writes its member record (the same Member the HTTP
// provider exchanges: id, addresses, kinds) at PREFIX/CLUSTER/members/ID
// under a lease whose TTL is cluster.failure_timeout, keeps the lease
// alive, writes the record again every cluster.etcd_refresh (a record lost
// without a watch event comes back), and watches PREFIX/CLUSTER/members/. A put is a
// join or an update, a delete (a clean stop revokes the lease; a killed
// node's lease expires) a departure; both feed the member list and
// protoactor's topology exactly as the HTTP provider's polls do. etcd is
// the only liveness mechanism while this provider runs: no node polls
// another.
//
// protoactor-go's own etcd provider (cluster/clusterproviders/etcd) does
// not fit: its lease TTL is fixed at 3 s, it
// names members "cluster@id" rather than by actor system id, it reads and
// writes its member map from several goroutines without a lock, and an
// unreachable endpoint makes StartMember wait forever. This one uses
// go.etcd.io/etcd/client/v3 directly.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/frognano/frognano/runtime/config"
)

// Membership is what a node needs of its cluster provider: protoactor's
// ClusterProvider, the live members as the provider last published them
// (runtime/node reads its member list from the cluster; this is the
// provider's side, for tests and the view), and the view served at Path.
// Provider (HTTP seeds) and Etcd implement it.
type Membership interface {
	cluster.ClusterProvider
	Members() []Member
	Handler() http.Handler
}

var (
	_ Membership = (*Provider)(nil)
	_ Membership = (*Etcd)(nil)
)

// EtcdOptions configure an Etcd provider.
type EtcdOptions struct {
	Endpoints []string // etcd client addresses
	Prefix    string   // key prefix, e.g. /frognano
	Cluster   string   // cluster name: members register under PREFIX/CLUSTER/members/
	// FailureTimeout is the lease TTL (rounded up to whole seconds, at least 1).
	FailureTimeout time.Duration
	// Heartbeat is how often an unanswered etcd is asked again.
	Heartbeat time.Duration
	// Refresh is how often the record is written again.
	Refresh time.Duration
	// DialTimeout bounds the first contact with etcd in NewEtcd (default 5s).
	DialTimeout time.Duration
	// Security is TLS and user auth to etcd.
	Security EtcdSecurity
	Logger   *slog.Logger
}

// Etcd implements Membership on etcd.
type Etcd struct {
	o      EtcdOptions
	client *clientv3.Client
	ttl    int64
	log    *slog.Logger
	// tls, user and password are the client's security (etcdsecurity.go);
	// leaf is the client certificate presented, if any.
	tls            *tls.Config
	user, password string
	leaf           *x509.Certificate

	mu     sync.Mutex
	self   Member
	others map[string]Member // member id -> record, this node excluded
	// gone are the ids this node has seen leave. A record under one of
	// them (a node that lost its lease and registered again) is ignored:
	// protoactor's member list blocks an id that left for good, so it
	// stays out of this node's members too until that node restarts
	// under a new id.
	gone    map[string]bool
	cl      *cluster.Cluster
	lease   clientv3.LeaseID
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// NewEtcd connects to etcd and checks that it answers, so that a wrong
// endpoint is one clear error when the node starts. httpAddr is where this
// node's HTTP server listens.
func NewEtcd(ctx context.Context, httpAddr string, o EtcdOptions) (*Etcd, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if len(o.Endpoints) == 0 {
		return nil, errors.New("cluster.etcd_endpoints: none given")
	}
	for _, e := range o.Endpoints {
		if err := config.EtcdEndpoint(e); err != nil {
			return nil, fmt.Errorf("cluster.etcd_endpoints: %w", err)
		}
	}
	tlsCfg, user, password, leaf, err := o.clientSecurity(time.Now())
	if err != nil {
		return nil, err
	}
	ttl := int64(math.Ceil(o.FailureTimeout.Seconds()))
	if ttl < 1 {
		ttl = 1
	}
	p := &Etcd{
		o: o, ttl: ttl, log: o.Logger,
		self:   Member{HTTP: httpAddr},
		others: map[string]Member{},
		gone:   map[string]bool{},
		tls:    tlsCfg, user: user, password: password, leaf: leaf,
	}
	// The check's client is closed again: the provider's own is made in
	// StartMember, once protoactor's remoting has set gRPC's global logger
	// (remote.Start writes it, and an etcd client already running would
	// read it meanwhile). A refusal (a certificate, a user or a
	// permission) is explained, naming the setting to fix.
	client, err := p.connect()
	if err != nil {
		return nil, p.explain(ctx, err)
	}
	defer client.Close()
	cctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if _, err := client.Get(cctx, o.membersKey(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		return nil, p.explain(ctx, err)
	}
	tlsDesc, auth := p.describe()
	p.log.Info("etcd answers", "endpoints", strings.Join(o.Endpoints, ","), "tls", tlsDesc, "auth", auth)
	if p.tls == nil && p.user != "" {
		p.log.Warn("cluster.etcd_username is set but etcd is dialled without TLS: the password and the auth token cross the network in the clear; " +
			"use https:// endpoints and cluster.etcd_tls_ca")
	}
	return p, nil
}

func (p *Etcd) connect() (*clientv3.Client, error) {
	// With a user name the client authenticates here, and again whenever
	// etcd expires its token; TLS applies to every endpoint.
	return clientv3.New(clientv3.Config{
		Endpoints:            p.o.Endpoints,
		DialTimeout:          p.o.DialTimeout,
		DialKeepAliveTime:    p.o.FailureTimeout,
		DialKeepAliveTimeout: p.o.FailureTimeout,
		TLS:                  p.tls,
		Username:             p.user,
		Password:             p.password,
		// The client's own zap logs would go to stderr beside the node's
		// slog; what matters is logged here.
		Logger: zap.NewNop(),
	})
}

// membersKey is the prefix every member's key starts with.
func (o EtcdOptions) membersKey() string { return o.Prefix + "/" + o.Cluster + "/members/" }

func (p *Etcd) key(id string) string { return p.o.membersKey() + id }

// StartMember registers this node under a new lease, reads the members
// already there, publishes the topology and starts keeping the lease alive
// and watching.
func (p *Etcd) StartMember(c *cluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return err
	}
	if c.Config.Name != p.o.Cluster {
		return fmt.Errorf("membership: cluster %q, provider configured for %q", c.Config.Name, p.o.Cluster)
	}
	kinds := c.GetClusterKinds()
	sort.Strings(kinds)
	p.mu.Lock()
	p.cl = c
	p.self.ID = c.ActorSystem.ID
	p.self.Cluster = c.Config.Name
	p.self.Host, p.self.Port = host, port
	p.self.Kinds = kinds
	if h, hp, err := net.SplitHostPort(p.self.HTTP); err == nil {
		if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
			// A listener on 0.0.0.0 names no host: the HTTP server is on
			// the remoting host.
			p.self.HTTP = net.JoinHostPort(host, hp)
		}
	}
	p.mu.Unlock()

	if p.client, err = p.connect(); err != nil {
		return p.explain(context.Background(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.o.DialTimeout)
	defer cancel()
	if err := p.register(ctx); err != nil {
		return err
	}
	rev, err := p.list(ctx)
	if err != nil {
		return err
	}
	lctx, lcancel := context.WithCancel(context.Background())
	p.cancel = lcancel
	p.done = make(chan struct{})
	p.publish()
	go p.loop(lctx, rev)
	return nil
}

// StartClient is not supported: every frognano process that joins is a member.
func (p *Etcd) StartClient(*cluster.Cluster) error {
	return fmt.Errorf("membership: client mode is not supported; join as a member")
}

// register grants a lease and writes this node's record under it.
func (p *Etcd) register(ctx context.Context) error {
	lease, err := p.client.Grant(ctx, p.ttl)
	if err != nil {
		return fmt.Errorf("etcd: grant a lease: %w", err)
	}
	p.mu.Lock()
	p.lease = lease.ID
	p.mu.Unlock()
	if err := p.put(ctx); err != nil {
		return err
	}
	p.log.Info("registered in etcd", "key", p.key(p.self.ID), "lease_ttl_s", lease.TTL)
	return nil
}

// put writes this node's record under its lease.
func (p *Etcd) put(ctx context.Context) error {
	p.mu.Lock()
	rec, err := json.Marshal(p.self)
	lease, id := p.lease, p.self.ID
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := p.client.Put(ctx, p.key(id), string(rec), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("etcd: write the member record: %w", err)
	}
	return nil
}

// list replaces the member set with what etcd holds and returns the
// revision it read at.
func (p *Etcd) list(ctx context.Context) (int64, error) {
	resp, err := p.client.Get(ctx, p.o.membersKey(), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcd: list members: %w", err)
	}
	fresh := map[string]Member{}
	for _, kv := range resp.Kvs {
		if m, ok := p.decode(kv.Key, kv.Value); ok {
			fresh[m.ID] = m
		}
	}
	p.mu.Lock()
	for id, m := range fresh {
		if p.gone[id] {
			delete(fresh, id)
		} else if _, ok := p.others[id]; !ok {
			p.log.Info("member joined", "member", id, "address", m.Address(), "http", m.HTTP)
		}
	}
	for id, m := range p.others {
		if _, ok := fresh[id]; !ok {
			p.log.Warn("member gone", "member", id, "address", m.Address())
			p.gone[id] = true
		}
	}
	p.others = fresh
	p.mu.Unlock()
	return resp.Header.Revision, nil
}

// decode reads a member record, keeping only well-formed records of this
// cluster stored under their own id, and never this node's own.
func (p *Etcd) decode(key, value []byte) (Member, bool) {
	var m Member
	id := strings.TrimPrefix(string(key), p.o.membersKey())
	if len(value) > maxView {
		p.log.Warn("ignoring an oversized member record in etcd", "key", config.Clip(string(key), 120))
		return m, false
	}
	if err := json.Unmarshal(value, &m); err != nil {
		p.log.Warn("ignoring a member record that is not JSON", "key", config.Clip(string(key), 120), "err", err)
		return m, false
	}
	switch {
	case m.ID != id || m.ID == "" || len(m.ID) > 200:
		p.log.Warn("ignoring a member record stored under another id", "key", config.Clip(string(key), 120))
		return m, false
	case m.Cluster != p.o.Cluster:
		p.log.Warn("ignoring a member of another cluster", "key", config.Clip(string(key), 120), "cluster", config.Clip(m.Cluster, 80))
		return m, false
	case config.HostPort(m.Address()) != nil:
		p.log.Warn("ignoring a member record without a valid remoting address", "key", config.Clip(string(key), 120))
		return m, false
	case m.ID == p.self.ID:
		return m, false
	}
	return m, true
}

// loop keeps the lease alive, refreshes the record and follows the watch
// until Shutdown; a lost lease is registered anew, a broken watch listed
// and watched again.
func (p *Etcd) loop(ctx context.Context, rev int64) {
	defer close(p.done)
	// Each lease's keep-alive runs under its own context, ended when the
	// lease is replaced, so that no abandoned lease is kept alive.
	kaCtx, kaCancel := context.WithCancel(ctx)
	defer func() { kaCancel() }()
	keepAlive := p.keepAlive(kaCtx)
	renew := func() {
		kaCancel()
		kaCtx, kaCancel = context.WithCancel(ctx)
		keepAlive = p.reregister(ctx, kaCtx)
	}
	resume := func() {
		kaCancel()
		kaCtx, kaCancel = context.WithCancel(ctx)
		keepAlive = p.resume(ctx, kaCtx)
	}
	watch := p.client.Watch(clientv3.WithRequireLeader(ctx), p.o.membersKey(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	refresh := time.NewTicker(p.o.Refresh)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-keepAlive:
			if ok {
				continue
			}
			if ctx.Err() != nil {
				return
			}
			// No answer within the TTL: etcd was out of reach (restarted,
			// partitioned), or the lease is gone.
			resume()
		case resp, ok := <-watch:
			if !ok || resp.Err() != nil || resp.Canceled {
				if ctx.Err() != nil {
					return
				}
				if err := resp.Err(); err != nil {
					p.log.Warn("etcd watch broken; listing members again", "err", err)
				}
				watch = p.rewatch(ctx)
				continue
			}
			changed, selfGone := p.apply(resp.Events)
			if changed {
				p.publish()
			}
			if selfGone {
				// Deleted by hand, or its lease expired: write it again
				// under the lease, or under a new one if that is gone too.
				wctx, cancel := context.WithTimeout(ctx, p.o.DialTimeout)
				err := p.put(wctx)
				cancel()
				if err != nil && ctx.Err() == nil {
					p.log.Error("this node's record and lease left etcd: the other members have seen this node leave and block its id; "+
						"registering again for members that start later; restart the node to rejoin the others", "err", err)
					renew()
				}
			}
		case <-refresh.C:
			wctx, cancel := context.WithTimeout(ctx, p.o.Refresh)
			if err := p.put(wctx); err != nil && ctx.Err() == nil {
				p.log.Warn("could not refresh the member record in etcd", "err", err)
			}
			cancel()
		}
	}
}

func (p *Etcd) keepAlive(ctx context.Context) <-chan *clientv3.LeaseKeepAliveResponse {
	p.mu.Lock()
	lease := p.lease
	p.mu.Unlock()
	ch, err := p.client.KeepAlive(ctx, lease)
	if err != nil {
		// Only a cancelled ctx fails here; a closed channel makes the loop
		// register again.
		c := make(chan *clientv3.LeaseKeepAliveResponse)
		close(c)
		return c
	}
	return ch
}

// resume follows a keep-alive that stopped: while etcd does not answer it
// asks again every heartbeat; a lease etcd still holds (an etcd that
// restarted renews its leases) is kept alive again, a lease that is gone
// means the others have seen this node leave, and it registers anew.
func (p *Etcd) resume(ctx, kaCtx context.Context) <-chan *clientv3.LeaseKeepAliveResponse {
	p.mu.Lock()
	lease := p.lease
	p.mu.Unlock()
	for {
		rctx, cancel := context.WithTimeout(ctx, p.o.DialTimeout)
		_, err := p.client.KeepAliveOnce(rctx, lease)
		cancel()
		switch {
		case err == nil:
			p.log.Warn("etcd keep-alive was interrupted; the lease is still alive")
			return p.keepAlive(kaCtx)
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			p.log.Error("etcd lease lost (etcd out of reach for longer than cluster.failure_timeout?): the other members have seen this node leave " +
				"and block its id; registering again for members that start later; restart the node to rejoin the others")
			return p.reregister(ctx, kaCtx)
		case ctx.Err() != nil:
			return make(chan *clientv3.LeaseKeepAliveResponse)
		}
		p.log.Warn("etcd does not answer the lease keep-alive; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(p.o.Heartbeat):
		}
	}
}

// reregister retries register every heartbeat until it succeeds or ctx
// ends, then keeps the new lease alive under kaCtx.
func (p *Etcd) reregister(ctx, kaCtx context.Context) <-chan *clientv3.LeaseKeepAliveResponse {
	for {
		rctx, cancel := context.WithTimeout(ctx, p.o.DialTimeout)
		err := p.register(rctx)
		cancel()
		if err == nil {
			return p.keepAlive(kaCtx)
		}
		if ctx.Err() != nil {
			c := make(chan *clientv3.LeaseKeepAliveResponse)
			return c
		}
		p.log.Warn("could not register in etcd; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(p.o.Heartbeat):
		}
	}
}

// rewatch lists the members again (the topology follows) and watches from
// there, retrying every heartbeat while etcd does not answer.
func (p *Etcd) rewatch(ctx context.Context) clientv3.WatchChan {
	for {
		lctx, cancel := context.WithTimeout(ctx, p.o.DialTimeout)
		rev, err := p.list(lctx)
		cancel()
		if err == nil {
			p.publish()
			return p.client.Watch(clientv3.WithRequireLeader(ctx), p.o.membersKey(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		}
		if ctx.Err() != nil {
			return make(chan clientv3.WatchResponse)
		}
		p.log.Warn("could not list members in etcd; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(p.o.Heartbeat):
		}
	}
}

// apply folds watch events into the member set: whether the live set (or a
// member's addresses or kinds) changed, and whether this node's own record
// was deleted.
func (p *Etcd) apply(events []*clientv3.Event) (changed, selfGone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range events {
		id := strings.TrimPrefix(string(ev.Kv.Key), p.o.membersKey())
		switch ev.Type {
		case clientv3.EventTypePut:
			m, ok := p.decode(ev.Kv.Key, ev.Kv.Value)
			if !ok || p.gone[id] {
				continue
			}
			old, known := p.others[id]
			if !known {
				p.log.Info("member joined", "member", id, "address", m.Address(), "http", m.HTTP)
				changed = true
			} else if old.Address() != m.Address() || strings.Join(old.Kinds, ",") != strings.Join(m.Kinds, ",") {
				changed = true
			}
			p.others[id] = m
		case clientv3.EventTypeDelete:
			if id == p.self.ID {
				if !p.stopped {
					selfGone = true
				}
				continue
			}
			if m, ok := p.others[id]; ok {
				p.log.Warn("member gone", "member", id, "address", m.Address())
				delete(p.others, id)
				p.gone[id] = true
				changed = true
			}
		}
	}
	return changed, selfGone
}

// Shutdown stops the loop and revokes the lease, which deletes this node's
// record at once: the others see it leave without waiting for the TTL.
func (p *Etcd) Shutdown(bool) error {
	p.mu.Lock()
	p.stopped = true
	lease := p.lease
	p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
	if p.client == nil {
		return nil // StartMember never ran
	}
	var err error
	if lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, rerr := p.client.Revoke(ctx, lease); rerr != nil {
			err = fmt.Errorf("etcd: revoke the member lease (the record goes when its TTL ends): %w", rerr)
		}
		cancel()
	}
	return errors.Join(err, p.client.Close())
}

// Members returns the live members, this node included, sorted by id.
func (p *Etcd) Members() []Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Member, 0, len(p.others)+1)
	if p.self.ID != "" {
		out = append(out, p.self)
	}
	for _, m := range p.others {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Handler serves this node's view, as the HTTP provider's does; nothing a
// caller sends changes the member set.
func (p *Etcd) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET "+Path, http.StatusMethodNotAllowed)
			return
		}
		p.mu.Lock()
		self := p.self
		p.mu.Unlock()
		if self.ID == "" {
			http.Error(w, "membership not started", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(view{Self: self, Members: p.Members()})
	})
}

func (p *Etcd) publish() {
	live := p.Members()
	ms := make([]*cluster.Member, 0, len(live))
	for _, m := range live {
		ms = append(ms, &cluster.Member{Id: m.ID, Host: m.Host, Port: int32(m.Port), Kinds: m.Kinds})
	}
	p.mu.Lock()
	cl := p.cl
	p.mu.Unlock()
	if cl != nil {
		cl.MemberList.UpdateClusterTopology(ms)
	}
}
