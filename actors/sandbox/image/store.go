package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
)

// Store makes images available in one containerd namespace: it reuses what
// is there, imports what is cached on disk, and builds what is missing.
type Store struct {
	// Client must carry its namespace (containerd.WithDefaultNamespace) or
	// every ctx passed in must.
	Client *containerd.Client
	// Snapshotter unpacks images; sandboxes must use the same one.
	Snapshotter string
	// CacheDir keeps built OCI archives and the build lock.
	CacheDir string
	// AptDir is the apt configuration whose sources name the Debian mirror
	// when a recipe names none (default HostAptDir).
	AptDir string
	Logger *slog.Logger
}

func (s *Store) log() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// Exists reports whether containerd knows ref.
func (s *Store) Exists(ctx context.Context, ref string) (bool, error) {
	_, err := s.Client.ImageService().Get(ctx, ref)
	switch {
	case err == nil:
		return true, nil
	case errdefs.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("look up image %s: %w", ref, err)
	}
}

// Ready returns ref's image unpacked into the snapshotter, unpacking it if a
// previous process imported it but died before unpacking.
func (s *Store) Ready(ctx context.Context, ref string) (containerd.Image, error) {
	img, err := s.Client.GetImage(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	ok, err := img.IsUnpacked(ctx, s.Snapshotter)
	if err != nil {
		return nil, fmt.Errorf("check whether %s is unpacked: %w", ref, err)
	}
	if !ok {
		if err := img.Unpack(ctx, s.Snapshotter); err != nil {
			return nil, fmt.Errorf("unpack %s into %s: %w", ref, s.Snapshotter, err)
		}
	}
	return img, nil
}

// Import loads an OCI archive written by this package (or any OCI layout
// tar whose index names its image) and unpacks it.
func (s *Store) Import(ctx context.Context, path, ref string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	imgs, err := s.Client.Import(ctx, f)
	if err != nil {
		return fmt.Errorf("import %s: %w", path, err)
	}
	found := false
	for _, im := range imgs {
		found = found || im.Name == ref
	}
	if !found {
		return fmt.Errorf("import %s: archive does not name image %s", path, ref)
	}
	_, err = s.Ready(ctx, ref)
	return err
}

// EnsureBase returns the base image for r, building it only when neither
// containerd nor the on-disk cache has it. Concurrent callers (parallel test
// binaries, two nodes on one host) serialise on a file lock, so one builds
// and the others import its result.
func (s *Store) EnsureBase(ctx context.Context, r Recipe) (string, error) {
	if err := r.validate(); err != nil {
		return "", err
	}
	ref := r.Ref()
	if ok, err := s.Exists(ctx, ref); err != nil {
		return "", err
	} else if ok {
		_, err := s.Ready(ctx, ref)
		return ref, err
	}
	if err := os.MkdirAll(s.CacheDir, 0o755); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(s.CacheDir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if ok, err := s.Exists(ctx, ref); err != nil || ok {
		if err == nil {
			_, err = s.Ready(ctx, ref)
		}
		return ref, err
	}
	archivePath := filepath.Join(s.CacheDir, "base-"+r.Hash()[:16]+".oci.tar")
	if _, err := os.Stat(archivePath); errors.Is(err, os.ErrNotExist) {
		if r.Mirror == "" {
			aptDir := s.AptDir
			if aptDir == "" {
				aptDir = HostAptDir
			}
			if r.Mirror, err = HostMirror(aptDir, r.Suite); err != nil {
				return "", err
			}
		}
		start := time.Now()
		s.log().Info("building base image (first time on this host)", "ref", ref, "suite", r.Suite, "mirror", r.Mirror)
		if err := s.buildBase(ctx, r, archivePath); err != nil {
			return "", err
		}
		s.log().Info("built base image", "ref", ref, "seconds", time.Since(start).Seconds(), "archive", archivePath)
	} else if err != nil {
		return "", err
	}
	if err := s.Import(ctx, archivePath, ref); err != nil {
		return "", err
	}
	return ref, nil
}

// baseImageConfig is what every sandbox inherits: Go and Python on PATH,
// nothing that reaches the network (GOPROXY=off, GOTOOLCHAIN=local), and a
// Go build cache under /root/.cache, which sandboxes keep writable.
func baseImageConfig(r Recipe) ocispec.ImageConfig {
	return ocispec.ImageConfig{
		Env: []string{
			"PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOME=/root",
			"LANG=C.UTF-8",
			"GOTOOLCHAIN=local",
			"GOPROXY=off",
			"GOFLAGS=-buildvcs=false",
			"GOCACHE=/root/.cache/go-build",
			"GOTELEMETRY=off",
			"CGO_ENABLED=0",
			"PIP_NO_INPUT=1",
			"PIP_DISABLE_PIP_VERSION_CHECK=1",
		},
		Cmd:        []string{"/bin/bash"},
		WorkingDir: "/repo",
		Labels: map[string]string{
			"io.frognano.recipe": r.Hash(),
			// Sandboxes keep these writable next to the repository.
			"io.frognano.writable": "/root/.cache",
		},
	}
}

// buildBase debootstraps, adds Go, and writes the OCI archive to dst.
func (s *Store) buildBase(ctx context.Context, r Recipe, dst string) error {
	work, err := os.MkdirTemp(s.CacheDir, "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	rootfs := filepath.Join(work, "rootfs")
	logPath := filepath.Join(work, "build.log")

	args := []string{"--variant=" + r.Variant}
	if len(r.Packages) > 0 {
		args = append(args, "--include="+strings.Join(r.Packages, ","))
	}
	args = append(args, r.Suite, rootfs, r.Mirror)
	if err := runLogged(ctx, logPath, nil, "debootstrap", args...); err != nil {
		return fmt.Errorf("debootstrap %s (is debootstrap installed, and are we root?): %w", r.Suite, err)
	}
	if r.GoRoot != "" {
		if err := runLogged(ctx, logPath, nil, "cp", "-a", r.GoRoot, filepath.Join(rootfs, "usr/local/go")); err != nil {
			return fmt.Errorf("copy GOROOT %s: %w", r.GoRoot, err)
		}
		for _, tool := range []string{"go", "gofmt"} {
			if err := os.Symlink("/usr/local/go/bin/"+tool, filepath.Join(rootfs, "usr/local/bin", tool)); err != nil {
				return err
			}
		}
	}
	// Repositories are copied in from the host, so their owner rarely
	// matches root: trust them, and give commits an identity.
	gitconfig := "[safe]\n\tdirectory = *\n[user]\n\tname = frognano\n\temail = frognano@frognano.local\n[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
	if err := os.WriteFile(filepath.Join(rootfs, "etc/gitconfig"), []byte(gitconfig), 0o644); err != nil {
		return err
	}
	for _, d := range []string{"repo", "root/.cache"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return err
		}
	}
	if r.WarmGoCache {
		if err := warmGoCache(ctx, rootfs, logPath, baseImageConfig(r).Env); err != nil {
			return err
		}
	}
	// What debootstrap leaves behind that no container needs: downloaded
	// packages, index files (stale by the time anyone runs apt), logs, and
	// the device nodes the runtime mounts its own /dev over.
	for _, glob := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "var/log/*", "dev/*", "tmp/*", "run/*", "root/.cache/go-build/testexpire.txt"} {
		matches, err := filepath.Glob(filepath.Join(rootfs, glob))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if fi, err := os.Lstat(m); err == nil && fi.IsDir() && strings.HasSuffix(m, "partial") {
				continue
			}
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}

	layer, err := writeRootfsLayer(ctx, work, rootfs)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.CacheDir, ".base-*.oci.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	cfg := imageConfig(baseImageConfig(r), layer.diffID, fmt.Sprintf("frognano base: debootstrap %s %s + %v + go %s", r.Variant, r.Suite, r.Packages, r.GoVersion))
	if err := writeOCIArchive(tmp, r.Ref(), layer, cfg); err != nil {
		tmp.Close()
		return fmt.Errorf("write OCI archive: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// warmGoCache compiles the standard library and a small test inside the new
// root (chroot, no network needed) so the image ships a filled GOCACHE.
func warmGoCache(ctx context.Context, rootfs, logPath string, env []string) error {
	mod := filepath.Join(rootfs, "tmp/warm")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"go.mod":       "module warm\n\ngo 1.21\n",
		"warm.go":      "package warm\n\nfunc Add(a, b int) int { return a + b }\n",
		"warm_test.go": "package warm\n\nimport (\n\t\"encoding/json\"\n\t\"fmt\"\n\t\"strings\"\n\t\"testing\"\n)\n\nfunc TestAdd(t *testing.T) {\n\tb, _ := json.Marshal(Add(1, 2))\n\tif strings.TrimSpace(fmt.Sprint(string(b))) != \"3\" {\n\t\tt.Fatal(string(b))\n\t}\n}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(mod, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	script := "set -e; cd /tmp/warm; go build std; go test -count=1 ./... >/dev/null; go vet ./...; rm -rf /tmp/warm"
	// A chroot has no /proc, so the go command cannot find its own GOROOT.
	env = append(env, "GOROOT=/usr/local/go")
	if err := runLogged(ctx, logPath, env, "chroot", rootfs, "/bin/sh", "-c", script); err != nil {
		return fmt.Errorf("warm the Go build cache in the image: %w", err)
	}
	return nil
}

// runLogged runs a build step, appending its output to logPath and quoting
// the tail of it in the error, so a failed debootstrap says why.
func runLogged(ctx context.Context, logPath string, env []string, name string, args ...string) error {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	var tail bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout = io.MultiWriter(lf, &tail)
	cmd.Stderr = cmd.Stdout
	if env != nil {
		cmd.Env = env
	}
	if err := cmd.Run(); err != nil {
		t := tail.Bytes()
		if len(t) > 2000 {
			t = t[len(t)-2000:]
		}
		return fmt.Errorf("%s: %w\n%s", name, err, t)
	}
	return nil
}

// lockFile takes an exclusive flock, polling so that ctx can cancel the wait.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
