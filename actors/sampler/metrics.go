package sampler

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports an engine's counters (Stats) as Prometheus metrics on
// the node's /metrics: tokens sampled, prompt tokens computed, reused from
// kept caches and taken from running sequences (what prefix caching and
// the sharing of a group's prompt save), forward passes, sequences running
// and waiting, the policy version served and weight swaps. engine returns
// the engine if it is loaded, nil otherwise (a scrape never loads one).
func Collector(engine func() *Engine) prometheus.Collector { return &collector{engine: engine} }

type collector struct{ engine func() *Engine }

var (
	descGenerated = prometheus.NewDesc("frognano_sampler_generated_tokens_total", "Tokens the Sampler sampled, all requests.", nil, nil)
	descPrompt    = prometheus.NewDesc("frognano_sampler_prompt_tokens_total",
		"Prompt tokens of admitted requests by how they entered the KV cache: computed (prefilled), reused (from a kept cache), copied (from a running sequence with the same prompt prefix; shared counts those read in place among them).",
		[]string{"how"}, nil)
	descSteps    = prometheus.NewDesc("frognano_sampler_forward_passes_total", "Forward passes of the Sampler's batch.", nil, nil)
	descSeqs     = prometheus.NewDesc("frognano_sampler_sequences", "Requests in the Sampler: running (in the batch) or waiting (not admitted yet).", []string{"state"}, nil)
	descVersion  = prometheus.NewDesc("frognano_sampler_policy_version", "Policy version the Sampler serves.", nil, nil)
	descSwaps    = prometheus.NewDesc("frognano_sampler_weight_swaps_total", "Weight updates the Sampler applied.", nil, nil)
	descKept     = prometheus.NewDesc("frognano_sampler_prefix_cache_bytes", "Memory of the KV caches kept for prefix reuse, by capacity.", nil, nil)
	samplerDescs = []*prometheus.Desc{descGenerated, descPrompt, descSteps, descSeqs, descVersion, descSwaps, descKept}
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range samplerDescs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	e := c.engine()
	if e == nil {
		return
	}
	s := e.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(descGenerated, s.GeneratedTokens)
	counter(descPrompt, s.PromptTokens, "computed")
	counter(descPrompt, s.ReusedTokens, "reused")
	counter(descPrompt, s.CopiedTokens, "copied")
	counter(descPrompt, s.SharedTokens, "shared")
	counter(descSteps, s.Steps)
	gauge(descSeqs, float64(s.Running), "running")
	gauge(descSeqs, float64(s.Waiting), "waiting")
	gauge(descVersion, float64(s.Version))
	counter(descSwaps, s.Swaps)
	gauge(descKept, float64(s.PrefixBytes))
}
