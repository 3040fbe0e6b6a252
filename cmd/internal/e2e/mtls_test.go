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
// form a cluster over mutual TLS and the CLI, holding a certificate of the
// same CA, spawns a sandbox worker on the second through the first; the CLI
// without a certificate, or with another CA's, is refused; and a node
// whose remoting binds off loopback without TLS does not start.
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
	run("cert", "ca", "--out", filepath.Join(dir, "evil-ca"))
	for _, name := range []string{"node-a", "node-b", "cli"} {
		run("cert", "node", "--ca", filepath.Join(dir, "ca"), "--name", name, "--host", "127.0.0.1", "--out", filepath.Join(dir, name))
	}
	run("cert", "node", "--ca", filepath.Join(dir, "evil-ca"), "--name", "evil", "--host", "127.0.0.1", "--out", filepath.Join(dir, "evil"))
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
	if !strings.Contains(a.Log(), "remote_tls=\"mutual (node-a)\"") || !strings.Contains(nb.Log(), "remote_tls=\"mutual (node-b)\"") {
		t.Errorf("the nodes do not say they run mutual TLS:\n%s\n%s", a.Log(), nb.Log())
	}

	spawn := append(flags("cli"), "--node", a.http, "cluster", "spawn", "sandbox-worker", "--member", nb.remote)
	out := run(spawn...)
	if !strings.Contains(out, "spawned sandbox-worker as "+nb.remote) {
		t.Fatalf("spawn over mutual TLS:\n%s", out)
	}
	out = run(append(flags("cli"), "--node", a.http, "cluster", "members")...)
	if !strings.Contains(out, a.remote) || !strings.Contains(out, nb.remote) {
		t.Fatalf("cluster members over mutual TLS:\n%s", out)
	}

	out, code := cli(t, "--node", a.http, "cluster", "spawn", "sandbox-worker", "--member", nb.remote)
	if code == 0 || !strings.Contains(out, "did not answer") || !strings.Contains(out, "FROGNANO_REMOTE_TLS_CA") {
		t.Errorf("the CLI without a certificate (exit %d):\n%s", code, out)
	}
	out, code = cli(t, append(flags("evil"), "--node", a.http, "cluster", "spawn", "sandbox-worker", "--member", nb.remote)...)
	if code == 0 || !strings.Contains(out, "did not answer") {
		t.Errorf("the CLI with another CA's certificate (exit %d):\n%s", code, out)
	}

	out, code = runNode(t, "--data-dir", filepath.Join(t.TempDir(), "data"), "--http-addr", freeAddr(t), "--remote-addr", "0.0.0.0:0")
	if code == 0 || !strings.Contains(out, "remote.tls_ca, remote.tls_cert, remote.tls_key: required") || !strings.Contains(out, "frognano cert") {
		t.Errorf("remoting on 0.0.0.0 without TLS (exit %d):\n%s", code, out)
	}
}
