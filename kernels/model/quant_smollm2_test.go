package model

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels/kernelstest"
)

// q8LogitTol bounds the distance of Q8_0 logits from float32 logits on
// SmolLM2-135M (logits over about ±30): int8 weights and activations move
// them by 0.24 on average and by at most 2.3 (a tail token's) over the
// golden prompts (TestSmolLM2Q8Logits logs the figures).
var q8LogitTol = kernelstest.Tolerance{Abs: 3, Rel: 0}

// q8CacheTol bounds the difference between paths through the q8_0 model
// (full pass, incremental, batched). The products' int8 sums are the same
// on every path, but a float32 difference in the last bit upstream (an
// attention product of another shape) can move an activation across a
// rounding boundary of its int8 block, a whole step, and the difference
// grows from layer to layer: the paths differ by up to 1.33 in a logit
// (0.9 with the Go loops everywhere), where float32 paths differ by 3e-5
// (cacheTol). q8_0-f32, with float32 activations, keeps to cacheTol.
var q8CacheTol = kernelstest.Tolerance{Abs: 2, Rel: 0}

// q8LogProbTol bounds |Δ log p| of the float32 model's most likely token
// at each position: what a sampled token's log-probability moves by.
const q8LogProbTol = 0.5

// freshSmolLM2 loads FROGNANO_TEST_GGUF anew (quantizing the shared one
// would change what the other tests compute), or skips.
func freshSmolLM2(t testing.TB) *Model {
	t.Helper()
	smollm2(t) // skips when unset
	m, err := LoadGGUF(os.Getenv("FROGNANO_TEST_GGUF"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func logSoftmax64(row []float32) []float64 {
	mx := float64(row[0])
	for _, v := range row {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(s)
	out := make([]float64, len(row))
	for i, v := range row {
		out[i] = float64(v) - lse
	}
	return out
}

// TestSmolLM2Q8Logits runs the golden prompts through SmolLM2 with float32
// and with Q8_0 weights (requantized from the file's Q4_1 values) and
// bounds the difference of every position's logits, and of the log-prob
// of the float32 model's top token; then checks that the quantized model
// decodes incrementally and in batches as its own full pass does (the
// int8 activations are quantized row by row, so a batch's layout changes
// float32 summation order only).
//
// With float32 activations (q8_0-f32) the paths differ by float32
// summation order only, within cacheTol.
func TestSmolLM2Q8Logits(t *testing.T) {
	m := freshSmolLM2(t)
	g := readSmolGolden(t)
	cases := []string{"prose", "code", "single", "chat"}
	want := map[string][]float32{}
	for _, c := range cases {
		want[c] = forwardAll(t, m, goldenIDs(t, g, c))
	}
	for _, q := range []struct {
		typ     string
		pathTol kernelstest.Tolerance
	}{{"q8_0", q8CacheTol}, {"q8_0-f32", cacheTol}} {
		t.Run(q.typ, func(t *testing.T) { checkQ8Logits(t, m, g, q.typ, cases, want, q.pathTol) })
	}
}

func checkQ8Logits(t *testing.T, m *Model, g kernelstest.Golden, typ string, cases []string, want map[string][]float32, pathTol kernelstest.Tolerance) {
	if err := m.SetQuantization(typ); err != nil {
		t.Fatal(err)
	}
	if m.Quantization() != typ || m.QuantizedBytes() == 0 {
		t.Fatalf("quantization %q, %d bytes", m.Quantization(), m.QuantizedBytes())
	}
	v := m.Config.VocabSize
	var maxLogit, sumLogit, maxLP, sumLP float64
	var n, rows, agree int
	for _, c := range cases {
		ids := goldenIDs(t, g, c)
		got := forwardAll(t, m, ids)
		if msg := kernelstest.Mismatch(got, want[c], q8LogitTol); msg != "" {
			t.Errorf("%s: Q8_0 logits against float32: %s", c, msg)
		}
		for p := range len(ids) {
			gr, wr := got[p*v:(p+1)*v], want[c][p*v:(p+1)*v]
			for i := range gr {
				d := math.Abs(float64(gr[i] - wr[i]))
				maxLogit = math.Max(maxLogit, d)
				sumLogit += d
				n++
			}
			top := argmax(wr)
			if argmax(gr) == top {
				agree++
			}
			d := math.Abs(logSoftmax64(gr)[top] - logSoftmax64(wr)[top])
			if d > q8LogProbTol {
				t.Errorf("%s position %d: log p of token %d moved by %.3g", c, p, top, d)
			}
			maxLP = math.Max(maxLP, d)
			sumLP += d
			rows++
		}
	}
	t.Logf("%s vs float32 over %d positions: |Δ logit| mean %.3g max %.3g; |Δ log p(top token)| mean %.3g max %.3g; same top token at %d of %d",
		typ, rows, sumLogit/float64(n), maxLogit, sumLP/float64(rows), maxLP, agree, rows)
	if agree < rows*9/10 {
		t.Errorf("the top token agrees at %d of %d positions", agree, rows)
	}
	ids := goldenIDs(t, g, "chat")
	checkIncremental(t, m, ids[:48], 40, pathTol)
	checkBatched(t, m, [][]int32{goldenIDs(t, g, "prose"), goldenIDs(t, g, "single"), ids, goldenIDs(t, g, "code")[:9]}, 6, pathTol)

	if err := m.SetQuantization(Float32); err != nil {
		t.Fatal(err)
	}
	if msg := kernelstest.Mismatch(forwardAll(t, m, ids), want["chat"], kernelstest.Tolerance{}); msg != "" {
		t.Errorf("back to float32: %s", msg)
	}
}

// TestSmolLM2Q8SetParams pushes changed weights into a quantized model: it
// must serve them quantized at once (close to a float32 model holding
// them, far from what it served before).
func TestSmolLM2Q8SetParams(t *testing.T) {
	m := freshSmolLM2(t)
	ids := goldenIDs(t, readSmolGolden(t), "chat")[:24]
	params := map[string][]float32{}
	for _, p := range m.Params() {
		h := make([]float32, numel(p.Value.Shape()))
		m.b.ToHost(h, p.Value)
		params[p.Name] = h
	}
	if err := m.SetQuantization("q8_0"); err != nil {
		t.Fatal(err)
	}
	before := forwardAll(t, m, ids)
	// New weights: every MLP's down projection scaled by 0.8, the layers'
	// outputs changed everywhere.
	for name, v := range params {
		if strings.HasSuffix(name, ".mlp.down_proj.weight") {
			for i := range v {
				v[i] *= 0.8
			}
		}
	}
	if err := m.SetParams(params); err != nil {
		t.Fatal(err)
	}
	after := forwardAll(t, m, ids)
	if err := m.SetQuantization(Float32); err != nil {
		t.Fatal(err)
	}
	ref := forwardAll(t, m, ids)
	if msg := kernelstest.Mismatch(after, ref, q8LogitTol); msg != "" {
		t.Errorf("after SetParams, Q8_0 logits against float32 of the new weights: %s", msg)
	}
	moved, off := maxDiff(after, before), maxDiff(after, ref)
	t.Logf("SetParams moved the Q8_0 logits by up to %.3g; they are within %.3g of float32 of the new weights", moved, off)
	if moved < 3*off {
		t.Errorf("SetParams moved the quantized logits by %.3g only (%.3g from float32 of the new weights): stale quantized weights?", moved, off)
	}
}

// TestSetQuantizationUnsupported: a type the kernels lack is refused and
// the model keeps computing as before.
func TestSetQuantizationUnsupported(t *testing.T) {
	m := freshSmolLM2(t)
	ids := goldenIDs(t, readSmolGolden(t), "single")
	want := forwardAll(t, m, ids)
	for _, typ := range []string{"q4_k", "q6_k", "int3"} {
		if err := m.SetQuantization(typ); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", typ, err)
		}
		if m.Quantization() != Float32 || m.QuantizedBytes() != 0 {
			t.Errorf("%s: left quantization %q with %d bytes", typ, m.Quantization(), m.QuantizedBytes())
		}
	}
	if msg := kernelstest.Mismatch(forwardAll(t, m, ids), want, kernelstest.Tolerance{}); msg != "" {
		t.Errorf("after refused types: %s", msg)
	}
}
