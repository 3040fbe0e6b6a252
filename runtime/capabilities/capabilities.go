// Package capabilities finds out what a node can offer for placement: CPU
// cores, memory, whether containerd is there to run SandboxWorkers, and which
// NVIDIA GPUs a Learner could bind to.
//
// A probe never fails as a whole. A node without containerd or without a GPU
// is still a useful node (it can run the FrontierEstimator, say), so every
// part degrades to "not offered" and the reason is logged or, for GPUs,
// reported in Capabilities.GpuError where an operator can see it.
//
// Binaries that link this package link go-nvml, which resolves libnvidia-ml
// symbols lazily; build them with -ldflags '-extldflags=-Wl,-z,lazy' so that
// they start on machines without the NVIDIA driver.
package capabilities

import (
	"context"
	"log/slog"
	"time"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// Defaults used where Options leaves a field empty.
const (
	DefaultContainerdAddress   = "/run/containerd/containerd.sock"
	DefaultContainerdNamespace = "frognano"
	// DefaultTimeout is long enough for a loaded containerd to answer and for
	// NVML to initialise a few GPUs, and short enough not to stall a daemon's
	// start when something is wedged.
	DefaultTimeout = 5 * time.Second
)

// Options configures Probe. The zero value probes the local machine with the
// defaults above.
type Options struct {
	// ContainerdAddress is the containerd socket path.
	ContainerdAddress string
	// ContainerdNamespace is the namespace the client is bound to; it is the
	// one SandboxWorkers will create containers in.
	ContainerdNamespace string
	// Timeout bounds the whole probe: containerd and GPU discovery run
	// concurrently and whichever has not answered by then is reported as not
	// available. Callers' ctx deadlines are honoured as well.
	Timeout time.Duration
	// Logger receives the reasons a part was not available; nil discards them.
	Logger *slog.Logger

	// ProcMeminfo and CgroupRoot locate the files memory and CPU limits are
	// read from; they exist so tests can point them at fixtures. Empty means
	// /proc/meminfo and /sys/fs/cgroup.
	ProcMeminfo string
	CgroupRoot  string
}

func (o Options) withDefaults() Options {
	if o.ContainerdAddress == "" {
		o.ContainerdAddress = DefaultContainerdAddress
	}
	if o.ContainerdNamespace == "" {
		o.ContainerdNamespace = DefaultContainerdNamespace
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ProcMeminfo == "" {
		o.ProcMeminfo = "/proc/meminfo"
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	return o
}

// Probe reports what this node offers. It returns within opts.Timeout (or
// ctx's deadline, if sooner) whatever containerd or the GPU driver do, and it
// never returns nil.
func Probe(ctx context.Context, opts Options) *rtmsg.Capabilities {
	o := opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	// The slow, external parts run in their own goroutines so that one that
	// ignores ctx (NVML calls cannot be cancelled; the containerd client makes
	// one call without a deadline) cannot hold the probe past its timeout.
	// The channels are buffered so an abandoned goroutine can still finish.
	type ctrdResult struct {
		version string
		err     error
	}
	ctrdc := make(chan ctrdResult, 1)
	go func() {
		v, err := containerdVersion(ctx, o.ContainerdAddress, o.ContainerdNamespace)
		ctrdc <- ctrdResult{v, err}
	}()
	type gpuResult struct {
		gpus []*rtmsg.GPU
		err  error
	}
	gpuc := make(chan gpuResult, 1)
	lib := newNVML() // read here, not in the goroutine, which may outlive Probe
	go func() {
		g, err := listGPUs(lib)
		gpuc <- gpuResult{g, err}
	}()

	caps := &rtmsg.Capabilities{Cores: cores(o.CgroupRoot)}
	mem, err := memoryBytes(o.ProcMeminfo, o.CgroupRoot)
	if err != nil {
		o.Logger.Warn("capabilities: memory unknown", "err", err)
	}
	caps.MemoryBytes = mem

	select {
	case r := <-ctrdc:
		if r.err != nil {
			o.Logger.Info("capabilities: containerd unavailable", "address", o.ContainerdAddress, "err", r.err)
		} else {
			caps.Containerd, caps.ContainerdVersion = true, r.version
		}
	case <-ctx.Done():
		o.Logger.Info("capabilities: containerd unavailable", "address", o.ContainerdAddress, "err", context.Cause(ctx))
	}

	select {
	case r := <-gpuc:
		caps.Gpus = r.gpus
		if r.err != nil {
			caps.GpuError = r.err.Error()
		}
	case <-ctx.Done():
		caps.GpuError = "GPU discovery did not finish: " + context.Cause(ctx).Error()
	}
	if caps.GpuError != "" {
		o.Logger.Info("capabilities: no GPUs", "reason", caps.GpuError)
	}
	return caps
}
