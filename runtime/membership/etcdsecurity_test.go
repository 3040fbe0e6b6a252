package membership

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/runtime/membership/etcdtest"
	"github.com/frognano/frognano/runtime/mtls"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// connectEtcd makes an etcd provider, which connects to etcd and checks
// that it answers (and lets this client read the members' prefix).
func connectEtcd(endpoint, prefix string, sec EtcdSecurity) (*Etcd, error) {
	return NewEtcd(context.Background(), "127.0.0.1:0", EtcdOptions{
		Endpoints:      []string{endpoint},
		Prefix:         prefix,
		Cluster:        "frognano",
		FailureTimeout: time.Second,
		Heartbeat:      100 * time.Millisecond,
		Refresh:        300 * time.Millisecond,
		DialTimeout:    2 * time.Second,
		Security:       sec,
		Logger:         quiet,
	})
}

type refusal struct {
	name     string
	endpoint string
	prefix   string
	sec      EtcdSecurity
	want     []string // each must be in the error
}

// checkRefusals starts a provider for each case and checks it is refused
// with one error, on one line, that says what to fix, within seconds, and
// that never shows secret.
func checkRefusals(t *testing.T, secret string, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		prefix := c.prefix
		if prefix == "" {
			prefix = "/frognano-test"
		}
		start := time.Now()
		p, err := connectEtcd(c.endpoint, prefix, c.sec)
		if err == nil {
			p.Shutdown(true)
			t.Errorf("%s: connected; want a refusal", c.name)
			continue
		}
		msg := err.Error()
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: error %q\n  does not say %q", c.name, msg, w)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("%s: error on several lines: %q", c.name, msg)
		}
		if secret != "" && strings.Contains(msg, secret) {
			t.Errorf("%s: error shows the password: %q", c.name, msg)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: the error took %s", c.name, d)
		}
		t.Logf("%s: %s", c.name, msg)
	}
}

