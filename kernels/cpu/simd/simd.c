//go:build cgo && !purego

// The vector kernels, each twice: for AVX2 with FMA (8 lanes) and for
// AVX-512 F (16 lanes), compiled with per-function target attributes so the
// file builds with the compiler's default flags and runs on any x86-64;
// simd_level says which the CPU (and the OS, through XCR0, which
// __builtin_cpu_supports checks) allows, and the Go side passes the level to
// every call. Sums of float32 terms are kept in float64 lanes, as the Go
// reference loops keep theirs.

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX512 __attribute__((target("avx512f,avx2,fma")))

int simd_level(void) {
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
	if (!__builtin_cpu_supports("avx512f")) return 1;
	return 2;
}

// e^y for y ≤ 0, y ≥ -87.33654 giving a normal result and anything below
// giving 0; NaN stays NaN. y = n·ln2 + r with |r| ≤ ln2/2, e^r by Cephes's
// degree-7 expf polynomial (within 2 ulp), 2ⁿ built in the exponent bits.
// Arguments above 0 are computed up to 88 and clamped there (the kernels
// never pass them: their exponents are shifted by the row's maximum or
// are −|x|).
#define EXP_CONSTS                                                      \
	const float lo = -87.33654f, hi = 88.0f, log2e = 1.44269504088896341f; \
	const float ln2hi = 0.693359375f, ln2lo = -2.12194440e-4f;

static inline AVX2 __m256 exp8(__m256 y) {
	EXP_CONSTS
	__m256 yc = _mm256_min_ps(_mm256_max_ps(y, _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(yc, _mm256_set1_ps(log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ln2hi), yc);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ln2lo), r);
	__m256 p = _mm256_set1_ps(1.9875691500E-4f);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
	__m256 e = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1)));
	__m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	e = _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
	e = _mm256_andnot_ps(_mm256_cmp_ps(y, _mm256_set1_ps(lo), _CMP_LT_OQ), e); // below: 0
	return _mm256_blendv_ps(e, y, _mm256_cmp_ps(y, y, _CMP_UNORD_Q));         // NaN: NaN
}

static inline AVX512 __m512 exp16(__m512 y) {
	EXP_CONSTS
	__m512 yc = _mm512_min_ps(_mm512_max_ps(y, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(yc, _mm512_set1_ps(log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ln2hi), yc);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ln2lo), r);
	__m512 p = _mm512_set1_ps(1.9875691500E-4f);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
	__m512 e = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1)));
	__m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
	e = _mm512_mul_ps(e, _mm512_castsi512_ps(bits));
	e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, _mm512_set1_ps(lo), _CMP_GE_OQ), e);
	return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), y);
}

// Tails: AVX2 loads and stores the last n%8 elements under a lane mask,
// AVX-512 under a k mask; masked-off lanes read as 0 and are not written.
static inline AVX2 __m256i tail8(long rem) {
	return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rem), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline __mmask16 tail16(long rem) { return (__mmask16)((1u << rem) - 1); }

// Horizontal sums and maxima.
static inline AVX2 double hsum4d(__m256d v) {
	__m128d s = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
	return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}
