package blas

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Q8_0 weights: the matrix products of a quantized Sampler (y = x·Wᵀ with W
// stored as int8) read ggml's block_q8_0 directly, the layout of a GGUF
// Q8_0 tensor: each row of k values is k/32 blocks of 34 bytes, a
// little-endian IEEE half scale d followed by 32 int8 q, value = q·d.
//
// Two ways of multiplying are here, measured side by side by
// BenchmarkMatMulTQ8 (docs/quantized-sampling.md):
//
//   - MatMulTQ8 quantizes each row of x to int8 per block of 32 (float32
//     scale amax/127, round to nearest even), as llama.cpp does for its
//     Q8_0×Q8_0 dot products, and sums each block's products exactly in
//     int32 before scaling;
//   - MatMulTQ8F32 keeps x in float32 and widens each weight block to
//     float32 as it is read.
//
// With cgo on amd64 both run kernels written in C (q8_cgo.go, each compiled
// for its features only and chosen at run time from the CPU's): AVX-512
// VNNI where the CPU has it, else AVX2/FMA/F16C; otherwise, and on CPUs
// without them, the Go loops below. All agree to float32 rounding: the
// int8 activations and the int32 block sums are bit-identical, and only
// the order of the float32 sums differs. Within one kernel set a row's
// result of MatMulTQ8 does not depend on the rows computed with it (batch
// invariance; with AMX, within each side of q8AMXMinRows), nor one of
// MatMulTQ8F32 below q8PanelMinRows rows (from there it multiplies by
// widened panels with sgemm).
const (
	Q8Block      = 32 // values per block
	Q8BlockBytes = 34 // bytes per block: half scale + 32 int8
)

// q8Kernels is a set of Q8_0 kernels.
type q8Kernels int32

const (
	q8Go     q8Kernels = iota // the Go loops
	q8AVX2                    // AVX2, FMA, F16C
	q8AVX512                  // AVX-512 F/BW/DQ/VL and VNNI
	q8AMX                     // AMX-INT8 tiles for MatMulTQ8, AVX-512 VNNI otherwise
)

func (k q8Kernels) String() string {
	switch k {
	case q8AVX2:
		return "avx2"
	case q8AVX512:
		return "avx512-vnni"
	case q8AMX:
		return "amx"
	}
	return "go"
}

// q8Available are the kernel sets this CPU and build can run, best last.
func q8Available() []q8Kernels {
	ks := []q8Kernels{q8Go}
	if q8HaveAVX2() {
		ks = append(ks, q8AVX2)
	}
	if q8HaveAVX512() {
		ks = append(ks, q8AVX512)
	}
	if q8HaveAMX() {
		ks = append(ks, q8AMX)
	}
	return ks
}

// q8Active is the kernel set in use: the best this CPU has, capped by
// FROGNANO_Q8 ("go", "avx2"; for comparisons) and by FROGNANO_BLAS=go,
// which keeps every native kernel out; SetQ8Kernels changes it.
var q8Active atomic.Int32

func init() {
	limit := q8AMX
	if os.Getenv("FROGNANO_BLAS") == "go" {
		limit = q8Go
	}
	if v := os.Getenv("FROGNANO_Q8"); v != "" {
		if k, err := q8Parse(v); err == nil {
			limit = k
		}
	}
	// The best set up to the limit; AMX's permission is asked of the kernel
	// only when AMX may run (it changes what the process's signal stacks
	// must hold).
	best := q8Go
	switch {
	case limit >= q8AMX && q8HaveAMX():
		best = q8AMX
	case limit >= q8AVX512 && q8HaveAVX512():
		best = q8AVX512
	case limit >= q8AVX2 && q8HaveAVX2():
		best = q8AVX2
	}
	q8Active.Store(int32(best))
}

func q8Parse(name string) (q8Kernels, error) {
	for _, k := range []q8Kernels{q8Go, q8AVX2, q8AVX512, q8AMX} {
		if name == k.String() || (k == q8AVX512 && name == "avx512") {
			return k, nil
		}
	}
	return q8Go, fmt.Errorf("blas: unknown Q8_0 kernels %q (go, avx2, avx512-vnni, amx)", name)
}

func q8Current() q8Kernels { return q8Kernels(q8Active.Load()) }

// Q8Impl names the Q8_0 kernels in use: "amx", "avx512-vnni", "avx2" or
// "go".
func Q8Impl() string { return q8Current().String() }

// Q8Kernels lists the Q8_0 kernel sets this CPU and build can run, the
// best last.
func Q8Kernels() []string {
	var names []string
	for _, k := range q8Available() {
		names = append(names, k.String())
	}
	return names
}

// SetQ8Kernels makes the named kernel set ("go", "avx2", "avx512-vnni", "amx")
// the one in use, for side-by-side benchmarks, and returns the previous
// one's name. A set this CPU cannot run is an error.
func SetQ8Kernels(name string) (string, error) {
	k, err := q8Parse(name)
	if err != nil {
		return "", err
	}
	if !slices.Contains(q8Available(), k) {
		return "", fmt.Errorf("blas: this CPU or build cannot run the %s Q8_0 kernels (it has %s)", k, strings.Join(Q8Kernels(), ", "))
	}
	return q8Kernels(q8Active.Swap(int32(k))).String(), nil
}

// q8AMXMinRows: with fewer activation rows than this the AMX kernel set
// runs the VNNI kernel (a tile of 16 rows holding one or two costs more
// than VNNI on them; from 4 rows the tile is ahead: BenchmarkMatMulTQ8).
// The two sum a block's float32 terms in a different order, so a row's
// result is the same to the bit in any batch of fewer rows than this, and
// in any batch of at least this many, but not across the two.
const q8AMXMinRows = 4

// q8Scratch holds one product's quantized activations (and for the
// AVX-512 kernels, the same as unsigned bytes and widened scales).
type q8Scratch struct {
	q   []int8
	d   []float32
	u   []uint8
	dae []float32
	pb  []int8
	dyt []float32
}

var q8Pool = sync.Pool{New: func() any { return new(q8Scratch) }}

func checkQ8(op string, c, a []float32, w []byte, m, n, k int) {
	if m < 0 || n < 0 || k < 0 || k%Q8Block != 0 || len(a) < m*k || len(w) < n*(k/Q8Block)*Q8BlockBytes || len(c) < m*n {
		panic(fmt.Sprintf("blas: %s m=%d n=%d k=%d (a multiple of %d) with len(a)=%d len(w)=%d bytes len(c)=%d",
			op, m, n, k, Q8Block, len(a), len(w), len(c)))
	}
}

// MatMulTQ8 sets c[m,n] = a[m,k]·wᵀ, w being n rows of k/32 Q8_0 blocks (k
// a multiple of 32), with a quantized to int8 per block of 32 first. It
// uses every core when the product is large enough, and is safe for
// concurrent use.
func MatMulTQ8(c, a []float32, w []byte, m, n, k int) {
	matMulTQ8(c, a, w, m, n, k, q8Current())
}

// matMulTQ8 is MatMulTQ8 with the kernel set ks.
func matMulTQ8(c, a []float32, w []byte, m, n, k int, ks q8Kernels) {
	checkQ8("MatMulTQ8", c, a, w, m, n, k)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:m*n])
		return
	}
	nb := k / Q8Block
	s := q8Pool.Get().(*q8Scratch)
	if cap(s.q) < m*k {
		s.q = make([]int8, m*k)
	}
	if cap(s.d) < m*nb {
		s.d = make([]float32, m*nb)
	}
	qa, da := s.q[:m*k], s.d[:m*nb]
	if ks >= q8AVX2 {
		q8QuantizeC(a, m, k, qa, da)
	} else {
		QuantizeRowsQ8(a, m, k, qa, da)
	}
	if ks == q8AMX && (nb > q8AMXMaxBlocks || m < q8AMXMinRows) {
		ks = q8AVX512
	}
	var ua []uint8
	var dae []float32
	if ks == q8AVX512 || ks == q8AMX && n%16 != 0 {
		if cap(s.u) < m*k {
			s.u = make([]uint8, m*k)
		}
		if cap(s.dae) < 8*m*nb {
			s.dae = make([]float32, 8*m*nb)
		}
		ua, dae = s.u[:m*k], s.dae[:8*m*nb]
		q8PrepVNNI(m, nb, qa, da, ua, dae)
	}
	if ks == q8AMX {
		// Whole tiles of 16 columns with AMX, split among the cores; the
		// n%16 columns left with VNNI (which kernel a column takes
		// depends on n alone).
		groups := (m + 15) / 16
		if cap(s.pb) < groups*nb*512 {
			s.pb = make([]int8, groups*nb*512)
		}
		if cap(s.dyt) < groups*nb*16 {
			s.dyt = make([]float32, groups*nb*16)
		}
		pb, dyt := s.pb[:groups*nb*512], s.dyt[:groups*nb*16]
		q8PrepAMX(m, nb, qa, da, pb, dyt)
		tiles := n / 16
		forColumns(tiles*16, 2*m*k/16, func(j0, j1 int) { // j0, j1: multiples of 16
			q8GemmAMX(m, (j1-j0)/16, nb, pb, dyt, w[j0*nb*Q8BlockBytes:], c[j0:], n)
		})
		if j0 := tiles * 16; j0 < n {
			q8GemmVNNI(m, n-j0, nb, ua, dae, w[j0*nb*Q8BlockBytes:], c[j0:], n)
		}
		q8Pool.Put(s)
		return
	}
	// A column costs about a fifth of a float32 column: int8 products, 16
	// to an instruction.
	forColumns(n, 2*m*k/4, func(j0, j1 int) {
		wj := w[j0*nb*Q8BlockBytes:]
		switch ks {
		case q8AVX512:
			q8GemmVNNI(m, j1-j0, nb, ua, dae, wj, c[j0:], n)
		case q8AVX2:
			q8GemmC(m, j1-j0, nb, qa, da, wj, c[j0:], n)
		default:
			q8GemmGo(m, j1-j0, nb, qa, da, wj, c[j0:], n)
		}
	})
	q8Pool.Put(s)
}

