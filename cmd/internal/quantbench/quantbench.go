// Package quantbench measures quantized sampling side by side with float32
// (frognano bench quant): decoding tokens/s at batch 1 and 16 and prefill
// tokens/s for each quantization the Sampler can serve, and the mismatch
// the quantized sampler causes against the float32 learner: |Δ log p| of
// sampled tokens between the Sampler's engine and the Learner's Trainer on
// the same weights, and the share of tokens GRPO's TV mask would drop.
package quantbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/kernels/cpu/blas"
	"github.com/frognano/frognano/kernels/grpo"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
)

// Options size a run; zero fields take the defaults in brackets.
type Options struct {
	Model string // a .gguf file or Hugging Face directory
	// Types are the quantizations, float32 first [f32 q8_0 q8_0-f32, and
	// where the kernels in use are newer than AVX2 (AVX-512 VNNI, AMX),
	// q8_0@avx2 q8_0-f32@avx2 beside them].
	// TYPE@KERNELS serves TYPE with that Q8_0 kernel set (go, avx2,
	// avx512-vnni) instead of the best this CPU has.
	Types   []string
	Rounds  int    // speed rounds; each figure is its best round [3]
	Decode  int    // decoding steps timed per round [16]
	Prefill int    // prompt tokens of the prefill [128]
	Prompts int    // prompts sampled for the mismatch [4]
	Samples int    // completions per prompt [4]
	Tokens  int    // most tokens per completion [64]
	Seed    uint64 // sampling seeds start here [1]
	// SpeedOnly skips the mismatch: only the speeds are measured (for
	// timing side by side with another engine, scripts/bench-llamacpp.sh).
	SpeedOnly bool
	Log       io.Writer
}

func (o *Options) defaults() {
	if len(o.Types) == 0 {
		o.Types = []string{model.Float32, "q8_0", "q8_0-f32"}
		if q := blas.Q8Impl(); q != "avx2" && q != "go" && slices.Contains(blas.Q8Kernels(), "avx2") {
			o.Types = append(o.Types, "q8_0@avx2", "q8_0-f32@avx2")
		}
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Rounds, 3)
	def(&o.Decode, 16)
	def(&o.Prefill, 128)
	def(&o.Prompts, 4)
	def(&o.Samples, 4)
	def(&o.Tokens, 64)
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Speed is one quantization's throughput.
type Speed struct {
	Type          string
	WeightBytes   int     // what the products read per token: quantized copies, or float32 weights
	Decode1       float64 // tokens/s decoding one sequence
	Decode16      float64 // tokens/s decoding 16 sequences together
	PrefillTokens float64 // tokens/s reading one prompt
}

// Mismatch compares one quantization's sampler with the float32 learner.
type Mismatch struct {
	Type      string
	Tokens    int     // sampled tokens compared
	MeanAbs   float64 // mean |log p_learner − log p_sampler|
	MaxAbs    float64
	TVDropped float64 // share with |π_learner/π_sampler − 1| > TVDelta
	TVDelta   float64
}

// Report is a run's figures and the conditions they were measured under.
type Report struct {
	Model, Kernels, CPU string
	Threads             int
	LoadBefore          string // /proc/loadavg at the start
	Speeds              []Speed
	Mismatches          []Mismatch
}

// Run measures o.Model.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	rep := &Report{Model: o.Model, Kernels: "blas " + blas.Impl() + ", q8 " + blas.Q8Impl(), CPU: cpuModel(), Threads: blas.Threads(), LoadBefore: loadAvg()}
	m, err := model.Load(o.Model, model.Options{})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "speed: %d rounds of %d decoding steps at batch 1 and 16 and a %d-token prefill, for %v\n", o.Rounds, o.Decode, o.Prefill, o.Types)
	if rep.Speeds, err = speeds(ctx, m, o); err != nil {
		return nil, err
	}
	if o.SpeedOnly {
		return rep, nil
	}
	fmt.Fprintf(o.Log, "mismatch: %d prompts × %d samples of up to %d tokens at temperature 1\n", o.Prompts, o.Samples, o.Tokens)
	if rep.Mismatches, err = mismatches(ctx, m, o); err != nil {
		return nil, err
	}
	return rep, nil
}

