package sampler

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/sample"
)

// TestCollectorCountsPromptTokensByHow: a group of requests with one
// prompt, as a GRPO group sends them, then the same prompt again after
// they ended. The metrics account for every prompt token exactly once, as
// computed, copied from a running sequence or reused from a kept cache,
// and most are not computed.
func TestCollectorCountsPromptTokensByHow(t *testing.T) {
	var eng *Engine
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector(func() *Engine { return eng }))
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Fatalf("before the engine is loaded: %d metrics, %v", len(mfs), err)
	}
	eng = newEngine(t, Config{MaxSequences: 8})
	m := eng.Model()
	prompt := chatPrompt(t, m, strings.Repeat("Explain what a linked list is, and why one would use it. ", 8))
	const group = 4
	var wg sync.WaitGroup
	generated := make([]int, group+1)
	run := func(i int) {
		res, err := eng.Generate(context.Background(), policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 8,
			Sampling: sample.Params{Temperature: 1}, Seed: uint64(i + 1)})
		if err != nil {
			t.Error(err)
			return
		}
		generated[i] = len(res.TokenIDs)
	}
	for i := range group {
		wg.Add(1)
		go func() { defer wg.Done(); run(i) }()
	}
	wg.Wait()
	run(group)

	value := func(name string, labels ...string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, mt := range mf.GetMetric() {
				if len(labels) == 0 || (len(mt.GetLabel()) == 1 && mt.GetLabel()[0].GetValue() == labels[0]) {
					return mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no metric %s %v", name, labels)
		return 0
	}
	computed, copied, reused := value("frognano_sampler_prompt_tokens_total", "computed"),
		value("frognano_sampler_prompt_tokens_total", "copied"), value("frognano_sampler_prompt_tokens_total", "reused")
	total := float64((group + 1) * len(prompt))
	if computed+copied+reused != total {
		t.Fatalf("computed %v + copied %v + reused %v != %v prompt tokens", computed, copied, reused, total)
	}
	if computed > total/2 {
		t.Errorf("computed %v of %v prompt tokens: the group's prompt was not shared", computed, total)
	}
	if reused == 0 {
		t.Errorf("the request after the group reused nothing")
	}
	sum := 0
	for _, g := range generated {
		sum += g
	}
	if got := value("frognano_sampler_generated_tokens_total"); got != float64(sum) {
		t.Errorf("generated tokens %v, the requests got %d", got, sum)
	}
	if value("frognano_sampler_forward_passes_total") == 0 || value("frognano_sampler_sequences", "running") != 0 {
		t.Errorf("forward passes %v, running %v", value("frognano_sampler_forward_passes_total"), value("frognano_sampler_sequences", "running"))
	}
	t.Logf("prompt tokens: %v computed, %v copied, %v reused of %v", computed, copied, reused, total)
}
