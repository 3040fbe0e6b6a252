// Package services wires frognano's actors into a node: the environments
// and synthesizer actors, the SandboxWorker kind, and the containerd
// connection they share.
// Both binaries (the daemon and the CLI's embedded node) use it, so they
// offer the same actors.
package services

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandboxworker"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/persistence"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

// Sandboxes is a node's lazily opened containerd connection. The first
// successful connection sweeps what an earlier crashed process left behind.
type Sandboxes struct {
	cfg    config.Containerd
	mirror string
	token  string // the node API token, sent when fetching images from members
	log    *slog.Logger

	mu sync.Mutex
	rt *sandbox.Runtime
	// destroys is the node's store of failed sandbox destroys, set when
	// the node builds its actors (attach); nil in a process without a node.
	destroys persistence.SandboxDestroyStore
	// fetcher brings environment images from other members, one transfer
	// per image for all of the node's workers.
	fetcher *sandboxworker.Fetcher
}

// attach gives the connection the node's store, where destroys that fail
// (containerd restarting) are kept and retried until they succeed.
func (s *Sandboxes) attach(n *node.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroys == nil && n.DB() != nil {
		s.destroys = n.DB().SandboxDestroys()
	}
	if s.fetcher == nil {
		s.fetcher = &sandboxworker.Fetcher{Runtime: s.Runtime, Members: n.MemberInfos, Self: n.Address,
			Token: s.token, Logger: s.log.With("component", "sandbox")}
	}
}

// NewSandboxes prepares (but does not open) the connection.
func NewSandboxes(cfg config.Config, log *slog.Logger) *Sandboxes {
	return &Sandboxes{cfg: cfg.Containerd, mirror: cfg.Image.DebianMirror, token: cfg.Node.APIToken, log: log}
}

// Runtime returns the connection, connecting (and sweeping) on first use.
func (s *Sandboxes) Runtime(ctx context.Context) (*sandbox.Runtime, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rt != nil {
		return s.rt, nil
	}
	rt, err := sandbox.New(ctx, sandbox.Config{Address: s.cfg.Address, Namespace: s.cfg.Namespace, StateDir: s.cfg.StateDir, DebianMirror: s.mirror,
		Destroys: s.destroys, Logger: s.log.With("component", "sandbox")})
	if err != nil {
		return nil, err
	}
	report, err := rt.Sweep(ctx)
	if err != nil {
		s.log.Warn("sweep of leftovers from earlier runs failed", "err", err)
	} else {
		s.log.Info("swept leftovers of earlier runs", "report", fmt.Sprintf("%+v", report))
	}
	s.rt = rt
	return rt, nil
}

// Close closes the connection if it was opened.
func (s *Sandboxes) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rt == nil {
		return nil
	}
	err := s.rt.Close()
	s.rt = nil
	return err
}

// Options returns the kinds and named actors to start a node with.
func (s *Sandboxes) Options(buildLog io.Writer) ([]node.Kind, []node.NamedActor) {
	kinds := []node.Kind{{
		Name: sandboxworker.Kind,
		Props: func(n *node.Node) *actor.Props {
			s.attach(n)
			return sandboxworker.Props(sandboxworker.Config{Runtime: s.Runtime, Environments: n.DB().Environments(), Fetch: s.fetcher.Fetch, Logger: s.log})
		},
	}}
	actors := []node.NamedActor{{
		Name: environment.ActorName,
		Props: func(n *node.Node) *actor.Props {
			s.attach(n)
			return environment.Props(environment.Config{Store: n.DB().Environments(), Runtime: s.Runtime, Logger: s.log, BuildLog: buildLog})
		},
	}, {
		Name: synth.ActorName,
		Props: func(n *node.Node) *actor.Props {
			s.attach(n)
			return synth.Props(synth.ActorConfig{Environments: n.DB().Environments(), Tasks: n.DB().Tasks(), Coverage: n.DB().Coverage(),
				Runtime: s.Runtime, Logger: s.log.With("component", "synth")})
		},
	}}
	actors = append(actors, frontierActor(s.log))
	actors = append(actors, rolloutActor())
	actors = append(actors, learnerHost(s.log))
	return kinds, actors
}

// Start connects and sweeps right away when the node has containerd, so
// that leftovers of a crash are removed at start and not at first use.
func (s *Sandboxes) Start(ctx context.Context, n *node.Node) {
	s.attach(n)
	if !n.Info().GetCapabilities().GetContainerd() {
		s.log.Info("containerd not reachable; sandboxes and environments will connect on first use")
		return
	}
	if _, err := s.Runtime(ctx); err != nil {
		s.log.Warn("containerd connection failed; will retry on first use", "err", err)
	}
}
