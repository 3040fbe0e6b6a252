// Package kernelstest is the conformance suite every kernels.Backend must
// pass: hand-computed tables, NumPy golden files (kernels/testdata, written
// by testdata/gen/gen_ops.py), in-place use, KV-cache consistency, and the
// panics the interface promises. A backend's own test calls Run:
//
//	func TestConformance(t *testing.T) { kernelstest.Run(t, cpu.New(), "../testdata") }
package kernelstest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/tensor"
)

// Run checks b; dir is the kernels/testdata directory relative to the
// calling test's package.
func Run(t *testing.T, b kernels.Backend, dir string) {
	s := &suite{b: b, dir: dir}
	t.Run("MatMul", s.matMul)
	t.Run("Embedding", s.embedding)
	t.Run("RMSNorm", s.rmsNorm)
	t.Run("RoPE", s.rope)
	t.Run("Attention", s.attention)
	t.Run("AttentionPrefix", s.attentionPrefix)
	t.Run("AttentionPrefixGroup", s.attentionPrefixGroup)
	t.Run("KVCache", s.kvCache)
	t.Run("SwiGLU", s.swiGLU)
	t.Run("Softmax", s.softmax)
	t.Run("Add", s.add)
	t.Run("Views", s.views)
	t.Run("Panics", s.panics)
}

type suite struct {
	b   kernels.Backend
	dir string
}

// up copies values into a new backend tensor.
func (s *suite) up(vals []float32, shape ...int) kernels.Tensor {
	return s.b.FromHost(tensor.From(append([]float32(nil), vals...), shape...))
}

func (s *suite) upT(t *tensor.Tensor) kernels.Tensor { return s.up(t.Data(), t.Shape()...) }

// garbage is a destination pre-filled with NaN, so an element a kernel
// forgets to write shows up.
func (s *suite) garbage(shape ...int) kernels.Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return s.up(v, shape...)
}

func (s *suite) down(x kernels.Tensor) []float32 {
	n := 1
	for _, d := range x.Shape() {
		n *= d
	}
	out := make([]float32, n)
	s.b.ToHost(out, x)
	return out
}

func (s *suite) check(t *testing.T, what string, got kernels.Tensor, want []float32, tol Tolerance) {
	t.Helper()
	if msg := Mismatch(s.down(got), want, tol); msg != "" {
		t.Errorf("%s: %s", what, msg)
	}
}

func (s *suite) golden(t *testing.T, op string) Golden {
	t.Helper()
	g, err := ReadGolden(filepath.Join(s.dir, op+".golden"))
	if err != nil {
		t.Fatal(err)
	}
	if len(g) == 0 {
		t.Fatalf("%s.golden is empty", op)
	}
	return g
}

func get(t *testing.T, g Golden, c, name string) *tensor.Tensor {
	t.Helper()
	x, ok := g[c+"/"+name]
	if !ok {
		t.Fatalf("golden tensor %s/%s missing", c, name)
	}
	return x
}

// fp32Sum is the tolerance for a float32 sum of k products of unit-scale
// values: rounding grows with the number of terms.
func fp32Sum(k int) Tolerance { return Tolerance{Abs: 1e-6 * float64(k+4), Rel: 1e-5} }

func (s *suite) matMul(t *testing.T) {
	tables := []struct {
		name       string
		a, b, want []float32
		m, n, k    int
	}{
		{"2x2·3x2", []float32{1, 2, 3, 4}, []float32{5, 6, 7, 8, 1, 0}, []float32{17, 23, 1, 39, 53, 3}, 2, 3, 2},
		{"row", []float32{1, -1, 2}, []float32{1, 1, 1, 0, 0, 0}, []float32{2, 0}, 1, 2, 3},
		{"empty sum", nil, nil, []float32{0, 0, 0, 0, 0, 0}, 2, 3, 0},
	}
	for _, tt := range tables {
		t.Run(tt.name, func(t *testing.T) {
			dst := s.garbage(tt.m, tt.n)
			s.b.MatMul(dst, s.up(tt.a, tt.m, tt.k), s.up(tt.b, tt.n, tt.k))
			s.check(t, "dst", dst, tt.want, FP32)
		})
	}
	g := s.golden(t, "matmul")
	for _, c := range g.Cases() {
		t.Run(c, func(t *testing.T) {
			a, b, want := get(t, g, c, "a"), get(t, g, c, "b"), get(t, g, c, "out")
			dst := s.garbage(want.Shape()...)
			s.b.MatMul(dst, s.upT(a), s.upT(b))
			s.check(t, "dst", dst, want.Data(), fp32Sum(a.Cols()))
		})
	}
}

