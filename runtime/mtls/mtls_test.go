package mtls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/runtime/config"
)

// issue makes a CA in dir/ca and a node certificate for hosts in dir/name.
func issue(t *testing.T, dir, name string, hosts ...string) config.Remote {
	t.Helper()
	ca := filepath.Join(dir, "ca")
	if _, err := os.Stat(filepath.Join(ca, CAKeyFile)); err != nil {
		if err := NewCA(ca, CAOptions{Name: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, name)
	if err := IssueNode(out, NodeOptions{CADir: ca, Name: name, Hosts: hosts}); err != nil {
		t.Fatal(err)
	}
	return files(out)
}

func files(dir string) config.Remote {
	return config.Remote{TLSCA: filepath.Join(dir, CACertFile), TLSCert: filepath.Join(dir, NodeCertFile), TLSKey: filepath.Join(dir, NodeKeyFile)}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestCAAndNodeCertificates: the CA is an ECDSA P-256 key (0600) and a CA
// certificate that can sign only leaves; a node certificate names exactly
// the hosts given, serves both server and client authentication, chains to
// the CA, and Load accepts the directory's three files.
func TestCAAndNodeCertificates(t *testing.T) {
	dir := t.TempDir()
	r := issue(t, dir, "node-a", "127.0.0.1", "10.1.2.3", "node-a.internal", "::1")

	if m := mode(t, filepath.Join(dir, "ca", CAKeyFile)); m != 0o600 {
		t.Errorf("ca.key mode %v, want 0600", m)
	}
	if m := mode(t, r.TLSKey); m != 0o600 {
		t.Errorf("node.key mode %v, want 0600", m)
	}
	caCerts, err := ReadCerts(filepath.Join(dir, "ca", CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	ca := caCerts[0]
	pub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() || !ca.IsCA || !ca.MaxPathLenZero || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA certificate: key %T, IsCA %v, MaxPathLenZero %v, usage %v", ca.PublicKey, ca.IsCA, ca.MaxPathLenZero, ca.KeyUsage)
	}
	copied, err := ReadCerts(r.TLSCA)
	if err != nil || !copied[0].Equal(ca) {
		t.Fatalf("the node directory's ca.crt is not the CA's certificate: %v", err)
	}

	c, err := Load(r)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	leaf := c.Leaf
	if leaf.Subject.CommonName != "node-a" || leaf.IsCA {
		t.Errorf("leaf CN %q IsCA %v", leaf.Subject.CommonName, leaf.IsCA)
	}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	if strings.Join(ips, ",") != "127.0.0.1,10.1.2.3,::1" || strings.Join(leaf.DNSNames, ",") != "node-a.internal" {
		t.Errorf("SANs: IPs %v names %v", ips, leaf.DNSNames)
	}
	if len(leaf.ExtKeyUsage) != 2 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Errorf("extended key usage %v, want server and client auth", leaf.ExtKeyUsage)
	}
	if lp, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || lp.Curve != elliptic.P256() {
		t.Errorf("node key is %T, want ECDSA P-256", leaf.PublicKey)
	}
	if !leaf.NotAfter.Before(time.Now().Add(366*24*time.Hour)) || !leaf.NotAfter.After(time.Now().Add(364*24*time.Hour)) {
		t.Errorf("node certificate valid until %v, want a year", leaf.NotAfter)
	}
	for _, h := range []string{"127.0.0.1", "10.1.2.3", "node-a.internal", "::1"} {
		if err := c.CheckHost(h); err != nil {
			t.Errorf("CheckHost(%s): %v", h, err)
		}
	}
	if err := c.CheckHost("10.9.9.9"); err == nil || !strings.Contains(err.Error(), "remote.tls_cert") || !strings.Contains(err.Error(), "--host 10.9.9.9") {
		t.Errorf("CheckHost of a host the certificate does not name: %v", err)
	}
}

// TestNothingIsOverwrittenWithoutForce: a second `cert ca` or `cert node`
// into the same directory fails and leaves the keys byte for byte; --force
// replaces them; a node directory holding another CA's ca.crt is refused.
func TestNothingIsOverwrittenWithoutForce(t *testing.T) {
	dir := t.TempDir()
	r := issue(t, dir, "a", "127.0.0.1")
	caDir := filepath.Join(dir, "ca")
	caKey, _ := os.ReadFile(filepath.Join(caDir, CAKeyFile))
	nodeKey, _ := os.ReadFile(r.TLSKey)

	if err := NewCA(caDir, CAOptions{}); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "--force") {
		t.Errorf("second CA into the same directory: %v", err)
	}
	if err := IssueNode(filepath.Join(dir, "a"), NodeOptions{CADir: caDir, Name: "a", Hosts: []string{"127.0.0.1"}}); !errors.Is(err, ErrExists) {
		t.Errorf("second node certificate into the same directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(caDir, CAKeyFile)); !bytes.Equal(b, caKey) {
		t.Error("ca.key changed without --force")
	}
	if b, _ := os.ReadFile(r.TLSKey); !bytes.Equal(b, nodeKey) {
		t.Error("node.key changed without --force")
	}

	// Only the key exists (a half-copied directory): still refused.
	half := filepath.Join(dir, "half")
	os.MkdirAll(half, 0o755)
	os.WriteFile(filepath.Join(half, NodeKeyFile), []byte("mine"), 0o600)
	if err := IssueNode(half, NodeOptions{CADir: caDir, Name: "h", Hosts: []string{"127.0.0.1"}}); !errors.Is(err, ErrExists) {
		t.Errorf("a directory holding only node.key: %v", err)
	}

	// Another CA's ca.crt in the output directory is not silently replaced.
	other := filepath.Join(dir, "other")
	if err := NewCA(other, CAOptions{}); err != nil {
		t.Fatal(err)
	}
	mixed := filepath.Join(dir, "mixed")
	os.MkdirAll(mixed, 0o755)
	otherCA, _ := os.ReadFile(filepath.Join(other, CACertFile))
	os.WriteFile(filepath.Join(mixed, CACertFile), otherCA, 0o644)
	if err := IssueNode(mixed, NodeOptions{CADir: caDir, Name: "m", Hosts: []string{"127.0.0.1"}}); !errors.Is(err, ErrExists) {
		t.Errorf("an output directory with another CA's ca.crt: %v", err)
	}

	if err := NewCA(caDir, CAOptions{Force: true}); err != nil {
		t.Fatalf("--force CA: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(caDir, CAKeyFile)); bytes.Equal(b, caKey) {
		t.Error("ca.key unchanged with --force")
	}
	if m := mode(t, filepath.Join(caDir, CAKeyFile)); m != 0o600 {
		t.Errorf("replaced ca.key mode %v", m)
	}
	if err := IssueNode(filepath.Join(dir, "a"), NodeOptions{CADir: caDir, Name: "a", Hosts: []string{"127.0.0.1"}, Force: true}); err != nil {
		t.Fatalf("--force node: %v", err)
	}
	if _, err := Load(r); err != nil {
		t.Fatalf("reissued node under the new CA: %v", err)
	}
}

// TestBadInput: each mistake is refused with the setting or flag to fix.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	good := issue(t, dir, "a", "127.0.0.1")
	caDir := filepath.Join(dir, "ca")
	for _, h := range [][]string{nil, {"a/b"}, {"http://x"}, {"-bad.example"}, {strings.Repeat("x", 300)}} {
		err := IssueNode(filepath.Join(dir, "bad"), NodeOptions{CADir: caDir, Name: "b", Hosts: h})
		if err == nil || len(err.Error()) > 300 {
			t.Errorf("hosts %.40q: %v", h, err)
		}
	}
	if err := IssueNode(filepath.Join(dir, "bad"), NodeOptions{CADir: filepath.Join(dir, "nope"), Name: "b", Hosts: []string{"127.0.0.1"}}); err == nil || !strings.Contains(err.Error(), "frognano cert ca") {
		t.Errorf("missing CA: %v", err)
	}
	// A node directory is not a CA: it has no ca.key.
	if err := IssueNode(filepath.Join(dir, "bad"), NodeOptions{CADir: filepath.Join(dir, "a"), Name: "b", Hosts: []string{"127.0.0.1"}}); err == nil {
		t.Error("issued from a directory without ca.key")
	}

	otherDir := t.TempDir()
	other := issue(t, otherDir, "x", "127.0.0.1")

	cases := []struct {
		name string
		r    config.Remote
		want []string
	}{
		{"certificate of another CA", config.Remote{TLSCA: good.TLSCA, TLSCert: other.TLSCert, TLSKey: other.TLSKey}, []string{"remote.tls_cert", "remote.tls_ca", "unknown authority"}},
		{"key of another certificate", config.Remote{TLSCA: good.TLSCA, TLSCert: good.TLSCert, TLSKey: other.TLSKey}, []string{"remote.tls_key", "does not match"}},
		{"missing CA file", config.Remote{TLSCA: filepath.Join(dir, "none.crt"), TLSCert: good.TLSCert, TLSKey: good.TLSKey}, []string{"remote.tls_ca", "no such file"}},
		{"a key as the CA", config.Remote{TLSCA: good.TLSKey, TLSCert: good.TLSCert, TLSKey: good.TLSKey}, []string{"remote.tls_ca", "no PEM certificate"}},
	}
	for _, c := range cases {
		_, err := Load(c.r)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to mention %q", c.name, err, w)
			}
		}
	}

	// An expired certificate: issued two days ago for one day.
	expired := filepath.Join(dir, "expired")
	if err := IssueNode(expired, NodeOptions{CADir: caDir, Name: "old", Hosts: []string{"127.0.0.1"}, Validity: 24 * time.Hour, Now: time.Now().Add(-48 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(files(expired)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired certificate: %v", err)
	}
	if _, _, err := RemoteOptions(config.Remote{TLSCA: good.TLSCA}); err == nil || !strings.Contains(err.Error(), "remote.tls_cert") {
		t.Errorf("only remote.tls_ca set: %v", err)
	}
	if opts, creds, err := RemoteOptions(config.Remote{}); opts != nil || creds != nil || err != nil {
		t.Errorf("no TLS configured: %v %v %v", opts, creds, err)
	}
}

// handshake runs one TLS connection between a server and a client config
// and returns each side's error (the client's includes its first read:
// under TLS 1.3 a server refuses a client certificate after the client
// has finished its handshake).
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if err := c.(*tls.Conn).Handshake(); err != nil {
			done <- err
			return
		}
		_, err = c.Write([]byte("hi"))
		done <- err
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), client)
	if err == nil {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadFull(conn, make([]byte, 2))
		conn.Close()
	}
	return <-done, err
}

// TestHandshakes: the server accepts only a client certificate of its CA;
// the client accepts only a server certificate of its CA naming the host.
func TestHandshakes(t *testing.T) {
	dir := t.TempDir()
	a, err := Load(issue(t, dir, "a", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(issue(t, dir, "b", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := Load(issue(t, dir, "elsewhere", "10.7.7.7"))
	if err != nil {
		t.Fatal(err)
	}
	evil, err := Load(issue(t, t.TempDir(), "evil", "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}

	if s, c := handshake(t, a.ServerConfig(), b.ClientConfig()); s != nil || c != nil {
		t.Fatalf("two certificates of one CA: server %v, client %v", s, c)
	}
	// A client that trusts the server's CA but presents another CA's certificate.
	cheat := evil.ClientConfig()
	cheat.RootCAs = a.pool
	if s, c := handshake(t, a.ServerConfig(), cheat); s == nil || !strings.Contains(s.Error(), "certificate") || c == nil {
		t.Errorf("client certificate of another CA: server %v, client %v", s, c)
	}
	// A client with no certificate at all.
	bare := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: a.pool}
	if s, c := handshake(t, a.ServerConfig(), bare); s == nil || !strings.Contains(s.Error(), "certificate") || c == nil {
		t.Errorf("client without a certificate: server %v, client %v", s, c)
	}
	// A server of another CA: the client refuses it.
	if s, c := handshake(t, evil.ServerConfig(), a.ClientConfig()); c == nil || !strings.Contains(c.Error(), "unknown authority") || s == nil {
		t.Errorf("server of another CA: server %v, client %v", s, c)
	}
	// A server of the right CA whose certificate names another host.
	if s, c := handshake(t, elsewhere.ServerConfig(), a.ClientConfig()); c == nil || !strings.Contains(c.Error(), "127.0.0.1") || s == nil {
		t.Errorf("server certificate for another host: server %v, client %v", s, c)
	}
}