static inline AVX2 float hsum8(__m256 v) {
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline AVX2 float hmax8(__m256 v) {
	__m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_max_ps(s, _mm_movehl_ps(s, s));
	return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
// Adds 8 floats into two float64 accumulators.
static inline AVX2 void acc8(__m256d *a0, __m256d *a1, __m256 v) {
	*a0 = _mm256_add_pd(*a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
	*a1 = _mm256_add_pd(*a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}
static inline AVX512 __m256 hi256(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
static inline AVX512 void acc16(__m512d *a0, __m512d *a1, __m512 v) {
	*a0 = _mm512_add_pd(*a0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
	*a1 = _mm512_add_pd(*a1, _mm512_cvtps_pd(hi256(v)));
}
static inline AVX512 double hsum8d(__m512d v) { return _mm512_reduce_add_pd(v); }

// ---- row maximum: NaN elements after the first are passed over (the
// exponentials carry a NaN maximum into every result anyway).

static AVX2 float max_avx2(const float *x, long n) {
	__m256 m = _mm256_set1_ps(x[0]);
	long i = 0;
	for (; i + 8 <= n; i += 8) m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
	if (i < n) {
		__m256 v = _mm256_maskload_ps(x + i, tail8(n - i));
		v = _mm256_blendv_ps(m, v, _mm256_castsi256_ps(tail8(n - i)));
		m = _mm256_max_ps(v, m);
	}
	return hmax8(m);
}

static AVX512 float max_avx512(const float *x, long n) {
	__m512 m = _mm512_set1_ps(x[0]);
	long i = 0;
	for (; i + 16 <= n; i += 16) m = _mm512_max_ps(_mm512_loadu_ps(x + i), m);
	if (i < n) m = _mm512_max_ps(_mm512_mask_loadu_ps(m, tail16(n - i), x + i), m);
	return _mm512_reduce_max_ps(m);
}

float simd_max(int lvl, const float *x, long n) {
	return lvl >= 2 ? max_avx512(x, n) : max_avx2(x, n);
}

// ---- dst[j] = e^(x[j]·a − b), returning Σ dst in float64; dst may be x,
// or NULL for the sum alone.

static AVX2 double expsum_avx2(float *dst, const float *x, long n, float a, float b) {
	__m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
	__m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd(), s2 = _mm256_setzero_pd(), s3 = _mm256_setzero_pd();
	long i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 e0 = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(x + i), va, vb));
		__m256 e1 = exp8(_mm256_fmsub_ps(_mm256_loadu_ps(x + i + 8), va, vb));
		if (dst) {
			_mm256_storeu_ps(dst + i, e0);
			_mm256_storeu_ps(dst + i + 8, e1);
		}
		acc8(&s0, &s1, e0);
		acc8(&s2, &s3, e1);
	}
	for (; i < n; i += 8) {
		__m256i m = tail8(n - i);
		__m256 e = exp8(_mm256_fmsub_ps(_mm256_maskload_ps(x + i, m), va, vb));
		e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
		if (dst) _mm256_maskstore_ps(dst + i, m, e);
		acc8(&s0, &s1, e);
	}
	return hsum4d(_mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3)));
}

static AVX512 double expsum_avx512(float *dst, const float *x, long n, float a, float b) {
	__m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
	__m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd(), s2 = _mm512_setzero_pd(), s3 = _mm512_setzero_pd();
	long i = 0;
	for (; i + 32 <= n; i += 32) {
		__m512 e0 = exp16(_mm512_fmsub_ps(_mm512_loadu_ps(x + i), va, vb));
		__m512 e1 = exp16(_mm512_fmsub_ps(_mm512_loadu_ps(x + i + 16), va, vb));
		if (dst) {
			_mm512_storeu_ps(dst + i, e0);
			_mm512_storeu_ps(dst + i + 16, e1);
		}
		acc16(&s0, &s1, e0);
		acc16(&s2, &s3, e1);
	}
	for (; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
		__m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + i), va, vb)));
		if (dst) _mm512_mask_storeu_ps(dst + i, m, e);
		acc16(&s0, &s1, e);
	}
	return hsum8d(_mm512_add_pd(_mm512_add_pd(s0, s1), _mm512_add_pd(s2, s3)));
}

static double expsum(int lvl, float *dst, const float *x, long n, float a, float b) {
	return lvl >= 2 ? expsum_avx512(dst, x, n, a, b) : expsum_avx2(dst, x, n, a, b);
}

double simd_expsum(int lvl, float *dst, const float *x, long n, float a, float b) {
	return expsum(lvl, dst, x, n, a, b);
}

// ---- x *= a

static AVX2 void scale_avx2(float *x, long n, float a) {
	__m256 va = _mm256_set1_ps(a);
	long i = 0;
	for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), va));
	if (i < n) {
		__m256i m = tail8(n - i);
		_mm256_maskstore_ps(x + i, m, _mm256_mul_ps(_mm256_maskload_ps(x + i, m), va));
	}
}

