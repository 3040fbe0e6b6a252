package services

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/runtime/node"
)

// rolloutActor is the node's rollout actor. It serves the node's stored
// trajectories (traj ls, traj show) and stores the trajectories a CLI
// evaluation sends it. Its episodes run in SandboxWorker actors spawned by
// kind on the cluster's members that have containerd (rollout.Workers over
// rollout.ClusterWorkers, through the node's manager); it runs none until
// the node holds a policy (ActorConfig.Policy: the Sampler joins the main
// job later).
func rolloutActor() node.NamedActor {
	return node.NamedActor{
		Name: rollout.ActorName,
		Props: func(n *node.Node) *actor.Props {
			root := n.System().Root
			cluster := &rollout.ClusterWorkers{Root: root, Manager: n.Manager(), Members: n.Members}
			return rollout.Props(rollout.ActorConfig{
				Trajectories: n.DB().Trajectories(),
				// The image check is the worker's: this node may not run
				// containerd itself.
				Sandboxes: &rollout.Workers{Root: root, Spawn: cluster.Spawn, Environments: n.DB().Environments()},
			})
		},
	}
}
