package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/frognano/frognano/actors/sandbox/image"
	"github.com/frognano/frognano/persistence"
)

// Config says how to reach containerd and where to keep local state. The
// zero value works on a standard Linux host where we run as root.
type Config struct {
	// Address is containerd's socket (default /run/containerd/containerd.sock).
	Address string
	// Namespace isolates frognano's containers and images from everything
	// else on the host (default "frognano").
	Namespace string
	// Snapshotter unpacks images (default "overlayfs"; the tmpfs storage of
	// episode sandboxes needs overlayfs).
	Snapshotter string
	// Runtime is the containerd shim (default "io.containerd.runc.v2").
	Runtime string
	// CacheDir keeps built image archives (default /var/cache/frognano).
	CacheDir string
	// StateDir holds the per-sandbox tmpfs mounts (default /run/frognano).
	// It should be on a file system that a reboot clears.
	StateDir string
	// Agent chooses PID 1 of the sandboxes. Empty: the exec agent
	// (agent/main.go), built on first use with the host's Go toolchain —
	// it survives every signal sent from inside, reaps orphans, and runs
	// commands without a runc exec. "off": a shell loop from the image as
	// PID 1 and runc exec for every command (also what happens when no Go
	// toolchain is found). Any other value is the path of a prebuilt agent.
	Agent string
	// DebianMirror is the Debian archive the base image is bootstrapped
	// from; empty means the one in the host's apt sources.
	DebianMirror string
	// UserNS chooses whether episode sandboxes (StorageTmpfs) run in a user
	// namespace, each with a range of host ids of its own (see userns.go). Empty:
	// the value of FROGNANO_USERNS, and on when that is empty too; New then
	// fails with ErrUserNamespaces where the host cannot do it. "off": root
	// in the sandbox is host root, held in only by capabilities, seccomp
	// and the mount layout.
	UserNS string
	// UIDBase and UIDSlots are frognano's host ids: UIDSlots ranges of
	// 65536 uids and gids from UIDBase (defaults DefaultUIDBase, 1_000_000,
	// and DefaultUIDSlots, 64), one per live sandbox. No user or
	// subordinate id range of the host may overlap them: New checks
	// /etc/passwd, /etc/group, /etc/subuid and /etc/subgid.
	UIDBase  uint32
	UIDSlots int
	// DialTimeout bounds the initial connection (default 5s).
	DialTimeout time.Duration
	// Destroys, when set (a node's store: DB.SandboxDestroys), keeps every
	// sandbox whose Destroy failed until a retry in the background, or the
	// Sweep of a later process, has destroyed it (reclaim.go). Nil: a failed
	// Destroy is only returned, and what it left waits for a later
	// process's Sweep.
	Destroys persistence.SandboxDestroyStore
	Logger   *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Address == "" {
		c.Address = "/run/containerd/containerd.sock"
	}
	if c.Namespace == "" {
		c.Namespace = "frognano"
	}
	if c.Snapshotter == "" {
		c.Snapshotter = "overlayfs"
	}
	if c.Runtime == "" {
		c.Runtime = "io.containerd.runc.v2"
	}
	if c.CacheDir == "" {
		c.CacheDir = "/var/cache/frognano"
	}
	if c.StateDir == "" {
		c.StateDir = "/run/frognano"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.UserNS == "" {
		c.UserNS = os.Getenv("FROGNANO_USERNS")
	}
	if c.UserNS == "" {
		c.UserNS = "on"
	}
	if c.UIDBase == 0 {
		c.UIDBase = DefaultUIDBase
	}
	if c.UIDSlots == 0 {
		c.UIDSlots = DefaultUIDSlots
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ErrContainerdNotRunning means there is no containerd to talk to; the error
// text says how to start one.
var ErrContainerdNotRunning = errors.New("containerd is not running")

// Runtime owns one containerd connection and the sandboxes made through it.
type Runtime struct {
	cfg    Config
	client *containerd.Client
	images *image.Store
	owner  string
	agent  string   // host path of the exec agent binary, "" for the shell loop
	uids   *uidPool // nil when user namespaces are off

	mu        sync.Mutex
	imageInfo map[string]imageInfo // by image ref

	reclaim reclaimer // failed destroys, retried (reclaim.go)
}

// imageInfo is what Create needs from an image, cached so that creating a
// sandbox does not re-read the image config from the content store.
type imageInfo struct {
	img      containerd.Image
	target   string // manifest digest, to notice a re-tagged ref
	chainID  string
	config   ocispec.ImageConfig
	writable []string
}

// New connects to containerd. It fails fast, with a message saying how to
// start containerd, when the socket is missing or does not answer.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	hint := "start it with scripts/setup-containerd.sh, or `nohup containerd >/var/log/containerd.log 2>&1 &` as root"
	if _, err := os.Stat(cfg.Address); err != nil {
		return nil, fmt.Errorf("%w at %s: %s (%v)", ErrContainerdNotRunning, cfg.Address, hint, err)
	}
	client, err := containerd.New(cfg.Address,
		containerd.WithDefaultNamespace(cfg.Namespace),
		containerd.WithDefaultRuntime(cfg.Runtime),
		containerd.WithTimeout(cfg.DialTimeout))
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %s (%v)", ErrContainerdNotRunning, cfg.Address, hint, err)
	}
	ctx = namespaces.WithNamespace(ctx, cfg.Namespace)
	if _, err := client.Version(ctx); err != nil {
		client.Close()
		if errdefs.IsUnavailable(err) {
			return nil, fmt.Errorf("%w at %s: %s (%v)", ErrContainerdNotRunning, cfg.Address, hint, err)
		}
		return nil, fmt.Errorf("containerd at %s: %w", cfg.Address, err)
	}
	owner, err := ownerID(os.Getpid())
	if err != nil {
		client.Close()
		return nil, err
	}
	var uids *uidPool
	switch cfg.UserNS {
	case "on":
		if uids, err = newUIDPool(cfg.UIDBase, cfg.UIDSlots, cfg.StateDir); err != nil {
			client.Close()
			return nil, err
		}
	case "off":
	default:
		client.Close()
		return nil, fmt.Errorf("sandbox user namespaces: %q is neither \"on\" nor \"off\"", cfg.UserNS)
	}
	r := &Runtime{
		uids:   uids,
		cfg:    cfg,
		client: client,
		owner:  owner,
		images: &image.Store{
			Client:      client,
			Snapshotter: cfg.Snapshotter,
			CacheDir:    filepath.Join(cfg.CacheDir, "images"),
			Logger:      cfg.Logger,
		},
		imageInfo: map[string]imageInfo{},
	}
	switch cfg.Agent {
	case "off":
	case "":
		if r.agent, err = buildAgent(ctx, cfg.CacheDir); err != nil {
			cfg.Logger.Warn("sandboxes run without the exec agent: commands use runc exec (~30 ms each) and PID 1 is a shell loop", "err", err)
		}
	default:
		if _, err := os.Stat(cfg.Agent); err != nil {
			client.Close()
			uids.close()
			return nil, fmt.Errorf("sandbox agent %s: %w", cfg.Agent, err)
		}
		r.agent = cfg.Agent
	}
	if uids != nil && r.agent != "" {
		if err := checkReachable(r.agent); err != nil {
			client.Close()
			uids.close()
			return nil, err
		}
	}
	r.reclaim.store = cfg.Destroys
	r.startReclaimer()
	return r, nil
}

// Close drops the connection. Sandboxes keep running; Destroy them first.
// Destroys that failed and are still pending are retried for up to a
// minute first (a clean exit should leave nothing behind); what still fails
// stays recorded in Config.Destroys for the next process.
func (r *Runtime) Close() error {
	r.stopReclaimer()
	r.drainDestroys()
	r.uids.close()
	return r.client.Close()
}

// UserNS reports whether episode sandboxes get user namespaces.
func (r *Runtime) UserNS() bool { return r.uids != nil }

// Client is the underlying containerd client, for callers (benchmarks,
// diagnostics) that need something this package does not wrap.
func (r *Runtime) Client() *containerd.Client { return r.client }

// Namespace is the containerd namespace all objects live in.
func (r *Runtime) Namespace() string { return r.cfg.Namespace }

// Images is the image store in this runtime's namespace.
func (r *Runtime) Images() *image.Store { return r.images }

// ctx puts the runtime's namespace on a caller's context.
func (r *Runtime) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}

