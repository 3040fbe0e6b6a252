package model

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/frognano/frognano/kernels/kernelstest"
)

// The tests and benchmarks here run the Qwen2.5-Coder-Instruct GGUFs that
// `frognano model pull qwen2.5-coder-0.5b` and `qwen2.5-coder-1.5b` store,
// or the files FROGNANO_TEST_QWEN05_GGUF / FROGNANO_TEST_QWEN15_GGUF name;
// they skip when neither is there. The 1.5B takes 6 GB in float32, so its
// tests run only when FROGNANO_TEST_QWEN15_GGUF names it. testdata/qwen25_coder_*_logits.golden
// hold logits computed by transformers' Qwen2ForCausalLM in PyTorch
// (float32, CPU) on the same dequantised weights: testdata/gen/gen_qwen.py
// writes them. A vocabulary of 151,936 makes whole rows large, so the
// golden files keep the 20 largest logits at every position and every
// 64th logit of the last one.

type qwenModel struct {
	env, store, golden string
	layers, heads, kv  int
}

var qwenModels = map[string]qwenModel{
	"0.5b": {"FROGNANO_TEST_QWEN05_GGUF", "qwen2.5-coder-0.5b", "testdata/qwen25_coder_05b_logits.golden", 24, 14, 2},
	"1.5b": {"FROGNANO_TEST_QWEN15_GGUF", "qwen2.5-coder-1.5b", "testdata/qwen25_coder_15b_logits.golden", 28, 12, 2},
}

// qwenStride is gen_qwen.py's STRIDE: last_logits keeps ids 0, 64, 128, ...
const qwenStride = 64

// loadQwen loads one of the models (not cached: the 1.5B is 6 GB in
// float32), or skips.
func loadQwen(t testing.TB, size string) (*Model, qwenModel) {
	t.Helper()
	q := qwenModels[size]
	if size == "1.5b" && os.Getenv(q.env) == "" {
		t.Skipf("%s is unset: the 1.5B model takes 6 GB in float32; set it to the GGUF (frognano model show %s prints its path)", q.env, q.store)
	}
	p := kernelstest.ModelFile(t, q.env, q.store)
	m, err := LoadGGUF(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.Architecture != "qwen2" || m.Config.VocabSize != 151936 || m.Config.Layers != q.layers ||
		m.Config.Heads != q.heads || m.Config.KVHeads != q.kv || m.Config.RopeTheta != 1e6 || !m.Config.QKVBias {
		t.Fatalf("config %+v", m.Config)
	}
	return m, q
}

func TestQwen05Golden(t *testing.T) { testQwenGolden(t, "0.5b") }
func TestQwen15Golden(t *testing.T) { testQwenGolden(t, "1.5b") }

// testQwenGolden compares, for each prompt, the 20 largest logits at every
// position and every 64th logit of the last position with PyTorch's, then
// generates greedily with the KV cache and compares the tokens with
// PyTorch's generate().
func testQwenGolden(t *testing.T, size string) {
	m, q := loadQwen(t, size)
	g, err := kernelstest.ReadGolden(q.golden)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	v := m.Config.VocabSize
	for _, c := range []string{"prose", "code", "unicode", "single", "chat"} {
		t.Run(c, func(t *testing.T) {
			ids := goldenIDs(t, g, c)
			got := forwardAll(t, m, ids)
			last := got[(len(ids)-1)*v:]
			var sampled []float32
			for id := 0; id < v; id += qwenStride {
				sampled = append(sampled, last[id])
			}
			want := g[c+"/last_logits"].Data()
			if len(want) != len(sampled) {
				t.Fatalf("golden %s/last_logits has %d values, want %d", c, len(want), len(sampled))
			}
			if msg := kernelstest.Mismatch(sampled, want, goldenTol); msg != "" {
				t.Errorf("last position, every %dth logit: %s", qwenStride, msg)
			}
			worst = math.Max(worst, maxDiff(sampled, want))
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

// TestQwen05Batched prefills prompts of different lengths together and
// decodes them together, against each alone.
func TestQwen05Batched(t *testing.T) {
	m, q := loadQwen(t, "0.5b")
	g, err := kernelstest.ReadGolden(q.golden)
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int32{goldenIDs(t, g, "prose"), goldenIDs(t, g, "single"), goldenIDs(t, g, "unicode"), goldenIDs(t, g, "code")[:9]}
	checkBatched(t, m, prompts, 4, cacheTol)
}

// Benchmarks: go test ./kernels/model -run '^$' -bench Qwen05 -benchtime 2x
// (Qwen15 for the 1.5B) reports tokens/s for generation at batch 1 and 16
// (each sequence after a 128-token prompt) and for a 128-token prefill, in
// wall-clock time and per CPU-second of this process (tokens/cpu-s): on a
// shared machine the second is the steadier figure; on an idle one with P
// cores the wall rate approaches P times it when the engine keeps every
// core busy.

func BenchmarkQwen05(b *testing.B) { benchQwen(b, "0.5b") }
func BenchmarkQwen15(b *testing.B) { benchQwen(b, "1.5b") }

func benchQwen(b *testing.B, size string) {
	m, _ := loadQwen(b, size)
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("generate/batch=%d", batch), func(b *testing.B) {
			const prompt, steps = 128, 32
			r := m.NewRunner()
			caches := make([]*Cache, batch)
			prompts := make([][]int32, batch)
			next := make([][]int32, batch)
			for i := range caches {
				caches[i] = m.NewCache(prompt + steps)
				prompts[i] = benchTokens(prompt, i)
				next[i] = make([]int32, 1)
			}
			var cpu time.Duration
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
				start := processCPU()
				for s := range steps {
					for i := range next {
						next[i][0] = int32(100 + (s*7+i)%1000)
					}
					if _, err := r.Forward(caches, next, false); err != nil {
						b.Fatal(err)
					}
				}
				cpu += processCPU() - start
			}
			b.ReportMetric(float64(b.N*steps*batch)/b.Elapsed().Seconds(), "tokens/s")
			reportCPURate(b, b.N*steps*batch, cpu)
		})
	}
	b.Run("prefill/tokens=128", func(b *testing.B) {
		const n = 128
		r, c := m.NewRunner(), m.NewCache(n)
		ids := [][]int32{benchTokens(n, 0)}
		b.ResetTimer()
		start := processCPU()
		for range b.N {
			c.Reset()
			if _, err := r.Forward([]*Cache{c}, ids, false); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tokens/s")
		reportCPURate(b, b.N*n, processCPU()-start)
	})
}

func reportCPURate(b *testing.B, tokens int, cpu time.Duration) {
	if cpu > 0 {
		b.ReportMetric(float64(tokens)/cpu.Seconds(), "tokens/cpu-s")
	}
}
