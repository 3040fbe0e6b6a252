// Package membership is frognano's cluster providers for protoactor-go.
// Provider (cluster.provider static, this file): nodes find each other
// through seed HTTP addresses, poll each other's membership endpoint and
// publish the live set as the cluster topology. Etcd (etcd.go): nodes
// register under a lease in etcd and watch each other there. A provider
// says who is alive and nothing else: it is the cluster's one liveness
// mechanism (runtime/node turns protoactor's gossip heartbeat expiry off).
// A member's facts (capabilities, load) travel in protoactor's gossip
// state, not here; runtime/node reads the member list from the cluster
// and joins them.
//
// What a poller or a peer's answer can make a node do is bounded: a node is
// a member only once it has answered a poll itself, as a node of the same
// cluster; the node dials only plain HOST:PORT addresses and builds every
// URL itself (always http://HOST:PORT/cluster/v1/members, no redirects
// followed); a poller is polled back at its own source IP (its header gives
// only the port); with a cluster token every poll carries it and an
// unauthenticated poller is not polled back at all; without one (a cluster
// on loopback) only loopback addresses are dialled, apart from the seeds.
package membership

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"

	"github.com/frognano/frognano/runtime/config"
)

// Path is where every node serves its view of the cluster.
const Path = "/cluster/v1/members"

// Member is one node as the cluster sees it.
type Member struct {
	ID      string   `json:"id"`      // actor system id, new for every process
	Cluster string   `json:"cluster"` // cluster name
	Host    string   `json:"host"`    // remoting host
	Port    int      `json:"port"`    // remoting port
	HTTP    string   `json:"http"`    // HTTP address (membership, health): where this node reached it
	Kinds   []string `json:"kinds"`
}

// Address is the member's actor remoting address.
func (m Member) Address() string { return fmt.Sprintf("%s:%d", m.Host, m.Port) }

type view struct {
	Self    Member   `json:"self"`
	Members []Member `json:"members"`
}

// Provider implements cluster.ClusterProvider.
type Provider struct {
	seeds     []string
	heartbeat time.Duration
	timeout   time.Duration
	log       *slog.Logger
	client    *http.Client
	token     string
	tokenSum  [sha256.Size]byte

	mu       sync.Mutex
	self     Member
	lastSeen map[string]time.Time // member id -> last direct answer
	members  map[string]Member    // member id -> record
	// gone are the ids this node has seen leave, true once the member was
	// heard again and told so in the log. protoactor's member list blocks
	// an id that left for good, so a member silent for longer than the
	// failure timeout stays out of this node's members too (as in Etcd)
	// until it restarts under a new id.
	gone   map[string]bool
	cl     *cluster.Cluster
	cancel context.CancelFunc
	done   chan struct{}
	// candidates are HTTP addresses to probe once on the next round: nodes
	// that polled us (so that a node started without seeds still learns
	// about nodes that joined through it) and members that peers report.
	// None is a member until it answers itself.
	candidates map[string]bool
}

// callerHeader carries the polling node's HTTP address; only its port is
// used, the host is the poll's source address.
const callerHeader = "X-Frognano-Member"

// maxCandidates bounds the addresses probed per round beyond the seeds and
// the members, so that no stream of polls can make a node send many
// requests.
const maxCandidates = 64

// maxView bounds a peer's answer.
const maxView = 4 << 20

// Options configure a Provider.
type Options struct {
	Seeds          []string      // HTTP addresses of nodes to join through
	Heartbeat      time.Duration // poll interval
	FailureTimeout time.Duration // silence after which a member is gone
	// Token is the cluster's bearer token (node.api_token), sent with every
	// poll and required of pollers. Empty: a cluster on loopback, whose
	// nodes dial only loopback addresses (and the seeds).
	Token  string
	Logger *slog.Logger
}

