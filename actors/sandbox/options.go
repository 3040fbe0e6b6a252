package sandbox

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// Storage is where a sandbox's writes go.
type Storage int

const (
	// StorageTmpfs puts the writable layer of the root file system in a
	// size-limited tmpfs mounted on the host for this sandbox alone: the
	// disk bound is exact (ENOSPC at DiskBytes, fallocate included) and
	// destroying the sandbox frees it at once. The default, for episodes.
	StorageTmpfs Storage = iota
	// StorageSnapshot uses an ordinary containerd snapshot on the host's
	// disk, which Commit can turn into an image. DiskBytes is then a checked
	// quota, polled while commands run. For trusted build steps.
	StorageSnapshot
)

// Network is a sandbox's network access.
type Network int

const (
	// NetworkNone gives the sandbox its own network namespace with only a
	// loopback interface (brought up by runc): nothing outside is reachable,
	// not even the host's loopback services.
	NetworkNone Network = iota
	// NetworkHost shares the host's network, for build steps that install
	// dependencies. Never for agent episodes.
	NetworkHost
)

// Options are the limits and layout of one sandbox. Zero fields take the
// defaults in DefaultOptions.
type Options struct {
	// RepoDir is the repository inside the image; it stays writable when the
	// rest of the root file system is read-only (default /repo; SWE-bench
	// images use /testbed).
	RepoDir string
	// Writable lists more directories of the image to keep writable, in
	// addition to RepoDir and to those the image lists in its
	// io.frognano.writable label (the base image lists /root/.cache, for the
	// Go build cache). They must exist in the image.
	Writable []string
	// MemoryBytes caps the memory of all processes together (RAM, no swap;
	// tmpfs pages count too). The kernel OOM-kills inside the sandbox.
	MemoryBytes int64
	// Pids caps the number of processes and threads (fork bombs).
	Pids int64
	// CPUs is a CFS quota in cores (1.5 = one and a half cores).
	CPUs float64
	// TmpBytes sizes the /tmp tmpfs.
	TmpBytes int64
	// DiskBytes bounds the writable layer (RepoDir and Writable): the tmpfs
	// size under StorageTmpfs, a polled quota under StorageSnapshot.
	DiskBytes int64
	Storage   Storage
	Network   Network
	// WritableRootfs leaves the whole root file system writable, for build
	// steps that install packages. Never for agent episodes.
	WritableRootfs bool
	// Env is added to the image's environment for every command.
	Env []string
	// Labels are added to the container's labels.
	Labels map[string]string
}

// DefaultOptions are sized for a 2-core, 24 GiB node running a few sandboxes
// at once.
var DefaultOptions = Options{
	RepoDir:     "/repo",
	MemoryBytes: 2 << 30,
	Pids:        512,
	CPUs:        1,
	TmpBytes:    512 << 20,
	DiskBytes:   1 << 30,
}

func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions
	if o.RepoDir == "" {
		o.RepoDir = d.RepoDir
	}
	if o.MemoryBytes == 0 {
		o.MemoryBytes = d.MemoryBytes
	}
	if o.Pids == 0 {
		o.Pids = d.Pids
	}
	if o.CPUs == 0 {
		o.CPUs = d.CPUs
	}
	if o.TmpBytes == 0 {
		o.TmpBytes = d.TmpBytes
	}
	if o.DiskBytes == 0 {
		o.DiskBytes = d.DiskBytes
	}
	for _, p := range append([]string{o.RepoDir}, o.Writable...) {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return o, fmt.Errorf("writable directory %q must be a clean absolute path below /", p)
		}
	}
	switch {
	case o.MemoryBytes < 16<<20:
		return o, fmt.Errorf("memory limit %d bytes is too small to start a shell", o.MemoryBytes)
	case o.Pids < 8:
		return o, fmt.Errorf("pids limit %d is too small", o.Pids)
	case o.CPUs < 0.01:
		return o, fmt.Errorf("cpu quota %v cores is too small", o.CPUs)
	case o.TmpBytes < 1<<20 || o.DiskBytes < 1<<20:
		return o, fmt.Errorf("tmp (%d) and disk (%d) limits must be at least 1 MiB", o.TmpBytes, o.DiskBytes)
	}
	for _, e := range o.Env {
		if !strings.Contains(e, "=") {
			return o, fmt.Errorf("environment entry %q has no '='", e)
		}
	}
	return o, nil
}

// Defaults for commands.
const (
	DefaultExecTimeout  = 5 * time.Minute
	DefaultOutputLimit  = 1 << 20
	DefaultTestsTimeout = 15 * time.Minute
	// MaxFileBytes bounds ReadFile and WriteFile: an agent reading a 2 GiB
	// log must get an error, not take the node's memory.
	MaxFileBytes = 16 << 20
)