// MatMulTQ8F32 sets c[m,n] = a[m,k]·wᵀ like MatMulTQ8, with a kept in
// float32: each weight block is widened to float32 as it is read.
func MatMulTQ8F32(c, a []float32, w []byte, m, n, k int) {
	matMulTQ8F32(c, a, w, m, n, k, q8Current())
}

func matMulTQ8F32(c, a []float32, w []byte, m, n, k int, ks q8Kernels) {
	if ks == q8AMX { // int8 tiles need int8 activations: the AVX-512 kernels
		ks = q8AVX512
	}
	checkQ8("MatMulTQ8F32", c, a, w, m, n, k)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		clear(c[:m*n])
		return
	}
	nb := k / Q8Block
	if m >= q8PanelMinRows {
		// Enough rows to reuse each weight many times: widen a panel of
		// weight rows into float32 that stays in the L2 cache, and
		// multiply by it with sgemm.
		panel := max(16, (q8PanelBytes/(4*k))&^15)
		forColumns(n, 2*m*k, func(j0, j1 int) {
			buf := q8PanelPool.Get().(*[]float32)
			if cap(*buf) < panel*k {
				*buf = make([]float32, panel*k)
			}
			wf := (*buf)[:panel*k]
			for p0 := j0; p0 < j1; p0 += panel {
				p1 := min(p0+panel, j1)
				rows := w[p0*nb*Q8BlockBytes : p1*nb*Q8BlockBytes]
				switch ks {
				case q8AVX512:
					q8Widen512(rows, (p1-p0)*nb, wf)
				case q8AVX2:
					q8WidenC(rows, (p1-p0)*nb, wf)
				default:
					q8WidenGo(rows, (p1-p0)*nb, wf)
				}
				gemm(true, m, p1-p0, k, a, k, wf, k, c[p0:], n)
			}
			q8PanelPool.Put(buf)
		})
		return
	}
	forColumns(n, 2*m*k/2, func(j0, j1 int) {
		wj := w[j0*nb*Q8BlockBytes:]
		switch ks {
		case q8AVX512:
			q8GemmF32512(m, j1-j0, k, a, wj, c[j0:], n)
		case q8AVX2:
			q8GemmF32C(m, j1-j0, k, a, wj, c[j0:], n)
		default:
			q8GemmF32Go(m, j1-j0, k, a, wj, c[j0:], n)
		}
	})
}