func (s *suite) embedding(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		dst := s.garbage(3, 2)
		s.b.Embedding(dst, s.up([]float32{0, 1, 10, 11, 20, 21}, 3, 2), []int32{2, 0, 2})
		s.check(t, "dst", dst, []float32{20, 21, 0, 1, 20, 21}, Tolerance{})
	})
	g := s.golden(t, "embedding")
	for _, c := range g.Cases() {
		t.Run(c, func(t *testing.T) {
			want := get(t, g, c, "out")
			dst := s.garbage(want.Shape()...)
			s.b.Embedding(dst, s.upT(get(t, g, c, "table")), Ints(get(t, g, c, "ids")))
			s.check(t, "dst", dst, want.Data(), Tolerance{})
		})
	}
}

func (s *suite) rmsNorm(t *testing.T) {
	tables := []struct {
		name       string
		x, w, want []float32
		eps        float32
	}{
		{"3-4-5", []float32{3, 4}, []float32{1, 2}, []float32{0.84852814, 2.2627417}, 0},
		{"constant", []float32{2, 2, 2, 2}, []float32{1, 1, 1, 1}, []float32{1, 1, 1, 1}, 0},
		{"eps", []float32{1, 1}, []float32{1, 1}, []float32{0.5, 0.5}, 3},
		{"zero", []float32{0, 0}, []float32{1, 1}, []float32{0, 0}, 1e-6},
	}
	for _, tt := range tables {
		t.Run(tt.name, func(t *testing.T) {
			n := len(tt.x)
			dst := s.garbage(1, n)
			s.b.RMSNorm(dst, s.up(tt.x, 1, n), s.up(tt.w, n), tt.eps)
			s.check(t, "dst", dst, tt.want, FP32)
		})
	}
	g := s.golden(t, "rmsnorm")
	for _, c := range g.Cases() {
		t.Run(c, func(t *testing.T) {
			x, w, want := get(t, g, c, "x"), get(t, g, c, "weight"), get(t, g, c, "out")
			eps := get(t, g, c, "eps").Data()[0]
			dst := s.garbage(want.Shape()...)
			s.b.RMSNorm(dst, s.upT(x), s.upT(w), eps)
			s.check(t, "dst", dst, want.Data(), FP32)
			in := s.upT(x)
			s.b.RMSNorm(in, in, s.upT(w), eps)
			s.check(t, "in place", in, want.Data(), FP32)
		})
	}
}

func (s *suite) rope(t *testing.T) {
	// Head dim 4, theta 1e4: the pairs (0,2) and (1,3) turn by pos·1 and
	// pos·0.01 radians.
	tables := []struct {
		name    string
		x       []float32
		pos     []int32
		want    []float32
		headDim int
	}{
		{"position 0 is identity", []float32{1, 2, 3, 4}, []int32{0}, []float32{1, 2, 3, 4}, 4},
		{"position 1", []float32{1, 2, 3, 4}, []int32{1},
			// cos1−3sin1, 2cos.01−4sin.01, 3cos1+sin1, 4cos.01+2sin.01
			[]float32{-1.9841108, 1.9599007, 2.4623779, 4.0197997}, 4},
		{"two heads, position 2", []float32{1, 0, 0, 0, 0, 1, 0, 0}, []int32{2},
			// head 0: (cos2, 0, sin2, 0); head 1: (0, cos.02, 0, sin.02)
			[]float32{-0.41614684, 0, 0.9092974, 0, 0, 0.99980003, 0, 0.019998667}, 4},
		{"row per position", []float32{1, 0, 1, 0}, []int32{0, 1},
			[]float32{1, 0, 0.5403023, 0.84147096}, 2},
	}
	for _, tt := range tables {
		t.Run(tt.name, func(t *testing.T) {
			rows := len(tt.pos)
			cols := len(tt.x) / rows
			dst := s.garbage(rows, cols)
			s.b.RoPE(dst, s.up(tt.x, rows, cols), tt.pos, tt.headDim, 10000)
			s.check(t, "dst", dst, tt.want, FP32)
		})
	}
	g := s.golden(t, "rope")
	for _, c := range g.Cases() {
		t.Run(c, func(t *testing.T) {
			x, want := get(t, g, c, "x"), get(t, g, c, "out")
			pos, hd := Ints(get(t, g, c, "pos")), int(Ints(get(t, g, c, "head_dim"))[0])
			theta := get(t, g, c, "theta").Data()[0]
			dst := s.garbage(want.Shape()...)
			s.b.RoPE(dst, s.upT(x), pos, hd, theta)
			s.check(t, "dst", dst, want.Data(), FP32)
			in := s.upT(x)
			s.b.RoPE(in, in, pos, hd, theta)
			s.check(t, "in place", in, want.Data(), FP32)
		})
	}
}

