package model

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels/gguf"
	"github.com/frognano/frognano/kernels/kernelstest"
	"github.com/frognano/frognano/kernels/model/modeltest"
	"github.com/frognano/frognano/kernels/tokenizer"
)

// The tests here need no model file: they write tiny random models, in GGUF
// and in Hugging Face layout, into t.TempDir() (kernels/model/modeltest),
// and check the decoder against modeltest's float64 reference, written from
// the Hugging Face modelling code's equations, not from the Go decoder.

func f32s(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

// tinyTol is float32 arithmetic against the float64 reference on a model
// this small.
var tinyTol = kernelstest.Tolerance{Abs: 2e-5, Rel: 2e-5}

var tinySpecs = map[string]modeltest.Spec{
	"llama":        modeltest.Llama,
	"llama-untied": modeltest.LlamaUntied,
	"qwen2":        modeltest.Qwen2,
	"qwen3":        modeltest.Qwen3,
}

// tinyIDs is longer than fuseRows, so that a full pass takes the unfused
// path and decoding the fused one.
var tinyIDs = func() []int32 {
	ids := []int32{258, 104, 101, 108, 32, 260, 10, 257, 111, 33, 12, 200}
	for i := range 28 {
		ids = append(ids, int32((i*37+5)%262))
	}
	return ids
}()

func mustLoad(t testing.TB, path string) *Model {
	t.Helper()
	m, err := Load(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// forwardAll runs ids through a fresh cache in one pass.
func forwardAll(t testing.TB, m *Model, ids []int32) []float32 {
	t.Helper()
	l, err := m.NewRunner().Forward([]*Cache{m.NewCache(len(ids))}, [][]int32{ids}, true)
	if err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), l.Data...)
}

// TestTinyMatchesReference loads each architecture from GGUF (llama's q/k
// permuted as llama.cpp's converter does) and from a Hugging Face directory,
// and checks every position's logits against the float64 reference, for a
// prompt longer than fuseRows and for a short one.
func TestTinyMatchesReference(t *testing.T) {
	for name, s := range tinySpecs {
		t.Run(name, func(t *testing.T) {
			w := s.RandomWeights(1)
			var want []float32
			for _, row := range s.Reference(w, tinyIDs) {
				want = append(want, f32s(row)...)
			}
			gpath, _ := s.WriteGGUF(t, w, modeltest.GGUFOptions{})
			sharded := s.WriteHF(t, w, func(c map[string]any) { c["frognano_shards"] = 3 })
			for format, path := range map[string]string{"gguf": gpath, "hf": s.WriteHF(t, w, nil), "hf-sharded": sharded} {
				m := mustLoad(t, path)
				if m.Config.Architecture != s.Arch || (m.Weights().Output != nil) != s.Untied {
					t.Errorf("%s: config %+v, output projection %v", format, m.Config, m.Weights().Output != nil)
				}
				if msg := kernelstest.Mismatch(forwardAll(t, m, tinyIDs), want, tinyTol); msg != "" {
					t.Errorf("%s: logits: %s", format, msg)
				}
				// A batch short enough for the fused products (fuse.go).
				short := 7
				if msg := kernelstest.Mismatch(forwardAll(t, m, tinyIDs[:short]), want[:short*s.Vocab()], tinyTol); msg != "" {
					t.Errorf("%s: logits of %d tokens: %s", format, short, msg)
				}
			}
		})
	}
}

// TestUnpermuteRows: llama.cpp stores row 2j+t of each head where Hugging
// Face has row t·headDim/2+j, so HF rows 0 1 2 3 of a head of 4 are stored
// as 0 2 1 3.
func TestUnpermuteRows(t *testing.T) {
	// Two heads of 4 rows, 2 columns; value = 10·HF row + column.
	stored := []float32{0, 1, 20, 21, 10, 11, 30, 31, 40, 41, 60, 61, 50, 51, 70, 71}
	unpermuteRows(stored, 2, 4, 2)
	for i, v := range stored {
		if want := float32(10*(i/2) + i%2); v != want {
			t.Fatalf("row %d column %d = %v, want %v (all: %v)", i/2, i%2, v, want, stored)
		}
	}
}

// TestTinyQuantised loads Q4_1 and Q8_0 weights and checks them against the
// reference run on the same weights dequantised by the gguf package.
func TestTinyQuantised(t *testing.T) {
	for _, q := range []gguf.TensorType{gguf.Q4_1, gguf.Q8_0} {
		t.Run(q.String(), func(t *testing.T) {
			s := tinySpecs["llama"]
			path, held := s.WriteGGUF(t, s.RandomWeights(2), modeltest.GGUFOptions{Quant: q})
			var want []float32
			for _, row := range s.Reference(held, tinyIDs) {
				want = append(want, f32s(row)...)
			}
			if msg := kernelstest.Mismatch(forwardAll(t, mustLoad(t, path), tinyIDs), want, tinyTol); msg != "" {
				t.Error(msg)
			}
		})
	}
}

// TestTinyIncrementalAndBatched checks the KV cache: a prompt then one token
// at a time gives the full pass's logits; sequences of different lengths
// prefilled and decoded together give what each gives alone.
func TestTinyIncrementalAndBatched(t *testing.T) {
	for name, s := range tinySpecs {
		t.Run(name, func(t *testing.T) {
			path, _ := s.WriteGGUF(t, s.RandomWeights(3), modeltest.GGUFOptions{})
			m := mustLoad(t, path)
			checkIncremental(t, m, tinyIDs, 5, tinyTol)
			checkBatched(t, m, [][]int32{tinyIDs[:3], tinyIDs[2:9], tinyIDs[:1], tinyIDs}, 4, tinyTol)
		})
	}
}

// checkIncremental prefills ids[:prefix], decodes the rest one by one, and
// compares each step's last-position logits with the full pass.
func checkIncremental(t *testing.T, m *Model, ids []int32, prefix int, tol kernelstest.Tolerance) {
	t.Helper()
	full := forwardAll(t, m, ids)
	v := m.Config.VocabSize
	r, c := m.NewRunner(), m.NewCache(len(ids))
	l, err := r.Forward([]*Cache{c}, [][]int32{ids[:prefix]}, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := prefix; ; i++ {
		if msg := kernelstest.Mismatch(l.Row(0), full[(i-1)*v:i*v], tol); msg != "" {
			t.Fatalf("position %d: incremental decoding differs from the full pass: %s", i-1, msg)
		}
		if i == len(ids) {
			break
		}
		if l, err = r.Forward([]*Cache{c}, [][]int32{ids[i : i+1]}, false); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != len(ids) {
		t.Errorf("cache holds %d positions, want %d", c.Len(), len(ids))
	}
}

// checkBatched prefills prompts of different lengths in one call, then
// decodes steps greedy tokens for all of them together, and compares every
// logit row with the same sequence run alone.
func checkBatched(t *testing.T, m *Model, prompts [][]int32, steps int, tol kernelstest.Tolerance) {
	t.Helper()
	n := len(prompts)
	r := m.NewRunner()
	caches := make([]*Cache, n)
	for i := range caches {
		caches[i] = m.NewCache(128)
	}
	var batched [][][]float32 // [seq][step] logits
	batched = make([][][]float32, n)
	next := make([][]int32, n)
	l, err := r.Forward(caches, prompts, false)
	for step := 0; ; step++ {
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			batched[i] = append(batched[i], append([]float32(nil), l.Row(i)...))
			next[i] = []int32{argmax(l.Row(i))}
		}
		if step == steps {
			break
		}
		l, err = r.Forward(caches, next, false)
	}
	for i := range n {
		alone := m.NewRunner()
		c := m.NewCache(128)
		l, err := alone.Forward([]*Cache{c}, prompts[i:i+1], false)
		for step := 0; ; step++ {
			if err != nil {
				t.Fatal(err)
			}
			if msg := kernelstest.Mismatch(l.Row(0), batched[i][step], tol); msg != "" {
				t.Fatalf("sequence %d (prompt of %d), step %d: batched differs from alone: %s", i, len(prompts[i]), step, msg)
			}
			if step == steps {
				break
			}
			l, err = alone.Forward([]*Cache{c}, [][]int32{{argmax(batched[i][step])}}, false)
		}
		if c.Len() != caches[i].Len() {
			t.Errorf("sequence %d: cache lengths %d alone, %d batched", i, c.Len(), caches[i].Len())
		}
	}
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

// TestTinyAllLogitsOrder checks that with all, rows come sequence by
// sequence, each equal to that sequence's own full pass.
func TestTinyAllLogitsOrder(t *testing.T) {
	s := tinySpecs["qwen3"]
	path, _ := s.WriteGGUF(t, s.RandomWeights(4), modeltest.GGUFOptions{})
	m := mustLoad(t, path)
	a, b := tinyIDs[:5], tinyIDs[3:]
	l, err := m.NewRunner().Forward([]*Cache{m.NewCache(64), m.NewCache(64)}, [][]int32{a, b}, true)
	if err != nil {
		t.Fatal(err)
	}
	if l.Rows() != len(a)+len(b) {
		t.Fatalf("%d rows, want %d", l.Rows(), len(a)+len(b))
	}
	want := append(forwardAll(t, m, a), forwardAll(t, m, b)...)
	if msg := kernelstest.Mismatch(l.Data, want, tinyTol); msg != "" {
		t.Error(msg)
	}
}

func TestLoadErrors(t *testing.T) {
	s := tinySpecs["llama"]
	w := s.RandomWeights(5)
	good, _ := s.WriteGGUF(t, w, modeltest.GGUFOptions{})
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(t.TempDir(), "truncated.gguf")
	if err := os.WriteFile(truncated, raw[:len(raw)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	gpt2, _ := s.WriteGGUF(t, w, modeltest.GGUFOptions{Arch: "gpt2"})
	iq4, _ := s.WriteGGUF(t, w, modeltest.GGUFOptions{Override: map[string]gguf.TensorType{"blk.1.ffn_up.weight": gguf.IQ4_NL}})
	missing, _ := s.WriteGGUF(t, w, modeltest.GGUFOptions{Drop: "blk.1.ffn_up.weight"})
	big := s
	big.ExtraVocab = 5000
	mismatch, _ := big.WriteGGUF(t, big.RandomWeights(5), modeltest.GGUFOptions{})
	// Llama's weights (no biases) in a file that says qwen2.
	qwen2NoBias, _ := modeltest.Spec{Arch: "qwen2", Dim: 32, Heads: 4, KV: 2, HD: 8, FFN: 64, Layers: 2}.WriteGGUF(t, modeltest.Llama.RandomWeights(6), modeltest.GGUFOptions{})
	ropeScaled := s.WriteHF(t, w, func(c map[string]any) { c["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8.0} })
	unknownHF := s.WriteHF(t, w, func(c map[string]any) { c["architectures"] = []string{"GPT2LMHeadModel"} })

	tests := []struct {
		name, path string
		is         error
		msg        string
	}{
		{"truncated", truncated, gguf.ErrTruncated, "past the end of the file"},
		{"architecture", gpt2, ErrUnsupported, `architecture "gpt2"`},
		{"quantisation", iq4, ErrUnsupported, "IQ4_NL (1 tensors, e.g. blk.1.ffn_up.weight)"},
		{"missing tensor", missing, ErrMalformed, `"blk.1.ffn_up.weight" is missing`},
		{"tokenizer mismatch", mismatch, tokenizer.ErrMismatch, "embedding has 5263 rows"},
		{"qwen2 without biases", qwen2NoBias, ErrMalformed, "lacks the q/k/v biases"},
		{"rope scaling", ropeScaled, ErrUnsupported, "rope scaling"},
		{"hf architecture", unknownHF, ErrUnsupported, "GPT2LMHeadModel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.path, Options{})
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v, want %v containing %q", err, tt.is, tt.msg)
			}
		})
	}
}

func TestForwardErrors(t *testing.T) {
	s := tinySpecs["llama"]
	path, _ := s.WriteGGUF(t, s.RandomWeights(7), modeltest.GGUFOptions{})
	m, other := mustLoad(t, path), mustLoad(t, path)
	r := m.NewRunner()
	c := m.NewCache(4)
	tests := []struct {
		name   string
		caches []*Cache
		tokens [][]int32
		msg    string
	}{
		{"count", []*Cache{c}, nil, "1 caches and 0 token lists"},
		{"empty", []*Cache{c}, [][]int32{{}}, "no new tokens"},
		{"vocabulary", []*Cache{c}, [][]int32{{1, 9999}}, "token id 9999 outside the vocabulary"},
		{"full", []*Cache{c}, [][]int32{{1, 2, 3, 4, 5}}, "KV cache full"},
		{"same sequence twice", []*Cache{c, c}, [][]int32{{1}, {2}}, "same sequence"},
		{"other model", []*Cache{other.NewCache(4)}, [][]int32{{1}}, "another model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := r.Forward(tt.caches, tt.tokens, false); err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v, want %q", err, tt.msg)
			}
			if c.Len() != 0 {
				t.Errorf("a refused batch grew the cache to %d", c.Len())
			}
		})
	}
	// Truncate lets a sequence be continued differently.
	if _, err := r.Forward([]*Cache{c}, [][]int32{{1, 2, 3}}, false); err != nil {
		t.Fatal(err)
	}
	c.Truncate(1)
	l, err := r.Forward([]*Cache{c}, [][]int32{{5, 6}}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := forwardAll(t, m, []int32{1, 5, 6})
	if msg := kernelstest.Mismatch(l.Row(0), want[2*m.Config.VocabSize:], tinyTol); msg != "" {
		t.Errorf("after Truncate: %s", msg)
	}
}

// TestCopyPrefix: a cache that copies another's first positions continues
// like a cache that computed them, in two steps of copying, and refuses a
// copy from another model or beyond what the source holds.
func TestCopyPrefix(t *testing.T) {
	s := tinySpecs["qwen3"]
	path, _ := s.WriteGGUF(t, s.RandomWeights(11), modeltest.GGUFOptions{})
	m, other := mustLoad(t, path), mustLoad(t, path)
	r := m.NewRunner()
	src := m.NewCache(len(tinyIDs))
	if _, err := r.Forward([]*Cache{src}, [][]int32{tinyIDs[:20]}, false); err != nil {
		t.Fatal(err)
	}
	c := m.NewCache(len(tinyIDs))
	c.CopyPrefix(src, 7)
	c.CopyPrefix(src, 19)
	if c.Len() != 19 {
		t.Fatalf("after copying 19 positions the cache holds %d", c.Len())
	}
	l, err := r.Forward([]*Cache{c}, [][]int32{tinyIDs[19:]}, true)
	if err != nil {
		t.Fatal(err)
	}
	full := forwardAll(t, m, tinyIDs)
	v := m.Config.VocabSize
	if msg := kernelstest.Mismatch(l.Data, full[19*v:], tinyTol); msg != "" {
		t.Errorf("after CopyPrefix: %s", msg)
	}
	for name, f := range map[string]func(){
		"other model":   func() { other.NewCache(8).CopyPrefix(src, 4) },
		"beyond source": func() { m.NewCache(32).CopyPrefix(src, 21) },
		"backwards":     func() { c.CopyPrefix(src, 3) },
		"beyond room":   func() { m.NewCache(4).CopyPrefix(src, 5) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: CopyPrefix did not panic", name)
				}
			}()
			f()
		}()
	}
}

// TestSharePrefix: caches that share another's prompt positions (without
// copying them) continue like caches that computed them, decoded in one
// batch with their source, which goes on writing its own later positions;
// the source is pinned while shared; a share of a share reads the first
// source; and copying from a sharing cache copies the shared positions too.
func TestSharePrefix(t *testing.T) {
	s := tinySpecs["qwen3"]
	path, _ := s.WriteGGUF(t, s.RandomWeights(12), modeltest.GGUFOptions{})
	m := mustLoad(t, path)
	if !m.CanShare() {
		t.Fatal("the CPU backend cannot share prefixes")
	}
	r := m.NewRunner()
	src := m.NewCache(len(tinyIDs))
	if _, err := r.Forward([]*Cache{src}, [][]int32{tinyIDs[:12]}, false); err != nil {
		t.Fatal(err)
	}
	a, b := m.NewCache(len(tinyIDs)), m.NewCache(len(tinyIDs))
	if !a.SharePrefix(src, 5) || !a.SharePrefix(src, 10) {
		t.Fatal("a fresh cache did not share")
	}
	if a.Len() != 10 || a.Shared() != 10 || src.Pinned() != 10 {
		t.Fatalf("after sharing 10: Len %d, Shared %d, source pinned %d", a.Len(), a.Shared(), src.Pinned())
	}
	if !b.SharePrefix(a, 8) || b.base != src {
		t.Fatal("a share of a share did not read the first source")
	}
	f := m.NewCache(len(tinyIDs))
	f.SharePrefix(src, 8)
	// One batch: the source decodes its own next position while a, b and
	// f read its first ones (b, f and the source decode as one group).
	v := m.Config.VocabSize
	full := forwardAll(t, m, tinyIDs)
	l, err := r.Forward([]*Cache{src, a, b, f}, [][]int32{tinyIDs[12:13], tinyIDs[10:14], tinyIDs[8:9], tinyIDs[8:9]}, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range []int{12, 13, 8, 8} {
		if msg := kernelstest.Mismatch(l.Row(i), full[at*v:(at+1)*v], tinyTol); msg != "" {
			t.Errorf("sequence %d, position %d: %s", i, at, msg)
		}
	}
	if len(r.groups) != 1 || len(r.groups[0].members) != 3 {
		t.Errorf("groups of the first batch: %+v, want one of b, f and the source", r.groups)
	}
	// The next step: a and the source decode as one group (over 10
	// positions), b and f as another (over 8).
	l, err = r.Forward([]*Cache{src, a, b, f}, [][]int32{tinyIDs[13:14], tinyIDs[14:15], tinyIDs[9:10], tinyIDs[9:10]}, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range []int{13, 14, 9, 9} {
		if msg := kernelstest.Mismatch(l.Row(i), full[at*v:(at+1)*v], tinyTol); msg != "" {
			t.Errorf("second step: sequence %d, position %d: %s", i, at, msg)
		}
	}
	if len(r.groups) != 2 {
		t.Errorf("groups of the second batch: %+v, want two", r.groups)
	}
	f.Release()
	if a.Len() != 15 || a.Shared() != 10 {
		t.Errorf("a: Len %d, Shared %d after its own positions", a.Len(), a.Shared())
	}
	// A cache with positions of its own copies rather than sharing.
	e := m.NewCache(len(tinyIDs))
	if _, err := r.Forward([]*Cache{e}, [][]int32{tinyIDs[:2]}, false); err != nil {
		t.Fatal(err)
	}
	if e.SharePrefix(src, 14) || e.Len() != 14 || e.Shared() != 0 {
		t.Errorf("a cache holding positions of its own: Len %d, Shared %d after SharePrefix (want a copy)", e.Len(), e.Shared())
	}
	// Copying from a sharing cache brings the positions it reads from its
	// source too.
	c := m.NewCache(len(tinyIDs))
	c.CopyPrefix(a, 15)
	if l, err = r.Forward([]*Cache{c}, [][]int32{tinyIDs[15:]}, true); err != nil {
		t.Fatal(err)
	}
	if msg := kernelstest.Mismatch(l.Data, full[15*v:], tinyTol); msg != "" {
		t.Errorf("copied from a sharing cache: %s", msg)
	}
	// The source may not forget what others read, until they let go.
	mustPanic(t, "Truncate below the pinned positions", func() { src.Truncate(9) })
	mustPanic(t, "Reset of a pinned cache", func() { src.Reset() })
	src.Truncate(10)
	a.Truncate(6) // a reads 6 now: still shared
	if a.Shared() != 6 || src.Pinned() != 8 {
		t.Errorf("after truncating a to 6: a shares %d, source pinned %d (b reads 8)", a.Shared(), src.Pinned())
	}
	// A cache put aside owns its positions: Own copies what it read.
	b.Own()
	if b.Shared() != 0 || src.Pinned() != 6 {
		t.Errorf("after b.Own: b shares %d, source pinned %d (a reads 6)", b.Shared(), src.Pinned())
	}
	if l, err = r.Forward([]*Cache{b}, [][]int32{tinyIDs[b.Len():]}, true); err != nil {
		t.Fatal(err)
	}
	if msg := kernelstest.Mismatch(l.Data, full[10*v:], tinyTol); msg != "" {
		t.Errorf("after Own: %s", msg)
	}
	// A released source that others still read keeps those positions.
	src.Release()
	if src.Len() != 10 {
		t.Errorf("a pinned source released: holds %d positions, want its 10", src.Len())
	}
	b.Release()
	a.Reset()
	if src.Pinned() != 0 || b.Len() != 0 || a.Shared() != 0 {
		t.Errorf("after letting go: source pinned %d, b holds %d, a shares %d", src.Pinned(), b.Len(), a.Shared())
	}
	src.Reset()
	// A follower dropped without Release stops pinning once collected.
	d := m.NewCache(len(tinyIDs))
	if _, err := r.Forward([]*Cache{src}, [][]int32{tinyIDs[:4]}, false); err != nil {
		t.Fatal(err)
	}
	d.SharePrefix(src, 3)
	d = nil
	runtime.GC()
	if p := src.Pinned(); p != 0 {
		t.Errorf("a collected follower still pins %d positions", p)
	}
	mustPanic(t, "a prefix from itself", func() { src.SharePrefix(src, 2) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}
