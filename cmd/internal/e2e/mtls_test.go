package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMutualTLSCluster: with certificates from `frognano cert`, two
// frognano-node daemons (one configured by flags, one by its config file)
// form a cluster over mutual TLS and the CLI, through the first's HTTP API,
// spawns a sandbox worker on the second; a node whose remoting binds off
// loopback without TLS does not start. (Outsiders' remoting is refused:
// runtime/node's TestRemotingRefusesOutsiders.)
func TestMutualTLSCluster(t *testing.T) {
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		out, code := cli(t, args...)
		if code != 0 {
			t.Fatalf("frognano %s (exit %d):\n%s", strings.Join(args, " "), code, out)
		}
		return out
	}
	run("cert", "ca", "--out", filepath.Join(dir, "ca"))
	for _, name := range []string{"node-a", "node-b"} {
		run("cert", "node", "--ca", filepath.Join(dir, "ca"), "--name", name, "--host", "127.0.0.1", "--out", filepath.Join(dir, name))
	}
	flags := func(name string) []string {
		d := filepath.Join(dir, name)
		return []string{"--remote-tls-ca", filepath.Join(d, "ca.crt"), "--remote-tls-cert", filepath.Join(d, "node.crt"), "--remote-tls-key", filepath.Join(d, "node.key")}
	}

	a := startDaemon(t, t.TempDir(), flags("node-a")...)
	a.waitReady(t)
	cfgB := filepath.Join(dir, "node-b.yaml")
	b := filepath.Join(dir, "node-b")
	os.WriteFile(cfgB, []byte("remote:\n  tls_ca: "+filepath.Join(b, "ca.crt")+"\n  tls_cert: "+filepath.Join(b, "node.crt")+
		"\n  tls_key: "+filepath.Join(b, "node.key")+"\n"), 0o644)
	nb := startDaemon(t, t.TempDir(), "--config", cfgB, "--seeds", a.http)
	nb.waitReady(t)
	a.waitLog(t, "member joined", 10*time.Second)
	// A node answers /readyz a moment before it logs "node started", so
	// the line is waited for, not read at once.
	a.waitLog(t, "remote_tls=\"mutual (node-a)\"", 10*time.Second)
	nb.waitLog(t, "remote_tls=\"mutual (node-b)\"", 10*time.Second)

	// The CLI is a client of a node's HTTP API, not of its remoting: it
	// needs no certificate; node A spawns on B over mutual TLS.
	out := run("--node", a.http, "cluster", "spawn", "sandbox-worker", "--member", nb.remote)
	if !strings.Contains(out, "spawned sandbox-worker as "+nb.remote) {
		t.Fatalf("spawn over mutual TLS:\n%s", out)
	}
	out = run("--node", a.http, "cluster", "members")
	if !strings.Contains(out, a.remote) || !strings.Contains(out, nb.remote) {
		t.Fatalf("cluster members over mutual TLS:\n%s", out)
	}

	out, code := runNode(t, "--data-dir", filepath.Join(t.TempDir(), "data"), "--http-addr", freeAddr(t), "--remote-addr", "0.0.0.0:0")
	if code == 0 || !strings.Contains(out, "remote.tls_ca, remote.tls_cert, remote.tls_key: required") || !strings.Contains(out, "frognano cert") {
		t.Errorf("remoting on 0.0.0.0 without TLS (exit %d):\n%s", code, out)
	}
}
