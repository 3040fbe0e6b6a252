// Package sandboxbench measures what sandboxes cost an episode, side by
// side with a baseline, so a node (or the CLI) can report whether its
// sandbox layer is fast enough:
//
//   - episode latency: get a sandbox of an image, exec `true`, give it back;
//     cold (create → exec → destroy, all on the episode's clock) and pooled
//     (a Pool creates ahead and destroys behind) — against
//     `ctr -n <ns> run --rm <image> <id> true` of the same image;
//   - test-suite time: one real suite inside a sandbox against the same
//     suite on the host.
package sandboxbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
)

// Stats summarises a set of latencies.
type Stats struct {
	N             int
	P50, P95, Max time.Duration
	Mean          time.Duration
}

func summarize(d []time.Duration) Stats {
	if len(d) == 0 {
		return Stats{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	idx := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.5) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return Stats{N: len(s), P50: idx(0.50), P95: idx(0.95), Max: s[len(s)-1], Mean: sum / time.Duration(len(s))}
}

func (s Stats) String() string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
	return fmt.Sprintf("n=%d p50=%s p95=%s mean=%s max=%s", s.N, ms(s.P50), ms(s.P95), ms(s.Mean), ms(s.Max))
}

// ColdEpisodes times n episodes of Create, Exec(true), Destroy.
func ColdEpisodes(ctx context.Context, rt *sandbox.Runtime, image string, opts sandbox.Options, n int) (Stats, error) {
	var d []time.Duration
	for range n {
		start := time.Now()
		sb, err := rt.Create(ctx, image, opts)
		if err != nil {
			return Stats{}, err
		}
		if err := execTrue(ctx, sb); err != nil {
			sb.Destroy(context.WithoutCancel(ctx))
			return Stats{}, err
		}
		if err := sb.Destroy(ctx); err != nil {
			return Stats{}, err
		}
		d = append(d, time.Since(start))
	}
	return summarize(d), nil
}

// PooledEpisodes times n episodes of Pool.Get, Exec(true), Pool.Put with a
// pool of the given size. Episodes start every interval (a real episode
// holds its sandbox for seconds to minutes while the policy thinks, which is
// when the pool refills); interval 0 runs them back to back, which measures
// how fast the node can churn sandboxes rather than what an episode waits.
func PooledEpisodes(ctx context.Context, rt *sandbox.Runtime, image string, opts sandbox.Options, size, n int, interval time.Duration) (Stats, error) {
	pool, err := rt.NewPool(ctx, image, opts, size)
	if err != nil {
		return Stats{}, err
	}
	defer pool.Close()
	// Let the pool fill once before the clock starts.
	if err := waitFull(ctx, pool, size); err != nil {
		return Stats{}, err
	}
	var d []time.Duration
	next := time.Now()
	for range n {
		if wait := time.Until(next); wait > 0 {
			time.Sleep(wait)
		}
		next = time.Now().Add(interval)
		start := time.Now()
		sb, err := pool.Get(ctx)
		if err != nil {
			return Stats{}, err
		}
		if err := execTrue(ctx, sb); err != nil {
			pool.Put(sb)
			return Stats{}, err
		}
		pool.Put(sb)
		d = append(d, time.Since(start))
	}
	return summarize(d), nil
}

// waitFull waits until the pool holds size ready sandboxes.
func waitFull(ctx context.Context, pool *sandbox.Pool, size int) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if pool.Ready() >= size {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("pool did not fill to %d sandboxes within a minute", size)
}

func execTrue(ctx context.Context, sb *sandbox.Sandbox) error {
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}, Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("true exited %d: %s", res.ExitCode, res.Stderr)
	}
	return nil
}

// CtrRunCommand is the baseline command for one episode.
func CtrRunCommand(namespace, image, id string) []string {
	return []string{"ctr", "-n", namespace, "run", "--rm", image, id, "true"}
}

// CtrRunEpisodes times n runs of CtrRunCommand.
func CtrRunEpisodes(ctx context.Context, namespace, image string, n int) (Stats, error) {
	var d []time.Duration
	for i := range n {
		argv := CtrRunCommand(namespace, image, fmt.Sprintf("frognano-bench-ctr-%d-%d", os.Getpid(), i))
		start := time.Now()
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return Stats{}, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
		}
		d = append(d, time.Since(start))
	}
	return summarize(d), nil
}

// SuiteTimes is one suite timed in a sandbox and on the host.
type SuiteTimes struct {
	Packages        []string
	Sandbox, Host   time.Duration
	Runs            int
	SandboxCPUs     float64
	SandboxExitCode int
	HostExitCode    int
}

// Ratio is sandbox time over host time.
func (s SuiteTimes) Ratio() float64 { return s.Sandbox.Seconds() / s.Host.Seconds() }

// DefaultSuite is a real, CPU-bound test suite every Go image has: a few
// standard-library packages, run with the Go toolchain the base image copied
// from the host, so both sides run identical code.
var DefaultSuite = []string{"strings", "bytes", "sort", "strconv", "encoding/json", "regexp"}

// GoSuite runs `go test -json -count=1 pkgs...` in a sandbox of image (with
// as many CPUs as the host, so only the sandbox's overhead is measured) and
// on the host, once each to warm the build caches, then runs times each,
// and reports the medians.
func GoSuite(ctx context.Context, rt *sandbox.Runtime, image string, pkgs []string, runs int) (SuiteTimes, error) {
	cpus := float64(runtime.NumCPU())
	sb, err := rt.Create(ctx, image, sandbox.Options{CPUs: cpus, MemoryBytes: 4 << 30, TmpBytes: 2 << 30, DiskBytes: 2 << 30})
	if err != nil {
		return SuiteTimes{}, err
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	spec := sandbox.TestSpec{Framework: testreport.GoTest, Args: pkgs, Dir: "/"}
	st := SuiteTimes{Packages: pkgs, Runs: runs, SandboxCPUs: cpus}
	var inside, outside []time.Duration
	for i := 0; i <= runs; i++ {
		r, err := sb.RunTests(ctx, spec, nil)
		if err != nil {
			return st, err
		}
		if !r.Valid || r.ExitCode != 0 {
			return st, fmt.Errorf("suite in the sandbox: exit %d, %s", r.ExitCode, r.Problem)
		}
		st.SandboxExitCode = r.ExitCode
		cmd := exec.CommandContext(ctx, "go", append([]string{"test", "-json", "-count=1"}, pkgs...)...)
		cmd.Dir = os.TempDir()
		start := time.Now()
		out, err := cmd.Output()
		host := time.Since(start)
		if err != nil {
			return st, fmt.Errorf("suite on the host: %w", err)
		}
		hr := testreport.NewGoTestReport(out, 0, false, host)
		if !hr.Valid {
			return st, fmt.Errorf("suite on the host: %s", hr.Problem)
		}
		if i == 0 {
			continue // warm-up
		}
		inside = append(inside, r.Duration)
		outside = append(outside, host)
	}
	st.Sandbox, st.Host = summarize(inside).P50, summarize(outside).P50
	return st, nil
}