func (s *suite) attention(t *testing.T) {
	const ln3 = 1.0986123
	tables := []struct {
		name         string
		q, k, v      []float32
		want         []float32
		t, s, nh, kv int
	}{
		// Row 0 sees only key 0; row 1's zero query weighs both keys equally.
		{"causal mask", []float32{1, 0, 0, 0}, []float32{5, 0, 1, 1}, []float32{1, 2, 3, 4},
			[]float32{1, 2, 2, 3}, 2, 2, 1, 1},
		// One new query over a 3-step cache; head 0 (q=0) averages, head 1
		// (q=1) weighs keys 0, 0, ln3 as 1:1:3, both through the one kv head.
		{"decode, two heads share a kv head", []float32{0, 1}, []float32{0, 0, ln3}, []float32{3, 6, 9},
			[]float32{6, 7.2}, 1, 3, 2, 1},
		// Heads 0,1 read kv head 0 and heads 2,3 read kv head 1.
		{"grouping", []float32{1, 2, 3, 4}, []float32{1, 1}, []float32{10, 20},
			[]float32{10, 10, 20, 20}, 1, 1, 4, 2},
		// Queries at positions 1 and 2 of 3: the first must not see key 2.
		{"chunk after cache", []float32{0, 0}, []float32{0, 0, 0}, []float32{1, 2, 6},
			[]float32{1.5, 3}, 2, 3, 1, 1},
	}
	for _, tt := range tables {
		t.Run(tt.name, func(t *testing.T) {
			qc, kc := len(tt.q)/tt.t, len(tt.k)/tt.s
			dst := s.garbage(tt.t, qc)
			s.b.Attention(dst, s.up(tt.q, tt.t, qc), s.up(tt.k, tt.s, kc), s.up(tt.v, tt.s, kc), tt.nh, tt.kv)
			s.check(t, "dst", dst, tt.want, FP32)
		})
	}
	g := s.golden(t, "attention")
	for _, c := range g.Cases() {
		t.Run(c, func(t *testing.T) {
			q, k, v, want := get(t, g, c, "q"), get(t, g, c, "k"), get(t, g, c, "v"), get(t, g, c, "out")
			heads := Ints(get(t, g, c, "heads"))
			dst := s.garbage(want.Shape()...)
			s.b.Attention(dst, s.upT(q), s.upT(k), s.upT(v), int(heads[0]), int(heads[1]))
			s.check(t, "dst", dst, want.Data(), fp32Sum(q.Cols()/int(heads[0])))
		})
	}
}

