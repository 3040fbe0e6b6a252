package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestRecipeHash(t *testing.T) {
	base := Recipe{Suite: "bookworm", Variant: "minbase", Mirror: "http://a", Packages: []string{"git", "python3"}, GoVersion: "go1.26.8", Revision: 1}
	tests := []struct {
		name   string
		change func(*Recipe)
		same   bool
	}{
		{"mirror is not content", func(r *Recipe) { r.Mirror = "http://b" }, true},
		{"goroot path is not content", func(r *Recipe) { r.GoRoot = "/opt/go" }, true},
		{"package order is not content", func(r *Recipe) { r.Packages = []string{"python3", "git"} }, true},
		{"a package is content", func(r *Recipe) { r.Packages = append(r.Packages, "curl") }, false},
		{"go version is content", func(r *Recipe) { r.GoVersion = "go1.27" }, false},
		{"suite is content", func(r *Recipe) { r.Suite = "trixie" }, false},
		{"revision is content", func(r *Recipe) { r.Revision++ }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			r.Packages = append([]string(nil), base.Packages...)
			tt.change(&r)
			if got := r.Hash() == base.Hash(); got != tt.same {
				t.Fatalf("same hash = %v, want %v", got, tt.same)
			}
		})
	}
	if ref := base.Ref(); !strings.HasPrefix(ref, "frognano.local/base:") || len(ref) != len("frognano.local/base:")+16 {
		t.Fatalf("ref %q", ref)
	}
}

// testStore connects to the local containerd or skips: these tests need a
// real daemon (CI runs scripts/setup-containerd.sh first).
func testStore(t *testing.T) (*Store, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs containerd; skipped under -short")
	}
	addr := "/run/containerd/containerd.sock"
	if _, err := os.Stat(addr); err != nil {
		t.Skipf("containerd is not running at %s (start it with scripts/setup-containerd.sh): %v", addr, err)
	}
	client, err := containerd.New(addr, containerd.WithDefaultNamespace(testNamespace), containerd.WithTimeout(3*time.Second))
	if err != nil {
		t.Skipf("containerd is not reachable at %s (start it with scripts/setup-containerd.sh): %v", addr, err)
	}
	t.Cleanup(func() { client.Close() })
	cache := os.Getenv("FROGNANO_CACHE_DIR")
	if cache == "" {
		cache = "/var/cache/frognano"
	}
	return &Store{Client: client, Snapshotter: "overlayfs", CacheDir: filepath.Join(cache, "images")}, namespaces.WithNamespace(context.Background(), testNamespace)
}

// testNamespace is this package's own: the test deletes the base image to
// play a wiped containerd, which must not pull it from under the sandbox
// tests running in parallel in their namespace.
const testNamespace = "frognano-image-test"

func TestEnsureBaseAndDerive(t *testing.T) {
	s, ctx := testStore(t)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	r, err := DefaultRecipe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ref := r.Ref()
	// Start from a wiped namespace; on the way out, wipe it again so the
	// unpacked layers do not stay on disk.
	_ = s.Client.ImageService().Delete(ctx, ref)
	t.Cleanup(func() { _ = s.Client.ImageService().Delete(context.Background(), ref) })

	archive := filepath.Join(s.CacheDir, "base-"+r.Hash()[:16]+".oci.tar")
	before, cachedErr := os.Stat(archive)
	start := time.Now()
	if got, err := s.EnsureBase(ctx, r); err != nil || got != ref {
		t.Fatalf("EnsureBase = %q, %v", got, err)
	}
	took := time.Since(start)
	if cachedErr == nil {
		// The archive was there: containerd was "wiped", and the image must
		// come back from the cache, not from a new debootstrap.
		after, err := os.Stat(archive)
		if err != nil || !after.ModTime().Equal(before.ModTime()) {
			t.Fatalf("the cached archive was rebuilt (%v)", err)
		}
		t.Logf("base image %s imported from the cache in %v", ref, took)
	} else {
		t.Logf("base image %s built (first time on this host) in %v", ref, took)
	}
	// Present now: a second call is a lookup.
	start = time.Now()
	if _, err := s.EnsureBase(ctx, r); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("EnsureBase of a present image took %v", d)
	}

	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "hello.txt"), []byte("hi\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	derived := Registry + "/test-derived:" + randomHex(4)
	edit := func(c *ocispec.ImageConfig) { c.Env = append(c.Env, "DERIVED=1") }
	if err := s.Derive(ctx, ref, derived, "add hello", CopyInto(src, "/repo"), edit); err != nil {
		t.Fatal(err)
	}
	defer s.Client.ImageService().Delete(context.WithoutCancel(ctx), derived)
	img, err := s.Ready(ctx, derived)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.RootFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("derived image has %d layers, want 2", len(layers))
	}
	cfg, err := img.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.Config.Env, "DERIVED=1") || cfg.Config.Labels["io.frognano.writable"] != "/root/.cache" {
		t.Fatalf("derived config %+v", cfg.Config)
	}
}

