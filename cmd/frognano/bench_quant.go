package main

import (
	"github.com/spf13/cobra"

	"github.com/frognano/frognano/cmd/internal/quantbench"
	"github.com/frognano/frognano/kernels/modelstore"
)

func benchQuantCmd() *cobra.Command {
	var (
		opt          quantbench.Options
		name, models string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "quant",
		Short: "Quantized sampling against float32: decode and prefill tokens/s, and the mismatch with the float32 learner",
		Long: `quant loads a model and, for float32 weights and each quantization the
Sampler serves (q8_0: int8 weights and int8 activations per block, as
llama.cpp; q8_0-f32: int8 weights and float32 activations), times decoding
at batch 1 and 16 and a prefill, the types taking turns --rounds times with
each figure its best round (so load from other processes weighs on all
alike; the load average is printed). It then samples completions of coding
prompts at temperature 1 from a Sampler engine serving each type, scores the
same tokens with the float32 Learner's Trainer, and reports mean and max
|Δ log p| and the share of tokens GRPO's TV mask (δ = 0.2) would drop.

The Q8_0 products run the best kernels this CPU has (AMX, else AVX-512
VNNI, else AVX2, else Go loops). TYPE@KERNELS pins a type to a kernel set
(go, avx2, avx512-vnni, amx) for that arm alone; on a CPU with kernels
newer than AVX2 the default types add q8_0@avx2 and q8_0-f32@avx2, so both
are measured side by side in one run.

  frognano bench quant
  frognano bench quant --rounds 5 --prompts 8 --samples 8
  frognano bench quant --model qwen2.5-coder-0.5b --types q8_0 --speed-only --decode 32 --json
  frognano bench quant --types q8_0,q8_0@avx2,q8_0@go --speed-only`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := modelstore.Open(models)
			if err != nil {
				return err
			}
			if opt.Model, err = store.Resolve(name); err != nil {
				return err
			}
			opt.Log = cmd.ErrOrStderr()
			rep, err := quantbench.Run(cmd.Context(), opt)
			if err != nil {
				return err
			}
			if asJSON {
				printJSON(cmd.OutOrStdout(), rep)
				return nil
			}
			return rep.WriteTable(cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "model", modelstore.Default, "model store name, .gguf or Hugging Face path")
	f.StringVar(&models, "models", "", "model store directory (default: see frognano model ls)")
	f.StringSliceVar(&opt.Types, "types", nil, "weights to compare, TYPE or TYPE@KERNELS (default f32,q8_0,q8_0-f32, and q8_0@avx2,q8_0-f32@avx2 on a CPU with AVX-512 VNNI or AMX)")
	f.IntVar(&opt.Rounds, "rounds", 3, "speed rounds; each figure is its best")
	f.IntVar(&opt.Decode, "decode", 16, "decoding steps timed per round")
	f.IntVar(&opt.Prefill, "prefill", 128, "prompt tokens of the timed prefill")
	f.IntVar(&opt.Prompts, "prompts", 4, "prompts sampled for the mismatch")
	f.IntVar(&opt.Samples, "samples", 4, "completions per prompt")
	f.IntVar(&opt.Tokens, "tokens", 64, "most tokens per completion")
	f.BoolVar(&opt.SpeedOnly, "speed-only", false, "time decoding and prefill only; skip the mismatch")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