// attentionPrefix checks a backend's AttentionPrefix, where it has one,
// against the golden attention cases: the keys and values split into a
// prefix of nb rows and the rest at every nb the queries allow (the rest
// must hold the t query positions), each split giving the unsplit output.
func (s *suite) attentionPrefix(t *testing.T) {
	pa, ok := s.b.(kernels.PrefixAttention)
	if !ok {
		t.Skip("backend has no AttentionPrefix")
	}
	g := s.golden(t, "attention")
	for _, c := range g.Cases() {
		t.Run(c, func(t *testing.T) {
			q, k, v, want := get(t, g, c, "q"), get(t, g, c, "k"), get(t, g, c, "v"), get(t, g, c, "out")
			heads := Ints(get(t, g, c, "heads"))
			rows, keys, kc := q.Rows(), k.Rows(), k.Cols()
			splits := []int{0, 1, (keys - rows) / 2, keys - rows}
			for _, nb := range splits {
				if nb < 0 || nb > keys-rows {
					continue
				}
				kb, vb := s.up(k.Data()[:nb*kc], nb, kc), s.up(v.Data()[:nb*kc], nb, kc)
				kr, vr := s.up(k.Data()[nb*kc:], keys-nb, kc), s.up(v.Data()[nb*kc:], keys-nb, kc)
				dst := s.garbage(want.Shape()...)
				pa.AttentionPrefix(dst, s.upT(q), kb, vb, kr, vr, int(heads[0]), int(heads[1]))
				s.check(t, fmt.Sprintf("dst, prefix of %d of %d keys", nb, keys), dst, want.Data(), fp32Sum(q.Cols()/int(heads[0])))
			}
		})
	}
	// One query that must see every prefix key: a prefix whose last key
	// alone matches it takes the whole weight.
	dst := s.garbage(1, 1)
	pa.AttentionPrefix(dst, s.up([]float32{1}, 1, 1), s.up([]float32{0, 0, 40}, 3, 1), s.up([]float32{1, 2, 7}, 3, 1),
		s.up([]float32{0}, 1, 1), s.up([]float32{5}, 1, 1), 1, 1)
	s.check(t, "prefix key dominates", dst, []float32{7}, FP32)
}

// attentionPrefixGroup checks AttentionPrefixGroup against AttentionPrefix
// member by member: random queries, a shared prefix (empty or not) and own
// keys of different lengths, for one to five members and grouped heads.
func (s *suite) attentionPrefixGroup(t *testing.T) {
	pa, ok := s.b.(kernels.PrefixAttention)
	if !ok {
		t.Skip("backend has no AttentionPrefix")
	}
	r := rand.New(rand.NewPCG(5, 5))
	rnd := func(rows, cols int) kernels.Tensor {
		x := make([]float32, rows*cols)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return s.up(x, rows, cols)
	}
	for _, c := range []struct{ members, nb, nh, kv, hd int }{
		{1, 7, 2, 1, 4}, {3, 0, 4, 2, 8}, {4, 40, 9, 3, 16}, {5, 33, 14, 2, 8}, {2, 1, 3, 3, 5},
	} {
		t.Run(fmt.Sprintf("%d members, prefix %d, %d/%d heads of %d", c.members, c.nb, c.nh, c.kv, c.hd), func(t *testing.T) {
			kc := c.kv * c.hd
			kb, vb := rnd(c.nb, kc), rnd(c.nb, kc)
			var dst, q, k, v []kernels.Tensor
			for i := range c.members {
				own := 1 + (i*7)%11
				dst, q = append(dst, s.garbage(1, c.nh*c.hd)), append(q, rnd(1, c.nh*c.hd))
				k, v = append(k, rnd(own, kc)), append(v, rnd(own, kc))
			}
			pa.AttentionPrefixGroup(dst, q, kb, vb, k, v, c.nh, c.kv)
			for i := range c.members {
				want := s.garbage(1, c.nh*c.hd)
				pa.AttentionPrefix(want, q[i], kb, vb, k[i], v[i], c.nh, c.kv)
				s.check(t, fmt.Sprintf("member %d", i), dst[i], s.down(want), fp32Sum(c.nb+k[i].Shape()[0]))
			}
		})
	}
}

