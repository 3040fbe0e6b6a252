package rollout

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/harness"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/sample"
)

// BenchmarkEpisodes measures episodes per minute on this machine and
// where their time goes, side by side: the scripted policy (no generation:
// the sandbox's share alone: setup, tools, grading) against
// SmolLM2-135M-Instruct on the Sampler Engine in patch mode (one turn of
// at most 256 tokens) and in agent mode (at most 4 turns of 256 tokens),
// each a group of 8 episodes of one task at temperature 0.7.
//
//	FROGNANO_TEST_GGUF=… go test ./actors/rollout -run '^$' -bench Episodes -benchtime 1x -timeout 60m
func BenchmarkEpisodes(b *testing.B) {
	_, tasks := inflectionTasks(b)
	task := tasks[0]
	tok := smolTokenizer(b)
	var engine *sampler.Engine
	if p := os.Getenv("FROGNANO_TEST_GGUF"); p != "" {
		m, err := model.LoadGGUF(p, model.Options{})
		if err != nil {
			b.Fatal(err)
		}
		if engine, err = sampler.New(sampler.Config{Model: m, MaxSequences: 8}); err != nil {
			b.Fatal(err)
		}
		defer engine.Close()
	}
	rt := needRuntime(b)
	for _, c := range []struct {
		name   string
		mode   harness.Mode
		policy policy.Policy
		lim    harness.Limits
	}{
		{"scripted/agent", harness.ModeAgent, nil, harness.Limits{}},
		{"scripted/patch", harness.ModePatch, nil, harness.Limits{}},
		{"smollm2/patch", harness.ModePatch, engine, harness.Limits{MaxTurnTokens: 256}},
		{"smollm2/agent", harness.ModeAgent, engine, harness.Limits{MaxTurns: 4, MaxTurnTokens: 256, MaxContext: 4096}},
	} {
		b.Run(c.name, func(b *testing.B) {
			pol := c.policy
			if c.policy == nil && c.name[:8] == "scripted" {
				script, err := harness.SolveScript(task, c.mode)
				if err != nil {
					b.Fatal(err)
				}
				pol = &harness.ScriptedPolicy{Tokenizer: tok, Turns: script}
			} else if engine == nil {
				b.Skip("FROGNANO_TEST_GGUF is unset")
			}
			sbs := &Containerd{Runtime: func(context.Context) (*sandbox.Runtime, error) { return rt, nil }, Environments: testEnvs, PoolSize: 4}
			defer sbs.Close()
			r, err := New(Config{Policy: pol, Tokenizer: tok, Sandboxes: sbs, MaxEpisodes: 8, Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			var gen, sb, setup, grade float64
			episodes := 0
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				res, err := r.Run(context.Background(), Request{Task: task, Group: 8, Mode: c.mode, Limits: c.lim, Sampling: sample.Params{Temperature: 0.7, TopP: 0.95},
					Seed: uint64(i + 1), RunID: "bench"}, nil)
				if err != nil {
					b.Fatal(err)
				}
				for _, ep := range res.Episodes {
					episodes++
					gen += ep.Result.GenerationSeconds
					sb += ep.Result.SandboxSeconds + ep.SetupSeconds
					setup += ep.SetupSeconds
					grade += ep.Result.GradeSeconds
				}
			}
			wall := time.Since(start).Seconds()
			b.ReportMetric(float64(episodes)/wall*60, "episodes/min")
			b.ReportMetric(gen/float64(episodes), "gen-s/episode")
			b.ReportMetric(sb/float64(episodes), "sandbox-s/episode")
			b.ReportMetric(setup/float64(episodes), "setup-s/episode")
			b.ReportMetric(grade/float64(episodes), "grade-s/episode")
			fmt.Fprintf(os.Stderr, "%s: %d episodes in %.1fs: %.1f episodes/min; per episode %.2fs generating, %.2fs in the sandbox (%.2fs setup, %.2fs grading)\n",
				c.name, episodes, wall, float64(episodes)/wall*60, gen/float64(episodes), sb/float64(episodes), setup/float64(episodes), grade/float64(episodes))
		})
	}
}
