package node

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/membership/etcdtest"
)

// refused starts a node on cfg and checks that it does not start, with an
// error that says want and never shows secret.
func refused(t *testing.T, cfg config.Config, want, secret string) {
	t.Helper()
	n, err := Start(context.Background(), cfg, Options{Version: "test", Logger: quiet})
	if err == nil {
		n.Stop(context.Background())
		t.Fatalf("a node started; want %q", want)
	}
	if msg := err.Error(); !strings.Contains(msg, want) || strings.Contains(msg, "\n") || (secret != "" && strings.Contains(msg, secret)) {
		t.Fatalf("error = %q; want one line saying %q", msg, want)
	}
}

// TestEtcdTLSMembership runs the etcd provider against a real etcd that
// serves TLS and requires client certificates of its CA: two nodes
// configured with cluster.etcd_tls_ca, _cert and _key (one dialling
// https://, one a plain HOST:PORT, which TLS settings make TLS too) join,
// see each other in their member lists and topology, and one's clean stop
// (its lease revoked over TLS) is seen at once. A node presenting another
// CA's certificate does not start.
func TestEtcdTLSMembership(t *testing.T) {
	certs := etcdtest.NewCerts(t)
	srv := etcdtest.StartTLS(t, certs, true)
	secure := func(endpoint string) config.Config {
		cfg := etcdConfig(t, endpoint)
		cfg.Cluster.EtcdTLSCA = certs.CA
		cfg.Cluster.EtcdTLSCert = certs.ClientCert
		cfg.Cluster.EtcdTLSKey = certs.ClientKey
		return cfg
	}
	bcfg := secure(srv.Endpoint)
	bcfg.Cluster.FailureTimeout = 10 * time.Second // seen gone sooner: revoked
	joinAndLeave(t, secure(srv.URL), bcfg)

	stranger := secure(srv.URL)
	stranger.Cluster.EtcdTLSCert, stranger.Cluster.EtcdTLSKey = certs.OtherClientCert, certs.OtherClientKey
	refused(t, stranger, "cluster.etcd_tls_cert: etcd at "+srv.URL+" refused this node's client certificate", "")
}

// TestEtcdAuthMembership runs the etcd provider against a real etcd with
// its user auth enabled (over TLS): two nodes authenticating as an etcd
// user with read-write on the prefix, one with cluster.etcd_password, one
// with cluster.etcd_password_file, join and see each other; a clean stop
// is seen at once. A node with a wrong password does not start, and its
// error does not show the password.
func TestEtcdAuthMembership(t *testing.T) {
	certs := etcdtest.NewCerts(t)
	srv := etcdtest.StartTLS(t, certs, false)
	const password = "correct-horse-battery"
	pwFile := srv.EnableAuth(t, "frognano", password, "/frognano-test/")
	acfg := etcdConfig(t, srv.URL)
	acfg.Cluster.EtcdTLSCA = certs.CA
	acfg.Cluster.EtcdUsername, acfg.Cluster.EtcdPassword = "frognano", password
	if strings.Contains(acfg.YAML(), password) {
		t.Fatal("the printed configuration shows the etcd password")
	}
	bcfg := acfg
	bcfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	bcfg.Cluster.EtcdPassword, bcfg.Cluster.EtcdPasswordFile = "", pwFile
	bcfg.Cluster.FailureTimeout = 10 * time.Second

	joinAndLeave(t, acfg, bcfg)

	wrong := acfg
	wrong.Node.DataDir = filepath.Join(t.TempDir(), "data")
	wrong.Cluster.EtcdPassword = password + "-not"
	refused(t, wrong, `cluster.etcd_username, cluster.etcd_password: etcd at `+srv.URL+` refused user "frognano": wrong user name or password`, password)
}

// joinAndLeave starts two nodes, waits until each sees both, stops the
// second cleanly and waits until the first sees it gone (within 2 s: a
// clean stop is seen at once, not after the failure timeout).
func joinAndLeave(t *testing.T, acfg, bcfg config.Config) {
	t.Helper()
	a := startNode(t, acfg)
	aTopology := watchTopology(a, a.System().ID)
	b := startNode(t, bcfg)
	aID, bID := a.System().ID, b.System().ID
	waitIDs(t, a, aTopology, 10*time.Second, aID, bID)
	waitIDs(t, b, nil, 10*time.Second, aID, bID)
	if err := b.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitIDs(t, a, aTopology, 2*time.Second, aID)
}