static AVX512 void scale_avx512(float *x, long n, float a) {
	__m512 va = _mm512_set1_ps(a);
	long i = 0;
	for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), va));
	if (i < n) {
		__mmask16 m = tail16(n - i);
		_mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), va));
	}
}

static void scale(int lvl, float *x, long n, float a) {
	if (lvl >= 2) scale_avx512(x, n, a);
	else scale_avx2(x, n, a);
}

// ---- Σ x·y in float64

static AVX2 double dot_avx2(const float *x, const float *y, long n) {
	__m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
	long i = 0;
	for (; i < n; i += 8) {
		__m256i m = tail8(n - i);
		__m256 a = _mm256_maskload_ps(x + i, m), b = _mm256_maskload_ps(y + i, m);
		s0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(a)), _mm256_cvtps_pd(_mm256_castps256_ps128(b)), s0);
		s1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)), s1);
	}
	return hsum4d(_mm256_add_pd(s0, s1));
}

static AVX512 double dot_avx512(const float *x, const float *y, long n) {
	__m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
		__m512 a = _mm512_maskz_loadu_ps(m, x + i), b = _mm512_maskz_loadu_ps(m, y + i);
		s0 = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(a)), _mm512_cvtps_pd(_mm512_castps512_ps256(b)), s0);
		s1 = _mm512_fmadd_pd(_mm512_cvtps_pd(hi256(a)), _mm512_cvtps_pd(hi256(b)), s1);
	}
	return hsum8d(_mm512_add_pd(s0, s1));
}

static double dot(int lvl, const float *x, const float *y, long n) {
	return lvl >= 2 ? dot_avx512(x, y, n) : dot_avx2(x, y, n);
}

static void zero(float *x, long n) {
	for (long i = 0; i < n; i++) x[i] = 0;
}

// ---- causal softmax of rows of p (row r: its first n0+r entries of ld,
// the rest zeroed) of scale·p, the exponentials shifted by the row's
// maximum.
void simd_softmax_causal(int lvl, float *p, long rows, long ld, long n0, float sc) {
	for (long r = 0; r < rows; r++) {
		float *row = p + r * ld;
		long n = n0 + r;
		float m = simd_max(lvl, row, n) * sc;
		double sum = expsum(lvl, row, row, n, sc, m);
		scale(lvl, row, n, (float)(1 / sum));
		zero(row + n, ld - n);
	}
}

// ---- the backward of that softmax, row r of s holding raw scores and of
// dp the gradient of the probabilities: s becomes the probabilities, dp
// the gradient of the raw scores, sc·p·(dp − Σ p·dp).

static AVX2 void softgrad_avx2(float *p, float *dp, long n, float sc, float d) {
	__m256 vs = _mm256_set1_ps(sc), vd = _mm256_set1_ps(d);
	for (long i = 0; i < n; i += 8) {
		__m256i m = tail8(n - i);
		__m256 a = _mm256_maskload_ps(p + i, m), g = _mm256_maskload_ps(dp + i, m);
		_mm256_maskstore_ps(dp + i, m, _mm256_mul_ps(_mm256_mul_ps(vs, a), _mm256_sub_ps(g, vd)));
	}
}

static AVX512 void softgrad_avx512(float *p, float *dp, long n, float sc, float d) {
	__m512 vs = _mm512_set1_ps(sc), vd = _mm512_set1_ps(d);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
		__m512 a = _mm512_maskz_loadu_ps(m, p + i), g = _mm512_maskz_loadu_ps(m, dp + i);
		_mm512_mask_storeu_ps(dp + i, m, _mm512_mul_ps(_mm512_mul_ps(vs, a), _mm512_sub_ps(g, vd)));
	}
}

