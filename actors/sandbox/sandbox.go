package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/contrib/seccomp"
	"github.com/containerd/containerd/leases"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/oci"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// ErrSandboxDead means the sandbox's init exited (it was OOM-killed, or
// someone killed the container): the sandbox cannot run anything more and
// should be destroyed. An episode that hits it ends as a sandbox failure.
var ErrSandboxDead = errors.New("sandbox is dead")

// Sandbox is one running container. Its methods are safe for concurrent use;
// Destroy is idempotent.
type Sandbox struct {
	rt        *Runtime
	id        string
	image     string
	chainID   string
	opts      Options
	container containerd.Container
	task      containerd.Task
	process   specs.Process // template for exec'd processes
	upperDir  string        // tmpfs mount holding the writable layer, StorageTmpfs only
	uids      *uidLease     // the sandbox's host id range; nil: root is host root

	// agent is the exec agent running as PID 1, nil without one.
	agent      *agentConn
	agentLog   *capBuffer
	closeAgent func()

	// exited closes when init exits; stopWait ends the Wait that watches it.
	exited   chan struct{}
	stopWait context.CancelFunc

	execSeq atomic.Int64
	mu      sync.Mutex
	roots   map[int]bool // host pids of exec'd processes still running
	// spared are processes KillAll leaves alone (host pid → start time):
	// a grading PytestServer.
	spared map[int]uint64

	// destroyMu serialises Destroy; destroyed is set once it succeeded.
	destroyMu sync.Mutex
	destroyed bool
}

// userNS is the mapping the sandbox runs under, nil when it runs as host
// root: user namespaces are off, or the sandbox commits its writes into an
// image (StorageSnapshot), where they must keep the image's own uids.
func (s *Sandbox) userNS() *idmapper {
	if s.uids == nil {
		return nil
	}
	return s.uids.idmapper
}

// HostUID is the host uid (and gid) of the sandbox's root, and false when
// its root is host root.
func (s *Sandbox) HostUID() (uint32, bool) {
	if m := s.userNS(); m != nil {
		return m.base, true
	}
	return 0, false
}

// ID is the sandbox's id, shared by its container, lease and snapshot.
func (s *Sandbox) ID() string { return s.id }

// Image is the image ref the sandbox was created from.
func (s *Sandbox) Image() string { return s.image }

// Options are the sandbox's effective options (defaults filled in).
func (s *Sandbox) Options() Options { return s.opts }

// Alive reports whether the sandbox's init is still running.
func (s *Sandbox) Alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// image returns what Create needs from ref, unpacking the image if needed.
// The result is cached per ref and revalidated against the ref's target, so
// creating a sandbox costs one image lookup, not a walk of the content store.
func (r *Runtime) image(ctx context.Context, ref string) (imageInfo, error) {
	rec, err := r.client.ImageService().Get(ctx, ref)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return imageInfo{}, fmt.Errorf("image %s is not in containerd namespace %s (build it, import it, or run EnsureBaseImage): %w", ref, r.cfg.Namespace, err)
		}
		return imageInfo{}, fmt.Errorf("image %s: %w", ref, err)
	}
	r.mu.Lock()
	info, ok := r.imageInfo[ref]
	r.mu.Unlock()
	if ok && info.target == rec.Target.Digest.String() {
		return info, nil
	}
	img, err := r.images.Ready(ctx, ref)
	if err != nil {
		return imageInfo{}, err
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return imageInfo{}, fmt.Errorf("layers of %s: %w", ref, err)
	}
	cfg, err := img.Spec(ctx)
	if err != nil {
		return imageInfo{}, fmt.Errorf("config of %s: %w", ref, err)
	}
	info = imageInfo{
		img:     img,
		target:  rec.Target.Digest.String(),
		chainID: identity.ChainID(diffIDs).String(),
		config:  cfg.Config,
	}
	if w := cfg.Config.Labels[LabelWritable]; w != "" {
		info.writable = strings.Split(w, ":")
	}
	r.mu.Lock()
	r.imageInfo[ref] = info
	r.mu.Unlock()
	return info, nil
}

