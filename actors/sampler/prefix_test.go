package sampler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/sample"
)

// filled returns a cache of capacity positions holding tokens, computed by
// the model (the pool only looks at lengths, but Truncate needs them held).
func filled(t *testing.T, m *model.Model, capacity int, tokens []int32) *model.Cache {
	t.Helper()
	c := m.NewCache(capacity)
	if _, err := m.NewRunner().Forward([]*model.Cache{c}, [][]int32{tokens}, false); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPrefixPool checks the pool's choices: the longest shared prefix
// wins, a taken cache leaves the pool (so a second request for the same
// prefix cannot get it), at least one prompt token is left to run, a small
// shared prefix does not destroy a kept cache while there is room, a full
// pool recycles its least recently used cache, and the limits evict.
func TestPrefixPool(t *testing.T) {
	m := smollm2(t)
	seq := func(n int, base int32) []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = base + int32(i)
		}
		return s
	}
	p := newPrefixPool(m, 3, 1<<40)
	a, b := filled(t, m, 64, seq(20, 100)), filled(t, m, 64, seq(10, 100))
	p.put(a, seq(20, 100))
	p.put(b, seq(10, 100))
	if len(p.entries) != 2 || p.bytes != 2*64*p.perPos {
		t.Fatalf("pool of %d caches, %d bytes", len(p.entries), p.bytes)
	}

	// a shares 15 tokens, b 10: a is taken, truncated to 15.
	prompt := append(seq(15, 100), 7, 8, 9)
	c, held, n := p.take(prompt, 30, 48)
	if c != a || n != 15 || c.Len() != 15 || len(held) != 0 || cap(held) < 20 {
		t.Fatalf("take: cache a %v, %d shared, len %d, held %d/%d", c == a, n, c.Len(), len(held), cap(held))
	}
	// The same prompt again finds only b.
	if c2, _, n2 := p.take(prompt, 30, 48); c2 != b || n2 != 10 {
		t.Fatalf("second take of the same prefix: cache b %v, cache a again %v, %d shared", c2 == b, c2 == a, n2)
	}
	if len(p.entries) != 0 || p.bytes != 0 {
		t.Fatalf("taken caches still in the pool: %d, %d bytes", len(p.entries), p.bytes)
	}

	// A prompt equal to what is held leaves its last token to run.
	p.put(a, prompt[:15])
	if c, _, n := p.take(prompt[:15], 20, 30); c != a || n != 14 || a.Len() != 14 {
		t.Fatalf("whole prompt cached: %d shared, len %d", n, a.Len())
	}
	// Too small for the request: not taken.
	p.put(a, prompt[:14])
	if c, _, _ := p.take(prompt, 65, 80); c != nil {
		t.Fatal("took a cache smaller than the request needs")
	}
	// Sharing 2 of 14 tokens, with room in the pool: a new cache, a stays.
	if c, _, _ := p.take(append(seq(2, 100), 5, 5, 5), 10, 20); c != nil || len(p.entries) != 1 {
		t.Fatalf("a short shared prefix took a kept cache: %v, %d kept", c != nil, len(p.entries))
	}
	// A full pool (by count) hands out its least recently used cache
	// large enough, emptied, rather than allocating.
	p.put(b, seq(10, 100)[:b.Len()])
	d := filled(t, m, 16, seq(5, 300))
	p.put(d, seq(5, 300))
	if len(p.entries) != 3 || p.entries[0].cache != a {
		t.Fatalf("pool order: %d entries", len(p.entries))
	}
	if c, _, n := p.take(seq(8, 500), 20, 30); c != a || n != 0 || a.Len() != 0 {
		t.Fatalf("full pool: recycled a %v, %d shared", c == a, n)
	}
	// A full pool takes even a short shared prefix (b shares 2).
	p.put(a, nil) // empty: not kept
	if len(p.entries) != 2 {
		t.Fatalf("an empty cache was kept: %d entries", len(p.entries))
	}
	x := filled(t, m, 64, seq(30, 700))
	p.put(x, seq(30, 700))
	if c, _, n := p.take(append(seq(2, 100), 1, 1), 20, 30); c != b || n != 2 {
		t.Fatalf("full pool, short prefix: cache b %v, %d shared", c == b, n)
	}
	// Limits: a fourth cache evicts the least recently used (d), ...
	p.put(b, seq(2, 100))
	e := filled(t, m, 8, seq(3, 900))
	p.put(e, seq(3, 900))
	kept := func(c *model.Cache) bool {
		return slices.ContainsFunc(p.entries, func(k keptCache) bool { return k.cache == c })
	}
	if len(p.entries) != 3 || kept(d) || !kept(x) {
		t.Fatalf("count limit: %d entries, d kept %v, x kept %v", len(p.entries), kept(d), kept(x))
	}
	// ... and so does the byte limit (x), with room left by count.
	p.maxCount, p.maxBytes = 10, p.bytes-1
	p.put(filled(t, m, 8, seq(3, 950)), seq(3, 950))
	if p.bytes > p.maxBytes || len(p.entries) != 3 || kept(x) || !kept(b) {
		t.Fatalf("byte limit %d: %d bytes in %d entries, x kept %v", p.maxBytes, p.bytes, len(p.entries), kept(x))
	}
	// A cache larger than the whole budget is not kept.
	p.put(filled(t, m, 4096, seq(3, 960)), seq(3, 960))
	if len(p.entries) != 3 || !kept(b) {
		t.Fatalf("a cache over the budget evicted the others: %d entries", len(p.entries))
	}
	p.clear()
	if len(p.entries) != 0 || p.bytes != 0 {
		t.Fatal("clear left caches")
	}
	if c, _, _ := p.take(seq(3, 950), 4, 8); c != nil {
		t.Fatal("took from a cleared pool")
	}
}