// useType makes the model serve typ (TYPE or TYPE@KERNELS) and returns
// the name to report and a function that puts the Q8_0 kernels back.
func useType(m *model.Model, typ string) (string, func(), error) {
	base, kernels, pinned := strings.Cut(typ, "@")
	restore := func() {}
	if pinned {
		prev, err := blas.SetQ8Kernels(kernels)
		if err != nil {
			return "", nil, fmt.Errorf("quantization %q: %w", typ, err)
		}
		restore = func() { _, _ = blas.SetQ8Kernels(prev) }
	}
	if m != nil {
		if err := m.SetQuantization(base); err != nil {
			restore()
			return "", nil, err
		}
		base = m.Quantization()
	}
	if pinned {
		return base + "@" + kernels, restore, nil
	}
	return base, restore, nil
}

// speeds times every type in turn, round after round, so that load from
// other processes weighs on all alike; each figure is the best round's.
func speeds(ctx context.Context, m *model.Model, o Options) ([]Speed, error) {
	out := make([]Speed, len(o.Types))
	prompt := make([]int32, o.Prefill)
	for i := range prompt {
		prompt[i] = int32(1000 + (i*7919)%20000) // a fixed, varied prompt
	}
	dp := prompt[:min(32, len(prompt))] // the decoding sequences' prompt
	for r := range o.Rounds {
		for i, typ := range o.Types {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			name, restore, err := useType(m, typ)
			if err != nil {
				return nil, err
			}
			s := &out[i]
			s.Type = name
			s.WeightBytes = m.QuantizedBytes()
			if s.WeightBytes == 0 {
				s.WeightBytes = float32Bytes(m)
			}
			d1, err := decode(m, dp, 1, o.Decode)
			if err != nil {
				restore()
				return nil, err
			}
			d16, err := decode(m, dp, 16, o.Decode)
			if err != nil {
				restore()
				return nil, err
			}
			pf, err := prefill(m, prompt)
			restore()
			if err != nil {
				return nil, err
			}
			s.Decode1, s.Decode16, s.PrefillTokens = max(s.Decode1, d1), max(s.Decode16, d16), max(s.PrefillTokens, pf)
			fmt.Fprintf(o.Log, "  round %d %-9s decode b1 %6.1f tok/s, b16 %6.1f tok/s, prefill %6.1f tok/s\n", r+1, typ, d1, d16, pf)
		}
	}
	return out, m.SetQuantization(model.Float32)
}

// float32Bytes is the float32 weights the decoding products read.
func float32Bytes(m *model.Model) int {
	c := m.Config
	d := c.HiddenSize
	perLayer := d*(c.QDim()+2*c.KVDim()) + c.QDim()*d + 3*d*c.FFNSize
	return 4 * (c.Layers*perLayer + c.VocabSize*d)
}

// decode prefills batch copies of prompt, then times steps decoding steps
// of the whole batch, each sequence fed its own greedy token.
func decode(m *model.Model, prompt []int32, batch, steps int) (float64, error) {
	r := m.NewRunner()
	caches := make([]*model.Cache, batch)
	toks := make([][]int32, batch)
	for i := range caches {
		caches[i] = m.NewCache(len(prompt) + steps + 1)
		toks[i] = prompt
	}
	l, err := r.Forward(caches, toks, false)
	if err != nil {
		return 0, err
	}
	next := make([][]int32, batch)
	start := time.Now()
	for range steps {
		for i := range next {
			next[i] = []int32{argmax(l.Row(i))}
		}
		if l, err = r.Forward(caches, next, false); err != nil {
			return 0, err
		}
	}
	return float64(batch*steps) / time.Since(start).Seconds(), nil
}

