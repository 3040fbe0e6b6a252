package trainer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/diag"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/tokenizer"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

// fakeSampler answers SamplerStatusRequest with its status.
type fakeSampler struct{ status *messages.SamplerStatus }

func (f *fakeSampler) Receive(ctx actor.Context) {
	if _, ok := ctx.Message().(*messages.SamplerStatusRequest); ok {
		ctx.Respond(f.status)
	}
}

// TestARunOfNoStepsOpensNoLearner: a run that only measures its start
// point (no steps, no warm start) reads the Sampler's status and never
// asks the learner host to load the model; it refuses a Sampler that
// serves a later policy version or another model file. A run with a step
// opens the Learner (here a host whose every load fails, so that the
// test would see a measuring run that opened it).
func TestARunOfNoStepsOpensNoLearner(t *testing.T) {
	dir := t.TempDir()
	served, other := filepath.Join(dir, "served.gguf"), filepath.Join(dir, "other.gguf")
	for _, p := range []string{served, other} {
		if err := os.WriteFile(p, []byte("GGUF"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	status := &messages.SamplerStatus{Model: served, PolicyVersion: 0, Weights: "q8_0", ContextLength: 4096}
	var loads atomic.Int32
	host := node.NamedActor{Name: HostName, Props: func(n *node.Node) *actor.Props {
		return HostProps(HostConfig{Checkpoints: n.DB().Checkpoints(), LoadModel: func(context.Context, string) (*model.Model, error) {
			loads.Add(1)
			return nil, errors.New("this test's learner host loads no model")
		}})
	}}
	fake := node.NamedActor{Name: sampler.ActorName, Props: func(*node.Node) *actor.Props {
		return actor.PropsFromProducer(func() actor.Actor { return &fakeSampler{status: status} })
	}}
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(dir, "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	n, err := node.Start(context.Background(), cfg, diag.NodeOptions(node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Actors: []node.NamedActor{host, fake}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })

	trainRun := func(run *records.Run, s Settings) (string, *Trainer, error) {
		var out bytes.Buffer
		tr, err := New(Config{Root: n.System().Root, Node: n.Address(), Sandboxes: &rollout.Workers{}, Tokenizer: &tokenizer.Tokenizer{},
			Runs: n.DB().Runs(), Progress: &out})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.runs.Put(context.Background(), run); err != nil {
			t.Fatal(err)
		}
		_, err = tr.Train(context.Background(), run, s)
		return out.String(), tr, err
	}
	train := func(id string, s Settings) (string, *Trainer, error) {
		return trainRun(&records.Run{Id: id, Metrics: map[string]float64{}}, s)
	}
	s := Settings{Model: served, Mode: "patch", TasksPerStep: 1, Group: 2, LR: 1e-5, EvalTasks: 4, EvalK: 1, EvalHints: []int{4}}
	out, tr, err := train("measure", s)
	if err != nil || loads.Load() != 0 || strings.Contains(out, "learner:") || !strings.Contains(out, "the Learner is not opened") {
		t.Fatalf("a run of no steps: err %v, %d loads, output:\n%s", err, loads.Load(), out)
	}
	if tr.weights != "q8_0" {
		t.Errorf("weights %q, want the Sampler's q8_0", tr.weights)
	}

	// The same file by another path: a symlink, as a linked model store
	// directory gives.
	link := filepath.Join(dir, "link.gguf")
	if err := os.Symlink(served, link); err != nil {
		t.Fatal(err)
	}
	linked := s
	linked.Model = link
	if _, _, err := train("measure-link", linked); err != nil || loads.Load() != 0 {
		t.Fatalf("the served file through a symlink: %v, %d loads", err, loads.Load())
	}

	wrong := s
	wrong.Model = other
	if _, _, err := train("measure-other", wrong); err == nil || !strings.Contains(err.Error(), "serves "+served) {
		t.Errorf("another model file: %v", err)
	}
	status.PolicyVersion = 3
	if _, _, err := train("measure-later", s); err == nil || !strings.Contains(err.Error(), "v3") {
		t.Errorf("a Sampler at v3: %v", err)
	}
	if loads.Load() != 0 {
		t.Fatalf("%d loads by runs of no steps", loads.Load())
	}

	// A run that trained, resumed with no steps: its Learner knows its
	// versions, so it is opened.
	before := loads.Load()
	if _, _, err := trainRun(&records.Run{Id: "trained", Step: 2, Metrics: map[string]float64{MetricUpdates: 2, MetricPolicyVersion: 2}}, s); err == nil || loads.Load() == before {
		t.Fatalf("a trained run resumed with no steps: err %v; want the Learner opened", err)
	}

	stepped := s
	stepped.Steps = 1
	if _, _, err := train("step", stepped); err == nil || loads.Load() == 0 {
		t.Fatalf("a run of one step: err %v, %d loads; want the Learner opened", err, loads.Load())
	}
	warm := s
	warm.WarmStartEpochs, warm.WarmStartTasks, warm.WarmStartBatch, warm.WarmStartLR, warm.WarmStartEnvs = 1, 2, 2, 3e-4, "six-1.16.0"
	before = loads.Load()
	if _, _, err := train("warm", warm); err == nil || loads.Load() == before {
		t.Fatalf("a run of no steps with a warm start: err %v; want the Learner opened", err)
	}
}
