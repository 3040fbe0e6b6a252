package services

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/actors/sampler/openai"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/persistence"
	"github.com/frognano/frognano/runtime/node"
)

// PolicyConfig chooses the model a node serves and how.
type PolicyConfig struct {
	// Model is a model store name or a path (default: the store's
	// default, smollm2-135m); Models is the store directory (default
	// modelstore.DefaultDir).
	Model, Models string
	// MaxSequences and ContextLength go to the engine (0: its defaults).
	MaxSequences  int
	ContextLength int
	// Quantization is the weights the engine serves: "f32" (the default,
	// ""), "q8_0" or "q8_0-f32" (docs/quantized-sampling.md).
	Quantization string
	// Swap is when weight updates are applied: sampler.SwapBetweenSteps
	// (the default, "") or sampler.SwapDrain.
	Swap   string
	Logger *slog.Logger
}

// Policy is a node's Sampler engine, loaded on first use (a node that
// never generates never loads a model), shared by the node's Sampler actor,
// the actors of the sampler kind spawned on it, and its OpenAI endpoints.
type Policy struct {
	cfg PolicyConfig

	mu          sync.Mutex
	eng         *sampler.Engine
	checkpoints persistence.CheckpointStore
}

// NewPolicy prepares (but does not load) the node's policy.
func NewPolicy(cfg PolicyConfig) *Policy {
	if cfg.Model == "" {
		cfg.Model = modelstore.Default
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Policy{cfg: cfg}
}

// Engine returns the engine, loading the model the first time. A failed
// load is retried on the next call (the model may be pulled meanwhile).
func (p *Policy) Engine(ctx context.Context) (*sampler.Engine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.eng != nil {
		return p.eng, nil
	}
	store, err := modelstore.Open(p.cfg.Models)
	if err != nil {
		return nil, err
	}
	path, err := store.Resolve(p.cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("the node's policy: %w", err)
	}
	// Shared: a Learner of this process (the node's learner host) loading
	// the same file on the CPU shares the weights neither changes; every
	// update copies what it writes first (kernels/model/share.go).
	m, err := model.Load(path, model.Options{Shared: true})
	if err != nil {
		return nil, fmt.Errorf("the node's policy %s: %w", path, err)
	}
	e, err := sampler.New(sampler.Config{
		Model: m, MaxSequences: p.cfg.MaxSequences, ContextLength: p.cfg.ContextLength,
		Quantization: p.cfg.Quantization, Swap: p.cfg.Swap, Checkpoints: p.checkpoints, Logger: p.cfg.Logger.With("component", "sampler"),
	})
	if err != nil {
		return nil, err
	}
	p.cfg.Logger.Info("policy loaded", "model", path, "architecture", m.Config.Architecture, "context", e.ContextLength(), "weights", e.Quantization())
	p.eng = e
	return e, nil
}

// Collector exports the engine's counters on the node's /metrics once it
// is loaded (sampler.Collector).
func (p *Policy) Collector() prometheus.Collector {
	return sampler.Collector(func() *sampler.Engine {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.eng
	})
}

// Name is the model id the OpenAI endpoints report.
func (p *Policy) Name() string { return p.cfg.Model }

// Options returns the sampler kind, the node's Sampler actor and the
// OpenAI endpoints, to start a node with. Weight updates are read from the
// node's checkpoint store.
func (p *Policy) Options() ([]node.Kind, []node.NamedActor, []node.Handler) {
	props := func(n *node.Node) *actor.Props {
		p.mu.Lock()
		p.checkpoints = n.DB().Checkpoints()
		p.mu.Unlock()
		return sampler.Props(sampler.ActorConfig{Engine: p.Engine, Logger: p.cfg.Logger.With("component", "sampler")})
	}
	srv := &openai.Server{Engine: p.Engine, Name: p.cfg.Model, Logger: p.cfg.Logger.With("component", "openai")}
	api := func(*node.Node) http.Handler { return srv.Handler() }
	var handlers []node.Handler
	for _, pattern := range openai.Patterns {
		handlers = append(handlers, node.Handler{Pattern: pattern, Handler: api, MaxBody: openai.MaxBody})
	}
	return []node.Kind{{Name: sampler.Kind, Props: props}},
		[]node.NamedActor{{Name: sampler.ActorName, Props: props}},
		handlers
}

// Close stops the engine if it was loaded.
func (p *Policy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.eng == nil {
		return nil
	}
	err := p.eng.Close()
	p.eng = nil
	return err
}
