// Package etcdtest starts a real etcd server (Debian's etcd-server package,
// /usr/bin/etcd) for tests: on free loopback ports, in a temporary
// directory, stopped when the test ends; with StartTLS, serving its client
// port with TLS (and requiring client certificates) from certificates
// NewCerts makes, and with EnableAuth, with etcd's user auth on. A test
// skips, saying so, only when the etcd binary is not installed.
package etcdtest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/frognano/frognano/runtime/mtls"
)

// Server is a running etcd.
type Server struct {
	Endpoint string // HOST:PORT of its client port
	// URL is the client port as a URL: http://HOST:PORT, or https://
	// with TLS.
	URL string
	bin string
	// tls is the harness's own client TLS (nil without TLS); rootPassword
	// is root's once EnableAuth ran.
	tls          *tls.Config
	rootPassword string
	args         []string
	log          *lockedBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Binary is the etcd server binary, or "" when none is installed.
func Binary() string {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd"
	}
	return ""
}

// Start runs an etcd server for t, or skips t when etcd is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, nil, false)
}

// StartTLS runs an etcd server for t that serves its client port with TLS
// on certs' server certificate; with clientCertAuth it accepts only
// clients presenting a certificate signed by certs.CA (etcd's
// --client-cert-auth). It skips t when etcd is not installed.
func StartTLS(t testing.TB, certs *Certs, clientCertAuth bool) *Server {
	t.Helper()
	return start(t, certs, clientCertAuth)
}

func start(t testing.TB, certs *Certs, clientCertAuth bool) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("etcd is not installed (apt-get install etcd-server; scripts/setup.sh installs it): skipping the etcd membership test")
	}
	dir := t.TempDir()
	client, peer := FreePort(t), FreePort(t)
	scheme := "http"
	if certs != nil {
		scheme = "https"
	}
	clientURL := scheme + "://" + client
	peerURL := "http://" + peer
	s := &Server{Endpoint: client, URL: clientURL, log: &lockedBuffer{}, bin: bin, args: []string{
		"--name", "test",
		"--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "test=" + peerURL,
		"--initial-cluster-state", "new",
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--log-level", "warn",
	}}
	if certs != nil {
		s.args = append(s.args, "--cert-file", certs.ServerCert, "--key-file", certs.ServerKey)
		s.tls = &tls.Config{RootCAs: certs.pool(t)}
		if clientCertAuth {
			s.args = append(s.args, "--client-cert-auth", "--trusted-ca-file", certs.CA)
			pair, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
			if err != nil {
				t.Fatal(err)
			}
			s.tls.Certificates = []tls.Certificate{pair}
		}
	}
	t.Cleanup(s.kill)
	s.start(t)
	return s
}

// start runs etcd and waits until it answers.
func (s *Server) start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a killed test takes it along
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.URL}, TLS: s.tls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := c.Get(ctx, "/health-check")
		cancel()
		var refused rpctypes.EtcdError
		if err == nil || errors.As(err, &refused) { // an answer, if a refusal (auth on)
			return
		}
		select {
		case <-exited:
			t.Fatalf("etcd exited at start:\n%s", s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not answer within 15s: %v\n%s", err, s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends etcd with SIGKILL and waits for it.
func (s *Server) kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		<-exited
	}
}

// Restart kills etcd, leaves it down for down, and starts it again on the
// same ports and data directory.
func (s *Server) Restart(t testing.TB, down time.Duration) {
	t.Helper()
	s.kill()
	time.Sleep(down)
	s.start(t)
}

// Log is what etcd has printed.
func (s *Server) Log() string { return s.log.String() }

// FreePort returns a loopback HOST:PORT nothing listens on.
func FreePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Client is a client of s for t: over TLS when s serves it (presenting
// the client certificate when s requires one), as root once EnableAuth ran.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: []string{s.URL}, TLS: s.tls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if s.rootPassword != "" {
		cfg.Username, cfg.Password = "root", s.rootPassword
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(fmt.Errorf("etcd client: %w", err))
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// EnableAuth turns on etcd's user auth, as an operator does with etcdctl
// (user add root, user grant-role root root, role add, role
// grant-permission, user add, user grant-role, auth enable), through the
// client API: a root user with a random password, and user with password
// and a role allowed to read and write the keys under prefix. It returns
// a file holding the user's password (with a newline, as an editor leaves
// it), for cluster.etcd_password_file.
func (s *Server) EnableAuth(t testing.TB, user, password, prefix string) (passwordFile string) {
	t.Helper()
	passwordFile = filepath.Join(t.TempDir(), "etcd-password")
	if err := os.WriteFile(passwordFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := make([]byte, 16)
	rand.Read(b)
	root := hex.EncodeToString(b)
	role := user + "-members"
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"user add root", func() error { _, err := c.UserAdd(ctx, "root", root); return err }},
		{"user grant-role root root", func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err }},
		{"role add " + role, func() error { _, err := c.RoleAdd(ctx, role); return err }},
		{"role grant-permission " + role, func() error {
			_, err := c.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		}},
		{"user add " + user, func() error { _, err := c.UserAdd(ctx, user, password); return err }},
		{"user grant-role " + user, func() error { _, err := c.UserGrantRole(ctx, user, role); return err }},
		{"auth enable", func() error { _, err := c.AuthEnable(ctx); return err }},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("etcd %s: %v", step.name, err)
		}
	}
	s.rootPassword = root
	return passwordFile
}

// Certs are the PEM files of a TLS etcd test, made with frognano's own
// certificate authority (what `frognano cert` runs): a CA, etcd's server
// certificate (for 127.0.0.1 and localhost) and a client certificate
// signed by it, and another CA with a client certificate of its own.
type Certs struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	OtherCA, OtherClientCert, OtherClientKey         string
}

// NewCerts makes Certs in a temporary directory of t.
func NewCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	d := func(name string) string { return filepath.Join(dir, name) }
	for _, step := range []error{
		mtls.NewCA(d("ca"), mtls.CAOptions{Name: "etcd test"}),
		mtls.IssueNode(d("server"), mtls.NodeOptions{CADir: d("ca"), Name: "etcd", Hosts: []string{"127.0.0.1", "localhost"}}),
		mtls.IssueNode(d("client"), mtls.NodeOptions{CADir: d("ca"), Name: "node-a", Hosts: []string{"127.0.0.1"}}),
		mtls.NewCA(d("other-ca"), mtls.CAOptions{Name: "another cluster"}),
		mtls.IssueNode(d("other-client"), mtls.NodeOptions{CADir: d("other-ca"), Name: "stranger", Hosts: []string{"127.0.0.1"}}),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	return &Certs{
		CA:              filepath.Join(d("ca"), mtls.CACertFile),
		ServerCert:      filepath.Join(d("server"), mtls.NodeCertFile),
		ServerKey:       filepath.Join(d("server"), mtls.NodeKeyFile),
		ClientCert:      filepath.Join(d("client"), mtls.NodeCertFile),
		ClientKey:       filepath.Join(d("client"), mtls.NodeKeyFile),
		OtherCA:         filepath.Join(d("other-ca"), mtls.CACertFile),
		OtherClientCert: filepath.Join(d("other-client"), mtls.NodeCertFile),
		OtherClientKey:  filepath.Join(d("other-client"), mtls.NodeKeyFile),
	}
}

func (c *Certs) pool(t testing.TB) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(c.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatalf("%s holds no certificate", c.CA)
	}
	return pool
}