// MatMulTQ8F32 widens panels of weights to float32 for sgemm from
// q8PanelMinRows rows of a on (prefill, batched decoding: measured faster
// than the direct kernel from 8 rows), each panel about q8PanelBytes.
const (
	q8PanelMinRows = 8
	q8PanelBytes   = 128 << 10
)

var q8PanelPool = sync.Pool{New: func() any { return new([]float32) }}

// q8WidenGo writes the values of blocks Q8_0 blocks of w into out.
func q8WidenGo(w []byte, blocks int, out []float32) {
	for b := range blocks {
		blk := w[b*Q8BlockBytes : (b+1)*Q8BlockBytes]
		d := half(uint16(blk[0]) | uint16(blk[1])<<8)
		o := out[b*Q8Block : (b+1)*Q8Block]
		for t, q := range blk[2:] {
			o[t] = float32(int8(q)) * d
		}
	}
}

// QuantizeRowsQ8 quantizes the m rows of a (k values each, a multiple of
// 32) to int8 per block of 32: d = amax/127 into da[i·k/32+b], q =
// round-to-nearest-even(x·127/amax) into qa, as llama.cpp's AVX2
// quantize_row_q8_0 does (its scale kept in float32 rather than half).
func QuantizeRowsQ8(a []float32, m, k int, qa []int8, da []float32) {
	nb := k / Q8Block
	for i := range m {
		for b := range nb {
			x := a[i*k+b*Q8Block : i*k+(b+1)*Q8Block]
			var amax float32
			for _, v := range x {
				amax = max(amax, float32(math.Abs(float64(v))))
			}
			da[i*nb+b] = amax / 127
			var id float32
			if amax != 0 {
				id = 127 / amax
			}
			q := qa[i*k+b*Q8Block : i*k+(b+1)*Q8Block]
			for j, v := range x {
				q[j] = int8(math.RoundToEven(float64(v * id)))
			}
		}
	}
}

