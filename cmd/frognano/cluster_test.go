package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/actors/frontier"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/cmd/internal/services"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// TestClusterMembersShowsLoad: `frognano cluster members` prints each
// member's load as the member published it: the machine's load average,
// CPU and available memory, and its actors by kind.
func TestClusterMembersShowsLoad(t *testing.T) {
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Cluster.Heartbeat, cfg.Cluster.FailureTimeout = 100*time.Millisecond, time.Second
	cfg.Log.Level = "warn"
	n, err := node.Start(context.Background(), cfg, diag.NodeOptions(node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Handlers: []node.Handler{services.Gateway()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop(context.Background())
	if res, err := n.System().Root.RequestFuture(n.Manager(), &rtmsg.SpawnRequest{Kind: diag.Kind}, 10*time.Second).Result(); err != nil {
		t.Fatal(err)
	} else if _, ok := res.(*rtmsg.SpawnReply); !ok {
		t.Fatalf("spawn answered %v", res)
	}

	// The node's own member record is sampled anew every heartbeat, once
	// the previous sample is a second old.
	row := regexp.MustCompile(`\s(\d+\.\d\d)\s+(\d+)%\s+(\d+\.\d) GiB\s+diag:1\s*$`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, errOut, err := runCLI(t, "", "cluster", "members", "--node", n.HTTPAddr())
		if err != nil {
			t.Fatalf("cluster members: %v\n%s", err, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "LOAD 1M") || !strings.Contains(lines[0], "ACTORS BY KIND") {
			t.Fatalf("cluster members printed:\n%s", out)
		}
		if row.MatchString(lines[1]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the member's row has no load figures or no diag actor:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A member that published no load shows dashes.
	var b strings.Builder
	if err := writeMembers(&b, &rtmsg.MembersReply{Members: []*rtmsg.NodeInfo{{Id: "old", Address: "h:1"}}}); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`h:1 .*-\s+-\s+-\s+-\s*$`).MatchString(strings.TrimSpace(b.String())) {
		t.Errorf("a member without load:\n%s", b.String())
	}
}

// TestFrontierPrintsPoolByHintLevel: `frognano frontier` splits each band
// of the pool by the tasks' hint level, a column per level.
func TestFrontierPrintsPoolByHintLevel(t *testing.T) {
	reply := &messages.FrontierStateReply{State: &records.FrontierState{}, Pool: []*messages.FrontierBand{
		{Name: frontier.BandTooHard, Tasks: 9, Low: 0, High: 0.2, HintTasks: map[int32]int32{1: 6, 3: 3}},
		{Name: frontier.BandFrontier, Tasks: 5, Low: 0.2, High: 0.8, HintTasks: map[int32]int32{1: 1, 3: 2, 4: 2}},
		{Name: frontier.BandTooEasy, Low: 0.8, High: 1},
	}}
	var b strings.Builder
	if err := writeFrontier(&b, reply); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^  BAND\s+SOLVE RATE\s+TASKS\s+HINT 1\s+HINT 3\s+HINT 4\s*$`),
		regexp.MustCompile(`(?m)^  too_hard\s+0\.00–0\.20\s+9\s+6\s+3\s+0\s*$`),
		regexp.MustCompile(`(?m)^  frontier\s+0\.20–0\.80\s+5\s+1\s+2\s+2\s*$`),
		regexp.MustCompile(`(?m)^  too_easy\s+0\.80–1\.00\s+0\s+0\s+0\s+0\s*$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("frontier output lacks %s:\n%s", want, out)
		}
	}
}
