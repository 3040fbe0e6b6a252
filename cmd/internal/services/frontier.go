package services

import (
	"context"
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/evaluate"
	"github.com/frognano/frognano/actors/frontier"
	"github.com/frognano/frognano/persistence"
	"github.com/frognano/frognano/runtime/node"
)

// frontierActor is the node's FrontierEstimator: its posteriors live in the
// node's curriculum store and its own state in the frontier store, and it
// asks the node's synthesizer for tasks when the pool runs short of
// frontier tasks.
func frontierActor(log *slog.Logger) node.NamedActor {
	return node.NamedActor{
		Name: frontier.ActorName,
		Props: func(n *node.Node) *actor.Props {
			db := n.DB()
			return frontier.Props(frontier.ActorConfig{
				Tasks: db.Tasks(), State: db.Frontier(), Environments: db.Environments(),
				Params: frontier.DefaultParams(), Exclude: heldOut(db.Environments()), Synthesis: true, Logger: log.With("component", "frontier"),
			})
		},
	}
}

// heldOut says whether an environment is held out (actors/evaluate): by
// its record's source when it is registered, else by its name.
func heldOut(envs persistence.EnvironmentStore) func(string) bool {
	return func(name string) bool {
		e, err := envs.Get(context.Background(), name)
		if err != nil {
			return evaluate.CheckTraining(name, nil) != nil
		}
		return evaluate.HeldOutEnvironment(e)
	}
}