// TestEtcdTLSClientCertificates runs a real etcd that serves TLS and
// requires client certificates signed by its CA (--client-cert-auth): a
// client with the CA and a certificate of that CA connects, over https://
// and over a plain HOST:PORT alike; every other combination is refused
// with one error naming the setting to fix.
func TestEtcdTLSClientCertificates(t *testing.T) {
	certs := etcdtest.NewCerts(t)
	srv := etcdtest.StartTLS(t, certs, true)
	good := EtcdSecurity{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	for _, ep := range []string{srv.URL, srv.Endpoint} {
		p, err := connectEtcd(ep, "/frognano-test", good)
		if err != nil {
			t.Fatalf("%s with the cluster CA and a client certificate of it: %v", ep, err)
		}
		if tlsDesc, _ := p.describe(); !strings.Contains(tlsDesc, `mutual (client certificate "node-a")`) {
			t.Errorf("tls described as %q", tlsDesc)
		}
		p.Shutdown(true)
	}

	// A client certificate that is no longer valid, from the same CA.
	expiredDir := t.TempDir()
	if err := mtls.IssueNode(expiredDir, mtls.NodeOptions{CADir: filepath.Dir(certs.CA), Name: "old", Hosts: []string{"127.0.0.1"},
		Now: time.Now().Add(-72 * time.Hour), Validity: time.Hour}); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	checkRefusals(t, "", []refusal{
		{"no client certificate", srv.URL, "", EtcdSecurity{CAFile: certs.CA},
			[]string{"cluster.etcd_tls_cert: etcd at " + srv.URL + " requires a client certificate", "cluster.etcd_tls_key"}},
		{"a client certificate of another CA", srv.URL, "", EtcdSecurity{CAFile: certs.CA, CertFile: certs.OtherClientCert, KeyFile: certs.OtherClientKey},
			[]string{"cluster.etcd_tls_cert: etcd at " + srv.URL + " refused this node's client certificate " + certs.OtherClientCert, `"stranger"`}},
		{"etcd's certificate not of the CA given", srv.URL, "", EtcdSecurity{CAFile: certs.OtherCA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey},
			[]string{"cluster.etcd_tls_ca: etcd's server certificate at " + srv.URL + " does not verify against " + certs.OtherCA}},
		{"https:// without a CA: the system's roots", srv.URL, "", EtcdSecurity{},
			[]string{"cluster.etcd_tls_ca: etcd's server certificate at " + srv.URL + " does not verify against the system's root CAs"}},
		{"no TLS to an etcd that serves TLS", srv.Endpoint, "", EtcdSecurity{},
			[]string{"cluster.etcd_endpoints " + srv.Endpoint + ": etcd serves TLS there", "https://" + srv.Endpoint}},
		{"http:// with TLS settings", "http://" + srv.Endpoint, "", good,
			[]string{"cluster.etcd_endpoints: http:// endpoints are dialled without TLS"}},
		{"a certificate without its key", srv.URL, "", EtcdSecurity{CAFile: certs.CA, CertFile: certs.ClientCert},
			[]string{"cluster.etcd_tls_cert: set without cluster.etcd_tls_key"}},
		{"a key without its certificate", srv.URL, "", EtcdSecurity{CAFile: certs.CA, KeyFile: certs.ClientKey},
			[]string{"cluster.etcd_tls_key: set without cluster.etcd_tls_cert"}},
		{"a key that is not the certificate's", srv.URL, "", EtcdSecurity{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.OtherClientKey},
			[]string{"cluster.etcd_tls_cert " + certs.ClientCert + ", cluster.etcd_tls_key " + certs.OtherClientKey}},
		{"an expired client certificate", srv.URL, "", EtcdSecurity{CAFile: certs.CA,
			CertFile: filepath.Join(expiredDir, mtls.NodeCertFile), KeyFile: filepath.Join(expiredDir, mtls.NodeKeyFile)},
			[]string{"cluster.etcd_tls_cert " + filepath.Join(expiredDir, mtls.NodeCertFile) + ` ("old") is not valid now`}},
		{"a CA file that is missing", srv.URL, "", EtcdSecurity{CAFile: "/nonexistent/ca.crt", CertFile: certs.ClientCert, KeyFile: certs.ClientKey},
			[]string{"cluster.etcd_tls_ca: open /nonexistent/ca.crt"}},
		{"a CA file that is not PEM", srv.URL, "", EtcdSecurity{CAFile: notPEM, CertFile: certs.ClientCert, KeyFile: certs.ClientKey},
			[]string{"cluster.etcd_tls_ca: " + notPEM + " holds no PEM certificate"}},
	})
}

// TestEtcdUserAuth runs a real etcd serving TLS (server certificate only)
// with its user auth enabled, set up as an operator does with etcdctl: a
// user with a password and read-write on the prefix connects, the password
// given directly or in a file; a wrong password, an unknown user, no user,
// or a user without permission on the prefix is refused with one error
// naming the setting, never showing the password.
func TestEtcdUserAuth(t *testing.T) {
	certs := etcdtest.NewCerts(t)
	srv := etcdtest.StartTLS(t, certs, false)
	const password = "correct-horse-battery"
	pwFile := srv.EnableAuth(t, "frognano", password, "/frognano-test/")
	for _, sec := range []EtcdSecurity{
		{CAFile: certs.CA, Username: "frognano", Password: password},
		{CAFile: certs.CA, Username: "frognano", PasswordFile: pwFile},
	} {
		p, err := connectEtcd(srv.URL, "/frognano-test", sec)
		if err != nil {
			t.Fatalf("user frognano (password file %q): %v", sec.PasswordFile, err)
		}
		if _, auth := p.describe(); auth != "user frognano" {
			t.Errorf("auth described as %q", auth)
		}
		p.Shutdown(true)
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte(password+"x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkRefusals(t, password, []refusal{
		{"a wrong password", srv.URL, "", EtcdSecurity{CAFile: certs.CA, Username: "frognano", Password: "not-" + password},
			[]string{`cluster.etcd_username, cluster.etcd_password: etcd at ` + srv.URL + ` refused user "frognano": wrong user name or password`}},
		{"a wrong password from a file", srv.URL, "", EtcdSecurity{CAFile: certs.CA, Username: "frognano", PasswordFile: wrong},
			[]string{`refused user "frognano": wrong user name or password`}},
		{"an unknown user", srv.URL, "", EtcdSecurity{CAFile: certs.CA, Username: "mallory", Password: password},
			[]string{`refused user "mallory": wrong user name or password`}},
		{"no user", srv.URL, "", EtcdSecurity{CAFile: certs.CA},
			[]string{"cluster.etcd_username: etcd at " + srv.URL + " has authentication enabled", "FROGNANO_CLUSTER_ETCD_PASSWORD"}},
		{"a user name without a password", srv.URL, "", EtcdSecurity{CAFile: certs.CA, Username: "frognano"},
			[]string{"cluster.etcd_password: required with cluster.etcd_username"}},
		{"a password file that is missing", srv.URL, "", EtcdSecurity{CAFile: certs.CA, Username: "frognano", PasswordFile: "/nonexistent/pw"},
			[]string{"cluster.etcd_password_file: open /nonexistent/pw"}},
		{"no permission on the prefix", srv.URL, "/elsewhere", EtcdSecurity{CAFile: certs.CA, Username: "frognano", Password: password},
			[]string{`cluster.etcd_username: etcd user "frognano" may not read and write /elsewhere/frognano/members/`}},
	})
}
