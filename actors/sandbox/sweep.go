package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/leases"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/snapshots"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// Labels frognano puts on every container, snapshot and lease it creates.
const (
	// LabelOwner names the creating process as boot-id/pid/start-time: a
	// pid alone is reused, the triple is not.
	LabelOwner = "io.frognano.owner"
	// LabelSandbox is the sandbox id; container, lease, snapshot and tmpfs
	// directory share it.
	LabelSandbox = "io.frognano.sandbox"
)

// ownerID identifies a live process on this boot of this host.
func ownerID(pid int) (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	start, err := procStartTime(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s/%d/%d", strings.TrimSpace(string(boot)), pid, start), nil
}

// ownerAlive reports whether the process named by an owner label still runs.
// Malformed labels count as dead so that they are cleaned rather than kept
// forever.
func ownerAlive(owner string) bool {
	parts := strings.Split(owner, "/")
	if len(parts) != 3 {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	current, err := ownerID(pid)
	return err == nil && current == owner
}

// procStat reads the fields of /proc/<pid>/stat after the command name
// (which may itself contain spaces and parentheses).
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// procStartTime is field 22 of /proc/<pid>/stat: clock ticks after boot.
func procStartTime(pid int) (uint64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 20 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// SweepReport counts what Sweep removed. Pending counts the sandboxes
// whose earlier destroy had failed (Config.Destroys) and that are destroyed
// now, whoever their owner.
type SweepReport struct {
	Containers, Leases, Snapshots, Mounts int
	Pending                               int
}

// Sweep removes what earlier frognano processes left behind when they died
// without destroying their sandboxes: containers (and their tasks), leases,
// snapshots and tmpfs mounts whose owner process is gone. Sandboxes of live
// processes — another test binary, another node process — are kept, except
// those whose destroy failed earlier and is still recorded in
// Config.Destroys: those are destroyed now. Call it at startup.
func (r *Runtime) Sweep(ctx context.Context) (SweepReport, error) {
	return r.sweep(ctx, func(owner string) bool { return !ownerAlive(owner) })
}

// SweepAll removes every frognano sandbox in the namespace, live or not:
// for an operator who knows no frognano process is running.
func (r *Runtime) SweepAll(ctx context.Context) (SweepReport, error) {
	return r.sweep(ctx, func(string) bool { return true })
}

func (r *Runtime) sweep(ctx context.Context, stale func(owner string) bool) (SweepReport, error) {
	ctx = r.ctx(ctx)
	var rep SweepReport
	var errs []error
	live := map[string]bool{} // sandbox ids kept

	containers, err := r.client.Containers(ctx, fmt.Sprintf("labels.%q", LabelOwner))
	if err != nil {
		return rep, fmt.Errorf("list containers: %w", err)
	}
	for _, c := range containers {
		labels, err := c.Labels(ctx)
		if err != nil {
			if !errdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		if !stale(labels[LabelOwner]) {
			live[labels[LabelSandbox]] = true
			continue
		}
		if err := deleteContainer(ctx, c); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Containers++
	}

	ls, err := r.client.LeasesService().List(ctx, fmt.Sprintf("labels.%q", LabelOwner))
	if err != nil {
		return rep, fmt.Errorf("list leases: %w", err)
	}
	for _, l := range ls {
		if !stale(l.Labels[LabelOwner]) {
			live[l.Labels[LabelSandbox]] = true
			continue
		}
		if err := r.client.LeasesService().Delete(ctx, l, leases.SynchronousDelete); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete lease %s: %w", l.ID, err))
			continue
		}
		rep.Leases++
	}

	sn := r.client.SnapshotService(r.cfg.Snapshotter)
	var keys []string
	if err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if owner, ok := info.Labels[LabelOwner]; ok && stale(owner) && !live[info.Labels[LabelSandbox]] {
			keys = append(keys, info.Name)
		}
		return nil
	}, fmt.Sprintf("labels.%q", LabelOwner)); err != nil {
		errs = append(errs, fmt.Errorf("walk snapshots: %w", err))
	}
	for _, k := range keys {
		if err := sn.Remove(ctx, k); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove snapshot %s: %w", k, err))
			continue
		}
		rep.Snapshots++
	}

	// tmpfs upper directories: one per sandbox, named by its id.
	dir := filepath.Join(r.cfg.StateDir, r.cfg.Namespace)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if live[e.Name()] {
			continue
		}
		owner, _ := os.ReadFile(filepath.Join(dir, e.Name()+".owner"))
		if !e.IsDir() || (len(owner) > 0 && !stale(string(owner))) {
			continue
		}
		if err := removeUpper(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Mounts++
	}

	// Destroys that failed (containerd restarting) and are still recorded,
	// by this process or an earlier one.
	done, left, err := r.retryDestroys(ctx)
	rep.Pending = done
	if err != nil {
		errs = append(errs, err)
	}
	if left > 0 || err != nil {
		r.wakeReclaimer() // keeps trying, with backoff
	}
	return rep, errors.Join(errs...)
}

// deleteContainer kills and deletes a container's task, then the container
// and its snapshot; each step tolerates the object being gone already.
func deleteContainer(ctx context.Context, c containerd.Container) error {
	if task, err := c.Task(ctx, nil); err == nil {
		if err := task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) && !errdefs.IsFailedPrecondition(err) {
			return fmt.Errorf("kill task %s: %w", c.ID(), err)
		}
		if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("delete task %s: %w", c.ID(), err)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("task of %s: %w", c.ID(), err)
	}
	if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete container %s: %w", c.ID(), err)
	}
	return nil
}

// removeUpper unmounts a sandbox's tmpfs (lazily if a dying shim still holds
// it) and removes its directory and owner file.
func removeUpper(dir string) error {
	unmountLowers(dir)
	if err := mount.UnmountAll(dir, 0); err != nil {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Remove(dir + ".owner"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