// half widens an IEEE binary16 value (the block scales).
func half(h uint16) float32 { return halfTable[h] }

var halfTable = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = halfSlow(uint16(h))
	}
	return &t
}()

func halfSlow(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		e := uint32(127 - 15 + 1)
		for frac&0x400 == 0 {
			frac <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (frac&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

// q8GemmGo sets c[i·ldc+j] for i < m, j < n to the dot product of
// quantized activation row i with weight row j.
func q8GemmGo(m, n, nb int, qa []int8, da []float32, w []byte, c []float32, ldc int) {
	const bb = Q8BlockBytes
	for j := range n {
		wr := w[j*nb*bb : (j+1)*nb*bb]
		for i := range m {
			var acc float32
			for b := range nb {
				blk := wr[b*bb : (b+1)*bb]
				y := qa[(i*nb+b)*Q8Block : (i*nb+b+1)*Q8Block]
				var s int32
				for t, q := range blk[2:] {
					s += int32(int8(q)) * int32(y[t])
				}
				acc += half(uint16(blk[0])|uint16(blk[1])<<8) * da[i*nb+b] * float32(s)
			}
			c[i*ldc+j] = acc
		}
	}
}

// q8GemmF32Go is q8GemmGo with float32 activations a[m, k].
func q8GemmF32Go(m, n, k int, a []float32, w []byte, c []float32, ldc int) {
	const bb = Q8BlockBytes
	nb := k / Q8Block
	var wf [Q8Block]float32
	for j := range n {
		wr := w[j*nb*bb : (j+1)*nb*bb]
		for i := range m {
			var acc float32
			x := a[i*k : (i+1)*k]
			for b := range nb {
				blk := wr[b*bb : (b+1)*bb]
				d := half(uint16(blk[0]) | uint16(blk[1])<<8)
				for t, q := range blk[2:] {
					wf[t] = float32(int8(q)) * d
				}
				xb := x[b*Q8Block : (b+1)*Q8Block]
				var s float32
				for t, v := range wf {
					s += v * xb[t]
				}
				acc += s
			}
			c[i*ldc+j] = acc
		}
	}
}
