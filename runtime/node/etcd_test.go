package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/membership/etcdtest"
)

// etcdConfig is a test node's configuration on the etcd provider: a lease
// of one second, the record rewritten every 300 ms.
func etcdConfig(t testing.TB, endpoint string) config.Config {
	cfg := testConfig(t)
	cfg.Cluster.Provider = config.ProviderEtcd
	cfg.Cluster.EtcdEndpoints = []string{endpoint}
	cfg.Cluster.EtcdPrefix = "/frognano-test"
	cfg.Cluster.EtcdRefresh = 300 * time.Millisecond
	return cfg
}

// helperEnv names the etcd endpoint for TestEtcdHelperNode when the test
// binary runs it as a separate node process (killed with SIGKILL).
const helperEnv = "ETCDTEST_HELPER_ENDPOINT"

// TestEtcdHelperNode is not a test on its own: run by
// TestEtcdMembership in a child process, it starts a node on etcd, prints
// its member id and waits to be killed.
func TestEtcdHelperNode(t *testing.T) {
	endpoint := os.Getenv(helperEnv)
	if endpoint == "" {
		t.Skip("helper process of TestEtcdMembership")
	}
	n, err := Start(context.Background(), etcdConfig(t, endpoint), Options{Version: "test", Logger: quiet, Kinds: []Kind{echo()}})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	os.Stdout.WriteString("MEMBER " + n.System().ID + "\n")
	time.Sleep(60 * time.Second) // killed long before
}

// topology records the members of the latest protoactor ClusterTopology
// event a node published (the events the rest of the node consumes; a
// SandboxWorker's owner watch is one).
type topology struct {
	mu  sync.Mutex
	ids []string
}

// watchTopology follows n's topology events from now on, starting from
// initial.
func watchTopology(n *Node, initial ...string) *topology {
	tp := &topology{ids: slices.Sorted(slices.Values(initial))}
	n.System().EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*cluster.ClusterTopology); ok {
			var ids []string
			for _, m := range t.Members {
				ids = append(ids, m.Id)
			}
			slices.Sort(ids)
			tp.mu.Lock()
			tp.ids = ids
			tp.mu.Unlock()
		}
	})
	return tp
}