func (r *Runtime) forgetImage(ref string) {
	r.mu.Lock()
	delete(r.imageInfo, ref)
	r.mu.Unlock()
}

// LabelWritable is an image config label listing, colon-separated, the
// directories a sandbox of that image keeps writable besides RepoDir.
const LabelWritable = "io.frognano.writable"

// Create starts a sandbox from ref: a copy-on-write root file system (see
// Storage), a static init as PID 1 in fresh PID, mount, IPC, UTS and network
// namespaces, and the limits in opts. Everything hangs off a lease named
// after the sandbox, so a crash at any point leaves objects Sweep finds.
func (r *Runtime) Create(ctx context.Context, ref string, opts Options) (_ *Sandbox, retErr error) {
	if err := fault("sandbox/create"); err != nil {
		return nil, err
	}
	ctx = r.ctx(ctx)
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	info, err := r.image(ctx, ref)
	if err != nil {
		return nil, err
	}
	id := "fn-" + randomHex(8)
	labels := map[string]string{}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	labels[LabelOwner] = r.owner
	labels[LabelSandbox] = id

	// Calls that create things are never abandoned half-way: a cancelled
	// gRPC call can still complete on the server after we gave up on it,
	// leaving a container no one knows of. So they run to completion (under
	// a generous bound), and the caller's ctx is checked between steps; the
	// deferred Destroy then removes everything made so far.
	callerCtx := ctx
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	lease, err := r.client.LeasesService().Create(ctx, leases.WithID(id), leases.WithLabels(labels))
	if err != nil {
		return nil, fmt.Errorf("lease for sandbox: %w", err)
	}
	ctx = leases.WithLease(ctx, lease.ID)
	s := &Sandbox{rt: r, id: id, image: ref, chainID: info.chainID, opts: opts, exited: make(chan struct{}), roots: map[int]bool{}}
	defer func() {
		if retErr != nil {
			if err := s.Destroy(context.WithoutCancel(ctx)); err != nil {
				r.cfg.Logger.Warn("cleaning up a sandbox that failed to start", "sandbox", id, "err", err)
			}
		}
	}()

	if r.uids != nil && opts.Storage == StorageTmpfs {
		if s.uids, err = r.uids.acquire(); err != nil {
			return nil, err
		}
	}
	step := func() error {
		if err := callerCtx.Err(); err != nil {
			return fmt.Errorf("create sandbox: %w", err)
		}
		return nil
	}
	var (
		containerOpts []containerd.NewContainerOpts
		taskOpts      []containerd.NewTaskOpts
	)
	switch opts.Storage {
	case StorageTmpfs:
		mounts, err := r.tmpfsRoot(ctx, s, labels)
		if err != nil {
			return nil, err
		}
		taskOpts = append(taskOpts, containerd.WithRootFS(mounts))
	case StorageSnapshot:
		containerOpts = append(containerOpts,
			containerd.WithSnapshotter(r.cfg.Snapshotter),
			containerd.WithNewSnapshot(id, info.img, snapshots.WithLabels(labels)))
	default:
		return nil, fmt.Errorf("unknown storage %d", opts.Storage)
	}

	containerOpts = append(containerOpts,
		containerd.WithImageName(ref),
		containerd.WithContainerLabels(labels),
		containerd.WithRuntime(r.cfg.Runtime, nil),
		containerd.WithNewSpec(r.specOpts(info, opts, s.userNS())...))
	if err := step(); err != nil {
		return nil, err
	}
	s.container, err = r.client.NewContainer(ctx, id, containerOpts...)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	spec, err := s.container.Spec(ctx)
	if err != nil {
		return nil, fmt.Errorf("spec of %s: %w", id, err)
	}
	s.process = *spec.Process
	s.process.OOMScoreAdj = ptr(execOOMScoreAdj)

	creator := cio.NullIO
	var reqR, respR *io.PipeReader
	var reqW, respW *io.PipeWriter
	if r.agent != "" {
		// The agent's stdin and stdout are our channel to it.
		reqR, reqW = io.Pipe()
		respR, respW = io.Pipe()
		s.agentLog = &capBuffer{limit: 64 << 10}
		creator = cio.NewCreator(cio.WithStreams(reqR, respW, s.agentLog))
		s.closeAgent = func() { reqW.Close(); respW.Close() }
	}
	if err := step(); err != nil {
		return nil, err
	}
	s.task, err = s.container.NewTask(ctx, creator, taskOpts...)
	if err != nil {
		return nil, fmt.Errorf("create task: %w", classify(err))
	}
	// Wait before Start, so an init that dies at once is still seen. The
	// wait outlives ctx: it ends with the sandbox.
	waitCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopWait = stop
	exitC, err := s.task.Wait(waitCtx)
	if err != nil {
		return nil, fmt.Errorf("wait on task: %w", err)
	}
	go func() {
		<-exitC
		close(s.exited)
	}()
	if err := step(); err != nil {
		return nil, err
	}
	if err := s.task.Start(ctx); err != nil {
		return nil, fmt.Errorf("start sandbox init: %w", classify(err))
	}
	if r.agent != "" {
		s.agent = newAgentConn(reqW, respR)
		if err := s.agent.ping(ctx); err != nil {
			return nil, fmt.Errorf("sandbox agent: %w (its log: %q)", err, s.agentLog.Bytes())
		}
	}
	return s, step()
}

