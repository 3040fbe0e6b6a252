package synth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Sandbox is what synthesis needs from one sandbox; *sandbox.Sandbox has
// it. The Synthesizer calls sandboxes directly rather than through
// SandboxWorker actors: validation is a tight loop of patch, test and reset
// on one container, and a message hop per step would only add latency.
type Sandbox interface {
	ID() string
	Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error)
	ReadFile(ctx context.Context, p string) ([]byte, error)
	WriteFile(ctx context.Context, p string, content []byte) error
	ApplyPatch(ctx context.Context, patch string) error
	RunTests(ctx context.Context, spec sandbox.TestSpec, tests []string) (*testreport.Report, error)
	StartPytestServer(ctx context.Context, spec sandbox.TestSpec, use sandbox.PytestUse) (*sandbox.PytestServer, error)
	Destroy(ctx context.Context) error
}

// Sandboxes starts sandboxes of an environment's image.
type Sandboxes interface {
	Create(ctx context.Context, env *records.Environment) (Sandbox, error)
}

// CPUMeter is implemented by Sandboxes that can say how much CPU time the
// sandboxes they made have used, for the throughput figures.
type CPUMeter interface {
	CPUSeconds() float64
}

// Containerd makes sandboxes with a sandbox.Runtime (connected on first
// use) and meters their CPU time from their cgroups.
type Containerd struct {
	Runtime func(ctx context.Context) (*sandbox.Runtime, error)
	// Options are the sandbox limits (RepoDir comes from the environment).
	// Zero fields take sandbox.DefaultOptions: one CPU per sandbox, which
	// is what one validation worker keeps busy.
	Options sandbox.Options
	// CgroupRoot is the cgroup v1 cpuacct hierarchy (default
	// /sys/fs/cgroup/cpuacct); containerd puts a container of namespace N
	// and id I at <root>/N/I.
	CgroupRoot string

	cpuNanos atomic.Int64
}

var (
	_ Sandboxes = (*Containerd)(nil)
	_ CPUMeter  = (*Containerd)(nil)
	_ Sandbox   = (*sandbox.Sandbox)(nil)
)

// Create starts a sandbox of env's image.
func (c *Containerd) Create(ctx context.Context, env *records.Environment) (Sandbox, error) {
	rt, err := c.Runtime(ctx)
	if err != nil {
		return nil, err
	}
	opts := c.Options
	opts.RepoDir = env.GetRepoDir()
	sb, err := rt.Create(ctx, env.GetImage(), opts)
	if err != nil {
		return nil, err
	}
	root := c.CgroupRoot
	if root == "" {
		root = "/sys/fs/cgroup/cpuacct"
	}
	return &meteredSandbox{Sandbox: sb, usage: filepath.Join(root, rt.Namespace(), sb.ID(), "cpuacct.usage"), total: &c.cpuNanos}, nil
}

// CPUSeconds is the CPU time of every sandbox made so far: destroyed ones
// as read just before their destruction, live ones as read now. It is 0
// where the cgroup files cannot be read (cgroup v2 hosts).
func (c *Containerd) CPUSeconds() float64 { return float64(c.cpuNanos.Load()) / 1e9 }

// meteredSandbox adds the sandbox's cgroup CPU time to a total as it grows.
type meteredSandbox struct {
	*sandbox.Sandbox
	usage string
	last  int64
	total *atomic.Int64
}

func (m *meteredSandbox) sample() {
	b, err := os.ReadFile(m.usage)
	if err != nil {
		return
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < m.last {
		return
	}
	m.total.Add(n - m.last)
	m.last = n
}

// RunTests samples the cgroup after every run, so CPUSeconds is current
// while a synthesis is still running.
func (m *meteredSandbox) RunTests(ctx context.Context, spec sandbox.TestSpec, tests []string) (*testreport.Report, error) {
	r, err := m.Sandbox.RunTests(ctx, spec, tests)
	m.sample()
	return r, err
}

func (m *meteredSandbox) Destroy(ctx context.Context) error {
	m.sample()
	return m.Sandbox.Destroy(ctx)
}

// resetScript puts the repository back to its base commit between
// candidates: tracked files restored, untracked files removed. Ignored files
// stay (an editable install's egg-info is ignored and must survive), and so
// does Python bytecode: pytest's cache of rewritten test modules saves a
// compile per run. The bytecode of patched modules is dropped (dropBytecode)
// instead.
const resetScript = `git checkout -q -- . && git clean -fdq -e __pycache__ -e '*.pyc'`

// dropBytecode removes the cached bytecode of the Python files given as
// arguments. A patched module can keep its size and its mtime second, and
// Python would then run the stale bytecode of the previous version.
const dropBytecode = `for f in "$@"; do d=$(dirname -- "$f"); b=$(basename -- "$f" .py); rm -f -- "$d/__pycache__/$b".*.pyc; done`

func shell(ctx context.Context, sb Sandbox, dir, script string, timeout time.Duration, args ...string) error {
	argv := append([]string{"/bin/sh", "-c", script, "sh"}, args...)
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: argv, Workdir: dir, Timeout: timeout, OutputLimit: 64 << 10})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.TimedOut {
		return fmt.Errorf("%q exited %d (timed out %v): %s", script, res.ExitCode, res.TimedOut, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}