// New returns a provider for a node whose HTTP server is reachable at httpAddr.
func New(httpAddr string, o Options) *Provider {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Provider{
		seeds:     o.Seeds,
		heartbeat: o.Heartbeat,
		timeout:   o.FailureTimeout,
		log:       o.Logger,
		token:     o.Token,
		tokenSum:  sha256.Sum256([]byte(o.Token)),
		client: &http.Client{
			Timeout: o.Heartbeat,
			// A peer answers or it does not; it cannot send the node elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		self:       Member{HTTP: httpAddr},
		lastSeen:   map[string]time.Time{},
		candidates: map[string]bool{},
		members:    map[string]Member{},
		gone:       map[string]bool{},
	}
}

// Authorized reports whether r carries the cluster's bearer token (always
// true for a cluster without one), comparing in constant time.
func (p *Provider) Authorized(r *http.Request) bool {
	if p.token == "" {
		return true
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(got))
	return ok && subtle.ConstantTimeCompare(sum[:], p.tokenSum[:]) == 1
}

// Handler serves this node's view: itself and every member it believes
// alive. GET only; a poller's X-Frognano-Member header, when the poll is
// authorized, makes it a candidate probed once at its source IP.
func (p *Provider) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET "+Path, http.StatusMethodNotAllowed)
			return
		}
		if !p.Authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="frognano"`)
			http.Error(w, "missing or wrong bearer token (node.api_token)", http.StatusUnauthorized)
			return
		}
		caller, callerOK := p.callerAddr(r)
		p.mu.Lock()
		if callerOK {
			p.addCandidateLocked(caller)
		}
		v := view{Self: p.self, Members: p.liveLocked()}
		p.mu.Unlock()
		if v.Self.ID == "" {
			http.Error(w, "membership not started", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	})
}

// callerAddr is where a poller is polled back: the port its header names,
// at the IP its poll came from.
func (p *Provider) callerAddr(r *http.Request) (string, bool) {
	h := r.Header.Get(callerHeader)
	if h == "" || len(h) > 300 {
		return "", false
	}
	_, port, err := net.SplitHostPort(h)
	if err != nil {
		return "", false
	}
	src, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return "", false
	}
	addr := net.JoinHostPort(src, port)
	if !p.dialable(addr) {
		return "", false
	}
	return addr, true
}

// dialable reports whether the node may poll addr: a plain HOST:PORT, and
// on a cluster without a token a loopback one.
func (p *Provider) dialable(addr string) bool {
	if config.HostPort(addr) != nil {
		return false
	}
	if p.token == "" {
		return config.LoopbackAddr(addr)
	}
	return true
}

func (p *Provider) addCandidateLocked(addr string) {
	if addr == p.self.HTTP || p.candidates[addr] || len(p.candidates) >= maxCandidates {
		return
	}
	for _, m := range p.members {
		if m.HTTP == addr {
			return
		}
	}
	p.candidates[addr] = true
}

// StartMember joins the cluster as a full member.
func (p *Provider) StartMember(c *cluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return err
	}
	kinds := c.GetClusterKinds()
	sort.Strings(kinds)
	p.mu.Lock()
	p.cl = c
	p.self.ID = c.ActorSystem.ID
	p.self.Cluster = c.Config.Name
	p.self.Host, p.self.Port = host, port
	p.self.Kinds = kinds
	p.members[p.self.ID] = p.self
	p.lastSeen[p.self.ID] = time.Now()
	p.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.done = make(chan struct{})
	p.publish()
	go p.loop(ctx)
	return nil
}

// StartClient is not supported: every frognano process that joins is a member.
func (p *Provider) StartClient(*cluster.Cluster) error {
	return fmt.Errorf("membership: client mode is not supported; join as a member")
}

// Shutdown stops polling.
func (p *Provider) Shutdown(bool) error {
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
	return nil
}

// Members returns the live members, this node included, sorted by id.
func (p *Provider) Members() []Member {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.liveLocked()
}

func (p *Provider) liveLocked() []Member {
	out := make([]Member, 0, len(p.members))
	for _, m := range p.members {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (p *Provider) loop(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.heartbeat)
	defer t.Stop()
	for {
		p.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll asks every seed, every known member and this round's candidates for
// its view. A node counts as a member only when it answers itself; members
// learned second-hand are candidates, probed directly on the next round.
func (p *Provider) poll(ctx context.Context) {
	p.mu.Lock()
	targets := map[string]bool{}
	for _, s := range p.seeds {
		targets[s] = true
	}
	for id, m := range p.members {
		if id != p.self.ID {
			targets[m.HTTP] = true
		}
	}
	for addr := range p.candidates {
		targets[addr] = true
	}
	clear(p.candidates)
	delete(targets, p.self.HTTP)
	p.mu.Unlock()

	type answer struct {
		v   view
		err error
	}
	results := make(chan answer, len(targets))
	for addr := range targets {
		go func(addr string) {
			v, err := p.fetch(ctx, addr)
			v.Self.HTTP = addr // where it answered, not what it claims
			results <- answer{v, err}
		}(addr)
	}
	now := time.Now()
	heard := map[string]Member{}
	var learned []string
	for range targets {
		a := <-results
		if a.err != nil {
			continue
		}
		self := a.v.Self
		switch {
		case self.Cluster != p.self.Cluster:
			p.log.Warn("ignoring node of another cluster", "node", self.HTTP, "cluster", config.Clip(self.Cluster, 80))
			continue
		case self.ID == "" || len(self.ID) > 200 || config.HostPort(self.Address()) != nil:
			p.log.Warn("ignoring an answer that is not a member record", "node", self.HTTP)
			continue
		case self.ID == p.self.ID:
			continue // this node, reached at another of its addresses
		}
		heard[self.ID] = self
		for _, m := range a.v.Members {
			if m.ID != p.self.ID && p.dialable(m.HTTP) {
				learned = append(learned, m.HTTP)
			}
		}
	}

	p.mu.Lock()
	changed := false
	for id, m := range heard {
		if seen, ok := p.gone[id]; ok {
			if !seen {
				p.gone[id] = true
				p.log.Warn("a member seen gone answers again; the cluster blocks its id: restart it to rejoin", "member", id, "address", m.Address(), "http", m.HTTP)
			}
			continue
		}
		if _, ok := p.members[id]; !ok {
			changed = true
			p.log.Info("member joined", "member", id, "address", m.Address(), "http", m.HTTP)
		}
		p.members[id] = m
		p.lastSeen[id] = now
	}
	for _, addr := range learned {
		// Probe it directly next round; do not trust it as alive yet.
		p.addCandidateLocked(addr)
	}
	p.lastSeen[p.self.ID] = now
	for id, seen := range p.lastSeen {
		if id != p.self.ID && now.Sub(seen) > p.timeout {
			p.log.Warn("member gone", "member", id, "address", p.members[id].Address(), "silent_for", now.Sub(seen).Round(time.Millisecond))
			delete(p.members, id)
			delete(p.lastSeen, id)
			p.gone[id] = false
			changed = true
		}
	}
	p.mu.Unlock()
	if changed {
		p.publish()
	}
}

func (p *Provider) fetch(ctx context.Context, addr string) (view, error) {
	var v view
	if config.HostPort(addr) != nil {
		return v, fmt.Errorf("not HOST:PORT: %q", config.Clip(addr, 80))
	}
	u := url.URL{Scheme: "http", Host: addr, Path: Path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return v, err
	}
	req.Header.Set(callerHeader, p.self.HTTP)
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s: %s", addr, resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, maxView)).Decode(&v)
	return v, err
}

func (p *Provider) publish() {
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