// createTimeout bounds the containerd calls of one Create.
const createTimeout = 2 * time.Minute

// execOOMScoreAdj makes everything exec'd the OOM killer's first choice,
// before init and before the host's own processes. Init keeps the score it
// inherits: lowering it needs CAP_SYS_RESOURCE, which hosts that are
// themselves containers (like our CI) do not grant, and runc then fails.
const execOOMScoreAdj = 500

// sandboxCaps is Docker's default set minus what a test suite never needs
// and an escape would: raw sockets, device nodes, chroot, audit, file caps.
var sandboxCaps = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FOWNER",
	"CAP_FSETID",
	"CAP_KILL",
	"CAP_NET_BIND_SERVICE",
	"CAP_SETGID",
	"CAP_SETPCAP",
	"CAP_SETUID",
}

// specOpts builds the OCI spec, only from oci.SpecOpts, on top of
// containerd's default (new PID/IPC/UTS/mount/network namespaces, masked
// /proc paths, no new privileges).
func (r *Runtime) specOpts(info imageInfo, opts Options, userns *idmapper) []oci.SpecOpts {
	cwd := info.config.WorkingDir
	if cwd == "" {
		cwd = opts.RepoDir
	}
	var mounts []specs.Mount
	mounts = append(mounts, specs.Mount{
		Destination: "/tmp",
		Type:        "tmpfs",
		Source:      "tmpfs",
		Options:     []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%d", opts.TmpBytes)},
	})
	if !opts.WritableRootfs {
		// The root is remounted read-only at the end of container setup, but
		// a bind mount of a directory onto itself is a mount of its own and
		// stays writable. A relative source is resolved against the bundle,
		// whose rootfs/ is the container's root file system.
		for _, d := range writableDirs(info, opts) {
			mounts = append(mounts, specs.Mount{
				Destination: d,
				Type:        "bind",
				Source:      "rootfs" + d,
				Options:     []string{"bind", "rw"},
			})
		}
	}
	if r.agent != "" {
		mounts = append(mounts, specs.Mount{
			Destination: initMountPoint,
			Type:        "bind",
			Source:      r.agent,
			Options:     []string{"bind", "ro", "nosuid", "nodev"},
		})
	}

	so := []oci.SpecOpts{
		oci.WithEnv(info.config.Env),
		oci.WithEnv(opts.Env),
		oci.WithProcessCwd(cwd),
		oci.WithProcessArgs(r.initArgs()...),
		oci.WithHostname("sandbox"),
		oci.WithMounts(mounts),
		oci.WithMemoryLimit(uint64(opts.MemoryBytes)),
		oci.WithPidsLimit(opts.Pids),
		oci.WithCPUCFS(int64(opts.CPUs*100000), 100000),
		oci.WithCapabilities(sandboxCaps),
		oci.WithNoNewPrivileges,
		seccomp.WithDefaultProfile(),
	}
	if swapAccounting() {
		// Swap limit = memory limit: no swap, so a memory hog is OOM-killed
		// instead of thrashing the host's disk.
		so = append(so, oci.WithMemorySwap(opts.MemoryBytes))
	}
	if !opts.WritableRootfs {
		so = append(so, oci.WithRootFSReadonly())
	}
	if opts.Network == NetworkHost {
		so = append(so, oci.WithHostNamespace(specs.NetworkNamespace), oci.WithHostResolvconf, oci.WithHostHostsFile)
	}
	if userns != nil {
		so = append(so, oci.WithUserNamespace(userns.mappings(), userns.mappings()))
	}
	return so
}

