package sandbox

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// The sandbox tests run real containers. They need containerd (CI starts it
// with scripts/setup-containerd.sh) and root; without a reachable containerd
// they skip and say so. The base image is built once per host and cached.
var (
	testRT    *Runtime
	testImage string
	setupErr  error
)

// testNamespace keeps test containers and images apart from a real node's.
const testNamespace = "frognano-test"

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		testRT, setupErr = New(ctx, Config{Namespace: testNamespace, Address: os.Getenv("FROGNANO_CONTAINERD_ADDRESS")})
		if setupErr == nil {
			if rep, err := testRT.Sweep(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "sweep before tests: %v\n", err)
			} else if rep != (SweepReport{}) {
				fmt.Fprintf(os.Stderr, "swept leftovers of earlier runs: %+v\n", rep)
			}
			start := time.Now()
			testImage, setupErr = testRT.EnsureBaseImage(ctx)
			if d := time.Since(start); d > 10*time.Second {
				fmt.Fprintf(os.Stderr, "base image %s ready after %v\n", testImage, d.Round(time.Second))
			}
		}
		cancel()
	}
	code := m.Run()
	if testRT != nil {
		testRT.Close()
	}
	os.Exit(code)
}

// needRuntime returns the shared runtime and base image, or skips the test
// when containerd is not reachable.
func needRuntime(t *testing.T) (*Runtime, string) {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("runs real containers; skipped under -short")
	case errors.Is(setupErr, ErrContainerdNotRunning):
		t.Skipf("skipping: %v", setupErr)
	case setupErr != nil:
		t.Fatalf("sandbox test setup: %v", setupErr)
	}
	return testRT, testImage
}

// newSandbox creates a sandbox of the base image and destroys it when the
// test ends.
func newSandbox(t *testing.T, opts Options) *Sandbox {
	t.Helper()
	rt, img := needRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := rt.Create(ctx, img, opts)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy %s: %v", sb.ID(), err)
		}
	})
	return sb
}

// noAgentRT is a second runtime on the same namespace with the exec agent
// turned off: runc exec for every command and a shell loop as PID 1.
var noAgentRT struct {
	sync.Once
	rt  *Runtime
	err error
}

// eachExecPath runs f once with sandboxes run by the exec agent and once
// with runc exec, the fallback when no Go toolchain builds the agent.
func eachExecPath(t *testing.T, opts Options, f func(t *testing.T, sb *Sandbox)) {
	rt, img := needRuntime(t)
	noAgentRT.Do(func() {
		noAgentRT.rt, noAgentRT.err = New(context.Background(), Config{Namespace: testNamespace, Agent: "off", Address: os.Getenv("FROGNANO_CONTAINERD_ADDRESS")})
	})
	if noAgentRT.err != nil {
		t.Fatal(noAgentRT.err)
	}
	for _, c := range []struct {
		name string
		rt   *Runtime
	}{{"agent", rt}, {"runc-exec", noAgentRT.rt}} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "agent" && rt.agent == "" {
				t.Skip("no exec agent on this host (no Go toolchain?)")
			}
			sb, err := c.rt.Create(context.Background(), img, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := sb.Destroy(context.Background()); err != nil {
					t.Errorf("destroy: %v", err)
				}
			})
			f(t, sb)
		})
	}
}

// run executes a shell snippet and fails the test on an infrastructure error.
func run(t *testing.T, sb *Sandbox, script string) ExecResult {
	t.Helper()
	res, err := sb.Exec(context.Background(), ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return res
}
