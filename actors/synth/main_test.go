package synth

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// The integration tests synthesize tasks from real packages in containerd:
// they need containerd (scripts/setup-containerd.sh), root and the package
// registries, and skip without them or under -short. Each environment is
// built once per test binary, on first use, and removed at the end.
//
// FROGNANO_SYNTH_TEST_ENVS=DIR keeps the built environments (their images
// and records in DIR) across runs, for quick iterations while developing.

// testNamespace keeps test containers and images apart from a real node's.
const testNamespace = "frognano-test"

var (
	rtOnce  sync.Once
	testRT  *sandbox.Runtime
	rtErr   error
	envsMu  sync.Mutex
	envs    = map[string]*records.Environment{}
	envErrs = map[string]error{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if testRT != nil {
		if os.Getenv("FROGNANO_SYNTH_TEST_ENVS") == "" {
			b := &environment.Builder{Runtime: testRT, Store: envStore}
			for name := range envs {
				if err := b.Remove(context.Background(), name); err != nil {
					fmt.Fprintf(os.Stderr, "remove test environment %s: %v\n", name, err)
				}
			}
		}
		testRT.Close()
	}
	os.Exit(code)
}

var envStore = persistence.NewMemory().Environments()

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// needRuntime returns the shared containerd runtime or skips.
func needRuntime(t *testing.T) *sandbox.Runtime {
	t.Helper()
	if testing.Short() {
		t.Skip("builds containerd images and runs sandboxes; skipped with -short")
	}
	rtOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		testRT, rtErr = sandbox.New(ctx, sandbox.Config{Namespace: testNamespace, Logger: quietLogger()})
		if rtErr == nil {
			if _, err := testRT.Sweep(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "sweep before tests: %v\n", err)
			}
		}
	})
	if errors.Is(rtErr, sandbox.ErrContainerdNotRunning) {
		t.Skipf("containerd is not running: %v", rtErr)
	}
	if rtErr != nil {
		t.Fatal(rtErr)
	}
	return testRT
}

// testEnv builds (once per binary) the environment of source, named name.
func testEnv(t *testing.T, name, source string) *records.Environment {
	t.Helper()
	rt := needRuntime(t)
	envsMu.Lock()
	defer envsMu.Unlock()
	if env, ok := envs[name]; ok {
		return env
	}
	if err, ok := envErrs[name]; ok {
		t.Fatalf("environment %s: %v", name, err)
	}
	ctx := context.Background()
	keep := os.Getenv("FROGNANO_SYNTH_TEST_ENVS")
	if keep != "" {
		if b, err := os.ReadFile(filepath.Join(keep, name+".pb")); err == nil {
			env := &records.Environment{}
			if proto.Unmarshal(b, env) == nil {
				if ok, _ := rt.Images().Exists(ctx, env.Image); ok {
					envs[name] = env
					envStore.Put(ctx, env)
					return env
				}
			}
		}
	}
	src, err := environment.ParseSource(source)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b := &environment.Builder{Runtime: rt, Store: envStore}
	env, err := b.Add(ctx, src, environment.AddOptions{Name: name})
	if err != nil {
		envErrs[name] = err
		t.Fatalf("build environment %s from %s: %v", name, source, err)
	}
	t.Logf("environment %s built in %v", name, time.Since(start).Round(time.Second))
	envs[name] = env
	if keep != "" {
		os.MkdirAll(keep, 0o755)
		if b, err := proto.Marshal(env); err == nil {
			os.WriteFile(filepath.Join(keep, name+".pb"), b, 0o644)
		}
	}
	return env
}

// newSynth returns a Synthesizer over the test runtime with in-memory
// stores.
func newSynth(t *testing.T) (*Synthesizer, *Containerd, persistence.TaskStore, persistence.CoverageStore) {
	rt := needRuntime(t)
	sbs := &Containerd{Runtime: func(context.Context) (*sandbox.Runtime, error) { return rt, nil }}
	tasks := persistence.NewMemory().Tasks()
	cov := persistence.NewMemoryCoverage()
	return New(Config{Sandboxes: sbs, Tasks: tasks, Coverage: cov, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}), sbs, tasks, cov
}
