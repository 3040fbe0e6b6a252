package diag

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

func TestDigest(t *testing.T) {
	once := sha256.Sum256([]byte("x"))
	twice := sha256.Sum256(once[:])
	for _, tc := range []struct {
		rounds int64
		want   []byte
	}{{0, once[:]}, {1, twice[:]}} {
		if got := Digest([]byte("x"), tc.rounds); !bytes.Equal(got, tc.want) {
			t.Errorf("Digest(x, %d) = %x, want %x", tc.rounds, got, tc.want)
		}
	}
}

func startNode(t *testing.T, seeds ...string) *node.Node {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Cluster.Heartbeat, cfg.Cluster.FailureTimeout = 100*time.Millisecond, time.Second
	cfg.Cluster.Seeds = seeds
	cfg.Log.Level = "warn"
	n, err := node.Start(context.Background(), cfg, NodeOptions(node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	return n
}

func ask(t *testing.T, n *node.Node, req any) any {
	t.Helper()
	res, err := n.System().Root.RequestFuture(n.Manager(), req, 30*time.Second).Result()
	if err != nil {
		t.Fatalf("ask %T: %v", req, err)
	}
	return res
}

// TestTwoNodesSpreadVerifiedWork: a node started with NodeOptions offers
// the diag kind, and its manager runs a DigestBatchRequest on the other
// member when asked to prefer remote ones; every digest checks.
func TestTwoNodesSpreadVerifiedWork(t *testing.T) {
	a := startNode(t)
	b := startNode(t, a.HTTPAddr())
	deadline := time.Now().Add(10 * time.Second)
	for len(a.Members()) != 2 || len(b.Members()) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("members: a sees %d, b sees %d, want 2", len(a.Members()), len(b.Members()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !slices.Contains(a.Info().GetKinds(), Kind) {
		t.Fatalf("kinds %v lack %q", a.Info().GetKinds(), Kind)
	}

	res := ask(t, a, &rtmsg.DigestBatchRequest{Jobs: 6, Rounds: 1000, PreferRemote: true, Seed: 7})
	report, ok := res.(*rtmsg.DigestBatchReport)
	if !ok || len(report.Outcomes) != 6 {
		t.Fatalf("digest batch answered %v", res)
	}
	for _, o := range report.Outcomes {
		if o.Error != "" || !bytes.Equal(o.Digest, Digest(o.Data, 1000)) {
			t.Errorf("job %s: error %q or wrong digest", o.Id, o.Error)
		}
		if o.Node != b.Address() {
			t.Errorf("job %s ran on %s, want the remote node %s", o.Id, o.Node, b.Address())
		}
	}
}

// TestBatchesRefuseWhatTheyCannotRun: a batch outside the bounds is a
// bad_request at once, and so is a single job with too many rounds.
func TestBatchesRefuseWhatTheyCannotRun(t *testing.T) {
	n := startNode(t)
	for _, req := range []*rtmsg.DigestBatchRequest{
		{Jobs: 0, Rounds: 1}, {Jobs: MaxJobs + 1, Rounds: 1}, {Jobs: 1, Rounds: -1}, {Jobs: 1, Rounds: MaxRounds + 1},
	} {
		if r := ask(t, n, req); !rtmsg.IsFailure(r, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
			t.Errorf("jobs %d, rounds %d answered %v", req.Jobs, req.Rounds, r)
		}
	}
	res, err := n.System().Root.RequestFuture(n.System().Root.Spawn(Props(n.Info)), &rtmsg.DigestJob{Id: "j", Rounds: MaxRounds + 1}, 10*time.Second).Result()
	if err != nil || !rtmsg.IsFailure(res, rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST) {
		t.Errorf("a job with %d rounds answered %v, %v", MaxRounds+1, res, err)
	}
}

// TestNodeOptionsKeepsTheCallers: NodeOptions adds diag beside what the
// caller gives and does not write into the caller's slices.
func TestNodeOptionsKeepsTheCallers(t *testing.T) {
	mine := func(*node.Node, actor.Context) bool { return false }
	handlers := make([]node.ManagerHandler, 1, 4)
	handlers[0] = mine
	kinds := []node.Kind{{Name: "mine"}}
	opts := NodeOptions(node.Options{Kinds: kinds, Manager: handlers})
	if len(opts.Kinds) != 2 || opts.Kinds[0].Name != Kind || opts.Kinds[1].Name != "mine" {
		t.Errorf("kinds %v", opts.Kinds)
	}
	if len(opts.Manager) != 2 || handlers[:2][1] != nil {
		t.Errorf("handlers: %d, the caller's slice written: %v", len(opts.Manager), handlers[:2][1] != nil)
	}
}
