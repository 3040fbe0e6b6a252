package sandboxbench

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/sandbox"
)

// The side-by-side report runs only when asked, as root with containerd:
//
//	FROGNANO_BENCH=1 go test ./actors/sandbox/sandboxbench -run TestReport -v -timeout 30m
//
// The Benchmark functions time one episode each with go test -bench.

const namespace = "frognano-bench"

func setup(tb testing.TB) (*sandbox.Runtime, string) {
	tb.Helper()
	ctx := context.Background()
	rt, err := sandbox.New(ctx, sandbox.Config{Namespace: namespace})
	if errors.Is(err, sandbox.ErrContainerdNotRunning) {
		tb.Skipf("skipping: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rt.Close() })
	if _, err := rt.Sweep(ctx); err != nil {
		tb.Logf("sweep: %v", err)
	}
	img, err := rt.EnsureBaseImage(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return rt, img
}

func TestReport(t *testing.T) {
	if os.Getenv("FROGNANO_BENCH") == "" {
		t.Skip("set FROGNANO_BENCH=1 to run the sandbox benchmark report")
	}
	rt, img := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const n = 100

	ctr, err := CtrRunEpisodes(ctx, namespace, img, n)
	if err != nil {
		t.Fatal(err)
	}
	cold, err := ColdEpisodes(ctx, rt, img, sandbox.Options{}, n)
	if err != nil {
		t.Fatal(err)
	}
	churn, err := PooledEpisodes(ctx, rt, img, sandbox.Options{}, 4, n, 0)
	if err != nil {
		t.Fatal(err)
	}
	paced, err := PooledEpisodes(ctx, rt, img, sandbox.Options{}, 4, n, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	suite, err := GoSuite(ctx, rt, img, DefaultSuite, 3)
	if err != nil {
		t.Fatal(err)
	}
	ratio := func(s Stats) float64 { return s.P50.Seconds() / ctr.P50.Seconds() }
	t.Logf("episode latency, %d episodes each, image %s", n, img)
	t.Logf("  ctr run --rm (%s)          %v", strings.Join(CtrRunCommand(namespace, img, "<id>"), " "), ctr)
	t.Logf("  cold create+exec+destroy     %v  p50 = %.2fx ctr run", cold, ratio(cold))
	t.Logf("  pool, back to back           %v  p50 = %.2fx ctr run", churn, ratio(churn))
	t.Logf("  pool, an episode every 250ms %v  p50 = %.2fx ctr run", paced, ratio(paced))
	t.Logf("test suite go test -count=1 %s (median of %d, sandbox with %.0f CPUs):", strings.Join(suite.Packages, " "), suite.Runs, suite.SandboxCPUs)
	t.Logf("  sandbox %v, host %v: %.3fx", suite.Sandbox.Round(time.Millisecond), suite.Host.Round(time.Millisecond), suite.Ratio())
}

func BenchmarkCtrRun(b *testing.B) {
	_, img := setup(b)
	for b.Loop() {
		if _, err := CtrRunEpisodes(context.Background(), namespace, img, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkColdEpisode(b *testing.B) {
	rt, img := setup(b)
	for b.Loop() {
		if _, err := ColdEpisodes(context.Background(), rt, img, sandbox.Options{}, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPooledEpisode(b *testing.B) {
	rt, img := setup(b)
	ctx := context.Background()
	pool, err := rt.NewPool(ctx, img, sandbox.Options{}, 4)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if err := waitFull(ctx, pool, 4); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		sb, err := pool.Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := execTrue(ctx, sb); err != nil {
			b.Fatal(err)
		}
		pool.Put(sb)
	}
}
