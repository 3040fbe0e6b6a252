package services

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/learner"
	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/runtime/node"
	"github.com/frognano/frognano/runtime/supervise"
)

// learnerHost is the node's learner host (actors/trainer): it opens the
// Learner of a training run on this node's best device (a GPU when the
// binary and the machine have one that can train, else the CPU), from the
// model store's default directory, with checkpoints in the node's store,
// and keeps the node's run records. A crashed Learner is restarted with
// backoff and resumes from its newest checkpoint.
func learnerHost(log *slog.Logger) node.NamedActor {
	return node.NamedActor{
		Name: trainer.HostName,
		Props: func(n *node.Node) *actor.Props {
			db := n.DB()
			log := log.With("component", "learner")
			load := func(_ context.Context, name string) (*model.Model, error) {
				if name == "" {
					name = modelstore.Default
				}
				store, err := modelstore.Open("")
				if err != nil {
					return nil, err
				}
				path, err := store.Resolve(name)
				if err != nil {
					return nil, fmt.Errorf("the Learner's model: %w", err)
				}
				// On the CPU the Learner shares the weights it does not
				// train with the node's Sampler (model.Options.Shared):
				// with --train-layers the frozen layers and the embedding
				// are one copy in the process, not two. A GPU Learner
				// loads its own.
				return model.Load(path, model.Options{Backend: learner.SelectBackend(n.Info().GetCapabilities(), log), Shared: true})
			}
			sup := supervise.Policy{MaxRestarts: 10, Window: time.Minute, BackoffMin: 100 * time.Millisecond, BackoffMax: 10 * time.Second, Logger: log}
			return trainer.HostProps(trainer.HostConfig{Checkpoints: db.Checkpoints(), LoadModel: load,
				Supervisor: sup.Strategy(), Logger: log})
		},
	}
}
