package sampler

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// The tests run SmolLM2-135M-Instruct (Q4_1 GGUF) named by
// FROGNANO_TEST_GGUF, the model of kernels/model's own tests.

var (
	smolOnce  sync.Once
	smolModel *model.Model
	smolErr   error
)

// smollm2 loads FROGNANO_TEST_GGUF once, or skips.
func smollm2(t testing.TB) *model.Model {
	t.Helper()
	p := os.Getenv("FROGNANO_TEST_GGUF")
	if p == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: set it to SmolLM2-135M-Instruct.Q4_1.gguf (`frognano model pull smollm2-135m`)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("FROGNANO_TEST_GGUF=%s: %v", p, err)
	}
	smolOnce.Do(func() { smolModel, smolErr = model.LoadGGUF(p, model.Options{}) })
	if smolErr != nil {
		t.Fatal(smolErr)
	}
	return smolModel
}

// chatPrompt renders a user turn as the model's chat template does.
func chatPrompt(t testing.TB, m *model.Model, user string) []int32 {
	t.Helper()
	tok := m.Tokenizer
	text, err := tokenizer.RenderChat([]tokenizer.Message{{Role: "user", Content: user}}, tokenizer.ChatOptions{
		DefaultSystem:       tokenizer.DefaultSystemFor(tok.ChatTemplate()),
		AddGenerationPrompt: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encode(text)
}

func imEnd(t testing.TB, m *model.Model) int32 {
	t.Helper()
	id, ok := m.Tokenizer.TokenID("<|im_end|>")
	if !ok {
		t.Fatal("no <|im_end|> token")
	}
	return id
}

var questions = []string{
	"What is the capital of France?",
	"Write a haiku about the sea.",
	"List three prime numbers.",
	"Explain what a linked list is in one sentence.",
	"Why is the sky blue?",
	"Name a famous physicist.",
}

func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.Model == nil {
		cfg.Model = smollm2(t)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// lpTol bounds log-probability differences between batch layouts and
// between the engine and a separate forward pass: both differ only in
// float32 summation order (kernels/model's cacheTol is 2e-4 on logits).
const lpTol = 2e-3

func closeLogProbs(a, b []float32) (int, bool) {
	for i := range min(len(a), len(b)) {
		if math.Abs(float64(a[i]-b[i])) > lpTol {
			return i, false
		}
	}
	return -1, len(a) == len(b)
}

// TestBatchEqualsAlone runs each request alone, then all at once (more
// requests than MaxSequences, so some join mid-flight, with prompts read in
// chunks beside decoding sequences), with greedy and with seeded sampling:
// the tokens must be the same, and equal to model.Generate's.
func TestBatchEqualsAlone(t *testing.T) {
	m := smollm2(t)
	e := newEngine(t, Config{MaxSequences: 4, MaxStepTokens: 40})
	stop := imEnd(t, m)
	for _, mode := range []struct {
		name string
		p    sample.Params
	}{{"greedy", sample.Params{}}, {"seeded", sample.Params{Temperature: 0.8, TopP: 0.95}}} {
		t.Run(mode.name, func(t *testing.T) {
			reqs := make([]policy.GenerateRequest, len(questions))
			for i, q := range questions {
				reqs[i] = policy.GenerateRequest{PromptIDs: chatPrompt(t, m, q), MaxTokens: 24, Sampling: mode.p, Seed: uint64(100 + i), Stop: []int32{stop}}
			}
			alone := make([]policy.GenerateResult, len(reqs))
			for i, r := range reqs {
				res, err := e.Generate(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				alone[i] = res
				// model.Generate is the reference: same seed stream, one
				// sequence, no scheduler.
				var want []int32
				reason, err := m.Generate(context.Background(), m.NewRunner(), m.NewSequence(512), r.PromptIDs,
					model.GenerateOptions{MaxTokens: r.MaxTokens, Sampling: r.Sampling, Seed: r.Seed, Stop: r.Stop},
					func(tok int32) error { want = append(want, tok); return nil })
				if err != nil {
					t.Fatal(err)
				}
				got := res.TokenIDs
				if reason == model.StopToken {
					want = append(want, stop)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("request %d: engine %v, model.Generate %v (%s)", i, got, want, reason)
				}
			}
			batched := make([]policy.GenerateResult, len(reqs))
			errs := make([]error, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				wg.Go(func() { batched[i], errs[i] = e.Generate(context.Background(), r) })
			}
			wg.Wait()
			for i := range reqs {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				if !slices.Equal(alone[i].TokenIDs, batched[i].TokenIDs) || alone[i].Finish != batched[i].Finish {
					t.Fatalf("request %d: alone %v (%s), batched %v (%s)", i, alone[i].TokenIDs, alone[i].Finish, batched[i].TokenIDs, batched[i].Finish)
				}
				if j, ok := closeLogProbs(alone[i].LogProbs, batched[i].LogProbs); !ok {
					t.Fatalf("request %d: log-prob %d alone %v, batched %v", i, j, alone[i].LogProbs, batched[i].LogProbs)
				}
				text, _ := m.Tokenizer.Decode(batched[i].TokenIDs)
				t.Logf("%d (%s, %d tokens): %q", i, batched[i].Finish, len(batched[i].TokenIDs), text)
			}
			if st := e.Stats(); st.Running != 0 || st.Waiting != 0 {
				t.Fatalf("stats after all finished: %+v", st)
			}
		})
	}
}

// TestLogProbs checks the sampled tokens' log-probabilities against
// log-softmax(logits/T) of a separate forward pass over prompt and
// continuation.
func TestLogProbs(t *testing.T) {
	m := smollm2(t)
	e := newEngine(t, Config{})
	for _, temp := range []float32{0, 0.7} {
		prompt := chatPrompt(t, m, questions[1])
		res, err := e.Generate(context.Background(), policy.GenerateRequest{
			PromptIDs: prompt, MaxTokens: 12, Sampling: sample.Params{Temperature: temp, TopK: 40}, Seed: 7,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.TokenIDs) != 12 || len(res.LogProbs) != 12 || res.Finish != policy.FinishLength {
			t.Fatalf("T=%v: %d tokens, %d log-probs, %s", temp, len(res.TokenIDs), len(res.LogProbs), res.Finish)
		}
		seq := append(slices.Clone(prompt), res.TokenIDs...)
		cache := m.NewCache(len(seq))
		logits, err := m.NewRunner().Forward([]*model.Cache{cache}, [][]int32{seq}, true)
		if err != nil {
			t.Fatal(err)
		}
		scale := 1.0
		if temp > 0 {
			scale = 1 / float64(temp)
		}
		for i, tok := range res.TokenIDs {
			row := logits.Row(len(prompt) - 1 + i)
			want := logSoftmaxAt(row, scale, tok)
			if d := math.Abs(want - float64(res.LogProbs[i])); d > lpTol {
				t.Fatalf("T=%v token %d (%d): engine log-prob %v, forward pass %v", temp, i, tok, res.LogProbs[i], want)
			}
			if res.LogProbs[i] > 0 {
				t.Fatalf("positive log-prob %v", res.LogProbs[i])
			}
		}
	}
}

func logSoftmaxAt(row []float32, scale float64, tok int32) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = max(mx, float64(v)*scale)
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(float64(v)*scale - mx)
	}
	return float64(row[tok])*scale - mx - math.Log(sum)
}

// TestLimits covers the three ways a continuation ends, and the requests
// refused before they reach a batch.
func TestLimits(t *testing.T) {
	m := smollm2(t)
	prompt := chatPrompt(t, m, questions[0])
	e := newEngine(t, Config{ContextLength: len(prompt) + 5})
	ctx := context.Background()

	ref, err := e.Generate(ctx, policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.TokenIDs) != 4 || ref.Finish != policy.FinishLength {
		t.Fatalf("max tokens 4: %v %s", ref.TokenIDs, ref.Finish)
	}
	// Stopping on the third greedy token: it is the last one returned.
	stopAt := ref.TokenIDs[2]
	k := slices.Index(ref.TokenIDs, stopAt)
	res, err := e.Generate(ctx, policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 4, Stop: []int32{stopAt}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Finish != policy.FinishStop || !slices.Equal(res.TokenIDs, ref.TokenIDs[:k+1]) {
		t.Fatalf("stop on %d: %v %s, want %v", stopAt, res.TokenIDs, res.Finish, ref.TokenIDs[:k+1])
	}
	// A stop sequence of the second and third greedy tokens ends the
	// turn after them (they stay in it); one that never occurs does not.
	seq := ref.TokenIDs[1:3]
	res, err = e.Generate(ctx, policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 4, StopSeqs: [][]int32{{ref.TokenIDs[3], 1 << 10}, seq}})
	if err != nil {
		t.Fatal(err)
	}
	if end := policy.StopSeqEnd(ref.TokenIDs, [][]int32{seq}); res.Finish != policy.FinishStopSeq || end > 3 || !slices.Equal(res.TokenIDs, ref.TokenIDs[:end]) {
		t.Fatalf("stop sequence %v: %v %s, want %v", seq, res.TokenIDs, res.Finish, ref.TokenIDs[:3])
	}
	// No MaxTokens: the context (prompt + 5 positions) ends it after 6
	// tokens, the last one sampled but not cached.
	res, err = e.Generate(ctx, policy.GenerateRequest{PromptIDs: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if res.Finish != policy.FinishContext || len(res.TokenIDs) != 6 || !slices.Equal(res.TokenIDs[:4], ref.TokenIDs) {
		t.Fatalf("context: %v %s", res.TokenIDs, res.Finish)
	}
	// A MaxTokens as large as an int can hold is the context too (it once
	// overflowed prompt + MaxTokens and crashed the engine).
	res, err = e.Generate(ctx, policy.GenerateRequest{PromptIDs: prompt, MaxTokens: math.MaxInt})
	if err != nil || res.Finish != policy.FinishContext || len(res.TokenIDs) != 6 {
		t.Fatalf("MaxTokens MaxInt: %v %s %v", res.TokenIDs, res.Finish, err)
	}

	bad := []struct {
		name string
		req  policy.GenerateRequest
		want error
	}{
		{"empty prompt", policy.GenerateRequest{}, ErrBadRequest},
		{"negative max tokens", policy.GenerateRequest{PromptIDs: prompt, MaxTokens: -1}, ErrBadRequest},
		{"token outside vocabulary", policy.GenerateRequest{PromptIDs: []int32{1, 49152}}, ErrBadRequest},
		{"negative token", policy.GenerateRequest{PromptIDs: []int32{-3}}, ErrBadRequest},
		{"stop outside vocabulary", policy.GenerateRequest{PromptIDs: prompt, Stop: []int32{1 << 20}}, ErrBadRequest},
		{"stop sequence outside vocabulary", policy.GenerateRequest{PromptIDs: prompt, StopSeqs: [][]int32{{1, -2}}}, ErrBadRequest},
		{"negative temperature", policy.GenerateRequest{PromptIDs: prompt, Sampling: sample.Params{Temperature: -1}}, ErrBadRequest},
		{"NaN temperature", policy.GenerateRequest{PromptIDs: prompt, Sampling: sample.Params{Temperature: float32(math.NaN())}}, ErrBadRequest},
		{"top-p above 1", policy.GenerateRequest{PromptIDs: prompt, Sampling: sample.Params{Temperature: 1, TopP: 1.5}}, ErrBadRequest},
		{"prompt fills the context", policy.GenerateRequest{PromptIDs: append(slices.Clone(prompt), prompt[:5]...)}, ErrPromptTooLong},
	}
	for _, c := range bad {
		if _, err := e.Generate(ctx, c.req); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// The engine still works after refusing.
	if res, err := e.Generate(ctx, policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 4}); err != nil || !slices.Equal(res.TokenIDs, ref.TokenIDs) {
		t.Fatalf("after bad requests: %v %v", res.TokenIDs, err)
	}
}

// TestCancel ends a long generation from its context while another one
// runs beside it; the other is unaffected and the engine empties.
func TestCancel(t *testing.T) {
	m := smollm2(t)
	e := newEngine(t, Config{})
	prompt := chatPrompt(t, m, questions[2])
	ref, err := e.Generate(context.Background(), policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	long, err := e.Start(ctx, policy.GenerateRequest{PromptIDs: chatPrompt(t, m, questions[1]), MaxTokens: 4000})
	if err != nil {
		t.Fatal(err)
	}
	other := make(chan policy.GenerateResult, 1)
	go func() {
		res, err := e.Generate(context.Background(), policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 16})
		if err != nil {
			t.Error(err)
		}
		other <- res
	}()
	for n := 0; n < 3; {
		ids, _, err := long.Next()
		if err != nil {
			t.Fatal(err)
		}
		n += len(ids)
	}
	cancel()
	if _, err := long.Result(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled generation: %v", err)
	}
	if _, _, err := long.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v", err)
	}
	if res := <-other; !slices.Equal(res.TokenIDs, ref.TokenIDs) {
		t.Fatalf("neighbour of a cancelled request: %v, want %v", res.TokenIDs, ref.TokenIDs)
	}
	// The cancelled sequence left the batch: a fresh request runs alone.
	if _, err := e.Generate(context.Background(), policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats(); st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("stats: %+v", st)
	}
	// A context already cancelled fails at once.
	if _, err := e.Generate(ctx, policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 2}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
	e.Close()
	if _, err := e.Generate(context.Background(), policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 2}); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed engine: %v", err)
	}
}

// hostParams copies the model's weights to the host, by name.
func hostParams(m *model.Model) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range m.Params() {
		n := 1
		for _, d := range p.Value.Shape() {
			n *= d
		}
		v := make([]float32, n)
		m.Backend().ToHost(v, p.Value)
		out[p.Name] = v
	}
	return out
}

// TestVersionSwap publishes version 2 (the same model with its final norm
// halved, so every log-probability changes) through a checkpoint store
// while requests run, then version 3 (the original weights) directly.
// Every result must match, token for token, a reference computed wholly
// under the version it reports; a request asking for version 3 waits.
func TestVersionSwap(t *testing.T) {
	for _, mode := range []string{SwapDrain, SwapBetweenSteps} {
		t.Run(mode, func(t *testing.T) { testVersionSwap(t, mode) })
	}
}

// halvedNorm returns the model's weights and a second version of them, the
// final norm's weights halved (every logit halved: a flatter distribution).
func halvedNorm(m *model.Model) (orig, halved map[string][]float32) {
	orig = hostParams(m)
	halved = map[string][]float32{}
	for k, v := range orig {
		halved[k] = v
	}
	norm := slices.Clone(orig["model.norm.weight"])
	for i := range norm {
		norm[i] *= 0.5
	}
	halved["model.norm.weight"] = norm
	return orig, halved
}

// testVersionSwap swaps versions beside concurrent requests: each request
// one version sampled matches that version's reference (with SwapDrain,
// every request; with SwapBetweenSteps, a request in flight at the swap
// reports both versions instead).
func testVersionSwap(t *testing.T, mode string) {
	m := smollm2(t)
	orig, halved := halvedNorm(m)
	defer func() {
		if err := m.SetParams(orig); err != nil {
			t.Fatal(err)
		}
	}()
	norm := halved["model.norm.weight"]

	store := persistence.NewMemory().Checkpoints()
	var tensors []persistence.Tensor
	for _, p := range m.Params() {
		v := halved[p.Name]
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		shape := make([]int64, len(p.Value.Shape()))
		for i, d := range p.Value.Shape() {
			shape[i] = int64(d)
		}
		tensors = append(tensors, persistence.Tensor{Name: p.Name, DType: records.DType_DTYPE_F32, Shape: shape, Data: b})
	}
	ctx := context.Background()
	if err := store.Save(ctx, &records.Checkpoint{RunId: "run", Step: 10, PolicyVersion: 2}, tensors, nil); err != nil {
		t.Fatal(err)
	}
	tensors = nil

	e := newEngine(t, Config{Version: 1, Checkpoints: store, MaxSequences: 3, Swap: mode})
	req := func(i int) policy.GenerateRequest {
		return policy.GenerateRequest{PromptIDs: chatPrompt(t, m, questions[i%len(questions)]), MaxTokens: 10, Sampling: sample.Params{Temperature: 1}, Seed: uint64(i)}
	}
	const n = 6
	refs := map[int64][]policy.GenerateResult{}
	for i := range n {
		res, err := e.Generate(ctx, req(i))
		if err != nil {
			t.Fatal(err)
		}
		refs[1] = append(refs[1], res)
	}

	results := make([]policy.GenerateResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := e.Generate(ctx, req(i))
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		})
	}
	if err := e.UpdateWeights(ctx, Update{RunID: "run", Step: 10, Version: 2}); err != nil {
		t.Fatal(err)
	}
	if v := e.Version(); v != 2 {
		t.Fatalf("version after update: %d", v)
	}
	wg.Wait()
	for i := range n {
		res, err := e.Generate(ctx, req(i))
		if err != nil {
			t.Fatal(err)
		}
		if res.PolicyVersion != 2 {
			t.Fatalf("after the swap: version %d", res.PolicyVersion)
		}
		refs[2] = append(refs[2], res)
	}
	if slices.Equal(refs[1][0].LogProbs, refs[2][0].LogProbs) {
		t.Fatal("version 2's weights did not change the log-probabilities")
	}
	for i, res := range results {
		ref := refs[res.PolicyVersion]
		if ref == nil {
			t.Fatalf("request %d: version %d", i, res.PolicyVersion)
		}
		if res.LastPolicyVersion != 0 {
			if mode == SwapDrain || res.PolicyVersion != 1 || res.LastPolicyVersion != 2 {
				t.Fatalf("request %d (swap %s): versions %d to %d", i, mode, res.PolicyVersion, res.LastPolicyVersion)
			}
			continue // sampled by both: no single reference
		}
		if !slices.Equal(res.TokenIDs, ref[i].TokenIDs) {
			t.Fatalf("request %d (version %d): %v, reference %v", i, res.PolicyVersion, res.TokenIDs, ref[i].TokenIDs)
		}
		if j, ok := closeLogProbs(res.LogProbs, ref[i].LogProbs); !ok {
			t.Fatalf("request %d (version %d): log-prob %d differs from the reference: %v vs %v", i, res.PolicyVersion, j, res.LogProbs, ref[i].LogProbs)
		}
	}

	// Stale updates are refused; a request for version 3 waits for it.
	if err := e.UpdateWeights(ctx, Update{RunID: "run", Step: 10, Version: 2}); !errors.Is(err, ErrStaleVersion) {
		t.Fatalf("stale update: %v", err)
	}
	waiter := make(chan policy.GenerateResult, 1)
	go func() {
		r := req(0)
		r.MinPolicyVersion = 3
		res, err := e.Generate(ctx, r)
		if err != nil {
			t.Error(err)
		}
		waiter <- res
	}()
	// Requests without a minimum go past the waiting one.
	if res, err := e.Generate(ctx, req(1)); err != nil || res.PolicyVersion != 2 {
		t.Fatalf("request beside a waiting one: %v %v", res.PolicyVersion, err)
	}
	if st := e.Stats(); st.Waiting != 1 {
		t.Fatalf("the version-3 request is not waiting: %+v", st)
	}
	if err := e.SetWeights(ctx, 3, orig); err != nil {
		t.Fatal(err)
	}
	res := <-waiter
	if res.PolicyVersion != 3 || !slices.Equal(res.TokenIDs, refs[1][0].TokenIDs) || !slices.Equal(res.LogProbs, refs[1][0].LogProbs) {
		t.Fatalf("version 3 (the original weights): %v %v, want %v %v", res.PolicyVersion, res.TokenIDs, refs[1][0].TokenIDs, refs[1][0].LogProbs)
	}
	if err := e.SetWeights(ctx, 4, map[string][]float32{"model.norm.weight": norm}); err == nil || e.Version() != 3 {
		t.Fatalf("partial weights: %v, version %d", err, e.Version())
	}
}