void simd_softmax_causal_backward(int lvl, float *s, float *dp, long rows, long ld, long n0, float sc) {
	for (long r = 0; r < rows; r++) {
		float *sr = s + r * ld, *dr = dp + r * ld;
		long n = n0 + r;
		float m = simd_max(lvl, sr, n) * sc;
		double sum = expsum(lvl, sr, sr, n, sc, m);
		scale(lvl, sr, n, (float)(1 / sum));
		float d = (float)dot(lvl, sr, dr, n);
		if (lvl >= 2) softgrad_avx512(sr, dr, n, sc, d);
		else softgrad_avx2(sr, dr, n, sc, d);
		zero(sr + n, ld - n);
		zero(dr + n, ld - n);
	}
}

// ---- the log-prob head: log Σ e^(x − max) per row, and its gradient.

// Row r of x (width cols): lse[r] = max + log Σ e^(x − max), in float64.
void simd_logsumexp(int lvl, double *lse, const float *x, long rows, long cols) {
	for (long r = 0; r < rows; r++) {
		const float *row = x + r * cols;
		float m = simd_max(lvl, row, cols);
		lse[r] = (double)m + log(expsum(lvl, 0, row, cols, 1, m));
	}
}

// out = −g·softmax(in) (out may be in); the caller adds g at the target.
void simd_softmax_scaled(int lvl, float *out, const float *in, long n, float g) {
	float m = simd_max(lvl, in, n);
	double sum = expsum(lvl, out, in, n, 1, m);
	scale(lvl, out, n, (float)(-(double)g / sum));
}

// ---- SwiGLU: silu(g)·u with the sigmoid as 1/(1+e) or e/(1+e), e =
// e^(−|g|) ≤ 1, so neither overflows. Like the Go loops, the backward
// holds the exponent at −87.33654 or above, so e stays a normal number, and
// the forward lets it reach 0; so ±Inf gates get the Go loops' results.

static AVX2 __m256 sigmoid8(__m256 x, int clamp) {
	__m256 sign = _mm256_set1_ps(-0.0f);
	__m256 a = _mm256_or_ps(x, sign); // −|x|
	if (clamp) a = _mm256_max_ps(a, _mm256_set1_ps(-87.33654f));
	__m256 e = exp8(a);
	__m256 one = _mm256_set1_ps(1);
	__m256 num = _mm256_blendv_ps(one, e, x); // e where x's sign bit is set
	return _mm256_div_ps(num, _mm256_add_ps(one, e));
}

static AVX512 __m512 sigmoid16(__m512 x, int clamp) {
	__m512 a = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)));
	if (clamp) a = _mm512_max_ps(a, _mm512_set1_ps(-87.33654f));
	__m512 e = exp16(a);
	__m512 one = _mm512_set1_ps(1);
	__mmask16 neg = _mm512_cmplt_epi32_mask(_mm512_castps_si512(x), _mm512_setzero_si512());
	return _mm512_div_ps(_mm512_mask_mov_ps(one, neg, e), _mm512_add_ps(one, e));
}

static AVX2 void swiglu_avx2(float *d, const float *g, const float *u, long n) {
	for (long i = 0; i < n; i += 8) {
		__m256i m = tail8(n - i);
		__m256 x = _mm256_maskload_ps(g + i, m), y = _mm256_maskload_ps(u + i, m);
		__m256 s = sigmoid8(x, 0);
		_mm256_maskstore_ps(d + i, m, _mm256_mul_ps(_mm256_mul_ps(x, s), y));
	}
}

static AVX512 void swiglu_avx512(float *d, const float *g, const float *u, long n) {
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
		__m512 x = _mm512_maskz_loadu_ps(m, g + i), y = _mm512_maskz_loadu_ps(m, u + i);
		_mm512_mask_storeu_ps(d + i, m, _mm512_mul_ps(_mm512_mul_ps(x, sigmoid16(x, 0)), y));
	}
}

void simd_swiglu(int lvl, float *d, const float *g, const float *u, long n) {
	if (lvl >= 2) swiglu_avx512(d, g, u, n);
	else swiglu_avx2(d, g, u, n);
}

