package services

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/evaluate"
	"github.com/frognano/frognano/actors/frontier"
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
				Params: frontierParams(), Synthesis: true, Logger: log.With("component", "frontier"),
			})
		},
	}
}

// frontierParams are the defaults, with the held-out environments
// excluded from every run's pool and synthesis.
func frontierParams() frontier.Params {
	p := frontier.DefaultParams()
	p.Exclude = evaluate.HeldOutEnvironments
	return p
}
