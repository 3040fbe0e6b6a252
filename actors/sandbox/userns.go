package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// User namespaces. An episode sandbox runs in its own user namespace with
// its own range of host ids: frognano owns Config.UIDSlots ranges of 65536
// uids and gids from Config.UIDBase (default 64 from 1_000_000), and each
// live sandbox holds one, so that no two sandboxes share a host uid. A
// sandbox's uids 0-65535 are its range's; its root is the range's first
// uid. Root in the sandbox keeps its capabilities over the sandbox's own
// files, namespaces and mounts, but on the host it is an unprivileged uid
// that no other sandbox and no host user has: a process that got out would
// own nothing and could override no permission.
//
// A range is held by an exclusive flock on StateDir/uids/<first uid>, taken
// at Create and dropped at Destroy. The kernel drops it when the process
// dies, so ranges are shared correctly between every frognano process of
// the host, and a crash frees them.
//
// The image's files are owned by uid 0 on disk. Rather than chown a copy of
// every image (containerd's remapped snapshots: measured 3 min 21 s and
// 801 MB of disk per environment image here), each read-only layer of the
// sandbox's overlay is an idmapped bind mount (mount_setattr
// MOUNT_ATTR_IDMAP; overlayfs accepts idmapped layers since Linux 5.19)
// that shows uid N as B+N, B being the first uid of the sandbox's range;
// the overlay's tmpfs upper layer then holds host uids B+N directly. Nothing is copied and the mounts cost
// microseconds. containerd 1.6 and runc 1.1 know nothing of this: the
// overlay is assembled here (StorageTmpfs) and the spec only gains the
// user namespace and its mappings.
//
// StorageSnapshot sandboxes (build steps whose writable layer Commit turns
// into an image) keep host root: their writes must land in the image owned
// by the image's own uids.

// userNSSize is how many uids and gids a sandbox maps.
const userNSSize = 65536

// Default id ranges: 64 ranges of 65536 from host uid (and gid) 1_000_000,
// that is 1_000_000…5_194_303.
const (
	DefaultUIDBase  = 1_000_000
	DefaultUIDSlots = 64
)

// ErrUserNamespaces means the host cannot give sandboxes a user namespace;
// the text says why and how to turn them off.
var ErrUserNamespaces = errors.New("sandbox user namespaces unavailable")

// userNSOff is how an operator turns user namespaces off.
const userNSOff = `set FROGNANO_USERNS=off (sandbox.Config.UserNS "off") to run sandboxes as host root`

// idmapper holds the user namespace whose mapping every idmapped layer
// uses. The namespace has no process; the open descriptor keeps it alive.
type idmapper struct {
	base uint32
	fd   int
}

func (m *idmapper) close() {
	if m != nil && m.fd >= 0 {
		unix.Close(m.fd)
		m.fd = -1
	}
}

// mappings is the spec's uid and gid mapping.
func (m *idmapper) mappings() []specs.LinuxIDMapping {
	return []specs.LinuxIDMapping{{ContainerID: 0, HostID: m.base, Size: userNSSize}}
}

// uidPool hands out the id ranges.
type uidPool struct {
	base    uint32
	slots   int
	lockDir string

	mu   sync.Mutex
	maps map[int]*idmapper // namespaces by slot, made on first use
}

