package node

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testConfig(t testing.TB) config.Config {
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr = "127.0.0.1:0"
	cfg.Node.RemoteAddr = "127.0.0.1:0"
	cfg.Cluster.Heartbeat = 100 * time.Millisecond
	cfg.Cluster.FailureTimeout = time.Second
	cfg.Log.Level = "warn"
	return cfg
}

// echoKind is the kind the tests' nodes offer: a node registers no kind
// of its own (the binaries add actors/diag's, which imports this package).
// It answers Ping.
const echoKind = "echo"

func echo() Kind {
	return Kind{Name: echoKind, Props: func(*Node) *actor.Props {
		return actor.PropsFromFunc(func(ctx actor.Context) {
			if p, ok := ctx.Message().(*rtmsg.Ping); ok {
				ctx.Respond(&rtmsg.Pong{Seq: p.Seq, Node: ctx.ActorSystem().Address(), Payload: p.Payload})
			}
		})
	}}
}

func startNode(t testing.TB, cfg config.Config) *Node {
	t.Helper()
	n, err := Start(context.Background(), cfg, Options{Version: "test", Logger: quiet, Kinds: []Kind{echo()}})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	return n
}

// startPair starts two nodes of the test configuration, the second
// joining through the first, and waits until each lists both.
func startPair(t testing.TB) (a, b *Node) {
	t.Helper()
	a = startNode(t, testConfig(t))
	cfgB := testConfig(t)
	cfgB.Cluster.Seeds = []string{a.HTTPAddr()}
	b = startNode(t, cfgB)
	waitMembers(t, 2, a, b)
	return a, b
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestNodeServesHealthReadinessAndMetrics(t *testing.T) {
	n := startNode(t, testConfig(t))
	base := "http://" + n.HTTPAddr()

	if code, body := get(t, base+"/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	code, body := get(t, base+"/readyz")
	var ready struct {
		Ready  bool
		Checks []struct {
			Name string
			OK   bool
		}
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || code != 200 || !ready.Ready {
		t.Fatalf("/readyz = %d %s (%v)", code, body, err)
	}
	names := map[string]bool{}
	for _, c := range ready.Checks {
		names[c.Name] = c.OK
	}
	for _, want := range []string{"store", "actors", "cluster"} {
		if !names[want] {
			t.Errorf("/readyz check %q missing or failing: %s", want, body)
		}
	}
	code, body = get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, "frognano_cluster_members 1") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics = %d, missing expected series:\n%.500s", code, body)
	}
	code, body = get(t, base+InfoPath)
	if code != 200 || !strings.Contains(body, n.Address()) {
		t.Errorf("%s = %d %s", InfoPath, code, body)
	}
}

func TestReadyzFailsWhenStoreIsClosed(t *testing.T) {
	n := startNode(t, testConfig(t))
	if err := n.db.Close(); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, "http://"+n.HTTPAddr()+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"name":"store","ok":false`) {
		t.Fatalf("/readyz with a closed store = %d %s", code, body)
	}
}

func ask(t *testing.T, n *Node, req any) any {
	t.Helper()
	res, err := n.System().Root.RequestFuture(n.Manager(), req, 30*time.Second).Result()
	if err != nil {
		t.Fatalf("ask %T: %v", req, err)
	}
	return res
}

func TestUnknownKindIsAClearError(t *testing.T) {
	n := startNode(t, testConfig(t))
	res := ask(t, n, &rtmsg.SpawnRequest{Kind: "no-such-kind"})
	f, ok := res.(*rtmsg.Failure)
	if !ok || f.GetCode() != rtmsg.FailureCode_FAILURE_CODE_UNKNOWN_KIND || !strings.Contains(f.Message, `"no-such-kind"`) || !strings.Contains(f.Message, echoKind) {
		t.Fatalf("spawn of an unknown kind answered %v", res)
	}
	res = ask(t, n, &rtmsg.SpawnRequest{Kind: echoKind})
	if r, ok := res.(*rtmsg.SpawnReply); !ok || r.Address != n.Address() {
		t.Fatalf("spawn of echo answered %v", res)
	}
}

func waitMembers(t testing.TB, want int, nodes ...*Node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range nodes {
		for len(n.Members()) != want {
			if time.Now().After(deadline) {
				t.Fatalf("node %s sees %d members, want %d", n.ID(), len(n.Members()), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestManagerHandsOtherRequestsOn: the manager asks Options.Manager, in
// order, about what it does not answer itself (actors/diag answers
// DigestBatchRequest so); what none takes is answered UNKNOWN_REQUEST,
// not left to the asker's timeout.
func TestManagerHandsOtherRequestsOn(t *testing.T) {
	var asked []string
	handler := func(name string, takes func(any) bool) ManagerHandler {
		return func(n *Node, ctx actor.Context) bool {
			asked = append(asked, name)
			if !takes(ctx.Message()) {
				return false
			}
			ctx.Respond(&rtmsg.DigestBatchReport{Seconds: 1})
			return true
		}
	}
	isBatch := func(m any) bool { _, ok := m.(*rtmsg.DigestBatchRequest); return ok }
	n, err := Start(context.Background(), testConfig(t), Options{Version: "test", Logger: quiet, Manager: []ManagerHandler{
		handler("never", func(any) bool { return false }), handler("batches", isBatch)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })

	if r, ok := ask(t, n, &rtmsg.DigestBatchRequest{Jobs: 1}).(*rtmsg.DigestBatchReport); !ok || r.Seconds != 1 {
		t.Fatalf("a request a handler takes answered %v", r)
	}
	if got := strings.Join(asked, ","); got != "never,batches" {
		t.Errorf("handlers asked %s, want never,batches", got)
	}
	asked = nil
	if _, ok := ask(t, n, &rtmsg.Ping{Seq: 3}).(*rtmsg.Pong); !ok || len(asked) != 0 {
		t.Errorf("Ping: handlers asked %v, want none (the manager answers it)", asked)
	}
	res := ask(t, n, &rtmsg.DigestJob{Id: "x"})
	if f, ok := res.(*rtmsg.Failure); !ok || f.GetCode() != rtmsg.FailureCode_FAILURE_CODE_UNKNOWN_REQUEST || !strings.Contains(f.Message, "DigestJob") {
		t.Fatalf("a request no handler takes answered %v", res)
	}
}

func TestBadInput(t *testing.T) {
	t.Run("invalid config", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.Node.HTTPAddr = "no-port"
		_, err := Start(context.Background(), cfg, Options{Logger: quiet})
		if err == nil || !strings.Contains(err.Error(), "node.http_addr") {
			t.Fatalf("got %v", err)
		}
		if _, statErr := os.Stat(cfg.Node.DataDir); !errors.Is(statErr, fs.ErrNotExist) {
			t.Errorf("data dir created for an invalid config: %v", statErr)
		}
	})
	t.Run("taken http port", func(t *testing.T) {
		a := startNode(t, testConfig(t))
		cfg := testConfig(t)
		cfg.Node.HTTPAddr = a.HTTPAddr()
		_, err := Start(context.Background(), cfg, Options{Logger: quiet})
		if !errors.Is(err, ErrAddressInUse) || !strings.Contains(err.Error(), a.HTTPAddr()) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("taken remote port", func(t *testing.T) {
		a := startNode(t, testConfig(t))
		cfg := testConfig(t)
		cfg.Node.RemoteAddr = a.Address()
		_, err := Start(context.Background(), cfg, Options{Logger: quiet})
		if !errors.Is(err, ErrAddressInUse) || !strings.Contains(err.Error(), "node.remote_addr") {
			t.Fatalf("got %v", err)
		}
		code, _ := get(t, "http://"+a.HTTPAddr()+"/readyz")
		if code != 200 {
			t.Errorf("first node not ready after a second one failed: %d", code)
		}
	})
	t.Run("locked data dir", func(t *testing.T) {
		a := startNode(t, testConfig(t))
		if err := a.DB().Runs().Put(context.Background(), &records.Run{Id: "r1", Status: "running"}); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t)
		cfg.Node.DataDir = a.cfg.Node.DataDir
		_, err := Start(context.Background(), cfg, Options{Logger: quiet})
		if !errors.Is(err, persistence.ErrLocked) {
			t.Fatalf("got %v", err)
		}
		if r, err := a.DB().Runs().Get(context.Background(), "r1"); err != nil || r.Status != "running" {
			t.Fatalf("first node's data damaged: %v %v", r, err)
		}
	})
	t.Run("corrupt data dir", func(t *testing.T) {
		cfg := testConfig(t)
		if err := os.MkdirAll(StoreDir(cfg), 0o755); err != nil {
			t.Fatal(err)
		}
		junk := filepath.Join(StoreDir(cfg), "MANIFEST")
		if err := os.WriteFile(junk, []byte("this is not a badger manifest"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := hashDir(t, cfg.Node.DataDir)
		_, err := Start(context.Background(), cfg, Options{Logger: quiet})
		if !errors.Is(err, persistence.ErrCorrupt) {
			t.Fatalf("got %v", err)
		}
		if after := hashDir(t, cfg.Node.DataDir); after != before {
			t.Fatalf("a failed start changed the data dir:\n%s\n%s", before, after)
		}
	})
}

func hashDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		b.WriteString(p)
		b.WriteString(" ")
		sum := sha256.Sum256(data)
		b.Write(sum[:])
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestReadyActorsStartBeforeHTTP: a named actor marked Ready has handled
// its Started message (here a slow one) when Start returns and the HTTP
// server answers; one not marked may still be starting.
func TestReadyActorsStartBeforeHTTP(t *testing.T) {
	var ready, lazy atomic.Bool
	slow := func(done *atomic.Bool) func(*Node) *actor.Props {
		return func(*Node) *actor.Props {
			return actor.PropsFromFunc(func(ctx actor.Context) {
				if _, ok := ctx.Message().(*actor.Started); ok {
					time.Sleep(300 * time.Millisecond)
					done.Store(true)
				}
			})
		}
	}
	n := startWith(t, testConfig(t), Options{Actors: []NamedActor{
		{Name: "slow-lazy", Props: slow(&lazy)},
		{Name: "slow-ready", Props: slow(&ready), Ready: true},
	}})
	if !ready.Load() {
		t.Fatal("Start returned before the Ready actor had handled Started")
	}
	resp, err := http.Get("http://" + n.HTTPAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !ready.Load() {
		t.Fatal("HTTP answered before the Ready actor had started")
	}
}
