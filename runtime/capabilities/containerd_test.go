package capabilities

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	namespacesapi "github.com/containerd/containerd/api/services/namespaces/v1"
	versionapi "github.com/containerd/containerd/api/services/version/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

// socketPath returns a unix socket path short enough for sun_path (108
// bytes), which t.TempDir's long names can exceed.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "capsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "c.sock")
}

// fakeContainerd answers the two calls the client makes: the namespace label
// lookup inside containerd.New and Version. block, when set, makes the
// namespace lookup hang until the server stops, like a wedged daemon.
type fakeContainerd struct {
	versionapi.UnimplementedVersionServer
	namespacesapi.UnimplementedNamespacesServer
	block bool

	mu         sync.Mutex
	namespaces []string // containerd-namespace header of each Version call
}

func (f *fakeContainerd) Version(ctx context.Context, _ *emptypb.Empty) (*versionapi.VersionResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.namespaces = append(f.namespaces, strings.Join(md.Get("containerd-namespace"), ","))
	f.mu.Unlock()
	return &versionapi.VersionResponse{Version: "v1.7.99-fake", Revision: "abc"}, nil
}

func (f *fakeContainerd) Get(ctx context.Context, req *namespacesapi.GetNamespaceRequest) (*namespacesapi.GetNamespaceResponse, error) {
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &namespacesapi.GetNamespaceResponse{Namespace: &namespacesapi.Namespace{Name: req.Name}}, nil
}

func serveFake(t *testing.T, f *fakeContainerd) string {
	t.Helper()
	path := socketPath(t)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	versionapi.RegisterVersionServer(s, f)
	namespacesapi.RegisterNamespacesServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return path
}

// probeContainerd runs Probe against address and reports how long it took.
func probeContainerd(t *testing.T, address string, timeout time.Duration) (ok bool, version string, took time.Duration) {
	t.Helper()
	start := time.Now()
	caps := Probe(context.Background(), Options{ContainerdAddress: address, Timeout: timeout})
	return caps.Containerd, caps.ContainerdVersion, time.Since(start)
}

// slack allows for a loaded CI machine; the checks below are about not
// hanging, not about speed.
const slack = 3 * time.Second

func TestProbeContainerd(t *testing.T) {
	t.Run("no socket", func(t *testing.T) {
		const timeout = 2 * time.Second
		ok, v, took := probeContainerd(t, filepath.Join(t.TempDir(), "missing.sock"), timeout)
		if ok || v != "" {
			t.Errorf("containerd = %v %q, want false", ok, v)
		}
		if took > timeout+slack {
			t.Errorf("probe took %v with timeout %v", took, timeout)
		}
	})

	t.Run("not a socket", func(t *testing.T) {
		const timeout = 500 * time.Millisecond
		path := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		ok, _, took := probeContainerd(t, path, timeout)
		if ok {
			t.Error("containerd = true for a regular file")
		}
		if took > timeout+slack {
			t.Errorf("probe took %v with timeout %v", took, timeout)
		}
	})

	t.Run("silent listener", func(t *testing.T) {
		// Accepts connections and never speaks gRPC: the client waits
		// for a server preface that never comes.
		const timeout = 500 * time.Millisecond
		path := socketPath(t)
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		ok, _, took := probeContainerd(t, path, timeout)
		if ok {
			t.Error("containerd = true for a silent listener")
		}
		if took > timeout+slack {
			t.Errorf("probe took %v with timeout %v", took, timeout)
		}
	})

	t.Run("wedged namespace service", func(t *testing.T) {
		// containerd.New looks up namespace labels with
		// context.Background(); Probe must not inherit that hang.
		const timeout = 500 * time.Millisecond
		path := serveFake(t, &fakeContainerd{block: true})
		ok, _, took := probeContainerd(t, path, timeout)
		if ok {
			t.Error("containerd = true though the daemon never answered")
		}
		if took > timeout+slack {
			t.Errorf("probe took %v with timeout %v", took, timeout)
		}
	})

	t.Run("fake daemon answers", func(t *testing.T) {
		f := &fakeContainerd{}
		path := serveFake(t, f)
		ok, v, _ := probeContainerd(t, path, 5*time.Second)
		if !ok || v != "v1.7.99-fake" {
			t.Fatalf("containerd = %v %q, want true v1.7.99-fake", ok, v)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.namespaces) != 1 || f.namespaces[0] != DefaultContainerdNamespace {
			t.Errorf("Version calls carried namespaces %q, want [%q]", f.namespaces, DefaultContainerdNamespace)
		}
	})

	t.Run("local containerd", func(t *testing.T) {
		c, err := net.DialTimeout("unix", DefaultContainerdAddress, time.Second)
		if err != nil {
			t.Skipf("no containerd answering at %s: %v", DefaultContainerdAddress, err)
		}
		c.Close()
		ok, v, _ := probeContainerd(t, DefaultContainerdAddress, 5*time.Second)
		if !ok || v == "" {
			t.Fatalf("containerd = %v %q, want true with a version", ok, v)
		}
		t.Logf("containerd %s", v)
	})
}