// writableDirs is RepoDir, the image's declared writable directories and
// opts.Writable, without duplicates.
func writableDirs(info imageInfo, opts Options) []string {
	dirs := []string{opts.RepoDir}
	for _, d := range append(slices.Clone(info.writable), opts.Writable...) {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// swapAccounting reports whether the kernel accounts swap per cgroup; runc
// refuses a swap limit otherwise.
var swapAccounting = sync.OnceValue(func() bool {
	for _, p := range []string{
		"/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes", // cgroup v1
		"/sys/fs/cgroup/init.scope/memory.swap.max",         // cgroup v2 with systemd
		"/sys/fs/cgroup/system.slice/memory.swap.max",
	} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
})

// tmpfsRoot mounts a tmpfs of opts.DiskBytes for this sandbox on the host and
// returns an overlay whose lower layers are a read-only view of the image and
// whose upper layer lives in that tmpfs.
func (r *Runtime) tmpfsRoot(ctx context.Context, s *Sandbox, labels map[string]string) ([]mount.Mount, error) {
	sn := r.client.SnapshotService(r.cfg.Snapshotter)
	view, err := sn.View(ctx, s.id, s.chainID, snapshots.WithLabels(labels))
	if err != nil {
		return nil, fmt.Errorf("view of %s: %w", s.image, err)
	}
	lower, extra, err := lowerDirs(view)
	if err != nil {
		return nil, err
	}
	parent := filepath.Join(r.cfg.StateDir, r.cfg.Namespace)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, err
	}
	// The owner file comes first, so a sweep never finds a directory it
	// cannot attribute.
	dir := filepath.Join(parent, s.id)
	if err := os.WriteFile(dir+".owner", []byte(r.owner), 0o600); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	s.upperDir = dir
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", s.opts.DiskBytes)); err != nil {
		return nil, fmt.Errorf("mount tmpfs for sandbox storage at %s: %w", dir, err)
	}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	if err := os.Mkdir(upper, 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		return nil, err
	}
	if m := s.userNS(); m != nil {
		// The layers show the image's uid N as host uid base+N; the upper
		// directory is the sandbox's "/", owned by its root.
		if lower, err = m.idmapLowers(lower, dir); err != nil {
			return nil, fmt.Errorf("%w: %v; %s", ErrUserNamespaces, err, userNSOff)
		}
		if err := os.Chown(upper, int(m.base), int(m.base)); err != nil {
			return nil, err
		}
	}
	return []mount.Mount{{
		Type:    "overlay",
		Source:  "overlay",
		Options: append(extra, "lowerdir="+lower, "upperdir="+upper, "workdir="+work),
	}}, nil
}