// newUIDPool checks the ranges and the kernel: no host user or subordinate
// id range may overlap them, and an overlay on an idmapped layer must mount
// (tried on a scratch tmpfs under stateDir).
func newUIDPool(base uint32, slots int, stateDir string) (*uidPool, error) {
	n := uint64(slots) * userNSSize
	if slots < 1 || base < userNSSize || uint64(base)+n > 1<<31 {
		return nil, fmt.Errorf("%w: %d ranges of 65536 ids from %d: they must lie between 65536 and 2^31; pick another Config.UIDBase or Config.UIDSlots or %s",
			ErrUserNamespaces, slots, base, userNSOff)
	}
	if err := checkIDRangeFree(uint64(base), n, "/etc"); err != nil {
		return nil, fmt.Errorf("%w: %v; pick another Config.UIDBase or %s", ErrUserNamespaces, err, userNSOff)
	}
	p := &uidPool{base: base, slots: slots, lockDir: filepath.Join(stateDir, "uids"), maps: map[int]*idmapper{}}
	if err := os.MkdirAll(p.lockDir, 0o700); err != nil {
		return nil, err
	}
	m, err := p.mapper(0)
	if err != nil {
		return nil, err
	}
	if err := m.probe(stateDir); err != nil {
		var uts unix.Utsname
		_ = unix.Uname(&uts)
		return nil, fmt.Errorf("%w: kernel %s cannot mount an overlay on an idmapped layer (needs Linux ≥ 5.19): %v; %s",
			ErrUserNamespaces, unix.ByteSliceToString(uts.Release[:]), err, userNSOff)
	}
	return p, nil
}

// mapper returns the namespace of a slot, creating it on first use.
func (p *uidPool) mapper(slot int) (*idmapper, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m := p.maps[slot]; m != nil {
		return m, nil
	}
	base := p.base + uint32(slot)*userNSSize
	fd, err := userNamespaceFD(base)
	if err != nil {
		return nil, fmt.Errorf("%w: create a user namespace: %v; %s", ErrUserNamespaces, err, userNSOff)
	}
	m := &idmapper{base: base, fd: fd}
	p.maps[slot] = m
	return m, nil
}

// uidLease is one range held by one sandbox.
type uidLease struct {
	*idmapper
	lock *os.File
}

func (l *uidLease) release() {
	if l != nil && l.lock != nil {
		l.lock.Close() // drops the flock
		l.lock = nil
	}
}

// ErrNoUIDRange means every id range is held by a live sandbox.
var ErrNoUIDRange = errors.New("every sandbox uid range is in use")

// acquire takes a free range, trying the slots from a random one on.
func (p *uidPool) acquire() (*uidLease, error) {
	start := mrand.IntN(p.slots)
	for i := range p.slots {
		slot := (start + i) % p.slots
		base := p.base + uint32(slot)*userNSSize
		f, err := os.OpenFile(filepath.Join(p.lockDir, strconv.FormatUint(uint64(base), 10)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				continue
			}
			return nil, fmt.Errorf("lock uid range %d: %w", base, err)
		}
		m, err := p.mapper(slot)
		if err != nil {
			f.Close()
			return nil, err
		}
		return &uidLease{idmapper: m, lock: f}, nil
	}
	return nil, fmt.Errorf("%w: all %d ranges from %d are held by live sandboxes (raise Config.UIDSlots)", ErrNoUIDRange, p.slots, p.base)
}

func (p *uidPool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.maps {
		m.close()
	}
	p.maps = map[int]*idmapper{}
}

// userNamespaceFD returns a descriptor of a new user namespace mapping
// 0…65535 to base…base+65535. A Go process cannot unshare its own user
// namespace (it has threads), so a short-lived child is started in one and
// the namespace is kept by its descriptor after the child exits.
func userNamespaceFD(base uint32) (int, error) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		return -1, err
	}
	cmd := exec.Command(sh, "-c", "read _")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: userNSSize}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: userNSSize}},
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	stdin.Close()
	_ = cmd.Wait()
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// bind mounts src read-only at dst with the namespace's mapping.
func (m *idmapper) bind(src, dst string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(m.fd)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmap %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach idmapped %s at %s: %w", src, dst, err)
	}
	return nil
}

// idmapLowers bind-mounts each overlay lower directory (colon-separated,
// highest first) with the mapping under dir/lower/N and returns the new
// lowerdir value. The mounts live inside the sandbox's storage directory,
// so removeUpper takes them down with it.
func (m *idmapper) idmapLowers(lower, dir string) (string, error) {
	var out []string
	for i, l := range strings.Split(lower, ":") {
		dst := filepath.Join(dir, "lower", strconv.Itoa(i))
		if err := os.MkdirAll(dst, 0o700); err != nil {
			return "", err
		}
		if err := m.bind(l, dst); err != nil {
			return "", err
		}
		out = append(out, dst)
	}
	return strings.Join(out, ":"), nil
}

