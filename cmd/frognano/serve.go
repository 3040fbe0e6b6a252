package main

import (
	"context"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/diag"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/actors/sampler/openai"
	"github.com/frognano/frognano/actors/ui"
	"github.com/frognano/frognano/cmd/internal/nodeflags"
	"github.com/frognano/frognano/cmd/internal/services"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

func serveCmd(a *app) *cobra.Command {
	var pc services.PolicyConfig
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a model over the OpenAI API (and as the node's Sampler actor) until interrupted",
		Long: `serve starts a node that holds the policy: it loads --model and answers
POST /v1/chat/completions (tools, streaming, logprobs), POST /v1/completions
(prompts as text or token ids, with token ids and logprobs back) and
GET /v1/models on the node's --http-addr (default 127.0.0.1:7070), with
continuous batching of concurrent requests. The node also runs the Sampler
actor and offers the sampler kind, so Rollouts on other nodes (--seeds) can
generate with it, and applies weight updates published by a Learner.

Standard clients work against it, e.g.
  curl http://127.0.0.1:7070/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Hello"}]}'
or the openai Python package with base_url="http://127.0.0.1:7070/v1".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.nodeAddr != "" {
				return fmt.Errorf("serve starts its own node; drop --node")
			}
			cfg, err := a.load()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("remote-addr") && os.Getenv(config.EnvName("node.remote_addr")) == "" {
				cfg.Node.RemoteAddr = "127.0.0.1:0"
			}
			log := nodeflags.Logger(cfg, os.Stderr)
			pc.Logger = log
			policy := services.NewPolicy(pc)
			defer policy.Close()
			ctx := cmd.Context()
			// Load before listening, so that a missing model fails now.
			e, err := policy.Engine(ctx)
			if err != nil {
				return err
			}
			kinds, actors, handlers := policy.Options()
			n, err := node.Start(ctx, cfg, diag.NodeOptions(node.Options{Logger: log, Version: node.Version(), Collectors: []prometheus.Collector{policy.Collector()}, Kinds: kinds, Actors: actors, Handlers: append(handlers, ui.NodeHandler())}))
			if err != nil {
				return err
			}
			base := "http://" + n.HTTPAddr()
			fmt.Fprintf(cmd.OutOrStdout(), "serving %s (%s, context %d) at %s/v1 (%s, %s, %s); Sampler actor %s/%s\n",
				policy.Name(), e.Model().Config.Architecture, e.ContextLength(), base,
				openai.ChatPath, openai.CompletionsPath, openai.ModelsPath, n.Address(), sampler.ActorName)
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return n.Stop(sctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&pc.Model, "model", modelstore.Default, "model store name, or a path to a .gguf file or a Hugging Face directory")
	f.StringVar(&pc.Models, "models", "", "model store directory (default $FROGNANO_MODELS, $XDG_DATA_HOME/frognano/models or ~/.local/share/frognano/models)")
	f.IntVar(&pc.MaxSequences, "max-seqs", 16, "most sequences generated at once (continuous batching)")
	f.IntVar(&pc.ContextLength, "context", 8192, "most positions per sequence, prompt included (capped at the model's)")
	f.StringVar(&pc.Quantization, "quantization", "f32", "weights the Sampler's products read: f32, q8_0 (int8 weights and activations, fastest) or q8_0-f32 (int8 weights, float32 activations); see docs/quantized-sampling.md")
	f.StringVar(&pc.Swap, "swap", sampler.SwapBetweenSteps, "when the Sampler applies a new policy version: between-steps (between two forward passes; answers in flight go on with the new weights and report both versions) or drain (once every answer in flight has finished, admitting none meanwhile); see docs/sampler.md")
	return cmd
}
