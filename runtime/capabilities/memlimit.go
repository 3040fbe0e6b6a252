package capabilities

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultMemoryFraction is the share of the memory a process may use that
// SetMemoryLimit gives the Go runtime as its soft limit.
const DefaultMemoryFraction = 0.7

// SetMemoryLimit gives the Go runtime a soft memory limit
// (runtime/debug.SetMemoryLimit) of frac of the memory this process may
// use (MemTotal, lowered to its cgroups' limit), unless the environment
// sets GOMEMLIMIT, which wins. It returns the limit set, 0 when none was.
//
// Without a limit the garbage collector lets the heap grow to twice what
// is live before it collects: a training run of Qwen2.5-Coder-0.5B, 9 GB
// live (two copies of the weights, the Learner's activations), grew to
// 16.6 GB of resident memory within a few steps and was OOM-killed on a
// 24 GB machine; with an 11 GiB limit it stayed at 11 GB. The limit is
// soft: a process whose live heap exceeds it still runs, collecting more
// often (the runtime bounds that work to half the CPU).
//
// A fixed limit below what the process legitimately keeps live is worse
// than none: the collector then runs back to back. A run of
// Qwen2.5-Coder-1.5B holds about 15 GB live (the Sampler's and the
// Learner's float32 weights, the Learner's optimizer state), above 70% of
// a 24 GB machine, and spent a third of its CPU marking; its held-out
// evaluation ran at a fifth of the speed of the same episodes in a process
// holding one copy of the weights. So the limit follows the live heap:
// after every collection it is raised, when needed, to LiveHeadroom above
// what that collection found live (never above CeilingFraction of the
// machine's memory, which leaves room for what is not Go heap: BLAS
// buffers, mapped model files, cgo; and never below frac of it). The heap
// then grows by at most that headroom over what is live, where the
// default collector would let it double. (The first version let the
// limit rise to the whole memory: that run was OOM-killed at its first
// learning step, 24.1 GB resident.)
func SetMemoryLimit(frac float64) int64 {
	if os.Getenv("GOMEMLIMIT") != "" || !(frac > 0 && frac <= 1) { // empty is unset, as the runtime reads it
		return 0
	}
	mem, err := memoryBytes("/proc/meminfo", "/sys/fs/cgroup")
	if err != nil || mem == 0 {
		return 0
	}
	limit := int64(math.Min(float64(mem)*frac, math.MaxInt64))
	debug.SetMemoryLimit(limit)
	follow(limit, int64(math.Min(float64(mem)*max(frac, CeilingFraction), math.MaxInt64)))
	return limit
}

// FixMemoryLimit sets a fixed soft limit of limit bytes (the follower, if
// running, keeps it there: its base and ceiling become limit), or, for
// limit <= 0, lifts the limit and stops following. node.memory_limit's
// explicit values come here; its default is SetMemoryLimit's.
func FixMemoryLimit(limit int64) {
	if limit <= 0 {
		stopFollowing()
		debug.SetMemoryLimit(math.MaxInt64)
		return
	}
	debug.SetMemoryLimit(limit)
	follow(limit, limit)
}

// CeilingFraction is the most of the machine's memory the limit follows
// the live heap to.
const CeilingFraction = 0.85

// LiveHeadroom is the share of the live heap the memory limit keeps
// above it, once the live heap has outgrown the base limit.
const LiveHeadroom = 0.25

// followLimit is the limit for a live heap of live bytes: base, or
// LiveHeadroom above live when that is higher, at most ceiling.
func followLimit(base, ceiling, live int64) int64 {
	want := int64(float64(live) * (1 + LiveHeadroom))
	return max(base, min(want, ceiling))
}

// follower keeps the runtime's memory limit at followLimit of the live
// heap, checked after every collection.
type follower struct {
	base, ceiling int64
	sample        []metrics.Sample
}

var (
	followMu  sync.Mutex
	following *follower
)

// follow starts (or retargets) the follower.
func follow(base, ceiling int64) {
	followMu.Lock()
	defer followMu.Unlock()
	if following != nil {
		following.base, following.ceiling = base, ceiling
		return
	}
	following = &follower{base: base, ceiling: ceiling,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	following.arm()
}

// arm registers a cleanup that runs after the next collection finds a
// fresh object unreachable: it adjusts the limit and arms again.
func (f *follower) arm() {
	sentinel := new([64]byte)
	runtime.AddCleanup(sentinel, func(*follower) {
		f.adjust()
		f.arm()
	}, f)
}

// adjust sets the limit for the live heap the last collection measured.
func (f *follower) adjust() {
	followMu.Lock()
	defer followMu.Unlock()
	if following != f {
		return
	}
	metrics.Read(f.sample)
	if f.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	live := int64(min(f.sample[0].Value.Uint64(), math.MaxInt64))
	limit := followLimit(f.base, f.ceiling, live)
	if debug.SetMemoryLimit(-1) != limit {
		debug.SetMemoryLimit(limit)
	}
}

// stopFollowing stops the follower (its armed cleanup finds it retired).
func stopFollowing() {
	followMu.Lock()
	following = nil
	followMu.Unlock()
}
