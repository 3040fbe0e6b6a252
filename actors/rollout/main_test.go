package rollout

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

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/environment"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandboxworker"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/kernels/gguf"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// The rollout tests run real episodes: real environments built from PyPI
// sdists in containerd, tasks synthesized from them by the real
// Synthesizer, sandboxes, grading, a Badger trajectory store, and
// SmolLM2's tokenizer (FROGNANO_TEST_GGUF). They need containerd
// (scripts/setup-containerd.sh), root and the package registry, and skip
// without them or under -short. The environment is built once per test
// binary, in its own namespace, and removed at the end.
//
// FROGNANO_ROLLOUT_TEST_ENVS=DIR keeps the environment (image and record)
// and the synthesized tasks in DIR across runs, for quick iterations.

const testNamespace = "frognano-rollout-test"

var (
	rtOnce   sync.Once
	testRT   *sandbox.Runtime
	rtErr    error
	envOnce  sync.Once
	testEnvs = persistence.NewMemory().Environments()
	theEnv   *records.Environment
	theTasks []*records.Task
	envErr   error
	tokOnce  sync.Once
	testTok  *tokenizer.Tokenizer
	tokErr   error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if testRT != nil {
		if theEnv != nil && os.Getenv("FROGNANO_ROLLOUT_TEST_ENVS") == "" {
			b := &environment.Builder{Runtime: testRT, Store: testEnvs}
			if err := b.Remove(context.Background(), theEnv.Name); err != nil {
				fmt.Fprintf(os.Stderr, "remove test environment %s: %v\n", theEnv.Name, err)
			}
		}
		testRT.Close()
	}
	os.Exit(code)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func needRuntime(t testing.TB) *sandbox.Runtime {
	t.Helper()
	if testing.Short() {
		t.Skip("builds containerd images and runs sandboxes; skipped with -short")
	}
	rtOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		testRT, rtErr = sandbox.New(ctx, sandbox.Config{Namespace: testNamespace, Logger: quiet()})
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

func smolTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	p := os.Getenv("FROGNANO_TEST_GGUF")
	if p == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: set it to SmolLM2-135M-Instruct.Q4_1.gguf (`frognano model pull smollm2-135m`)")
	}
	tokOnce.Do(func() {
		f, err := gguf.Open(p)
		if err != nil {
			tokErr = err
			return
		}
		defer f.Close()
		testTok, tokErr = tokenizer.FromGGUF(&f.Meta)
	})
	if tokErr != nil {
		t.Fatal(tokErr)
	}
	return testTok
}

// inflectionTasks builds inflection==0.5.1 and synthesizes two tasks from
// it at hint level 1, once per binary.
func inflectionTasks(t testing.TB) (*records.Environment, []*records.Task) {
	t.Helper()
	rt := needRuntime(t)
	envOnce.Do(func() { theEnv, theTasks, envErr = buildInflection(rt) })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return theEnv, theTasks
}

func buildInflection(rt *sandbox.Runtime) (*records.Environment, []*records.Task, error) {
	ctx := context.Background()
	keep := os.Getenv("FROGNANO_ROLLOUT_TEST_ENVS")
	if keep != "" {
		if b, err := os.ReadFile(filepath.Join(keep, "inflection.pb")); err == nil {
			set := &messages.TaskList{}
			if proto.Unmarshal(b, set) == nil && len(set.Tasks) > 0 {
				if b, err := os.ReadFile(filepath.Join(keep, "inflection-env.pb")); err == nil {
					env := &records.Environment{}
					if proto.Unmarshal(b, env) == nil {
						if ok, _ := rt.Images().Exists(ctx, env.Image); ok {
							testEnvs.Put(ctx, env)
							return env, set.Tasks, nil
						}
					}
				}
			}
		}
	}
	src, err := environment.ParseSource("inflection==0.5.1")
	if err != nil {
		return nil, nil, err
	}
	b := &environment.Builder{Runtime: rt, Store: testEnvs}
	env, err := b.Add(ctx, src, environment.AddOptions{Name: "inflection-0.5.1"})
	if err != nil {
		return nil, nil, fmt.Errorf("build inflection==0.5.1: %w", err)
	}
	s := synth.New(synth.Config{Sandboxes: &synth.Containerd{Runtime: func(context.Context) (*sandbox.Runtime, error) { return rt, nil }}, Logger: quiet()})
	res, err := s.Synthesize(ctx, env, synth.Request{Count: 2, Seed: 5, HintLevel: synth.HintLocation}, nil)
	if err != nil {
		return env, nil, err
	}
	if len(res.Tasks) < 2 {
		return env, nil, fmt.Errorf("synthesized %d tasks, want 2 (rejected %v)", len(res.Tasks), res.Rejected)
	}
	if keep != "" {
		os.MkdirAll(keep, 0o755)
		if b, err := proto.Marshal(&messages.TaskList{Tasks: res.Tasks}); err == nil {
			os.WriteFile(filepath.Join(keep, "inflection.pb"), b, 0o644)
		}
		if b, err := proto.Marshal(env); err == nil {
			os.WriteFile(filepath.Join(keep, "inflection-env.pb"), b, 0o644)
		}
	}
	return env, res.Tasks, nil
}

// containerd returns Sandboxes over the test runtime.
func containerd(t testing.TB) *Containerd {
	rt := needRuntime(t)
	c := &Containerd{Runtime: func(context.Context) (*sandbox.Runtime, error) { return rt, nil }, Environments: testEnvs, PoolSize: 2}
	t.Cleanup(c.Close)
	return c
}

// workers returns Sandboxes that run every episode in its own
// SandboxWorker actor of a fresh actor system, over the test runtime.
func workers(t testing.TB) *Workers {
	rt := needRuntime(t)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet() }))
	t.Cleanup(system.Shutdown)
	runtime := func(context.Context) (*sandbox.Runtime, error) { return rt, nil }
	w := &Workers{
		Root:         system.Root,
		Spawn:        LocalWorkers(system.Root, sandboxworker.Props(sandboxworker.Config{Runtime: runtime, Environments: testEnvs, Logger: quiet()})),
		Environments: testEnvs,
		Runtime:      runtime,
		Logger:       quiet(),
	}
	t.Cleanup(w.Close)
	return w
}

// bothSandboxes are the two ways to run episodes, by name.
func bothSandboxes(t testing.TB) []struct {
	name string
	sbs  Sandboxes
} {
	return []struct {
		name string
		sbs  Sandboxes
	}{{"workers", workers(t)}, {"pool", containerd(t)}}
}

// badgerStore opens a Badger database in a temporary directory.
func badgerStore(t *testing.T) persistence.TrajectoryStore {
	db, err := persistence.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db.Trajectories()
}