// kvCache decodes step by step into a cache written through Slice views, and
// demands the rows a single full pass gives.
func (s *suite) kvCache(t *testing.T) {
	const (
		steps, nh, nkv, hd, dim = 11, 4, 2, 8, 12
		theta                   = 10000
	)
	r := rand.New(rand.NewPCG(7, 7))
	rnd := func(shape ...int) kernels.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return s.up(v, shape...)
	}
	x := rnd(steps, dim)
	wq, wk, wv := rnd(nh*hd, dim), rnd(nkv*hd, dim), rnd(nkv*hd, dim)
	pos := make([]int32, steps)
	for i := range pos {
		pos[i] = int32(i)
	}

	// Full pass.
	q, k, v := s.b.New(steps, nh*hd), s.b.New(steps, nkv*hd), s.b.New(steps, nkv*hd)
	s.b.MatMul(q, x, wq)
	s.b.MatMul(k, x, wk)
	s.b.MatMul(v, x, wv)
	s.b.RoPE(q, q, pos, hd, theta)
	s.b.RoPE(k, k, pos, hd, theta)
	full := s.b.New(steps, nh*hd)
	s.b.Attention(full, q, k, v, nh, nkv)
	want := s.down(full)

	// A prompt of 4 tokens, then one token at a time.
	kc, vc := s.b.New(steps+5, nkv*hd), s.b.New(steps+5, nkv*hd) // spare rows stay unread
	var got []float32
	for p0 := 0; p0 < steps; {
		n := 1
		if p0 == 0 {
			n = 4
		}
		xs := s.b.Slice(x, p0, p0+n)
		qs, ks, vs := s.b.New(n, nh*hd), s.b.Slice(kc, p0, p0+n), s.b.Slice(vc, p0, p0+n)
		s.b.MatMul(qs, xs, wq)
		s.b.MatMul(ks, xs, wk)
		s.b.MatMul(vs, xs, wv)
		s.b.RoPE(qs, qs, pos[p0:p0+n], hd, theta)
		s.b.RoPE(ks, ks, pos[p0:p0+n], hd, theta)
		out := s.b.New(n, nh*hd)
		s.b.Attention(out, qs, s.b.Slice(kc, 0, p0+n), s.b.Slice(vc, 0, p0+n), nh, nkv)
		got = append(got, s.down(out)...)
		p0 += n
	}
	if msg := Mismatch(got, want, Tolerance{Abs: 1e-5, Rel: 1e-5}); msg != "" {
		t.Errorf("incremental decoding differs from the full pass: %s", msg)
	}
}

func (s *suite) swiGLU(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		// silu(1) = 1/(1+e⁻¹), silu(−1) = −1/(1+e), silu(2) = 2/(1+e⁻²)
		dst := s.garbage(1, 4)
		s.b.SwiGLU(dst, s.up([]float32{0, 1, -1, 2}, 1, 4), s.up([]float32{5, 2, 3, 1}, 1, 4))
		s.check(t, "dst", dst, []float32{0, 1.4621172, -0.80682426, 1.7615942}, FP32)
	})
	g := s.golden(t, "swiglu")
	for _, c := range g.Cases() {
		t.Run(c, func(t *testing.T) {
			gate, up, want := get(t, g, c, "gate"), get(t, g, c, "up"), get(t, g, c, "out")
			dst := s.garbage(want.Shape()...)
			s.b.SwiGLU(dst, s.upT(gate), s.upT(up))
			s.check(t, "dst", dst, want.Data(), FP32)
			in := s.upT(gate)
			s.b.SwiGLU(in, in, s.upT(up))
			s.check(t, "in place", in, want.Data(), FP32)
		})
	}
}

func (s *suite) softmax(t *testing.T) {
	const ln2, ln3, ln4 = 0.6931472, 1.0986123, 1.3862944
	x := []float32{0, ln2, ln3, ln4, 1000, 1000, 1000, 1000}
	t.Run("table", func(t *testing.T) {
		dst := s.garbage(2, 4)
		s.b.Softmax(dst, s.up(x, 2, 4))
		s.check(t, "softmax", dst, []float32{0.1, 0.2, 0.3, 0.4, 0.25, 0.25, 0.25, 0.25}, FP32)
		s.b.LogSoftmax(dst, s.up(x, 2, 4))
		s.check(t, "logsoftmax", dst, []float32{-2.3025851, -1.6094379, -1.2039728, -0.9162907, -ln4, -ln4, -ln4, -ln4}, FP32)
	})
	g := s.golden(t, "softmax")
	for _, c := range g.Cases() {
		t.Run(c, func(t *testing.T) {
			x := get(t, g, c, "x")
			for _, op := range []struct {
				name string
				f    func(dst, x kernels.Tensor)
			}{{"softmax", s.b.Softmax}, {"logsoftmax", s.b.LogSoftmax}} {
				want := get(t, g, c, op.name)
				dst := s.garbage(want.Shape()...)
				op.f(dst, s.upT(x))
				s.check(t, op.name, dst, want.Data(), FP32)
				in := s.upT(x)
				op.f(in, in)
				s.check(t, op.name+" in place", in, want.Data(), FP32)
			}
		})
	}
}