func (tp *topology) get() []string {
	if tp == nil {
		return nil
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return slices.Clone(tp.ids)
}

// waitIDs waits until n sees exactly want in its member list and, when tp
// is not nil, in its latest topology event.
func waitIDs(t *testing.T, n *Node, tp *topology, within time.Duration, want ...string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	deadline := time.Now().Add(within)
	for {
		var members []string
		for _, m := range n.Members() {
			members = append(members, m.ID)
		}
		slices.Sort(members)
		if slices.Equal(members, want) && (tp == nil || slices.Equal(tp.get(), want)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s sees members %v, topology %v; want %v", n.System().ID, members, tp.get(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestEtcdMembership(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startNode(t, etcdConfig(t, srv.Endpoint))
	aTopology := watchTopology(a, a.System().ID)
	bcfg := etcdConfig(t, srv.Endpoint)
	// b's lease lives 10 s: seen gone sooner, it was revoked at its stop.
	bcfg.Cluster.FailureTimeout = 10 * time.Second
	b := startNode(t, bcfg)

	// A third node in its own process, to be killed without a goodbye.
	child := exec.Command(os.Args[0], "-test.run=^TestEtcdHelperNode$", "-test.v")
	child.Env = append(os.Environ(), helperEnv+"="+srv.Endpoint)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	cID := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "MEMBER "); ok {
				cID <- id
			}
		}
		close(cID)
	}()
	var c string
	select {
	case c = <-cID:
	case <-time.After(30 * time.Second):
		t.Fatal("the child node did not start")
	}
	if c == "" {
		t.Fatal("the child node exited before joining")
	}

	aID, bID := a.System().ID, b.System().ID
	waitIDs(t, a, aTopology, 10*time.Second, aID, bID, c)
	waitIDs(t, b, nil, 10*time.Second, aID, bID, c)

	// Each member's facts come through the cluster's gossip (the etcd
	// records hold none): capabilities, kinds and load.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var missing []string
		for _, m := range a.Members() {
			info := m.Info
			if info.GetCapabilities().GetCores() <= 0 || info.GetLoad() == nil || !slices.Contains(m.Kinds, echoKind) || info.GetAddress() != m.Address() {
				missing = append(missing, fmt.Sprintf("%s: kinds %v, info %v", m.ID, m.Kinds, info))
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members' facts as node a sees them:\n%s", strings.Join(missing, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Records that are not members of this cluster are ignored.
	cli := srv.Client(t)
	prefix := "/frognano-test/frognano/members/"
	for key, value := range map[string]string{
		prefix + "garbage":   "not json",
		prefix + "elsewhere": `{"id":"elsewhere","cluster":"other","host":"127.0.0.1","port":9}`,
		prefix + "misnamed":  `{"id":"someone-else","cluster":"frognano","host":"127.0.0.1","port":9}`,
	} {
		if _, err := cli.Put(context.Background(), key, value); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	waitIDs(t, a, aTopology, time.Second, aID, bID, c)

	// A clean stop revokes b's lease: the others see it leave at once,
	// well within the lease TTL.
	stopping := time.Now()
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitIDs(t, a, aTopology, time.Second, aID, c)
	t.Logf("clean stop seen %s after Stop began (lease TTL 10 s)", time.Since(stopping).Round(time.Millisecond))

	// A killed node's lease expires (TTL = failure_timeout, 1 s here).
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitIDs(t, a, aTopology, 10*time.Second, aID)
	t.Logf("SIGKILL seen %s later", time.Since(killed).Round(time.Millisecond))

	// b restarts on its data directory and joins again (a new member id:
	// the actor system's is new every process).
	b2 := startNode(t, bcfg)
	waitIDs(t, a, aTopology, 10*time.Second, aID, b2.System().ID)
	waitIDs(t, b2, nil, 10*time.Second, aID, b2.System().ID)

	// The membership view served over HTTP is etcd's.
	code, body := get(t, "http://"+a.HTTPAddr()+"/cluster/v1/members")
	if code != 200 || !strings.Contains(body, b2.System().ID) {
		t.Errorf("members view = %d %s", code, body)
	}
	// b2's lease revoked behind its back (as when etcd expires it while b2
	// cannot reach it): a sees b2 leave; b2 registers again under a new
	// lease, and a keeps it out (protoactor blocks a member id that left,
	// so rejoining the members that saw it leave takes a restart).
	b2ID := b2.System().ID
	bKey := prefix + b2ID
	got, err := cli.Get(context.Background(), bKey)
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].Lease == 0 {
		t.Fatalf("b2's record in etcd: %v %v", got, err)
	}
	oldLease := clientv3.LeaseID(got.Kvs[0].Lease)
	if _, err := cli.Revoke(context.Background(), oldLease); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err = cli.Get(context.Background(), bKey)
		if err == nil && len(got.Kvs) == 1 && clientv3.LeaseID(got.Kvs[0].Lease) != oldLease {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b2 did not register again after its lease was revoked: %v %v", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	waitIDs(t, a, aTopology, time.Second, aID)
	waitIDs(t, b2, nil, time.Second, aID, b2ID)
}

func TestEtcdUnreachableIsOneClearError(t *testing.T) {
	if etcdtest.Binary() == "" {
		// Not needed to run, but kept beside the other etcd tests' rule.
		t.Log("etcd is not installed; this test needs only a dead port")
	}
	cfg := etcdConfig(t, etcdtest.FreePort(t))
	start := time.Now()
	n, err := Start(context.Background(), cfg, Options{Version: "test", Logger: quiet})
	if err == nil {
		n.Stop(context.Background())
		t.Fatal("a node started on an etcd endpoint nothing listens on")
	}
	msg := err.Error()
	if !strings.Contains(msg, "cluster.etcd_endpoints "+cfg.Cluster.EtcdEndpoints[0]) || !strings.Contains(msg, "etcd does not answer") || strings.Count(msg, "\n") > 0 {
		t.Fatalf("error = %q", msg)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the error took %s", d)
	}
	// The node released what it had taken: the same data directory starts
	// at once on the static provider.
	cfg.Cluster.Provider = config.ProviderStatic
	cfg.Cluster.EtcdEndpoints = nil
	startNode(t, cfg)
}

// TestEtcdRestartLosesNoMember kills etcd for longer than the members'
// lease TTL and starts it again: etcd renews the leases it restores, the
// nodes keep them alive again and follow their watches, no member is seen
// leaving, and a node that joins afterwards is seen by all.
func TestEtcdRestartLosesNoMember(t *testing.T) {
	srv := etcdtest.Start(t)
	a := startNode(t, etcdConfig(t, srv.Endpoint))
	aTopology := watchTopology(a, a.System().ID)
	b := startNode(t, etcdConfig(t, srv.Endpoint))
	aID, bID := a.System().ID, b.System().ID
	waitIDs(t, a, aTopology, 10*time.Second, aID, bID)

	srv.Restart(t, 2*time.Second)
	c := startNode(t, etcdConfig(t, srv.Endpoint))
	cID := c.System().ID
	waitIDs(t, a, aTopology, 10*time.Second, aID, bID, cID)
	waitIDs(t, b, nil, 10*time.Second, aID, bID, cID)
	waitIDs(t, c, nil, 10*time.Second, aID, bID, cID)
}
