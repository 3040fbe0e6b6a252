package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/cmd/internal/services"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/mtls"
	"github.com/frognano/frognano/runtime/node"
)

// cli runs the frognano command line in this process and returns its
// output and error.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := root()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// TestCertCommands: `cert ca` and `cert node` write a CA and a node
// certificate a node accepts (keys 0600), print the settings to use,
// refuse to overwrite without --force, and name missing flags.
func TestCertCommands(t *testing.T) {
	dir := t.TempDir()
	ca, nodeDir := filepath.Join(dir, "ca"), filepath.Join(dir, "node-a")
	out, err := cli(t, "cert", "ca", "--out", ca, "--name", "test")
	if err != nil || !strings.Contains(out, "ca.key") || !strings.Contains(out, "frognano cert node --ca") {
		t.Fatalf("cert ca: %v\n%s", err, out)
	}
	out, err = cli(t, "cert", "node", "--ca", ca, "--name", "node-a", "--host", "127.0.0.1,node-a.internal", "--host", "10.0.0.1", "--out", nodeDir)
	if err != nil {
		t.Fatalf("cert node: %v\n%s", err, out)
	}
	for _, want := range []string{"tls_ca: " + filepath.Join(nodeDir, "ca.crt"), "tls_key: " + filepath.Join(nodeDir, "node.key"),
		"FROGNANO_REMOTE_TLS_CERT", "127.0.0.1, 10.0.0.1, node-a.internal"} {
		if !strings.Contains(out, want) {
			t.Errorf("cert node output lacks %q:\n%s", want, out)
		}
	}
	for _, key := range []string{filepath.Join(ca, "ca.key"), filepath.Join(nodeDir, "node.key")} {
		if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", key, st.Mode(), err)
		}
	}
	r := config.Remote{TLSCA: filepath.Join(nodeDir, "ca.crt"), TLSCert: filepath.Join(nodeDir, "node.crt"), TLSKey: filepath.Join(nodeDir, "node.key")}
	creds, err := mtls.Load(r)
	if err != nil {
		t.Fatalf("the issued files do not load: %v", err)
	}
	if creds.Leaf.Subject.CommonName != "node-a" || len(creds.Leaf.ExtKeyUsage) != 2 || creds.Leaf.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Errorf("leaf %q usages %v", creds.Leaf.Subject.CommonName, creds.Leaf.ExtKeyUsage)
	}

	key, _ := os.ReadFile(r.TLSKey)
	caKey, _ := os.ReadFile(filepath.Join(ca, "ca.key"))
	if _, err := cli(t, "cert", "node", "--ca", ca, "--name", "node-a", "--host", "127.0.0.1", "--out", nodeDir); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("second cert node into the same directory: %v", err)
	}
	if _, err := cli(t, "cert", "ca", "--out", ca); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("second cert ca into the same directory: %v", err)
	}
	if b, _ := os.ReadFile(r.TLSKey); !bytes.Equal(b, key) {
		t.Error("node.key replaced without --force")
	}
	if b, _ := os.ReadFile(filepath.Join(ca, "ca.key")); !bytes.Equal(b, caKey) {
		t.Error("ca.key replaced without --force")
	}
	if _, err := cli(t, "cert", "node", "--ca", ca, "--name", "node-a", "--host", "127.0.0.1", "--out", nodeDir, "--force"); err != nil {
		t.Errorf("cert node --force: %v", err)
	}
	if b, _ := os.ReadFile(r.TLSKey); bytes.Equal(b, key) {
		t.Error("node.key unchanged with --force")
	}

	if _, err := cli(t, "cert", "node", "--out", filepath.Join(dir, "x")); err == nil || !strings.Contains(err.Error(), "--ca, --host, --name required") {
		t.Errorf("cert node without its flags: %v", err)
	}
	if _, err := cli(t, "cert", "ca"); err == nil || !strings.Contains(err.Error(), "--out") {
		t.Errorf("cert ca without --out: %v", err)
	}
	if _, err := cli(t, "cert", "node", "--ca", ca, "--name", "b", "--host", "a/b", "--out", filepath.Join(dir, "b")); err == nil || !strings.Contains(err.Error(), "not an IP address or a DNS name") {
		t.Errorf("a bad host: %v", err)
	}
	help, _ := cli(t, "cert", "node", "--help")
	for _, want := range []string{"--host", "127.0.0.1", "--force", "remote.tls_ca", "0600"} {
		if !strings.Contains(help, want) {
			t.Errorf("cert node --help lacks %q", want)
		}
	}
	help, _ = cli(t, "cert", "--help")
	for _, want := range []string{"frognano cert ca --out", "--remote-tls-ca", "FROGNANO_REMOTE_TLS_KEY", "ca.key off the nodes"} {
		if !strings.Contains(help, want) {
			t.Errorf("cert --help lacks %q", want)
		}
	}
}

// TestCLIReachesAnMTLSNodeThroughItsAPI: the CLI is a client of a node's
// HTTP API, never of its remoting: `frognano --node … cluster spawn`
// reaches a node whose remoting requires mutual TLS without any
// certificate, through the API and its token; without the token it is
// refused and spawns nothing.
func TestCLIReachesAnMTLSNodeThroughItsAPI(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	if _, err := cli(t, "cert", "ca", "--out", ca); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "node-a")
	if _, err := cli(t, "cert", "node", "--ca", ca, "--name", "node-a", "--host", "127.0.0.1", "--out", out); err != nil {
		t.Fatal(err)
	}
	token := strings.Repeat("t0ken", 8)
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(dir, "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Node.APIToken = token
	cfg.Remote = config.Remote{TLSCA: filepath.Join(out, "ca.crt"), TLSCert: filepath.Join(out, "node.crt"), TLSKey: filepath.Join(out, "node.key")}
	cfg.Log.Level = "warn"
	n, err := node.Start(context.Background(), cfg, diag.NodeOptions(node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Handlers: []node.Handler{services.Gateway()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop(context.Background())
	t.Setenv("FROGNANO_REMOTE_TLS_CA", "")
	t.Setenv("FROGNANO_REMOTE_TLS_CERT", "")
	t.Setenv("FROGNANO_REMOTE_TLS_KEY", "")

	t.Setenv("FROGNANO_NODE_API_TOKEN", "")
	res, err := cli(t, "--node", n.HTTPAddr(), "cluster", "spawn", "diag")
	if err == nil || !strings.Contains(err.Error(), "needs its API token") || strings.Contains(res, "spawned") {
		t.Errorf("without the token: %v\n%s", err, res)
	}
	t.Setenv("FROGNANO_NODE_API_TOKEN", token)
	res, err = cli(t, "--node", n.HTTPAddr(), "cluster", "spawn", "diag")
	if err != nil || !strings.Contains(res, "spawned diag as "+n.Address()) {
		t.Fatalf("with the token, without a certificate: %v\n%s", err, res)
	}
}