// TestImportTinyArchive writes an OCI archive of a three-file root file
// system with the same code that packs the base image, imports it, and
// checks what containerd made of it.
func TestImportTinyArchive(t *testing.T) {
	s, ctx := testStore(t)
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	for p, c := range map[string]string{"etc/hello": "hi\n", "repo/a.py": "print(1)\n", "bin/tool": "#!/bin/sh\n"} {
		full := filepath.Join(rootfs, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("hello", filepath.Join(rootfs, "etc/link")); err != nil {
		t.Fatal(err)
	}
	layer, err := writeRootfsLayer(ctx, dir, rootfs)
	if err != nil {
		t.Fatal(err)
	}
	ref := Registry + "/test-tiny:" + randomHex(4)
	archive := filepath.Join(dir, "tiny.oci.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	cfg := imageConfig(ocispec.ImageConfig{Env: []string{"A=1"}, WorkingDir: "/repo"}, layer.diffID, "test")
	if err := writeOCIArchive(f, ref, layer, cfg); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := s.Import(ctx, archive, ref); err != nil {
		t.Fatal(err)
	}
	defer s.Client.ImageService().Delete(context.WithoutCancel(ctx), ref)
	img, err := s.Ready(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil || len(diffIDs) != 1 || diffIDs[0] != layer.diffID {
		t.Fatalf("diff ids %v (%v), want [%s]", diffIDs, err, layer.diffID)
	}
	spec, err := img.Spec(ctx)
	if err != nil || spec.Config.WorkingDir != "/repo" || !slices.Equal(spec.Config.Env, []string{"A=1"}) {
		t.Fatalf("config %+v (%v)", spec.Config, err)
	}
	if ok, err := s.Exists(ctx, Registry+"/test-tiny:absent"); ok || err != nil {
		t.Fatalf("Exists(absent) = %v, %v", ok, err)
	}
}

// The base image's mirror comes from the host's apt sources, as debootstrap
// would read them; these are made-up hosts' configurations.
func TestHostMirror(t *testing.T) {
	const main822 = `# the main archive and its updates
Types: deb deb-src
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
`
	tests := []struct {
		name  string
		files map[string]string // relative to the apt directory
		want  string            // "" means ErrNoMirror
	}{
		{"one-line sources.list", map[string]string{
			"sources.list": "# a comment\ndeb-src http://src.example/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\ndeb http://mirror.example/debian-security bookworm-security main\n",
		}, "http://mirror.example/debian"},
		{"security and updates listed first", map[string]string{
			"sources.list": "deb http://security.example/debian-security bookworm-security main\ndeb http://updates.example/debian bookworm-updates main\ndeb http://mirror.example/debian bookworm main\n",
		}, "http://mirror.example/debian"},
		{"deb822 debian.sources", map[string]string{"sources.list.d/debian.sources": main822}, "http://mirror.example/debian"},
		{"a disabled stanza is skipped", map[string]string{"sources.list.d/a.sources": "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n" + main822}, "http://mirror.example/debian"},
		{"sources.list is read before sources.list.d", map[string]string{
			"sources.list":                  "deb http://first.example/debian bookworm main\n",
			"sources.list.d/debian.sources": main822,
		}, "http://first.example/debian"},
		{"files that are neither .list nor .sources are not read", map[string]string{
			"sources.list.d/old.list.disabled": "deb http://old.example/debian bookworm main\n",
			"sources.list.d/z.list":            "deb http://mirror.example/debian bookworm main\n",
		}, "http://mirror.example/debian"},
		{"other release's main archive serves the suite", map[string]string{
			"sources.list": "deb http://mirror.example/debian-security trixie-security main\ndeb http://mirror.example/debian trixie main\n",
		}, "http://mirror.example/debian"},
		{"a local mirror on disk", map[string]string{"sources.list": "deb file:///srv/debian bookworm main\n"}, "file:///srv/debian"},
		{"apt-only methods are not debootstrap's", map[string]string{
			"sources.list": "deb mirror+file:///etc/apt/mirrors.txt bookworm main\ndeb cdrom:[Debian 12]/ bookworm main\n",
		}, ""},
		{"only security and third-party archives", map[string]string{
			"sources.list":               "deb http://mirror.example/debian-security bookworm-security main\n",
			"sources.list.d/vendor.list": "deb https://vendor.example/apt stable main\n",
		}, ""},
		{"another distribution's archive", map[string]string{"sources.list": "deb http://mirror.example/ubuntu noble main\n"}, ""},
		{"no sources at all", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tt.files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := HostMirror(dir, "bookworm")
			if tt.want == "" {
				if !errors.Is(err, ErrNoMirror) || !strings.Contains(err.Error(), "image.debian_mirror") {
					t.Fatalf("got %q, %v; want ErrNoMirror naming image.debian_mirror", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// With no mirror configured and none in the host's apt sources, a base
// image that has to be built fails with the error that says what to set;
// one already cached needs no mirror at all.
func TestEnsureBaseWithoutAMirror(t *testing.T) {
	s, ctx := testStore(t)
	s.CacheDir, s.AptDir = t.TempDir(), t.TempDir()                  // nothing cached, no apt sources
	r := Recipe{Suite: "bookworm", Variant: "minbase", Revision: -1} // a recipe no host has built
	if _, err := s.EnsureBase(ctx, r); !errors.Is(err, ErrNoMirror) || !strings.Contains(err.Error(), "FROGNANO_IMAGE_DEBIAN_MIRROR") {
		t.Fatalf("EnsureBase without a mirror: %v", err)
	}
}