// With s = sigmoid(g): dgate = dy·u·s·(1 + g·(1−s)), dup = dy·g·s. Each
// vector of the inputs is read before the outputs' are written, so the
// outputs may be inputs.
static AVX2 void swiglu_bwd_avx2(float *dg, float *du, const float *dy, const float *g, const float *u, long n) {
	__m256 one = _mm256_set1_ps(1);
	for (long i = 0; i < n; i += 8) {
		__m256i m = tail8(n - i);
		__m256 gv = _mm256_maskload_ps(dy + i, m), x = _mm256_maskload_ps(g + i, m), y = _mm256_maskload_ps(u + i, m);
		__m256 s = sigmoid8(x, 1);
		__m256 t = _mm256_fmadd_ps(x, _mm256_sub_ps(one, s), one);
		_mm256_maskstore_ps(dg + i, m, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(gv, y), s), t));
		_mm256_maskstore_ps(du + i, m, _mm256_mul_ps(_mm256_mul_ps(gv, x), s));
	}
}

static AVX512 void swiglu_bwd_avx512(float *dg, float *du, const float *dy, const float *g, const float *u, long n) {
	__m512 one = _mm512_set1_ps(1);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
		__m512 gv = _mm512_maskz_loadu_ps(m, dy + i), x = _mm512_maskz_loadu_ps(m, g + i), y = _mm512_maskz_loadu_ps(m, u + i);
		__m512 s = sigmoid16(x, 1);
		__m512 t = _mm512_fmadd_ps(x, _mm512_sub_ps(one, s), one);
		_mm512_mask_storeu_ps(dg + i, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(gv, y), s), t));
		_mm512_mask_storeu_ps(du + i, m, _mm512_mul_ps(_mm512_mul_ps(gv, x), s));
	}
}

void simd_swiglu_backward(int lvl, float *dg, float *du, const float *dy, const float *g, const float *u, long n) {
	if (lvl >= 2) swiglu_bwd_avx512(dg, du, dy, g, u, n);
	else swiglu_bwd_avx2(dg, du, dy, g, u, n);
}

// ---- RMSNorm of each row: x·r·w with r = 1/sqrt(mean(x²) + eps), the
// mean and x·r in float64, as the Go loop has them.

static AVX2 void rmsnorm_row_avx2(float *out, const float *in, const float *w, long n, double rs) {
	__m256d vr = _mm256_set1_pd(rs);
	for (long i = 0; i < n; i += 8) {
		__m256i m = tail8(n - i);
		__m256 x = _mm256_maskload_ps(in + i, m), wv = _mm256_maskload_ps(w + i, m);
		__m128 a = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), vr));
		__m128 b = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), vr));
		__m256 xr = _mm256_insertf128_ps(_mm256_castps128_ps256(a), b, 1);
		_mm256_maskstore_ps(out + i, m, _mm256_mul_ps(xr, wv));
	}
}

static AVX512 void rmsnorm_row_avx512(float *out, const float *in, const float *w, long n, double rs) {
	__m512d vr = _mm512_set1_pd(rs);
	for (long i = 0; i < n; i += 16) {
		__mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
		__m512 x = _mm512_maskz_loadu_ps(m, in + i), wv = _mm512_maskz_loadu_ps(m, w + i);
		__m256 a = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), vr));
		__m256 b = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(hi256(x)), vr));
		__m512 xr = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a)), _mm256_castps_pd(b), 1));
		_mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(xr, wv));
	}
}

void simd_rmsnorm(int lvl, float *out, const float *in, const float *w, long rows, long cols, float eps) {
	for (long r = 0; r < rows; r++) {
		const float *x = in + r * cols;
		double rs = 1 / sqrt(dot(lvl, x, x, cols) / (double)cols + (double)eps);
		if (lvl >= 2) rmsnorm_row_avx512(out + r * cols, x, w, cols, rs);
		else rmsnorm_row_avx2(out + r * cols, x, w, cols, rs);
	}
}