// TestSwapBetweenSteps: by default a weight update does not wait for the
// sequences in flight. SetWeights returns while a long generation runs; the
// generation goes on with the new weights and reports both versions; its
// tokens up to the swap are the old version's alone; its cache, which holds
// the old version's keys and values, is not kept for a later request. With
// SwapDrain the same update waits for the generation, all of it the old
// version's.
func TestSwapBetweenSteps(t *testing.T) {
	m := smollm2(t)
	orig, halved := halvedNorm(m)
	defer func() {
		if err := m.SetParams(orig); err != nil {
			t.Fatal(err)
		}
	}()
	ctx := context.Background()
	// No stop id: every generation runs to MaxTokens.
	long := policy.GenerateRequest{PromptIDs: chatPrompt(t, m, questions[1]), MaxTokens: 96, Sampling: sample.Params{Temperature: 1}, Seed: 7}
	const before = 6 // tokens read before the swap

	for _, mode := range []string{SwapBetweenSteps, SwapDrain} {
		t.Run(mode, func(t *testing.T) {
			if err := m.SetParams(orig); err != nil {
				t.Fatal(err)
			}
			e, err := New(Config{Model: m, Version: 1, MaxSequences: 4, Swap: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			ref1, err := e.Generate(ctx, long)
			if err != nil {
				t.Fatal(err)
			}
			st, err := e.Start(ctx, long)
			if err != nil {
				t.Fatal(err)
			}
			var read []int32
			for len(read) < before {
				ids, _, err := st.Next()
				if err != nil {
					t.Fatal(err)
				}
				read = append(read, ids...)
			}
			if err := e.SetWeights(ctx, 2, halved); err != nil {
				t.Fatal(err)
			}
			stats := e.Stats()
			if mode == SwapBetweenSteps {
				// A request with the same prompt while the crossed
				// sequence runs must not copy its prompt positions,
				// which the old version computed.
				copied := e.Stats().CopiedTokens
				side := long
				side.Seed, side.MaxTokens = 8, 2
				r, err := e.Generate(ctx, side)
				if err != nil {
					t.Fatal(err)
				}
				if r.PolicyVersion != 2 || r.LastPolicyVersion != 0 {
					t.Fatalf("a request after the swap: versions %d to %d", r.PolicyVersion, r.LastPolicyVersion)
				}
				if got := e.Stats().CopiedTokens; got != copied {
					t.Fatalf("a request after the swap copied %d prompt tokens the old version computed", got-copied)
				}
			}
			res, err := st.Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(res.TokenIDs) != long.MaxTokens {
				t.Fatalf("%d tokens, want %d", len(res.TokenIDs), long.MaxTokens)
			}
			if !slices.Equal(res.TokenIDs[:len(read)], ref1.TokenIDs[:len(read)]) {
				t.Fatalf("the tokens before the swap are not version 1's: %v, want %v", res.TokenIDs[:len(read)], ref1.TokenIDs[:len(read)])
			}
			sameAsRef1 := slices.Equal(res.TokenIDs, ref1.TokenIDs)
			if _, ok := closeLogProbs(res.LogProbs, ref1.LogProbs); !ok {
				sameAsRef1 = false
			}
			switch mode {
			case SwapBetweenSteps:
				if stats.Swaps != 1 || stats.AcrossSwaps != 1 {
					t.Fatalf("stats right after SetWeights: %+v, want 1 swap with 1 sequence in flight", stats)
				}
				if res.PolicyVersion != 1 || res.LastPolicyVersion != 2 {
					t.Fatalf("versions %d to %d, want 1 to 2", res.PolicyVersion, res.LastPolicyVersion)
				}
				if sameAsRef1 {
					t.Fatal("the generation is version 1's from end to end: the new weights did not take over in flight")
				}
			case SwapDrain:
				if stats.Swaps != 1 || stats.AcrossSwaps != 0 {
					t.Fatalf("stats right after SetWeights: %+v, want 1 swap with none in flight", stats)
				}
				if res.PolicyVersion != 1 || res.LastPolicyVersion != 0 || !sameAsRef1 {
					t.Fatalf("versions %d to %d, same as version 1's alone: %v; want all of it version 1's", res.PolicyVersion, res.LastPolicyVersion, sameAsRef1)
				}
			}
			// The next turn of the conversation: its prompt extends what
			// the crossed sequence's cache holds.
			next := long
			next.PromptIDs, next.MaxTokens = append(slices.Clone(long.PromptIDs), res.TokenIDs...), 4
			reused := e.Stats().ReusedTokens
			ref2, err := e.Generate(ctx, next)
			if err != nil {
				t.Fatal(err)
			}
			if ref2.PolicyVersion != 2 || ref2.LastPolicyVersion != 0 {
				t.Fatalf("after the swap: versions %d to %d", ref2.PolicyVersion, ref2.LastPolicyVersion)
			}
			if got := e.Stats().ReusedTokens; got != reused {
				t.Fatalf("a request after the swap reused %d tokens of a cache the old version wrote", got-reused)
			}
		})
	}
}

// BenchmarkContinuousBatching generates 16 requests of 64 tokens through
// the engine, all at once (continuous batching) and one at a time, and
// reports generated tokens per second for each.
func BenchmarkContinuousBatching(b *testing.B) {
	m := smollm2(b)
	var reqs []policy.GenerateRequest
	for i := range 16 {
		reqs = append(reqs, policy.GenerateRequest{
			PromptIDs: chatPrompt(b, m, fmt.Sprintf("%s (%d)", questions[i%len(questions)], i)),
			MaxTokens: 64, Sampling: sample.Params{Temperature: 0.7}, Seed: uint64(i),
		})
	}
	for _, mode := range []string{"concurrent", "one-at-a-time"} {
		b.Run(mode, func(b *testing.B) {
			e := newEngine(b, Config{MaxSequences: 16})
			var tokens int
			for b.Loop() {
				if mode == "concurrent" {
					var wg sync.WaitGroup
					var mu sync.Mutex
					for _, r := range reqs {
						wg.Go(func() {
							res, err := e.Generate(context.Background(), r)
							if err != nil {
								b.Error(err)
							}
							mu.Lock()
							tokens += len(res.TokenIDs)
							mu.Unlock()
						})
					}
					wg.Wait()
				} else {
					for _, r := range reqs {
						res, err := e.Generate(context.Background(), r)
						if err != nil {
							b.Fatal(err)
						}
						tokens += len(res.TokenIDs)
					}
				}
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(e.Stats().Steps)/float64(b.N), "steps/op")
		})
	}
}

// TestPartialPublication: a run that trains only some weights publishes
// only those; the engine applies them over the base model (the others keep
// their values) and over the same run's earlier versions, and refuses them
// over another run's weights.
func TestPartialPublication(t *testing.T) {
	m := smollm2(t)
	orig := hostParams(m)
	defer func() {
		if err := m.SetParams(orig); err != nil {
			t.Fatal(err)
		}
	}()
	ctx := context.Background()
	store := persistence.NewMemory().Checkpoints()
	save := func(run string, step int64, names ...string) map[string][]float32 {
		want := map[string][]float32{}
		for _, p := range m.Params() {
			if len(names) > 0 && !slices.Contains(names, p.Name) {
				continue
			}
			v := slices.Clone(orig[p.Name])
			for i := range v {
				v[i] *= 1 + 0.1*float32(step)
			}
			want[p.Name] = v
		}
		publishRun(t, store, m, run, want, step, step)
		return want
	}
	top := []string{"model.norm.weight", "model.layers.29.mlp.down_proj.weight"}
	e := newEngine(t, Config{Version: 1, Checkpoints: store, MaxSequences: 2})

	want := save("a", 2, top...)
	if err := e.UpdateWeights(ctx, Update{RunID: "a", Step: 2, Version: 2}); err != nil {
		t.Fatalf("a partial publication over the base model: %v", err)
	}
	got := hostParams(m)
	for name, v := range orig {
		w, trained := want[name]
		if !trained {
			w = v
		}
		if !slices.Equal(got[name], w) {
			t.Fatalf("after run a's version 2: %s is not %s", name, map[bool]string{true: "the published value", false: "the base value"}[trained])
		}
	}
	save("a", 3, top...)
	if err := e.UpdateWeights(ctx, Update{RunID: "a", Step: 3, Version: 3}); err != nil {
		t.Fatalf("a partial publication over the same run's: %v", err)
	}
	save("b", 4)
	if err := e.UpdateWeights(ctx, Update{RunID: "b", Step: 4, Version: 4}); err != nil {
		t.Fatalf("a whole publication: %v", err)
	}
	save("a", 5, top...)
	err := e.UpdateWeights(ctx, Update{RunID: "a", Step: 5, Version: 5})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "run b") {
		t.Fatalf("run a's partial version over run b's weights: %v, want a refusal naming run b", err)
	}
	if e.Version() != 4 {
		t.Fatalf("version %d after the refusal, want 4", e.Version())
	}
}

// BenchmarkSwapInFlight measures what a weight swap costs generation, as
// in an asynchronous run: 16 clients keep the engine full with requests of
// varied lengths (sampled at temperature 1, ending at <|im_end|> or after
// 192 tokens); each iteration runs 5 s, then publishes a new version and
// counts the tokens generated in the next 30 s. With SwapDrain nothing is
// admitted until the longest sequence in flight has finished; with
// SwapBetweenSteps the swap takes effect at the next forward pass. It
// reports the swap's latency (SetWeights' call to return) and the tokens/s
// of the 30 s after the swap's call. The two modes run one after the other
// in one invocation:
//
//	FROGNANO_TEST_GGUF=… go test ./actors/sampler -run '^$' -bench SwapInFlight -benchtime 3x
func BenchmarkSwapInFlight(b *testing.B) {
	m := smollm2(b)
	orig, halved := halvedNorm(m)
	defer func() {
		if err := m.SetParams(orig); err != nil {
			b.Fatal(err)
		}
	}()
	stop := imEnd(b, m)
	for _, mode := range []string{SwapDrain, SwapBetweenSteps} {
		b.Run(mode, func(b *testing.B) {
			if err := m.SetParams(orig); err != nil {
				b.Fatal(err)
			}
			e, err := New(Config{Model: m, Version: 1, MaxSequences: 16, Swap: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for c := range 16 {
				wg.Go(func() {
					for i := 0; ctx.Err() == nil; i++ {
						q := questions[(c+i)%len(questions)] + fmt.Sprintf(" (%d)", c)
						_, _ = e.Generate(ctx, policy.GenerateRequest{
							PromptIDs: chatPrompt(b, m, q), MaxTokens: 192, Stop: []int32{stop},
							Sampling: sample.Params{Temperature: 1}, Seed: uint64(1000*c + i),
						})
					}
				})
			}
			var swapSecs, tokPerSec float64
			version := int64(1)
			for b.Loop() {
				time.Sleep(5 * time.Second)
				version++
				w := halved
				if version%2 == 1 {
					w = orig
				}
				before := e.Stats().GeneratedTokens
				start := time.Now()
				done := make(chan time.Duration, 1)
				go func() {
					if err := e.SetWeights(context.Background(), version, w); err != nil {
						b.Error(err)
					}
					done <- time.Since(start)
				}()
				time.Sleep(30 * time.Second)
				tokPerSec += float64(e.Stats().GeneratedTokens-before) / time.Since(start).Seconds()
				swapSecs += (<-done).Seconds()
			}
			cancel()
			wg.Wait()
			b.ReportMetric(swapSecs/float64(b.N), "swap_s")
			b.ReportMetric(tokPerSec/float64(b.N), "tokens/s_after_swap")
			b.ReportMetric(float64(e.Stats().AcrossSwaps)/float64(b.N), "in_flight/swap")
		})
	}
}
