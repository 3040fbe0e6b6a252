package services

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/runtime/node"
)

// rolloutActor is the node's rollout actor. It serves the node's stored
// trajectories (traj ls, traj show) and stores the trajectories a CLI
// evaluation sends it. Its episodes run in SandboxWorker actors spawned by
// kind on the cluster's members that have containerd (rollout.Workers over
// rollout.ClusterWorkers, through the node's manager), with the node's own
// Sampler (the named actor `sampler`, through sampler.Client) as the policy
// and the default model's tokenizer to render prompts.
func rolloutActor() node.NamedActor {
	return node.NamedActor{
		Name: rollout.ActorName,
		Props: func(n *node.Node) *actor.Props {
			root := n.System().Root
			cluster := &rollout.ClusterWorkers{Root: root, Manager: n.Manager(), Members: n.MemberInfos}
			policy := func(context.Context) (policy.Policy, *tokenizer.Tokenizer, error) {
				tok, err := defaultTokenizer()
				if err != nil {
					return nil, nil, err
				}
				return &sampler.Client{Root: root, PID: actor.NewPID(n.Address(), sampler.ActorName)}, tok, nil
			}
			return rollout.Props(rollout.ActorConfig{
				Trajectories: n.DB().Trajectories(),
				Policy:       policy,
				// The image check is the worker's: this node may not run
				// containerd itself.
				Sandboxes: &rollout.Workers{Root: root, Spawn: cluster.Spawn, Environments: n.DB().Environments()},
			})
		},
	}
}

// defaultTokenizer is the tokenizer of the model the node's Sampler serves
// by default (the model store's default model).
func defaultTokenizer() (*tokenizer.Tokenizer, error) {
	store, err := modelstore.Open("")
	if err != nil {
		return nil, err
	}
	tok, err := store.Tokenizer(modelstore.Default)
	if err != nil {
		return nil, fmt.Errorf("the rollout actor's tokenizer: %w", err)
	}
	return tok, nil
}
