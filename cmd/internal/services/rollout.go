package services

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/runtime/node"
)

// rolloutActor is the node's rollout actor. It serves the node's stored
// trajectories (traj ls, traj show) and stores the trajectories a CLI
// evaluation sends it; it runs no episodes itself until the node holds a
// policy (the Sampler joins the main job later).
func rolloutActor() node.NamedActor {
	return node.NamedActor{
		Name: rollout.ActorName,
		Props: func(n *node.Node) *actor.Props {
			return rollout.Props(rollout.ActorConfig{Trajectories: n.DB().Trajectories()})
		},
	}
}
