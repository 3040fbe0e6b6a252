// Package membership is frognano's cluster provider for protoactor-go: nodes
// find each other through seed HTTP addresses, poll each other's membership
// endpoint and publish the live set as the cluster topology. Each member also
// carries its node facts (capabilities), which placement decisions need and
// protoactor's own member record does not hold.
package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/encoding/protojson"

	messages "github.com/frognano/frognano/actors/messages/v1"
)

// Path is where every node serves its view of the cluster.
const Path = "/cluster/v1/members"

// Member is one node as the cluster sees it.
type Member struct {
	ID       string          `json:"id"`      // actor system id, new for every process
	Cluster  string          `json:"cluster"` // cluster name
	Host     string          `json:"host"`    // remoting host
	Port     int             `json:"port"`    // remoting port
	HTTP     string          `json:"http"`    // HTTP address (membership, health)
	Kinds    []string        `json:"kinds"`
	NodeInfo json.RawMessage `json:"node_info,omitempty"` // messages.NodeInfo as protojson
}

// Address is the member's actor remoting address.
func (m Member) Address() string { return fmt.Sprintf("%s:%d", m.Host, m.Port) }

// Info decodes the member's node facts.
func (m Member) Info() (*messages.NodeInfo, error) {
	info := &messages.NodeInfo{}
	if len(m.NodeInfo) == 0 {
		return info, nil
	}
	return info, protojson.Unmarshal(m.NodeInfo, info)
}

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

	mu       sync.Mutex
	self     Member
	lastSeen map[string]time.Time // member id -> last direct answer
	members  map[string]Member    // member id -> record
	cl       *cluster.Cluster
	cancel   context.CancelFunc
	done     chan struct{}
	info     func() *messages.NodeInfo
	// callers are HTTP addresses of nodes that polled us, so that a node
	// started without seeds still learns about nodes that joined through it.
	callers map[string]time.Time
}

// callerHeader carries the polling node's HTTP address.
const callerHeader = "X-Frognano-Member"

// Options configure a Provider.
type Options struct {
	Seeds          []string      // HTTP addresses of nodes to join through
	Heartbeat      time.Duration // poll interval
	FailureTimeout time.Duration // silence after which a member is gone
	Logger         *slog.Logger
}

// New returns a provider for a node whose HTTP server is reachable at httpAddr;
// info is asked for the node's current facts whenever another node polls.
func New(httpAddr string, info func() *messages.NodeInfo, o Options) *Provider {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Provider{
		info:      info,
		seeds:     o.Seeds,
		heartbeat: o.Heartbeat,
		timeout:   o.FailureTimeout,
		log:       o.Logger,
		client:    &http.Client{Timeout: o.Heartbeat},
		self:      Member{HTTP: httpAddr},
		lastSeen:  map[string]time.Time{},
		callers:   map[string]time.Time{},
		members:   map[string]Member{},
	}
}

// Handler serves this node's view: itself and every member it believes alive.
func (p *Provider) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := protojson.Marshal(p.info())
		p.mu.Lock()
		if caller := r.Header.Get(callerHeader); caller != "" {
			p.callers[caller] = time.Now()
		}
		if p.self.ID != "" {
			p.self.NodeInfo = raw
			p.members[p.self.ID] = p.self
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
	p.self.NodeInfo, _ = protojson.Marshal(p.info())
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

// poll asks every seed and every known member for its view. A member counts as
// alive only when it answers itself; members learned second-hand are probed
// directly on the next round.
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
	for addr, when := range p.callers {
		if time.Since(when) > p.timeout {
			delete(p.callers, addr)
			continue
		}
		targets[addr] = true
	}
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
			results <- answer{v, err}
		}(addr)
	}
	now := time.Now()
	heard := map[string]Member{}
	learned := map[string]Member{}
	for range targets {
		a := <-results
		if a.err != nil {
			continue
		}
		if a.v.Self.Cluster != p.self.Cluster {
			p.log.Warn("ignoring node of another cluster", "node", a.v.Self.HTTP, "cluster", a.v.Self.Cluster)
			continue
		}
		heard[a.v.Self.ID] = a.v.Self
		for _, m := range a.v.Members {
			learned[m.ID] = m
		}
	}

	p.mu.Lock()
	changed := false
	for id, m := range heard {
		if _, ok := p.members[id]; !ok {
			changed = true
			p.log.Info("member joined", "member", id, "address", m.Address(), "http", m.HTTP)
		}
		p.members[id] = m
		p.lastSeen[id] = now
	}
	for id, m := range learned {
		if _, ok := p.members[id]; !ok && id != p.self.ID {
			// Probe it directly next round; do not trust it as alive yet.
			if _, direct := heard[id]; !direct {
				p.members[id] = m
				p.lastSeen[id] = now.Add(-p.timeout / 2)
				changed = true
			}
		}
	}
	p.lastSeen[p.self.ID] = now
	for id, seen := range p.lastSeen {
		if id != p.self.ID && now.Sub(seen) > p.timeout {
			p.log.Warn("member gone", "member", id, "address", p.members[id].Address(), "silent_for", now.Sub(seen).Round(time.Millisecond))
			delete(p.members, id)
			delete(p.lastSeen, id)
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+Path, nil)
	if err != nil {
		return v, err
	}
	req.Header.Set(callerHeader, p.self.HTTP)
	resp, err := p.client.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("%s: %s", addr, resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
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
