// Package etcdtest starts a real etcd server (Debian's etcd-server package,
// /usr/bin/etcd) for tests: on free loopback ports, in a temporary
// directory, stopped when the test ends. A test skips, saying so, only when
// the etcd binary is not installed.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Server is a running etcd.
type Server struct {
	Endpoint string // HOST:PORT of its client port
	bin      string
	args     []string
	log      *lockedBuffer

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
	bin := Binary()
	if bin == "" {
		t.Skip("etcd is not installed (apt-get install etcd-server; scripts/setup.sh installs it): skipping the etcd membership test")
	}
	dir := t.TempDir()
	client, peer := FreePort(t), FreePort(t)
	clientURL := "http://" + client
	peerURL := "http://" + peer
	s := &Server{Endpoint: client, log: &lockedBuffer{}, bin: bin, args: []string{
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
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := c.Get(ctx, "/health-check")
		cancel()
		if err == nil {
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

// Client is a client of s for t.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(fmt.Errorf("etcd client: %w", err))
	}
	t.Cleanup(func() { c.Close() })
	return c
}
