package sandbox

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/frognano/frognano/persistence"
)

// containerdLink stands between a Runtime and containerd: a unix socket
// forwarding to containerd's, which a test cuts (every connection closed,
// the socket gone) and restores. To the Runtime's client that is containerd
// going away and coming back, as in a restart; containerd itself, which
// other tests and processes share, keeps running.
type containerdLink struct {
	path, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func newContainerdLink(t *testing.T) *containerdLink {
	t.Helper()
	target := os.Getenv("FROGNANO_CONTAINERD_ADDRESS")
	if target == "" {
		target = "/run/containerd/containerd.sock"
	}
	dir, err := os.MkdirTemp("", "frognano-link-")
	if err != nil {
		t.Fatal(err)
	}
	l := &containerdLink{path: filepath.Join(dir, "containerd.sock"), target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		l.cut()
		os.RemoveAll(dir)
	})
	l.restore(t)
	return l
}

// restore listens again and forwards every connection to containerd.
func (l *containerdLink) restore(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("unix", l.path)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.ln = ln
	l.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", l.target)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			l.conns[c], l.conns[up] = true, true
			l.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
}

// cut closes the socket and every connection through it.
func (l *containerdLink) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		l.ln.Close() // removes the socket file
		l.ln = nil
	}
	for c := range l.conns {
		c.Close()
	}
	clear(l.conns)
}

// linkedRuntime is a Runtime reaching containerd through link, keeping
// failed destroys in store.
func linkedRuntime(t *testing.T, link *containerdLink, store persistence.SandboxDestroyStore) *Runtime {
	t.Helper()
	rt, err := New(context.Background(), Config{Namespace: testNamespace, Address: link.path, Destroys: store, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// sandboxObjects reports which of the sandbox's container and lease are
// still in containerd, asked over the tests' own connection.
func sandboxObjects(t *testing.T, id string) (container, lease bool) {
	t.Helper()
	ctx := testRT.ctx(context.Background())
	_, err := testRT.client.LoadContainer(ctx, id)
	if err != nil && !errdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	container = err == nil
	ls, err := testRT.client.LeasesService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.ID == id {
			lease = true
		}
	}
	return container, lease
}

func openDestroyStore(t *testing.T) *persistence.DB {
	t.Helper()
	db, err := persistence.Open(t.TempDir(), persistence.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func pendingIDs(t *testing.T, db *persistence.DB) []string {
	t.Helper()
	recs, err := db.SandboxDestroys().List(context.Background(), testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range recs {
		ids = append(ids, d.ID)
	}
	return ids
}

// createThenFailDestroy makes a sandbox through link, cuts the link and
// checks that its Destroy fails, is recorded in db and left the container.
func createThenFailDestroy(t *testing.T, rt *Runtime, link *containerdLink, db *persistence.DB, img string) *Sandbox {
	t.Helper()
	sb, err := rt.Create(context.Background(), img, Options{})
	if err != nil {
		t.Fatal(err)
	}
	link.cut()
	if err := sb.Destroy(context.Background()); err == nil {
		t.Fatal("Destroy succeeded while containerd could not be reached")
	}
	if ids := pendingIDs(t, db); len(ids) != 1 || ids[0] != sb.ID() {
		t.Fatalf("pending destroys recorded: %v, want [%s]", ids, sb.ID())
	}
	if c, l := sandboxObjects(t, sb.ID()); !c || !l {
		t.Fatalf("after the failed destroy: container %v, lease %v; want both still there", c, l)
	}
	return sb
}

// TestFailedDestroyIsRetriedUntilDone: a destroy issued while containerd
// cannot be reached (the fault-injection suite's containerd-restart
// finding) fails, is recorded in the store, and once containerd answers
// again the runtime destroys the sandbox by itself, with no further call,
// and forgets the record. Before, the container and its lease stayed until
// a later process swept them.
func TestFailedDestroyIsRetriedUntilDone(t *testing.T) {
	_, img := needRuntime(t)
	db := openDestroyStore(t)
	link := newContainerdLink(t)
	rt := linkedRuntime(t, link, db.SandboxDestroys())
	defer rt.Close()

	sb := createThenFailDestroy(t, rt, link, db, img)
	time.Sleep(2 * time.Second) // a retry or two fail while containerd is away
	link.restore(t)
	deadline := time.Now().Add(45 * time.Second)
	for {
		c, l := sandboxObjects(t, sb.ID())
		ids := pendingIDs(t, db)
		if !c && !l && len(ids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("45s after containerd came back: container %v, lease %v, pending %v", c, l, ids)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy after the retry succeeded: %v", err)
	}
}

// TestSweepFinishesDestroysAnEarlierProcessLeft: a process whose destroy
// failed ends before containerd is back; the next runtime over the same
// store (a node restarting) destroys the sandbox in its startup Sweep,
// although the sandbox's owner (this test process) is alive and Sweep
// would otherwise keep it.
func TestSweepFinishesDestroysAnEarlierProcessLeft(t *testing.T) {
	_, img := needRuntime(t)
	db := openDestroyStore(t)
	link := newContainerdLink(t)
	first := linkedRuntime(t, link, db.SandboxDestroys())
	sb := createThenFailDestroy(t, first, link, db, img)
	// The process dies: its retries stop, the record stays. (Close would
	// first retry the destroy until containerd answers.)
	first.stopReclaimer()
	defer first.Close()

	link.restore(t)
	next := linkedRuntime(t, link, db.SandboxDestroys())
	defer next.Close()
	rep, err := next.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pending != 1 {
		t.Fatalf("sweep report %+v, want Pending 1", rep)
	}
	if c, l := sandboxObjects(t, sb.ID()); c || l {
		t.Fatalf("after the sweep: container %v, lease %v", c, l)
	}
	if ids := pendingIDs(t, db); len(ids) != 0 {
		t.Fatalf("records left after the sweep: %v", ids)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}