// ---- AdamW, element by element, with the Go loop's (and torch's)
// operations and roundings: the moments by single-rounded FMAs, the rest
// unfused. See kernels/cpu/optim.go for the formula.

typedef struct {
	float decay, lerpW, w2, beta2, negStep, bc2Sqrt, eps;
	int lerpLow;
} adamw_args;

static AVX2 void adamw_avx2(float *p, const float *g, float *m, float *v, long n, const adamw_args *a) {
	__m256 decay = _mm256_set1_ps(a->decay), lw = _mm256_set1_ps(a->lerpLow ? a->lerpW : a->lerpW - 1);
	__m256 w2 = _mm256_set1_ps(a->w2), b2 = _mm256_set1_ps(a->beta2), ns = _mm256_set1_ps(a->negStep);
	__m256 bc = _mm256_set1_ps(a->bc2Sqrt), eps = _mm256_set1_ps(a->eps);
	for (long i = 0; i < n; i += 8) {
		__m256i k = tail8(n - i);
		__m256 gi = _mm256_maskload_ps(g + i, k), mi = _mm256_maskload_ps(m + i, k);
		__m256 vi = _mm256_maskload_ps(v + i, k), pi = _mm256_maskload_ps(p + i, k);
		mi = _mm256_fmadd_ps(lw, _mm256_sub_ps(gi, mi), a->lerpLow ? mi : gi);
		vi = _mm256_fmadd_ps(_mm256_mul_ps(w2, gi), gi, _mm256_mul_ps(vi, b2));
		__m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc), eps);
		pi = _mm256_add_ps(_mm256_mul_ps(pi, decay), _mm256_div_ps(_mm256_mul_ps(ns, mi), denom));
		_mm256_maskstore_ps(m + i, k, mi);
		_mm256_maskstore_ps(v + i, k, vi);
		_mm256_maskstore_ps(p + i, k, pi);
	}
}

static AVX512 void adamw_avx512(float *p, const float *g, float *m, float *v, long n, const adamw_args *a) {
	__m512 decay = _mm512_set1_ps(a->decay), lw = _mm512_set1_ps(a->lerpLow ? a->lerpW : a->lerpW - 1);
	__m512 w2 = _mm512_set1_ps(a->w2), b2 = _mm512_set1_ps(a->beta2), ns = _mm512_set1_ps(a->negStep);
	__m512 bc = _mm512_set1_ps(a->bc2Sqrt), eps = _mm512_set1_ps(a->eps);
	for (long i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tail16(n - i);
		__m512 gi = _mm512_maskz_loadu_ps(k, g + i), mi = _mm512_maskz_loadu_ps(k, m + i);
		__m512 vi = _mm512_maskz_loadu_ps(k, v + i), pi = _mm512_maskz_loadu_ps(k, p + i);
		mi = _mm512_fmadd_ps(lw, _mm512_sub_ps(gi, mi), a->lerpLow ? mi : gi);
		vi = _mm512_fmadd_ps(_mm512_mul_ps(w2, gi), gi, _mm512_mul_ps(vi, b2));
		__m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc), eps);
		pi = _mm512_add_ps(_mm512_mul_ps(pi, decay), _mm512_div_ps(_mm512_mul_ps(ns, mi), denom));
		_mm512_mask_storeu_ps(m + i, k, mi);
		_mm512_mask_storeu_ps(v + i, k, vi);
		_mm512_mask_storeu_ps(p + i, k, pi);
	}
}

void simd_adamw(int lvl, float *p, const float *g, float *m, float *v, long n, float decay, float lerpW, int lerpLow,
                float w2, float beta2, float negStep, float bc2Sqrt, float eps) {
	adamw_args a = {decay, lerpW, w2, beta2, negStep, bc2Sqrt, eps, lerpLow};
	if (lvl >= 2) adamw_avx512(p, g, m, v, n, &a);
	else adamw_avx2(p, g, m, v, n, &a);
}