// prefill times reading prompt in one pass.
func prefill(m *model.Model, prompt []int32) (float64, error) {
	r := m.NewRunner()
	c := m.NewCache(len(prompt))
	start := time.Now()
	if _, err := r.Forward([]*model.Cache{c}, [][]int32{prompt}, false); err != nil {
		return 0, err
	}
	return float64(len(prompt)) / time.Since(start).Seconds(), nil
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// Prompts are coding tasks of the kind frognano trains on.
var Prompts = []string{
	"Write a Python function `is_palindrome(s)` that ignores case and non-letters.",
	"Fix the bug: `def mean(xs): return sum(xs) / len(xs) + 1`.",
	"Write a Go function that reverses a slice of ints in place.",
	"Implement binary search in Python and explain its complexity in one line.",
	"Write a Python function that returns the n-th Fibonacci number iteratively.",
	"Write a shell command that counts the lines of every .go file in a directory.",
	"Write a Python class Stack with push, pop and peek.",
	"Explain what a race condition is, with a short Go example.",
}

// mismatches samples completions with a Sampler engine serving each type,
// and scores the same tokens with the float32 learner's Trainer.
func mismatches(ctx context.Context, m *model.Model, o Options) ([]Mismatch, error) {
	learner, err := model.Load(o.Model, model.Options{})
	if err != nil {
		return nil, err
	}
	tr, err := learner.NewTrainer(model.TrainOptions{})
	if err != nil {
		return nil, err
	}
	delta := grpo.DefaultOptions().TVDelta
	var prompts [][]int32
	for i := range o.Prompts {
		p, err := chatPrompt(m.Tokenizer, Prompts[i%len(Prompts)])
		if err != nil {
			return nil, err
		}
		prompts = append(prompts, p)
	}
	var out []Mismatch
	for _, typ := range o.Types {
		name, restore, err := useType(nil, typ)
		if err != nil {
			return nil, err
		}
		base, _, _ := strings.Cut(typ, "@")
		e, err := sampler.New(sampler.Config{Model: m, Quantization: base, MaxSequences: 16})
		if err != nil {
			restore()
			return nil, err
		}
		type result struct {
			prompt []int32
			res    policy.GenerateResult
			err    error
		}
		results := make([]result, len(prompts)*o.Samples)
		var wg sync.WaitGroup
		for i := range results {
			p := prompts[i/o.Samples]
			wg.Go(func() {
				res, err := e.Generate(ctx, policy.GenerateRequest{PromptIDs: p, MaxTokens: o.Tokens, Sampling: sample.Params{Temperature: 1}, Seed: o.Seed + uint64(i)})
				results[i] = result{p, res, err}
			})
		}
		wg.Wait()
		served := e.Quantization()
		e.Close()
		restore()
		if name != base {
			served += name[len(base):]
		}
		var seqs [][]int32
		for _, r := range results {
			if r.err != nil {
				return nil, r.err
			}
			seqs = append(seqs, append(append([]int32(nil), r.prompt...), r.res.TokenIDs...))
		}
		lp, err := tr.LogProbs(seqs)
		if err != nil {
			return nil, err
		}
		mm := Mismatch{Type: served, TVDelta: delta}
		dropped := 0
		for i, r := range results {
			for j, got := range r.res.LogProbs {
				d := float64(lp[i][len(r.prompt)-1+j]) - float64(got)
				mm.MeanAbs += math.Abs(d)
				mm.MaxAbs = math.Max(mm.MaxAbs, math.Abs(d))
				if math.Abs(math.Exp(d)-1) > delta {
					dropped++
				}
				mm.Tokens++
			}
		}
		if mm.Tokens > 0 {
			mm.MeanAbs /= float64(mm.Tokens)
			mm.TVDropped = float64(dropped) / float64(mm.Tokens)
		}
		fmt.Fprintf(o.Log, "  %-9s %d tokens: mean |Δ log p| %.4f, max %.4f, TV-masked %.2f%%\n", typ, mm.Tokens, mm.MeanAbs, mm.MaxAbs, 100*mm.TVDropped)
		out = append(out, mm)
	}
	return out, m.SetQuantization(model.Float32)
}

func chatPrompt(tok *tokenizer.Tokenizer, user string) ([]int32, error) {
	text, err := tokenizer.RenderChat([]tokenizer.Message{{Role: "user", Content: user}}, tokenizer.ChatOptions{
		DefaultSystem:       tokenizer.DefaultSystemFor(tok.ChatTemplate()),
		AddGenerationPrompt: true,
	})
	if err != nil {
		return nil, err
	}
	return tok.Encode(text), nil
}

// WriteTable prints the report as two Markdown tables.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "model %s; %s; %s, %d threads; load average at start %s\n\n", r.Model, r.Kernels, r.CPU, r.Threads, r.LoadBefore)
	b.WriteString("| weights | MB read per token | decode b=1 tok/s | decode b=16 tok/s | prefill tok/s |\n|---|---|---|---|---|\n")
	for _, s := range r.Speeds {
		fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.1f | %.1f |\n", s.Type, float64(s.WeightBytes)/1e6, s.Decode1, s.Decode16, s.PrefillTokens)
	}
	if len(r.Mismatches) == 0 {
		_, err := io.WriteString(w, b.String())
		return err
	}
	b.WriteString("\n| sampler weights | sampled tokens | mean \\|Δ log p\\| | max \\|Δ log p\\| | TV-masked (δ) |\n|---|---|---|---|---|\n")
	for _, m := range r.Mismatches {
		fmt.Fprintf(&b, "| %s | %d | %.4f | %.4f | %.2f%% (%.2g) |\n", m.Type, m.Tokens, m.MeanAbs, m.MaxAbs, 100*m.TVDropped, m.TVDelta)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}