// EnsureBaseImage returns the ref of the default base image (Debian bookworm
// minbase, Python, git, the host's Go), building it on first use; see
// image.Store.EnsureBase for the caching.
func (r *Runtime) EnsureBaseImage(ctx context.Context) (string, error) {
	ctx = r.ctx(ctx)
	recipe, err := image.DefaultRecipe(ctx)
	if err != nil {
		return "", err
	}
	recipe.Mirror = r.cfg.DebianMirror
	return r.images.EnsureBase(ctx, recipe)
}

// DeriveImage builds newRef from baseRef plus host directories copied in
// (container path → host path), e.g. {"/repo": "/src/project"}. It is how
// an environment image starts: base + repository, before dependencies are
// installed in a build sandbox and committed with Commit.
func (r *Runtime) DeriveImage(ctx context.Context, baseRef, newRef string, dirs map[string]string, edit image.ConfigEdit) error {
	ctx = r.ctx(ctx)
	var parts []string
	for dst, src := range dirs {
		parts = append(parts, src+" -> "+dst)
	}
	err := r.images.Derive(ctx, baseRef, newRef, "frognano: copy "+strings.Join(parts, ", "), func(root string) error {
		for dst, src := range dirs {
			if err := image.CopyInto(src, dst)(root); err != nil {
				return err
			}
		}
		return nil
	}, edit)
	r.forgetImage(newRef)
	return err
}

// initArgs is PID 1's command line inside the sandbox.
func (r *Runtime) initArgs() []string {
	if r.agent != "" {
		return []string{initMountPoint}
	}
	return []string{"/bin/sh", "-c", shellInitLoop}
}

// shellInitLoop keeps PID 1 alive when there is no agent. It ignores every
// catchable signal but SIGCHLD (the shell would otherwise handle SIGINT
// while it waits, and die of it); signals it does not catch are dropped by
// the kernel for a namespace's init. The shell's wait reaps orphans as well
// as its sleep. Ignored dispositions do not leak into commands: those are
// started by runc exec, not by this shell.
const shellInitLoop = "trap '' 1 2 3 4 5 6 7 8 10 11 12 13 14 15 16 20 21 22 23 24 25 26 27 28 29 30 31; while :; do sleep 2147483647 & wait $!; done"

// initMountPoint is where the host's agent binary appears in a sandbox.
const initMountPoint = "/.frognano/init"

// ImportArchive loads the images in an OCI layout or `docker save` tar (a
// SWE-bench image exported elsewhere, say) into this runtime's namespace,
// unpacks them, and returns their names, which Create then accepts. Images
// already in the namespace need no import: Create takes any ref there.
func (r *Runtime) ImportArchive(ctx context.Context, path string) ([]string, error) {
	ctx = r.ctx(ctx)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	imgs, err := r.client.Import(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	var names []string
	for _, img := range imgs {
		if _, err := r.images.Ready(ctx, img.Name); err != nil {
			return names, err
		}
		r.forgetImage(img.Name)
		names = append(names, img.Name)
	}
	return names, nil
}