// lowerDirs turns the mounts of an overlayfs view into overlay lower
// directories: a one-layer view is a read-only bind mount, a deeper one an
// overlay with only lowerdir. Other options (index=off, userxattr) are kept.
func lowerDirs(view []mount.Mount) (string, []string, error) {
	if len(view) != 1 {
		return "", nil, fmt.Errorf("tmpfs storage needs the overlayfs snapshotter: view has %d mounts", len(view))
	}
	m := view[0]
	switch m.Type {
	case "bind":
		return m.Source, nil, nil
	case "overlay":
		var lower string
		var extra []string
		for _, o := range m.Options {
			switch {
			case strings.HasPrefix(o, "lowerdir="):
				lower = strings.TrimPrefix(o, "lowerdir=")
			case strings.HasPrefix(o, "upperdir="), strings.HasPrefix(o, "workdir="), o == "ro":
			default:
				extra = append(extra, o)
			}
		}
		if lower == "" {
			return "", nil, fmt.Errorf("overlay view without lowerdir: %v", m.Options)
		}
		return lower, extra, nil
	default:
		return "", nil, fmt.Errorf("tmpfs storage needs the overlayfs snapshotter, got a %s mount", m.Type)
	}
}

// Destroy kills every process, deletes the task, the container, its
// snapshot or tmpfs, and the lease. It keeps going past errors so that as
// much as possible is freed. Once it has succeeded it does nothing more;
// after a failure, calling it again tries again. A failed destroy (containerd
// restarting, say) is also kept in the runtime's DestroyStore when it has
// one, and retried in the background until it succeeds (see reclaim.go);
// without one, what it could not free waits for the Sweep of a later
// process.
func (s *Sandbox) Destroy(ctx context.Context) error { return s.destroyNoting(ctx, false) }

// destroyNoting is Destroy; retry says it is a background retry, which
// only updates the record of a failure.
func (s *Sandbox) destroyNoting(ctx context.Context, retry bool) error {
	s.destroyMu.Lock()
	defer s.destroyMu.Unlock()
	if s.destroyed {
		return nil
	}
	if err := s.destroy(ctx); err != nil {
		s.rt.destroyFailed(s, err, retry)
		return err
	}
	s.destroyed = true
	s.rt.destroyDone(s.id)
	return nil
}

func (s *Sandbox) destroy(ctx context.Context) error {
	ctx = s.rt.ctx(ctx)
	var errs []error
	// A create cut short by its context may have made the container or the
	// task on the server without the client hearing of it: look them up.
	if s.container == nil {
		if c, err := s.rt.client.LoadContainer(ctx, s.id); err == nil {
			s.container = c
		}
	}
	if s.task == nil && s.container != nil {
		if t, err := s.container.Task(ctx, nil); err == nil {
			s.task = t
		}
	}
	if s.task != nil {
		if err := s.task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsFailedPrecondition(err) {
			errs = append(errs, fmt.Errorf("kill sandbox %s: %w", s.id, err))
		}
		if _, err := s.task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete task %s: %w", s.id, err))
		}
	}
	if s.stopWait != nil {
		s.stopWait()
	}
	if s.closeAgent != nil {
		s.closeAgent()
	}
	if s.container != nil {
		var opts []containerd.DeleteOpts
		if s.opts.Storage == StorageSnapshot {
			opts = append(opts, containerd.WithSnapshotCleanup)
		}
		if err := s.container.Delete(ctx, opts...); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete container %s: %w", s.id, err))
		}
	}
	if s.upperDir != "" {
		if err := removeUpper(s.upperDir); err != nil {
			errs = append(errs, err)
		}
	}
	if s.opts.Storage == StorageTmpfs {
		if err := s.rt.client.SnapshotService(s.rt.cfg.Snapshotter).Remove(ctx, s.id); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove view %s: %w", s.id, err))
		}
	}
	if err := s.rt.client.LeasesService().Delete(ctx, leases.Lease{ID: s.id}); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete lease %s: %w", s.id, err))
	}
	if len(errs) == 0 {
		// The range is free again only when nothing of the sandbox runs;
		// otherwise it stays held until this process exits (when Sweep
		// would remove what is left).
		s.uids.release()
	}
	return errors.Join(errs...)
}

// classify adds what a caller can act on to containerd errors that say
// little by themselves.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errdefs.IsUnavailable(err):
		return fmt.Errorf("%w (is containerd still running?): %w", ErrContainerdNotRunning, err)
	default:
		return err
	}
}

func ptr[T any](v T) *T { return &v }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// deadline returns d, or def when d is not positive.
func deadline(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
