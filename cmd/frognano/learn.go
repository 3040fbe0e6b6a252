package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/learner"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/kernels/safetensors"
	"github.com/frognano/frognano/persistence"
	"github.com/frognano/frognano/runtime/node"
)

// The learn commands run in this process on the CPU. export reads the
// node's Badger store directly, so the node must not be running.

func learnCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "learn", Short: "The learner: a GRPO demo, HF export of trained weights, training throughput"}
	var modelName, models string
	cmd.PersistentFlags().StringVar(&modelName, "model", modelstore.Default, "model store name, or a path to a .gguf file or a Hugging Face directory")
	cmd.PersistentFlags().StringVar(&models, "models", "", "model store directory (default $FROGNANO_MODELS, $XDG_DATA_HOME/frognano/models or ~/.local/share/frognano/models)")
	loadModel := func() (*model.Model, error) {
		s, err := modelstore.Open(models)
		if err != nil {
			return nil, err
		}
		path, err := s.Resolve(modelName)
		if err != nil {
			return nil, err
		}
		return model.Load(path, model.Options{})
	}

	var lr float64
	demo := &cobra.Command{
		Use:   "demo",
		Short: "One GRPO step on a fixed batch with rewards: loss and log-probs of rewarded and unrewarded answers before and after",
		Long: `demo renders one question with four fixed answers in the model's chat
template, two right (reward 1) and two wrong (reward 0), takes the model's own
log-probs as the sampler's, and takes one GRPO step with AdamW on the CPU. It
prints the batch's GRPO loss and the mean per-token log-prob of the rewarded
and of the unrewarded answers, before and after the step: the loss goes down,
rewarded answers become more likely, unrewarded ones less.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := loadModel()
			if err != nil {
				return err
			}
			r, err := learner.Demo(cmd.Context(), m, lr)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "prompt: %s\n", learner.DemoPrompt)
			for _, c := range learner.DemoCompletions {
				fmt.Fprintf(out, "  reward %g: %s\n", c.Reward, c.Text)
			}
			s := r.Step
			fmt.Fprintf(out, "one step on %s: lr %g, grad norm %.3f (clipped %v), %d policy tokens, %.1fs\n",
				m.Backend().Name(), s.LR, s.GradNorm, s.Clipped, s.Stats.PolicyTokens, s.Duration.Seconds())
			fmt.Fprintf(out, "GRPO loss on the batch:            %+.5f → %+.5f\n", r.LossBefore, r.LossAfter)
			fmt.Fprintf(out, "mean log-prob, rewarded answers:   %+.4f → %+.4f\n", r.RewardedBefore, r.RewardedAfter)
			fmt.Fprintf(out, "mean log-prob, unrewarded answers: %+.4f → %+.4f\n", r.OtherBefore, r.OtherAfter)
			return nil
		},
	}
	demo.Flags().Float64Var(&lr, "lr", 1e-5, "AdamW learning rate of the step")

	var run, out, dtype string
	var step int64
	export := &cobra.Command{
		Use:   "export [--run RUN [--step S]] --out DIR",
		Short: "Write a run's published (or checkpointed) weights, or the model itself, as a Hugging Face checkpoint directory",
		Long: `export loads --model (the run's base model, for its configuration and
tokenizer), replaces its weights with those the Learner stored as checkpoint
--step of --run (default: the newest; RUN/train names the full training
checkpoints), and writes model.safetensors, config.json, tokenizer.json,
tokenizer_config.json and generation_config.json to --out, which
transformers and other tools load. It opens the node's store (DATA_DIR/db)
directly, so no node may be running on it. Without --run it exports --model
as it is (a GGUF file turned into a Hugging Face directory).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out is required")
			}
			dt := map[string]safetensors.DType{"f32": safetensors.F32, "bf16": safetensors.BF16, "f16": safetensors.F16}[strings.ToLower(dtype)]
			if dt == "" {
				return fmt.Errorf("--dtype %q: want f32, bf16 or f16", dtype)
			}
			if run == "" {
				m, err := loadModel()
				if err != nil {
					return err
				}
				if err := learner.ExportHF(m, out, learner.ExportOptions{DType: dt}); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "exported %s to %s\n", m.Source, out)
				return nil
			}
			cfg, err := a.load()
			if err != nil {
				return err
			}
			db, err := persistence.Open(node.StoreDir(cfg), persistence.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				return fmt.Errorf("open the store: %w (stop the node that uses it first)", err)
			}
			defer db.Close()
			store := db.Checkpoints()
			ctx := cmd.Context()
			if !cmd.Flags().Changed("step") {
				latest, err := store.Latest(ctx, run)
				if err != nil {
					return err
				}
				step = latest.GetStep()
			}
			m, err := loadModel()
			if err != nil {
				return err
			}
			man, err := learner.LoadPublished(ctx, store, m, run, step)
			if err != nil {
				return err
			}
			meta := map[string]string{"frognano_run": run, "frognano_step": fmt.Sprint(step), "frognano_policy_version": fmt.Sprint(man.GetPolicyVersion())}
			if err := learner.ExportHF(m, out, learner.ExportOptions{DType: dt, Metadata: meta}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "exported %s@%d (policy version %d) to %s\n", run, step, man.GetPolicyVersion(), out)
			return nil
		},
	}
	export.Flags().StringVar(&run, "run", "", "run id")
	export.Flags().Int64Var(&step, "step", 0, "checkpoint step (default: the newest)")
	export.Flags().StringVar(&out, "out", "", "directory to write")
	export.Flags().StringVar(&dtype, "dtype", "f32", "weight type: f32, bf16 or f16")

	var batch, seqLen, answer, group, steps, trainLayers int
	var recompute bool
	bench := &cobra.Command{
		Use:   "bench",
		Short: "Training throughput: tokens/s of GRPO steps (forward, backward, AdamW) at batch × sequence length",
		Long: `bench trains on random sequences of --batch × --seq tokens, every token a
policy token (or the last --answer of each, after a prompt, as in an
episode), for --steps steps after a warm-up step, and prints the time of
each step and the tokens per second of the median one, counting every token
(forward, backward and AdamW, over every weight or with --train-layers the
top layers only, in float32 on this machine's CPU).

With --group G (and --answer) the sequences come in groups of G that share
their prompt, as a GRPO group's episodes do, and bench measures the same
batch twice, side by side: with the prompt's rows computed once per group
(what training does) and with every sequence computed in full.

  frognano learn bench --model qwen2.5-coder-1.5b --batch 16 --seq 1024 --answer 32 --group 4 --train-layers 4 --steps 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if group < 1 || (group > 1 && answer == 0) {
				return fmt.Errorf("--group %d: want 1, or more with --answer (the prompt is what a group shares)", group)
			}
			m, err := loadModel()
			if err != nil {
				return err
			}
			o := cmd.OutOrStdout()
			layers := "every layer"
			if trainLayers > 0 && trainLayers < m.Config.Layers {
				layers = fmt.Sprintf("the top %d of %d layers", trainLayers, m.Config.Layers)
			}
			pol := "every token a policy token"
			if answer > 0 {
				pol = fmt.Sprintf("the last %d policy tokens", answer)
			}
			variants := []bool{false}
			if group > 1 {
				pol += fmt.Sprintf(", groups of %d sharing their prompt", group)
				variants = []bool{false, true}
			}
			var rates []float64
			for _, full := range variants {
				r, err := learner.Bench(cmd.Context(), m, batch, seqLen, answer, group, steps,
					model.TrainOptions{Recompute: recompute, TrainLayers: trainLayers, NoPrefixSharing: full})
				if err != nil {
					return err
				}
				if len(rates) == 0 {
					fmt.Fprintf(o, "%s on %s, batch %d × %d tokens (%s), training %s, recompute %v\n", m.Source, r.Backend, batch, seqLen, pol, layers, recompute)
				}
				label := "training"
				if group > 1 {
					label = map[bool]string{false: "shared prompts", true: "every sequence in full"}[full]
					fmt.Fprintf(o, "%s:\n", label)
				}
				for i, d := range r.PerStep {
					fmt.Fprintf(o, "  step %d: %.2fs wall, %.2fs CPU (%.0f tokens/s)\n", i+1, d.Seconds(), r.CPUPerStep[i].Seconds(), float64(batch*seqLen)/d.Seconds())
				}
				fmt.Fprintf(o, "%s: %.0f tokens/s (median step)\n", label, r.TokensPerSecond)
				rates = append(rates, r.TokensPerSecond)
			}
			if len(rates) == 2 {
				fmt.Fprintf(o, "shared / full: %.2f×\n", rates[0]/rates[1])
			}
			return nil
		},
	}
	bench.Flags().IntVar(&batch, "batch", 4, "sequences per step")
	bench.Flags().IntVar(&seqLen, "seq", 256, "tokens per sequence")
	bench.Flags().IntVar(&steps, "steps", 3, "measured steps")
	bench.Flags().BoolVar(&recompute, "recompute", false, "recompute activations in the backward pass (less memory)")
	bench.Flags().IntVar(&answer, "answer", 0, "policy tokens at the end of each sequence, after a prompt (0: every token but the first)")
	bench.Flags().IntVar(&group, "group", 1, "sequences per group sharing their prompt (needs --answer); above 1, measured with and without sharing, side by side")
	bench.Flags().IntVar(&trainLayers, "train-layers", 0, "train only the top N decoder layers and the final norm (0: every weight)")

	cmd.AddCommand(demo, export, bench)
	return cmd
}