// conversation builds agent-style turns at the token level: each turn's
// prompt is the previous prompt, the previous continuation (closed with
// <|im_end|> if it did not stop there) and a user observation.
type conversation struct {
	t      testing.TB
	m      *model.Model
	stop   int32
	prompt []int32
}

func (c *conversation) extend(gen []int32, observation string) {
	c.prompt = append(slices.Clone(c.prompt), gen...)
	if len(gen) == 0 || gen[len(gen)-1] != c.stop {
		c.prompt = append(c.prompt, c.stop)
	}
	c.prompt = append(c.prompt, c.m.Tokenizer.Encode("\n<|im_start|>user\n"+observation+"<|im_end|>\n<|im_start|>assistant\n")...)
}

// TestPrefixReuse runs one conversation of four turns on an engine keeping
// caches and on one keeping none, greedy and seeded: every turn's tokens
// must be equal and their log-probabilities within the batching tolerance,
// each turn after the first must read only its new tokens, and the
// counters must add up.
func TestPrefixReuse(t *testing.T) {
	m := smollm2(t)
	stop := imEnd(t, m)
	var task strings.Builder
	task.WriteString("Fix the bug in this Go file so that the tests pass.\n\n")
	for i := range 16 {
		fmt.Fprintf(&task, "func f%d(x int) int { return x*%d + %d }\n", i, i+1, 2*i)
	}
	observations := []string{
		"$ go test ./...\n--- FAIL: TestF3 (0.00s)\n    f_test.go:12: f3(2) = 11, want 10\nFAIL",
		"$ cat f_test.go | head -3\npackage f\n\nimport \"testing\"",
		"Applied the edit. $ go test ./...\nok  \tf\t0.004s",
	}
	for _, mode := range []struct {
		name string
		p    sample.Params
	}{{"greedy", sample.Params{}}, {"seeded", sample.Params{Temperature: 0.9, TopP: 0.95}}} {
		t.Run(mode.name, func(t *testing.T) {
			reuse := newEngine(t, Config{})
			fresh := newEngine(t, Config{PrefixCaches: -1})
			conv := &conversation{t: t, m: m, stop: stop, prompt: chatPrompt(t, m, task.String())}
			var wantReused int64
			for turn := range len(observations) + 1 {
				req := policy.GenerateRequest{PromptIDs: conv.prompt, MaxTokens: 24, Sampling: mode.p, Seed: uint64(40 + turn), Stop: []int32{stop}}
				before := reuse.Stats().ReusedTokens
				got, err := reuse.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				want, err := fresh.Generate(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.TokenIDs, want.TokenIDs) || got.Finish != want.Finish {
					t.Fatalf("turn %d: with reuse %v (%s), without %v (%s)", turn, got.TokenIDs, got.Finish, want.TokenIDs, want.Finish)
				}
				if j, ok := closeLogProbs(got.LogProbs, want.LogProbs); !ok {
					t.Fatalf("turn %d: log-prob %d with reuse %v, without %v", turn, j, got.LogProbs, want.LogProbs)
				}
				reused := reuse.Stats().ReusedTokens - before
				if turn > 0 && reused != wantReused-before {
					t.Fatalf("turn %d (%d prompt tokens): %d reused, want %d", turn, len(conv.prompt), reused, wantReused-before)
				}
				if turn == 0 && reused != 0 {
					t.Fatalf("first turn reused %d tokens of an empty pool", reused)
				}
				t.Logf("turn %d: %d prompt tokens, %d reused, %d generated (%s)", turn, len(conv.prompt), reused, len(got.TokenIDs), got.Finish)
				// The cache kept holds the prompt and every sampled token
				// but the last: the next turn reuses all of it.
				wantReused = reuse.Stats().ReusedTokens + int64(len(conv.prompt)+len(got.TokenIDs)-1)
				if turn < len(observations) {
					conv.extend(got.TokenIDs, observations[turn])
				}
			}
			r, f := reuse.Stats(), fresh.Stats()
			if f.ReusedTokens != 0 || f.PrefixCaches != 0 {
				t.Fatalf("the engine keeping no caches: %+v", f)
			}
			if r.PromptTokens+r.ReusedTokens != f.PromptTokens || r.ReusedTokens == 0 {
				t.Fatalf("prompt tokens: %d computed + %d reused, without reuse %d computed", r.PromptTokens, r.ReusedTokens, f.PromptTokens)
			}
			if r.PrefixCaches != 1 || r.PrefixBytes <= 0 {
				t.Fatalf("one conversation should leave one kept cache: %+v", r)
			}
			t.Logf("with reuse %d prompt tokens computed, %d reused; without %d", r.PromptTokens, r.ReusedTokens, f.PromptTokens)
		})
	}
}

