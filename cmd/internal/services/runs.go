package services

import (
	"context"
	"fmt"
	"github.com/frognano/frognano/actors/sandboxworker"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"log/slog"
	"sync"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/evaluate"
	"github.com/frognano/frognano/actors/frontier"
	"github.com/frognano/frognano/actors/gateway"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/actors/ui"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

// NewRuns is a node's run service (actors/trainer): training runs live in
// the node, started, followed, stopped and resumed through its HTTP API.
// A daemon resumes its unfinished runs when it starts (autoResume); the
// CLI's embedded node leaves them to frognano run --run ID.
func NewRuns(cfg config.Config, log *slog.Logger, sandboxes *Sandboxes, autoResume bool) *trainer.Service {
	// A daemon serves others: a job's TensorBoard directory is a name
	// under the run's directory. The CLI's embedded node is its user's own.
	return trainer.NewService(trainer.Deps{Runtime: sandboxes.Runtime, DataDir: cfg.Node.DataDir, TensorBoard: tensorBoard, Logger: log, AnyPath: !autoResume}, autoResume)
}

// tensorBoard opens run's TensorBoard event file in dir and returns the
// function that appends the record's new points after each write of it.
// A failed append is a warning, once: training goes on, and runs export
// --format tensorboard writes the file again.
func tensorBoard(dir string, run *records.Run, warn io.Writer) (func(*records.Run), error) {
	tb, err := ui.OpenTensorBoardLog(dir, run)
	if err != nil {
		return nil, fmt.Errorf("tensorboard %s: %w", dir, err)
	}
	fmt.Fprintf(warn, "tensorboard: appending the run's points to %s as they are recorded (tensorboard --logdir %s)\n", tb.Path(), dir)
	var (
		mu     sync.Mutex
		warned bool
	)
	return func(r *records.Run) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := tb.Append(r); err != nil && !warned {
			warned = true
			fmt.Fprintf(warn, "warning: tensorboard events: %v (training goes on; frognano runs export %s --format tensorboard writes them from the record)\n", err, r.GetId())
		}
	}, nil
}

// Gateway is the node's actor gateway (actors/gateway) for the CLI: the
// manager, environments, synthesizer, frontier and rollout actors, reached
// over the HTTP API, with its token and limits.
func Gateway() node.Handler {
	return gateway.Handler(node.ManagerName, environment.ActorName, synth.ActorName, frontier.ActorName, rollout.ActorName)
}

// Wiring is what both binaries start a node with: the diag kind and the
// manager's digest batches, the containerd connection and the actors that
// use it, the policy (Sampler, OpenAI API), the dashboard, the actor
// gateway, the evaluation service and the run service.
type Wiring struct {
	Sandboxes *Sandboxes
	Policy    *Policy
	Runs      *trainer.Service
	Evals     *evaluate.Service
}

// NewWiring prepares the services of a node and the options to start it
// with. buildLog receives environment builds' output; autoResume makes
// the run and evaluation services resume unfinished runs and evaluations
// at start (the daemon).
func NewWiring(cfg config.Config, log *slog.Logger, buildLog io.Writer, autoResume bool) (*Wiring, node.Options) {
	w := &Wiring{Sandboxes: NewSandboxes(cfg, log)}
	w.Policy = NewPolicy(PolicyConfig{Model: cfg.Policy.Model, Quantization: cfg.Policy.Quantization, Swap: cfg.Policy.Swap, Logger: log})
	w.Runs = NewRuns(cfg, log, w.Sandboxes, autoResume)
	// A daemon serves others: its evaluations open model store names and
	// URLs, never paths its clients name.
	w.Evals = evaluate.NewService(evaluate.Deps{Runtime: w.Sandboxes.Runtime, DataDir: cfg.Node.DataDir, AnyPath: !autoResume, AutoResume: autoResume, Logger: log})
	kinds, actors := w.Sandboxes.Options(buildLog)
	pk, pa, handlers := w.Policy.Options()
	// The run service comes last: it may resume a run at once, which asks
	// the other actors.
	return w, diag.NodeOptions(node.Options{Logger: log, Version: node.Version(), Collectors: []prometheus.Collector{w.Policy.Collector()},
		Kinds:    append(kinds, pk...),
		Actors:   append(append(actors, pa...), w.Evals.Actor(), w.Runs.Actor()),
		Handlers: append(append(append(handlers, ui.NodeHandler(), Gateway(), sandboxworker.ImagesHandler(w.Sandboxes.Runtime)), w.Runs.Handlers()...), w.Evals.Handlers()...)})
}

// Start begins what needs the started node (the containerd connection).
func (w *Wiring) Start(ctx context.Context, n *node.Node) { w.Sandboxes.Start(ctx, n) }

// Close releases the containerd connection and the policy's engine.
func (w *Wiring) Close() {
	_ = w.Sandboxes.Close()
	_ = w.Policy.Close()
}
