package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/images"
)

// network is a bridge of the test's own with network namespaces on it, one
// per host, each with an address of its own (not loopback aliases of one
// host): 10.231.N.H/24, the bridge at .1 in the test's namespace.
type network struct {
	id, subnet, bridge string
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newNetwork makes the bridge, or skips where the test cannot (not root,
// no iproute2, no bridge support).
func newNetwork(t *testing.T) *network {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (iproute2, util-linux)", tool)
		}
	}
	b := make([]byte, 2)
	rand.Read(b)
	nw := &network{id: hex.EncodeToString(b), subnet: fmt.Sprintf("10.231.%d", 10+int(b[0])%200)}
	nw.bridge = "fnbr" + nw.id
	if err := ipCmd("link", "add", nw.bridge, "type", "bridge"); err != nil {
		t.Skipf("cannot make a bridge here: %v", err)
	}
	t.Cleanup(func() { ipCmd("link", "del", nw.bridge) })
	for _, args := range [][]string{{"addr", "add", nw.subnet + ".1/24", "dev", nw.bridge}, {"link", "set", nw.bridge, "up"}} {
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	return nw
}

// host adds a namespace with address subnet.h and returns the command
// prefix that runs a program in it, and its address.
func (nw *network) host(t *testing.T, h int) ([]string, string) {
	t.Helper()
	ns := fmt.Sprintf("fn%s%d", nw.id, h)
	veth, peer := fmt.Sprintf("fv%s%d", nw.id, h), fmt.Sprintf("fp%s%d", nw.id, h)
	addr := fmt.Sprintf("%s.%d", nw.subnet, h)
	if err := ipCmd("netns", "add", ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ipCmd("netns", "del", ns) })
	for _, args := range [][]string{
		{"link", "add", veth, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", ns},
		{"link", "set", veth, "master", nw.bridge},
		{"link", "set", veth, "up"},
		{"netns", "exec", ns, "ip", "addr", "add", addr + "/24", "dev", peer},
		{"netns", "exec", ns, "ip", "link", "set", peer, "up"},
		{"netns", "exec", ns, "ip", "link", "set", "lo", "up"},
	} {
		if err := ipCmd(args...); err != nil {
			t.Fatal(err)
		}
	}
	// nsenter enters the network namespace only: ip netns exec would also
	// give the program a mount namespace of its own, where the sandboxes'
	// mounts would be out of containerd's sight.
	return []string{"nsenter", "--net=/run/netns/" + ns}, addr
}

// TestRunAcrossNetworkNamespaces is issue 17's check: two nodes in network
// namespaces of their own, with different addresses, over mutual TLS and
// an API token; the CLI in a third namespace starts a run on node A, the
// run places episodes on node B, the CLI leaves and comes back to follow
// it, node A is SIGTERMed and started again and resumes the run by itself;
// the API refuses calls without the token.
func TestRunAcrossNetworkNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an environment image and trains; skipped with -short")
	}
	if _, err := os.Stat("/run/containerd/containerd.sock"); err != nil {
		t.Skip("containerd is not running (scripts/setup-containerd.sh starts it)")
	}
	if os.Getenv("FROGNANO_TEST_GGUF") == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: the run trains the model store's smollm2-135m")
	}
	nw := newNetwork(t)
	inA, ipA := nw.host(t, 2)
	inB, ipB := nw.host(t, 3)
	inC, _ := nw.host(t, 4)

	dir := t.TempDir()
	for _, args := range [][]string{
		{"cert", "ca", "--out", filepath.Join(dir, "ca")},
		{"cert", "node", "--ca", filepath.Join(dir, "ca"), "--name", "node-a", "--host", ipA, "--out", filepath.Join(dir, "node-a")},
		{"cert", "node", "--ca", filepath.Join(dir, "ca"), "--name", "node-b", "--host", ipB, "--out", filepath.Join(dir, "node-b")},
	} {
		if out, code := cli(t, args...); code != 0 {
			t.Fatalf("frognano %s (exit %d):\n%s", strings.Join(args, " "), code, out)
		}
	}
	token := strings.Repeat("n3tns", 8)
	withToken := filepath.Join(dir, "token.yaml")
	if err := os.WriteFile(withToken, []byte("node:\n  api_token: "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Node B stands for another machine: a containerd namespace of its own,
	// so that it holds none of A's images and fetches the environment's
	// image from A when its first sandbox needs it.
	const nsB = "frognano-e2e-netns-b"
	configB := filepath.Join(dir, "b.yaml")
	if err := os.WriteFile(configB, []byte("node:\n  api_token: "+token+"\ncontainerd:\n  namespace: "+nsB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeNamespaceImages(t, nsB) })
	removeNamespaceImages(t, nsB)
	tls := func(name, config string) []string {
		d := filepath.Join(dir, name)
		return []string{"--remote-tls-ca", filepath.Join(d, "ca.crt"), "--remote-tls-cert", filepath.Join(d, "node.crt"), "--remote-tls-key", filepath.Join(d, "node.key"),
			"--config", config, "--log-level", "info"}
	}
	dataA := t.TempDir()
	httpA, remoteA := ipA+":7070", ipA+":7071"
	a := launchDaemon(t, inA, httpA, remoteA, dataA, tls("node-a", withToken)...)
	a.waitReady(t)
	b := launchDaemon(t, inB, ipB+":7070", ipB+":7071", t.TempDir(), append(tls("node-b", configB), "--seeds", httpA)...)
	b.waitReady(t)
	a.waitLog(t, "member joined", 20*time.Second)

	proj := writeArith(t, "nsarith")
	const id = "netns-run"
	node := []string{"--node", httpA, "--config", withToken}
	train := []string{"--env", proj, "--tasks", "2", "--tasks-per-step", "2", "--group", "2", "--max-turn-tokens", "24",
		"--parallel", "4", "--run", id, "--seed", "5", "--max-staleness", "0", "--jobs", "4", "--rounds", "10"}

	// Without the token the API refuses the CLI.
	if out, code := cliIn(t, inC, "--node", httpA, "runs", "ls"); code == 0 || !strings.Contains(out, "needs its API token") {
		t.Errorf("runs ls without the token (exit %d):\n%s", code, out)
	}
	out, code := cliIn(t, inC, append(append(node, "run", "--steps", "200", "--detach"), train...)...)
	if code != 0 || !strings.Contains(out, "run "+id+" started on the node") {
		t.Fatalf("run --detach from the third namespace (exit %d):\n%s\nnode A:\n%s", code, out, a.Log())
	}

	// Follow, leave, come back.
	followed := followUntil(t, inC, "step 2/200: frontier recorded", append(node, "runs", "logs", id, "-f")...)
	if !strings.Contains(followed, "cluster: 2 member(s)") || !strings.Contains(followed, "step 1/200: learner:") {
		t.Fatalf("the follower saw:\n%s\nnode A:\n%s", followed, a.Log())
	}
	out, code = cliIn(t, inC, append(node, "runs", "logs", id)...)
	if code != 0 || !strings.Contains(out, "step 2/200: frontier recorded") {
		t.Fatalf("runs logs after coming back (exit %d):\n%s", code, out)
	}

	// Episodes ran on B: its sandbox workers were spawned there, with the
	// environment's image fetched from A (B's namespace had none of it).
	if n := kindStarted(t, "http://"+b.http, token, "sandbox-worker"); n < 1 {
		t.Fatalf("no sandbox worker started on node B (%s); node A's log:\n%s", b.remote, a.Log())
	}
	b.waitLog(t, "fetched an environment image from a member", 10*time.Second)
	if !strings.Contains(b.Log(), "source="+httpA) {
		t.Fatalf("node B fetched its image elsewhere than from A:\n%s", b.Log())
	}
	// A serves only its environments' images, and only with the token.
	for _, c := range []struct {
		ref, token string
		want       int
	}{{"frognano.local/not-an-environment:1", token, http.StatusNotFound}, {"", token, http.StatusBadRequest}, {"frognano.local/x:1", "", http.StatusUnauthorized}} {
		if got := getStatus(t, "http://"+httpA+"/v1/images/export?ref="+url.QueryEscape(c.ref), c.token); got != c.want {
			t.Errorf("GET /v1/images/export?ref=%q (token %v): %d, want %d", c.ref, c.token != "", got, c.want)
		}
	}

	// A stops mid-run and starts again: it resumes the run by itself.
	a.stop(t)
	before := storedRun(t, dataA, id)
	if before.GetStatus() != "running" || before.GetStep() < 2 {
		t.Fatalf("after SIGTERM the record says %s at step %d", before.GetStatus(), before.GetStep())
	}
	a2 := launchDaemon(t, inA, httpA, remoteA, dataA, tls("node-a", withToken)...)
	a2.waitReady(t)
	a2.waitLog(t, "resuming an unfinished run", 30*time.Second)
	want := "resuming run " + id + " (running) after step " + strconv.FormatInt(before.GetStep(), 10)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _ = cliIn(t, inC, append(node, "runs", "logs", id)...)
		if strings.Contains(out, want) && strings.Count(out, "frontier recorded") > int(before.GetStep()) {
			break // a step after the restart
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed run made no step:\n%s\nnode A:\n%s", out, a2.Log())
		}
		time.Sleep(time.Second)
	}
	out, code = cliIn(t, inC, append(node, "runs", "stop", id)...)
	if code != 0 || !strings.Contains(out, "run "+id+" stopped after step") {
		t.Fatalf("runs stop (exit %d):\n%s", code, out)
	}
	cliIn(t, inC, append(node, "env", "rm", "nsarith")...)
}

// kindStarted reads frognano_kind_actors_started_total{kind} from a node's
// /metrics.
func kindStarted(t *testing.T, base, token, kind string) float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^frognano_kind_actors_started_total\{kind="` + regexp.QuoteMeta(kind) + `"\} (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// getStatus is the status of a GET of url, with token as the bearer token
// when set.
func getStatus(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// removeNamespaceImages deletes every image of a containerd namespace
// (what a node of that namespace imported), letting containerd collect
// their content and snapshots.
func removeNamespaceImages(t *testing.T, ns string) {
	t.Helper()
	c, err := containerd.New("/run/containerd/containerd.sock", containerd.WithDefaultNamespace(ns))
	if err != nil {
		t.Logf("clean namespace %s: %v", ns, err)
		return
	}
	defer c.Close()
	ctx := context.Background()
	imgs, err := c.ImageService().List(ctx)
	if err != nil {
		t.Logf("clean namespace %s: %v", ns, err)
		return
	}
	for _, img := range imgs {
		if err := c.ImageService().Delete(ctx, img.Name, images.SynchronousDelete()); err != nil {
			t.Logf("remove %s from %s: %v", img.Name, ns, err)
		}
	}
}