// TestPrefixNotShared sends the same next turn twice at once: one request
// takes the kept cache (no two running sequences share one) and computes
// the rest of its prompt; the other gets a cache of its own and copies the
// first one's positions into it as they are computed, all but its last
// prompt token; both give the tokens of an engine keeping no caches.
func TestPrefixNotShared(t *testing.T) {
	m := smollm2(t)
	stop := imEnd(t, m)
	reuse := newEngine(t, Config{})
	fresh := newEngine(t, Config{PrefixCaches: -1})
	ctx := context.Background()
	conv := &conversation{t: t, m: m, stop: stop, prompt: chatPrompt(t, m, questions[3])}
	first, err := reuse.Generate(ctx, policy.GenerateRequest{PromptIDs: conv.prompt, MaxTokens: 16, Stop: []int32{stop}})
	if err != nil {
		t.Fatal(err)
	}
	shared := int64(len(conv.prompt) + len(first.TokenIDs) - 1)
	conv.extend(first.TokenIDs, "Now say it in French.")
	req := policy.GenerateRequest{PromptIDs: conv.prompt, MaxTokens: 16, Sampling: sample.Params{Temperature: 0.8}, Seed: 3}
	want, err := fresh.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	before := reuse.Stats()
	// Start returns once the scheduler holds the request; the first one
	// runs for many steps, so both are in flight together.
	var streams []*Stream
	for range 2 {
		s, err := reuse.Start(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	for i, s := range streams {
		got, err := s.Result()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.TokenIDs, want.TokenIDs) {
			t.Fatalf("request %d: %v, without reuse %v", i, got.TokenIDs, want.TokenIDs)
		}
		if j, ok := closeLogProbs(got.LogProbs, want.LogProbs); !ok {
			t.Fatalf("request %d: log-prob %d: %v, without reuse %v", i, j, got.LogProbs, want.LogProbs)
		}
	}
	after := reuse.Stats()
	if d := after.ReusedTokens - before.ReusedTokens; d != shared {
		t.Fatalf("two requests for one kept cache reused %d tokens, want %d (one of them)", d, shared)
	}
	n := int64(len(conv.prompt))
	if d := after.CopiedTokens - before.CopiedTokens; d != n-1 {
		t.Fatalf("the second request copied %d prompt tokens, want %d", d, n-1)
	}
	if d := after.PromptTokens - before.PromptTokens; d != n-shared+1 {
		t.Fatalf("computed %d prompt tokens, want %d", d, n-shared+1)
	}
	if after.PrefixCaches != 2 {
		t.Fatalf("both caches should be kept afterwards: %+v", after)
	}
}

// TestPrefixSwap keeps a conversation's cache, then swaps in weights that
// change every key and value (the first layer's input norm halved): the
// pool must be emptied, and the next turn computed wholly with the new
// weights, as an engine keeping no caches computes it.
func TestPrefixSwap(t *testing.T) {
	m := smollm2(t)
	orig := hostParams(m)
	defer func() {
		if err := m.SetParams(orig); err != nil {
			t.Fatal(err)
		}
	}()
	const name = "model.layers.0.input_layernorm.weight"
	if orig[name] == nil {
		t.Fatalf("no weight %s", name)
	}
	changed := map[string][]float32{}
	for k, v := range orig {
		changed[k] = v
	}
	norm := slices.Clone(orig[name])
	for i := range norm {
		norm[i] *= 0.5
	}
	changed[name] = norm

	stop := imEnd(t, m)
	ctx := context.Background()
	e := newEngine(t, Config{Version: 1})
	conv := &conversation{t: t, m: m, stop: stop, prompt: chatPrompt(t, m, questions[4])}
	first, err := e.Generate(ctx, policy.GenerateRequest{PromptIDs: conv.prompt, MaxTokens: 16, Stop: []int32{stop}})
	if err != nil {
		t.Fatal(err)
	}
	conv.extend(first.TokenIDs, "Answer in one word.")
	req := policy.GenerateRequest{PromptIDs: conv.prompt, MaxTokens: 12}
	old, err := newEngine(t, Config{PrefixCaches: -1}).Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.PrefixCaches != 1 {
		t.Fatalf("before the swap: %+v", st)
	}

	if err := e.SetWeights(ctx, 2, changed); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.PrefixCaches != 0 || st.PrefixBytes != 0 {
		t.Fatalf("caches of version 1 kept after the swap: %+v", st)
	}
	before := e.Stats().ReusedTokens
	got, err := e.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Stats().ReusedTokens - before; d != 0 {
		t.Fatalf("reused %d tokens computed with the old weights", d)
	}
	want, err := newEngine(t, Config{PrefixCaches: -1}).Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.PolicyVersion != 2 || !slices.Equal(got.TokenIDs, want.TokenIDs) {
		t.Fatalf("after the swap: version %d, %v, want %v", got.PolicyVersion, got.TokenIDs, want.TokenIDs)
	}
	if j, ok := closeLogProbs(got.LogProbs, want.LogProbs); !ok {
		t.Fatalf("after the swap: log-prob %d: %v, want %v", j, got.LogProbs, want.LogProbs)
	}
	if _, ok := closeLogProbs(old.LogProbs, want.LogProbs); ok {
		t.Fatalf("the new weights did not change the log-probabilities: %v", want.LogProbs)
	}
}

// BenchmarkPrefixReuse runs an agent-style conversation per iteration: a
// prompt of about 1500 tokens, then four turns of 32 sampled tokens each
// followed by about 200 tokens of tool observation, on an engine keeping
// caches and on one keeping none. Each iteration's task differs from the
// start of its user message, so only the system prompt is shared between
// iterations.
func BenchmarkPrefixReuse(b *testing.B) {
	m := smollm2(b)
	stop := imEnd(b, m)
	lines := taskLines(b, m, 1500)
	var observations []string
	for turn := range 4 {
		var s strings.Builder
		s.WriteString("$ go test ./...\n")
		for j := 0; len(m.Tokenizer.Encode(s.String())) < 190; j++ {
			fmt.Fprintf(&s, "--- FAIL: TestF%d (0.00s)\n    f_test.go:%d: f%d(%d) = %d, want %d\n", j, 10+j, j, turn, j*turn+3, j*turn+2)
		}
		s.WriteString("FAIL")
		observations = append(observations, s.String())
	}
	const turns = 4
	b.Logf("first prompt %d tokens, observations about %d", len(chatPrompt(b, m, taskText(0, lines))), len(m.Tokenizer.Encode(observations[0])))
	for _, mode := range []struct {
		name string
		keep int
	}{{"reuse", 0}, {"no-reuse", -1}} {
		b.Run(mode.name, func(b *testing.B) {
			e := newEngine(b, Config{PrefixCaches: mode.keep})
			var generated, iter int
			for b.Loop() {
				conv := &conversation{t: b, m: m, stop: stop, prompt: chatPrompt(b, m, taskText(iter, lines))}
				for turn := range turns {
					res, err := e.Generate(context.Background(), policy.GenerateRequest{
						PromptIDs: conv.prompt, MaxTokens: 32, Sampling: sample.Params{Temperature: 0.7}, Seed: uint64(iter*turns + turn),
					})
					if err != nil {
						b.Fatal(err)
					}
					generated += len(res.TokenIDs)
					conv.extend(res.TokenIDs, observations[turn])
				}
				iter++
			}
			st := e.Stats()
			b.ReportMetric(float64(iter*turns)/b.Elapsed().Seconds(), "turns/s")
			b.ReportMetric(float64(generated)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(st.PromptTokens)/float64(iter), "prefilled/op")
			b.ReportMetric(float64(st.ReusedTokens)/float64(iter), "reused/op")
		})
	}
}

// taskText is a user message asking to fix a Go file of the given number
// of lines; its first line names task i, so that tasks share no more than
// the system prompt.
func taskText(i, lines int) string {
	var s strings.Builder
	fmt.Fprintf(&s, "Task %d: fix the bug in this Go file so that the tests pass.\n\n", i)
	for j := range lines {
		fmt.Fprintf(&s, "func f%d(x int) int { return x*%d + %d }\n", j, j+i+1, 2*j)
	}
	return s.String()
}

// taskLines is the fewest lines (in tens) that make taskText's chat prompt
// at least n tokens long.
func taskLines(t testing.TB, m *model.Model, n int) int {
	t.Helper()
	lines := 10
	for len(chatPrompt(t, m, taskText(0, lines))) < n {
		lines += 10
	}
	return lines
}

// groupTask is task i's chat prompt, at least n tokens long.
func groupTask(t testing.TB, m *model.Model, i, n int) []int32 {
	t.Helper()
	return chatPrompt(t, m, taskText(i, taskLines(t, m, n)))
}

// runGroup starts g requests for one prompt at once, as the episodes of a
// GRPO group start, and returns their results.
func runGroup(t testing.TB, e *Engine, prompt []int32, g, maxTokens int, seed uint64) []policy.GenerateResult {
	t.Helper()
	var streams []*Stream
	for i := range g {
		s, err := e.Start(context.Background(), policy.GenerateRequest{
			PromptIDs: prompt, MaxTokens: maxTokens, Sampling: sample.Params{Temperature: 1}, Seed: seed + uint64(i),
		})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	out := make([]policy.GenerateResult, g)
	for i, s := range streams {
		res, err := s.Result()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = res
	}
	return out
}

// TestShareRunning plays a group of four episodes of one prompt at once:
// three of them copy the first one's keys and values, so the prompt is
// computed once (plus one token each), and every episode samples what an
// engine computing every prompt itself samples. A request sharing fewer
// than ShareRunning tokens computes its own.
func TestShareRunning(t *testing.T) {
	m := smollm2(t)
	prompt := groupTask(t, m, 1, 600)
	share := newEngine(t, Config{MaxStepTokens: 128})
	compute := newEngine(t, Config{MaxStepTokens: 128, ShareRunning: -1})
	got := runGroup(t, share, prompt, 4, 12, 7)
	want := runGroup(t, compute, prompt, 4, 12, 7)
	out0 := got
	for i := range got {
		if !slices.Equal(got[i].TokenIDs, want[i].TokenIDs) {
			t.Fatalf("episode %d: sharing %v, computing %v", i, got[i].TokenIDs, want[i].TokenIDs)
		}
		if j, ok := closeLogProbs(got[i].LogProbs, want[i].LogProbs); !ok {
			t.Fatalf("episode %d: log-prob %d sharing %v, computing %v", i, j, got[i].LogProbs, want[i].LogProbs)
		}
	}
	n := int64(len(prompt))
	s, c := share.Stats(), compute.Stats()
	if s.CopiedTokens != 3*(n-1) || s.PromptTokens != n+3 {
		t.Errorf("sharing: %d prompt tokens computed, %d copied; want %d and %d", s.PromptTokens, s.CopiedTokens, n+3, 3*(n-1))
	}
	if m.CanShare() && s.SharedTokens != s.CopiedTokens {
		t.Errorf("sharing on the CPU: %d of %d positions taken from the lead read in place", s.SharedTokens, s.CopiedTokens)
	}
	// The same group again: its caches come from the pool, where the
	// first lead's cache is pinned by the followers' caches beside it,
	// and it still samples what computing samples.
	got = runGroup(t, share, prompt, 4, 12, 17)
	want = runGroup(t, compute, prompt, 4, 12, 17)
	for i := range got {
		if !slices.Equal(got[i].TokenIDs, want[i].TokenIDs) {
			t.Fatalf("second group, episode %d: sharing %v, computing %v", i, got[i].TokenIDs, want[i].TokenIDs)
		}
	}
	// And copying rather than reading in place samples the same.
	copying := newEngine(t, Config{MaxStepTokens: 128, CopyShared: true})
	got = runGroup(t, copying, prompt, 4, 12, 7)
	for i := range got {
		if !slices.Equal(got[i].TokenIDs, out0[i].TokenIDs) {
			t.Fatalf("episode %d: copying %v, sharing %v", i, got[i].TokenIDs, out0[i].TokenIDs)
		}
	}
	if st := copying.Stats(); st.CopiedTokens != 3*(n-1) || st.SharedTokens != 0 {
		t.Errorf("copying: %d positions taken from the lead, %d of them in place; want %d and 0", st.CopiedTokens, st.SharedTokens, 3*(n-1))
	}
	if c.CopiedTokens != 0 || c.PromptTokens != 4*n {
		t.Errorf("computing: %d prompt tokens computed, %d copied; want %d and 0", c.PromptTokens, c.CopiedTokens, 4*n)
	}
	// Two prompts that share only the chat template's opening (under 32
	// tokens) are computed each on their own.
	before := share.Stats()
	a, b := chatPrompt(t, m, questions[0]), chatPrompt(t, m, questions[1])
	if common := commonPrefix(a, b); common >= DefaultShareRunning {
		t.Fatalf("the two questions share %d tokens", common)
	}
	var streams []*Stream
	for _, p := range [][]int32{a, b} {
		st, err := share.Start(context.Background(), policy.GenerateRequest{PromptIDs: p, MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	for _, st := range streams {
		if _, err := st.Result(); err != nil {
			t.Fatal(err)
		}
	}
	if d := share.Stats().CopiedTokens - before.CopiedTokens; d != 0 {
		t.Errorf("prompts sharing less than %d tokens copied %d", DefaultShareRunning, d)
	}
}

// TestShareRunningLeadCancelled: when the episode being copied is
// cancelled before it has read the shared prompt, its follower computes
// the rest itself and still samples what it would have alone.
func TestShareRunningLeadCancelled(t *testing.T) {
	m := smollm2(t)
	prompt := groupTask(t, m, 2, 1000)
	e := newEngine(t, Config{MaxStepTokens: 32}) // the lead reads its prompt in 30-odd steps
	alone := newEngine(t, Config{ShareRunning: -1})
	ctx, cancel := context.WithCancel(context.Background())
	lead, err := e.Start(ctx, policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	req := policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 8, Sampling: sample.Params{Temperature: 1}, Seed: 2}
	follower, err := e.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// Cancel the lead once the follower has copied part of the prompt.
	for e.Stats().CopiedTokens == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if _, err := lead.Result(); err == nil {
		t.Fatal("the cancelled lead finished")
	}
	got, err := follower.Result()
	if err != nil {
		t.Fatal(err)
	}
	want, err := alone.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.TokenIDs, want.TokenIDs) {
		t.Fatalf("follower of a cancelled lead: %v, alone %v", got.TokenIDs, want.TokenIDs)
	}
	// The follower copied part of its prompt and computed the rest.
	st := e.Stats()
	if n := int64(len(prompt)); st.CopiedTokens <= 0 || st.CopiedTokens >= n-1 || st.PromptTokens < n-st.CopiedTokens {
		t.Errorf("%d prompt tokens: %d copied, %d computed (lead and follower)", n, st.CopiedTokens, st.PromptTokens)
	}
}

// BenchmarkGroupPrompt plays groups of four episodes of one 1500-token
// prompt (32 sampled tokens each), as a GRPO step starts them, on an
// engine whose followers read the lead's prompt positions in place, on
// one that copies them, and on one that computes every prompt. Each iteration's task differs, so the kept caches
// of earlier groups share only the system prompt.
func BenchmarkGroupPrompt(b *testing.B) {
	m := smollm2(b)
	for _, mode := range []struct {
		name  string
		share int
		copy  bool
	}{{"share", 0, false}, {"share-copying", 0, true}, {"compute", -1, false}} {
		b.Run(mode.name, func(b *testing.B) {
			e := newEngine(b, Config{ShareRunning: mode.share, CopyShared: mode.copy})
			lines := taskLines(b, m, 1500)
			iter := 0
			for b.Loop() {
				runGroup(b, e, chatPrompt(b, m, taskText(iter, lines)), 4, 32, uint64(iter))
				iter++
			}
			st := e.Stats()
			b.ReportMetric(float64(iter)/b.Elapsed().Seconds(), "groups/s")
			b.ReportMetric(float64(st.PromptTokens)/float64(iter), "computed-prompt-tokens/group")
			b.ReportMetric(float64(st.CopiedTokens)/float64(iter), "copied-prompt-tokens/group")
		})
	}
}

// BenchmarkStepDecode plays a GRPO step as `frognano run` starts one: two
// groups of four episodes, each group on its own 3,000-token prompt, up to
// 128 sampled tokens each, on Q8_0 weights; the episodes of a group share
// their prompt's positions read in place ("share", the default on the CPU)
// or copied ("copy"). Every iteration's tasks differ. The decoding steps,
// eight sequences over long caches, are where the two differ.
func BenchmarkStepDecode(b *testing.B) {
	m := smollm2(b)
	lines := taskLines(b, m, 3000)
	for _, mode := range []struct {
		name string
		copy bool
	}{{"share", false}, {"copy", true}} {
		b.Run(mode.name, func(b *testing.B) {
			e := newEngine(b, Config{CopyShared: mode.copy, Quantization: "q8_0"})
			iter := 0
			for b.Loop() {
				var wg sync.WaitGroup
				for g := range 2 {
					wg.Go(func() {
						runGroup(b, e, chatPrompt(b, m, taskText(2*iter+g, lines)), 4, 128, uint64(iter))
					})
				}
				wg.Wait()
				iter++
			}
			st := e.Stats()
			b.ReportMetric(float64(st.GeneratedTokens)/float64(iter), "sampled-tokens/step")
			b.ReportMetric(float64(st.SharedTokens)/float64(iter), "shared-prompt-tokens/step")
		})
	}
}