func (s *suite) add(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		dst := s.garbage(3)
		s.b.Add(dst, s.up([]float32{1, 2, 3}, 3), s.up([]float32{10, 20, 30}, 3))
		s.check(t, "dst", dst, []float32{11, 22, 33}, Tolerance{})
	})
	g := s.golden(t, "add")
	for _, c := range g.Cases() {
		t.Run(c, func(t *testing.T) {
			a, b, want := get(t, g, c, "a"), get(t, g, c, "b"), get(t, g, c, "out")
			dst := s.garbage(want.Shape()...)
			s.b.Add(dst, s.upT(a), s.upT(b))
			s.check(t, "dst", dst, want.Data(), FP32)
			in := s.upT(a)
			s.b.Add(in, in, s.upT(b))
			s.check(t, "in place", in, want.Data(), FP32)
		})
	}
}

// views checks Slice, Reshape and Copy: views share storage, so writes
// through one show in the other.
func (s *suite) views(t *testing.T) {
	x := s.up([]float32{1, 2, 3, 4, 5, 6}, 3, 2)
	r := s.b.Reshape(x, 2, 3)
	if got := r.Shape(); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("Reshape shape %v, want [2 3]", got)
	}
	s.check(t, "reshaped", r, []float32{1, 2, 3, 4, 5, 6}, Tolerance{})
	s.b.Copy(s.b.Slice(x, 1, 2), s.up([]float32{7, 8}, 2))
	s.check(t, "copy into a slice", x, []float32{1, 2, 7, 8, 5, 6}, Tolerance{})
	s.check(t, "seen through the reshape", r, []float32{1, 2, 7, 8, 5, 6}, Tolerance{})
	dst := s.garbage(1, 3)
	s.b.Copy(dst, s.b.Slice(r, 1, 2))
	s.check(t, "copy out of a slice", dst, []float32{8, 5, 6}, Tolerance{})
}

// panics checks that misuse the interface calls a programming error is
// refused rather than computed.
func (s *suite) panics(t *testing.T) {
	b := s.b
	tests := []struct {
		name string
		f    func()
	}{
		{"MatMul inner dims", func() { b.MatMul(b.New(2, 3), b.New(2, 4), b.New(3, 5)) }},
		{"MatMul dst shape", func() { b.MatMul(b.New(3, 2), b.New(2, 4), b.New(3, 4)) }},
		{"MatMul in place", func() { x := b.New(2, 2); b.MatMul(x, x, b.New(2, 2)) }},
		{"Embedding id out of range", func() { b.Embedding(b.New(1, 2), b.New(3, 2), []int32{3}) }},
		{"Embedding negative id", func() { b.Embedding(b.New(1, 2), b.New(3, 2), []int32{-1}) }},
		{"Embedding dst rows", func() { b.Embedding(b.New(2, 2), b.New(3, 2), []int32{1}) }},
		{"RMSNorm weight", func() { b.RMSNorm(b.New(2, 4), b.New(2, 4), b.New(3), 1e-6) }},
		{"RoPE odd head dim", func() { b.RoPE(b.New(1, 6), b.New(1, 6), []int32{0}, 3, 1e4) }},
		{"RoPE positions", func() { b.RoPE(b.New(2, 4), b.New(2, 4), []int32{0}, 4, 1e4) }},
		{"RoPE negative position", func() { b.RoPE(b.New(1, 4), b.New(1, 4), []int32{-1}, 4, 1e4) }},
		{"Attention heads not grouped", func() { b.Attention(b.New(1, 6), b.New(1, 6), b.New(1, 4), b.New(1, 4), 3, 2) }},
		{"Attention kv width", func() { b.Attention(b.New(1, 8), b.New(1, 8), b.New(1, 8), b.New(1, 8), 2, 1) }},
		{"Attention more queries than keys", func() { b.Attention(b.New(3, 4), b.New(3, 4), b.New(2, 4), b.New(2, 4), 1, 1) }},
		{"SwiGLU shapes", func() { b.SwiGLU(b.New(4), b.New(4), b.New(5)) }},
		{"Softmax shapes", func() { b.Softmax(b.New(2, 3), b.New(3, 2)) }},
		{"Add shapes", func() { b.Add(b.New(4), b.New(4), b.New(2, 2)) }},
		{"ToHost length", func() { b.ToHost(make([]float32, 3), b.New(4)) }},
		{"Copy shapes", func() { b.Copy(b.New(2, 3), b.New(3, 2)) }},
		{"Reshape element count", func() { b.Reshape(b.New(2, 3), 4) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tt.f()
		})
	}
}