// unmountLowers takes down what idmapLowers mounted under dir.
func unmountLowers(dir string) {
	entries, _ := os.ReadDir(filepath.Join(dir, "lower"))
	for _, e := range entries {
		_ = unix.Unmount(filepath.Join(dir, "lower", e.Name()), unix.MNT_DETACH)
	}
}

// probe mounts, on a scratch tmpfs, an overlay whose lower layer is an
// idmapped bind mount, and checks that a file owned by 0 shows as base.
func (m *idmapper) probe(stateDir string) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(stateDir, "userns-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0700"); err != nil {
		return fmt.Errorf("mount scratch tmpfs: %w", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	src, upper, work, root := filepath.Join(dir, "src"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "root")
	for _, d := range []string{src, upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(src, "f"), nil, 0o644); err != nil {
		return err
	}
	lower, err := m.idmapLowers(src, dir)
	if err != nil {
		return err
	}
	defer unmountLowers(dir)
	if err := unix.Mount("overlay", root, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
		return fmt.Errorf("overlay on an idmapped layer: %w", err)
	}
	defer unix.Unmount(root, unix.MNT_DETACH)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(root, "f"), &st); err != nil {
		return err
	}
	if st.Uid != m.base || st.Gid != m.base {
		return fmt.Errorf("a file owned by 0:0 shows as %d:%d through the overlay, want %d:%d", st.Uid, st.Gid, m.base, m.base)
	}
	return nil
}

// checkIDRangeFree refuses a range that etc's subuid, subgid, passwd or
// group already hands out: a sandbox's uids must
// belong to no one else on the host.
func checkIDRangeFree(lo, n uint64, etc string) error {
	hi := lo + n
	overlaps := func(start, n uint64) bool { return start < hi && lo < start+n }
	for _, f := range []struct {
		path string
		sub  bool // owner:start:count; otherwise name:x:id:…
	}{{"subuid", true}, {"subgid", true}, {"passwd", false}, {"group", false}} {
		f.path = filepath.Join(etc, f.path)
		b, err := os.ReadFile(f.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			switch {
			case f.sub && len(fields) == 3:
				start, err1 := strconv.ParseUint(fields[1], 10, 32)
				n, err2 := strconv.ParseUint(fields[2], 10, 32)
				if err1 == nil && err2 == nil && overlaps(start, n) {
					return fmt.Errorf("%s gives %s ids %d…%d, which overlap frognano's %d…%d", f.path, fields[0], start, start+n-1, lo, hi-1)
				}
			case !f.sub && len(fields) >= 3:
				if id, err := strconv.ParseUint(fields[2], 10, 32); err == nil && overlaps(id, 1) {
					return fmt.Errorf("%s has %s with id %d, inside frognano's %d…%d", f.path, fields[0], id, lo, hi-1)
				}
			}
		}
	}
	return nil
}

// checkReachable checks that a host file bind-mounted into sandboxes (the
// exec agent) can be reached and run by a sandbox's root, which on the
// host is a uid without privileges: every directory above it must be
// searchable and the file executable by others. runc's own error for this
// names neither the file nor the cause.
func checkReachable(file string) error {
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o001 == 0 {
		return fmt.Errorf("%w: %s (mode %o) is not executable by a sandbox's root, a host uid without privileges: chmod o+x it, or %s", ErrUserNamespaces, abs, st.Mode().Perm(), userNSOff)
	}
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%w: %s (mode %o) cannot be searched by a sandbox's root, a host uid without privileges, so %s cannot be mounted into sandboxes: chmod o+x it, choose another Config.CacheDir, or %s", ErrUserNamespaces, dir, st.Mode().Perm(), abs, userNSOff)
		}
		if dir == "/" {
			return nil
		}
	}
}
