//go:build cgo && !purego

package blas

/*
// Batch invariance rests on the compiler fusing no product and sum on its
// own (GCC's default -ffp-contract=fast may, and cgo does not let a
// package turn it off): in these kernels every product feeds the
// multiplicand of an explicit FMA, never a sum, so there is nothing to
// fuse (checked: GCC 12's code is the same with -ffp-contract=off). Keep it
// so.
#include <stdint.h>
#include <string.h>

// The Q8_0 kernels (q8.go), for x86-64 CPUs with AVX2, FMA and F16C. Each
// function is compiled for those features alone (target attributes, no
// -mavx2 for the whole file), so the rest of the binary runs on any x86-64,
// and q8_simd says at run time whether the CPU has them. The int8 dot
// product per block is llama.cpp's: |w| as unsigned bytes times x with w's
// sign (maddubs), pairs summed to int32 (madd), exact.

#if defined(__x86_64__)
#include <immintrin.h>

static int q8_simd(void) {
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

__attribute__((target("avx2,fma")))
static inline float q8_hsum(__m256 x) {
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

__attribute__((target("f16c")))
static inline float q8_scale(const uint8_t *blk) {
	uint16_t h;
	memcpy(&h, blk, 2);
	return _cvtsh_ss(h);
}

// q8_quantize: the rows of a to int8 per block of 32 (see QuantizeRowsQ8).
__attribute__((target("avx2,fma")))
static void q8_quantize(const float *a, int m, int k, int8_t *qa, float *da) {
	const int nb = k / 32;
	const __m256 sign = _mm256_set1_ps(-0.0f);
	const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	for (int i = 0; i < m; i++) {
		for (int b = 0; b < nb; b++) {
			const float *x = a + (size_t)i * k + (size_t)b * 32;
			__m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
			__m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
			__m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
			                          _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
			__m128 m4 = _mm_max_ps(_mm256_extractf128_ps(mx, 1), _mm256_castps256_ps128(mx));
			m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
			m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
			const float amax = _mm_cvtss_f32(m4);
			da[(size_t)i * nb + b] = amax / 127.f;
			const __m256 id = _mm256_set1_ps(amax != 0.f ? 127.f / amax : 0.f);
			__m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
			__m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
			__m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
			__m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
			i0 = _mm256_packs_epi32(i0, i1);
			i2 = _mm256_packs_epi32(i2, i3);
			i0 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i0, i2), perm);
			_mm256_storeu_si256((__m256i *)(qa + (size_t)i * k + (size_t)b * 32), i0);
		}
	}
}

// q8_block: one block's 8 int32 partial sums of w·y, as float32.
__attribute__((target("avx2")))
static inline __m256 q8_block(__m256i qx, __m256i ax, const int8_t *y) {
	const __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y), qx);
	const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
	return _mm256_cvtepi32_ps(s32);
}

// q8_gemm: c[i*ldc + j] = Σ_b dw·da·(w_j,b · y_i,b) for i < m, j < n. Four
// activation rows share each weight block load. Every row sums its blocks
// in the same order, in one accumulator, whether it is computed in a group
// of four or alone, so that a row's result does not depend on the batch it
// is in: a float32 difference of the last bit upstream can move an int8
// activation by a whole step (q8_0's paths differ more than float32's,
// kernels/model's q8CacheTol).
__attribute__((target("avx2,fma,f16c")))
static void q8_gemm(int m, int n, int nb, const int8_t *qa, const float *da, const uint8_t *w, float *c, int ldc) {
	for (int j = 0; j < n; j++) {
		const uint8_t *wr = w + (size_t)j * nb * 34;
		int i = 0;
		for (; i + 4 <= m; i += 4) {
			__m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
			const int8_t *y0 = qa + (size_t)i * nb * 32;
			const float *d0 = da + (size_t)i * nb;
			for (int b = 0; b < nb; b++) {
				const uint8_t *blk = wr + (size_t)b * 34;
				const float dw = q8_scale(blk);
				const __m256i qx = _mm256_loadu_si256((const __m256i *)(blk + 2));
				const __m256i ax = _mm256_sign_epi8(qx, qx);
				acc0 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d0[b]), q8_block(qx, ax, y0 + b * 32), acc0);
				acc1 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d0[nb + b]), q8_block(qx, ax, y0 + (size_t)(nb + b) * 32), acc1);
				acc2 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d0[2 * nb + b]), q8_block(qx, ax, y0 + (size_t)(2 * nb + b) * 32), acc2);
				acc3 = _mm256_fmadd_ps(_mm256_set1_ps(dw * d0[3 * nb + b]), q8_block(qx, ax, y0 + (size_t)(3 * nb + b) * 32), acc3);
			}
			c[(size_t)i * ldc + j] = q8_hsum(acc0);
			c[(size_t)(i + 1) * ldc + j] = q8_hsum(acc1);
			c[(size_t)(i + 2) * ldc + j] = q8_hsum(acc2);
			c[(size_t)(i + 3) * ldc + j] = q8_hsum(acc3);
		}
		for (; i < m; i++) {
			__m256 acc = _mm256_setzero_ps();
			const int8_t *y = qa + (size_t)i * nb * 32;
			const float *d = da + (size_t)i * nb;
			for (int b = 0; b < nb; b++) {
				const uint8_t *blk = wr + (size_t)b * 34;
				const __m256i qx = _mm256_loadu_si256((const __m256i *)(blk + 2));
				acc = _mm256_fmadd_ps(_mm256_set1_ps(q8_scale(blk) * d[b]), q8_block(qx, _mm256_sign_epi8(qx, qx), y + b * 32), acc);
			}
			c[(size_t)i * ldc + j] = q8_hsum(acc);
		}
	}
}

// q8_widen: one block's 32 weights as float32, times its scale.
__attribute__((target("avx2,fma,f16c")))
static inline void q8_widen(const uint8_t *blk, __m256 *w) {
	const __m256 d = _mm256_set1_ps(q8_scale(blk));
	const __m128i lo = _mm_loadu_si128((const __m128i *)(blk + 2));
	const __m128i hi = _mm_loadu_si128((const __m128i *)(blk + 18));
	w[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
	w[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))));
	w[2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)));
	w[3] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))));
}

// q8_widen_rows: blocks blocks of w as float32 into out.
__attribute__((target("avx2,fma,f16c")))
static void q8_widen_rows(const uint8_t *w, int blocks, float *out) {
	__m256 v[4];
	for (int b = 0; b < blocks; b++) {
		q8_widen(w + (size_t)b * 34, v);
		float *o = out + (size_t)b * 32;
		_mm256_storeu_ps(o, v[0]);
		_mm256_storeu_ps(o + 8, v[1]);
		_mm256_storeu_ps(o + 16, v[2]);
		_mm256_storeu_ps(o + 24, v[3]);
	}
}

__attribute__((target("avx2,fma")))
static inline __m256 q8_fma4(const __m256 *w, const float *x, __m256 acc) {
	acc = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(x), acc);
	acc = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x + 8), acc);
	acc = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x + 16), acc);
	return _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x + 24), acc);
}

// q8_gemm_f32: c[i*ldc + j] = a_i · widen(w_j), a row-major m×k float32.
__attribute__((target("avx2,fma,f16c")))
static void q8_gemm_f32(int m, int n, int k, const float *a, const uint8_t *w, float *c, int ldc) {
	const int nb = k / 32;
	__m256 wf[4];
	for (int j = 0; j < n; j++) {
		const uint8_t *wr = w + (size_t)j * nb * 34;
		int i = 0;
		for (; i + 4 <= m; i += 4) {
			__m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
			const float *x = a + (size_t)i * k;
			for (int b = 0; b < nb; b++) {
				q8_widen(wr + (size_t)b * 34, wf);
				acc0 = q8_fma4(wf, x + b * 32, acc0);
				acc1 = q8_fma4(wf, x + k + b * 32, acc1);
				acc2 = q8_fma4(wf, x + 2 * (size_t)k + b * 32, acc2);
				acc3 = q8_fma4(wf, x + 3 * (size_t)k + b * 32, acc3);
			}
			c[(size_t)i * ldc + j] = q8_hsum(acc0);
			c[(size_t)(i + 1) * ldc + j] = q8_hsum(acc1);
			c[(size_t)(i + 2) * ldc + j] = q8_hsum(acc2);
			c[(size_t)(i + 3) * ldc + j] = q8_hsum(acc3);
		}
		for (; i < m; i++) {
			__m256 acc = _mm256_setzero_ps();
			const float *x = a + (size_t)i * k;
			for (int b = 0; b < nb; b++) {
				q8_widen(wr + (size_t)b * 34, wf);
				acc = q8_fma4(wf, x + b * 32, acc);
			}
			c[(size_t)i * ldc + j] = q8_hsum(acc);
		}
	}
}

// The AVX-512 kernels (CPUs with AVX-512 F, BW, DQ, VL and VNNI: Ice Lake
// and later Xeons, Zen 4 and later). One 512-bit register holds two blocks.
// vpdpbusd multiplies unsigned bytes by signed bytes and adds each four
// products to an int32 lane, exactly, in one instruction (AVX2 needs
// sign, maddubs and madd). The activations are unsigned for it: u = y+128
// (y XOR 0x80), and the weights' share of the offset, 128·Σw per lane, is
// taken off by starting each lane's sum at −128·Σw, computed once per
// weight block and shared by every activation row. The int32 sums are
// the AVX2 kernel's; only the order of the float32 sums differs.
static int q8_vnni(void) {
	__builtin_cpu_init();
	return q8_simd() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
	       __builtin_cpu_supports("avx512vnni");
}

// q8_prep_vnni: the int8 activations qa as unsigned u = y+128, and each
// block's scale da eight times over (dae: two blocks' scales, each over
// its eight lanes, are one 512-bit load).
__attribute__((target("avx512f,avx512bw")))
static void q8_prep_vnni(int m, int nb, const int8_t *qa, const float *da, uint8_t *ua, float *dae) {
	const size_t n = (size_t)m * nb * 32, blocks = (size_t)m * nb;
	const __m512i off = _mm512_set1_epi8((char)0x80);
	size_t t = 0;
	for (; t + 64 <= n; t += 64)
		_mm512_storeu_si512((void *)(ua + t), _mm512_xor_si512(_mm512_loadu_si512((const void *)(qa + t)), off));
	for (; t < n; t++)
		ua[t] = (uint8_t)qa[t] ^ 0x80;
	for (size_t b = 0; b < blocks; b++)
		_mm256_storeu_ps(dae + b * 8, _mm256_set1_ps(da[b]));
}

// q8v_pair: blocks 2p and 2p+1 of a weight row (the second zero when
// last is set: an odd block count): q in one register, −128·Σq per lane,
// and the two scales over their eight lanes each.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")))
static inline void q8v_pair(const uint8_t *blk, int last, __m512i *wq, __m512i *negc, __m512 *dw) {
	const __m256i q0 = _mm256_loadu_si256((const __m256i *)(blk + 2));
	const __m256 d0 = _mm256_set1_ps(q8_scale(blk));
	if (last) {
		*wq = _mm512_inserti64x4(_mm512_setzero_si512(), q0, 0);
		*dw = _mm512_insertf32x8(_mm512_setzero_ps(), d0, 0);
	} else {
		*wq = _mm512_inserti64x4(_mm512_castsi256_si512(q0), _mm256_loadu_si256((const __m256i *)(blk + 36)), 1);
		*dw = _mm512_insertf32x8(_mm512_castps256_ps512(d0), _mm256_set1_ps(q8_scale(blk + 34)), 1);
	}
	*negc = _mm512_sub_epi32(_mm512_setzero_si512(),
	                         _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), *wq));
}

// q8v_row: one activation row's step over a pair of blocks. Every row
// takes exactly these steps, in a group or alone (batch invariance).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
static inline __m512 q8v_row(__m512 acc, __m512i wq, __m512i negc, __m512 dw, const uint8_t *u, const float *de, int last) {
	__m512i x;
	__m512 d;
	if (last) {
		x = _mm512_maskz_loadu_epi8(0xffffffffull, u);
		d = _mm512_maskz_loadu_ps(0x00ff, de);
	} else {
		x = _mm512_loadu_si512((const void *)u);
		d = _mm512_loadu_ps(de);
	}
	const __m512i dot = _mm512_dpbusd_epi32(negc, x, wq);
	return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, d), acc);
}

// q8v_rows: rows i0…i0+R-1 of c's column j, R ≤ 8 activation rows sharing
// each pair of weight blocks (R a constant where it is inlined).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c"), always_inline))
static inline void q8v_rows(const int R, int nb, const uint8_t *u, const float *de, const uint8_t *wr, float *c, int ldc) {
	const int np = (nb + 1) / 2;
	const size_t rs = (size_t)nb * 32, ds = (size_t)nb * 8; // one row of ua, of dae
	__m512 acc[8];
#pragma GCC unroll 8
	for (int t = 0; t < R; t++)
		acc[t] = _mm512_setzero_ps();
	for (int p = 0; p < np; p++) {
		const int last = 2 * p + 1 == nb;
		__m512i wq, negc;
		__m512 dw;
		q8v_pair(wr + (size_t)p * 68, last, &wq, &negc, &dw);
	#pragma GCC unroll 8
	for (int t = 0; t < R; t++)
			acc[t] = q8v_row(acc[t], wq, negc, dw, u + t * rs + (size_t)p * 64, de + t * ds + (size_t)p * 16, last);
	}
#pragma GCC unroll 8
	for (int t = 0; t < R; t++)
		c[(size_t)t * ldc] = _mm512_reduce_add_ps(acc[t]);
}

// q8_gemm_vnni: q8_gemm with the AVX-512 VNNI kernel, up to eight
// activation rows sharing each pair of weight blocks. Every row takes the
// same steps whatever the size of its group.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,f16c")))
static void q8_gemm_vnni(int m, int n, int nb, const uint8_t *ua, const float *dae, const uint8_t *w, float *c, int ldc) {
	const size_t rs = (size_t)nb * 32, ds = (size_t)nb * 8;
	for (int j = 0; j < n; j++) {
		const uint8_t *wr = w + (size_t)j * nb * 34;
		int i = 0;
		for (; i + 8 <= m; i += 8)
			q8v_rows(8, nb, ua + i * rs, dae + i * ds, wr, c + (size_t)i * ldc + j, ldc);
		if (i + 4 <= m) {
			q8v_rows(4, nb, ua + i * rs, dae + i * ds, wr, c + (size_t)i * ldc + j, ldc);
			i += 4;
		}
		if (i + 2 <= m) {
			q8v_rows(2, nb, ua + i * rs, dae + i * ds, wr, c + (size_t)i * ldc + j, ldc);
			i += 2;
		}
		if (i < m)
			q8v_rows(1, nb, ua + i * rs, dae + i * ds, wr, c + (size_t)i * ldc + j, ldc);
	}
}

// q8v_widen: one block's 32 weights as float32 (two registers), times its
// scale: the same values as q8_widen's.
__attribute__((target("avx512f,f16c")))
static inline void q8v_widen(const uint8_t *blk, __m512 *w) {
	const __m512 d = _mm512_set1_ps(q8_scale(blk));
	w[0] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)))));
	w[1] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18)))));
}

__attribute__((target("avx512f,f16c")))
static void q8_widen_rows_512(const uint8_t *w, int blocks, float *out) {
	__m512 v[2];
	for (int b = 0; b < blocks; b++) {
		q8v_widen(w + (size_t)b * 34, v);
		_mm512_storeu_ps(out + (size_t)b * 32, v[0]);
		_mm512_storeu_ps(out + (size_t)b * 32 + 16, v[1]);
	}
}

__attribute__((target("avx512f")))
static inline __m512 q8v_fma2(const __m512 *w, const float *x, __m512 acc) {
	acc = _mm512_fmadd_ps(w[0], _mm512_loadu_ps(x), acc);
	return _mm512_fmadd_ps(w[1], _mm512_loadu_ps(x + 16), acc);
}

// q8_gemm_f32_512: q8_gemm_f32 with 512-bit registers.
__attribute__((target("avx512f,f16c")))
static void q8_gemm_f32_512(int m, int n, int k, const float *a, const uint8_t *w, float *c, int ldc) {
	const int nb = k / 32;
	__m512 wf[2];
	for (int j = 0; j < n; j++) {
		const uint8_t *wr = w + (size_t)j * nb * 34;
		int i = 0;
		for (; i + 4 <= m; i += 4) {
			__m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
			const float *x = a + (size_t)i * k;
			for (int b = 0; b < nb; b++) {
				q8v_widen(wr + (size_t)b * 34, wf);
				acc0 = q8v_fma2(wf, x + b * 32, acc0);
				acc1 = q8v_fma2(wf, x + k + b * 32, acc1);
				acc2 = q8v_fma2(wf, x + 2 * (size_t)k + b * 32, acc2);
				acc3 = q8v_fma2(wf, x + 3 * (size_t)k + b * 32, acc3);
			}
			c[(size_t)i * ldc + j] = _mm512_reduce_add_ps(acc0);
			c[(size_t)(i + 1) * ldc + j] = _mm512_reduce_add_ps(acc1);
			c[(size_t)(i + 2) * ldc + j] = _mm512_reduce_add_ps(acc2);
			c[(size_t)(i + 3) * ldc + j] = _mm512_reduce_add_ps(acc3);
		}
		for (; i < m; i++) {
			__m512 acc = _mm512_setzero_ps();
			const float *x = a + (size_t)i * k;
			for (int b = 0; b < nb; b++) {
				q8v_widen(wr + (size_t)b * 34, wf);
				acc = q8v_fma2(wf, x + b * 32, acc);
			}
			c[(size_t)i * ldc + j] = _mm512_reduce_add_ps(acc);
		}
	}
}

// The AMX kernel (Sapphire Rapids and later Xeons: AMX-TILE and
// AMX-INT8, and the kernel's permission to use the tile registers). One
// tdpbssd multiplies 16 weight rows by 16 activation rows over one block
// of 32 values, each of the 256 int32 sums exact, as the other kernels'
// block sums are. The weights are the A tile straight from their blocks
// (16 rows of 32 bytes, the row stride of a weight row); the activations,
// quantized per product anyway, are packed in the layout the B tile wants
// (q8_prep_amx). Each block's int32 tile is stored and scaled in float32:
// lane i of weight row r's accumulator gets fma(sum, dw[r]·dy[i], acc), one
// block after another, so a row's result does not depend on the rows
// computed with it. Columns are done in tiles of 16; the n%16 columns left
// over take the VNNI kernel, which depends on n only, never on m.
// Linux only (the permission is Linux's arch_prctl), and compilers that
// know the AMX intrinsics (GCC 11, clang 12); elsewhere the stubs below.
#if defined(__linux__) && (__GNUC__ >= 11 || __clang_major__ >= 12)
#define Q8_HAVE_AMX 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

// q8_amx_cpu: the CPU has AMX-TILE and AMX-INT8 (and the VNNI kernels'
// features, for the rows and columns AMX leaves), and the OS saves the
// tile state. It asks for nothing.
static int q8_amx_cpu(void) {
	unsigned a, b, c, d;
	if (!q8_vnni() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1))
		return 0;
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (lo >> 17 & 3) == 3;
}

static int q8_amx_state = -1; // -1 not asked yet, 0 no, 1 yes

// q8_amx: q8_amx_cpu, and this process may use the tile registers: asked
// of the kernel once (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, for the
// whole process; it fails, and the VNNI kernels run, where a thread's
// signal stack is too small for the tile state).
static int q8_amx(void) {
	int st = __atomic_load_n(&q8_amx_state, __ATOMIC_RELAXED);
	if (st >= 0)
		return st;
	st = q8_amx_cpu() && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
	__atomic_store_n(&q8_amx_state, st, __ATOMIC_RELAXED);
	return st;
}

struct q8_tilecfg {
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

// q8_prep_amx: the activations as B tiles, for each group g of 16 rows
// (zeros past m) and block b: 8 rows of 64 bytes, row t holding for each
// activation row i its values 4t…4t+3 of the block; and the scales of
// each group and block over the 16 lanes (dyt[(g·nb + b)·16 + i]).
static void q8_prep_amx(int m, int nb, const int8_t *qa, const float *da, int8_t *pb, float *dyt) {
	const int groups = (m + 15) / 16;
	const size_t k = (size_t)nb * 32;
	memset(pb, 0, (size_t)groups * nb * 512);
	memset(dyt, 0, (size_t)groups * nb * 16 * sizeof(float));
	for (int i = 0; i < m; i++) {
		const int g = i / 16, l = i % 16;
		for (int b = 0; b < nb; b++) {
			int8_t *tile = pb + ((size_t)g * nb + b) * 512;
			const int8_t *x = qa + (size_t)i * k + (size_t)b * 32;
			for (int t = 0; t < 8; t++)
				memcpy(tile + t * 64 + l * 4, x + t * 4, 4);
			dyt[((size_t)g * nb + b) * 16 + l] = da[(size_t)i * nb + b];
		}
	}
}

// q8_gemm_amx: c[i·ldc + j] for i < m and j < tiles·16, the weight rows
// taken 16 at a time; nb·34·15 must fit an int (Q8_AMX_MAX_BLOCKS).
#define Q8_AMX_MAX_BLOCKS (1 << 20)
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c,amx-tile,amx-int8")))
static void q8_gemm_amx(int m, int tiles, int nb, const int8_t *pb, const float *dyt, const uint8_t *w, float *c, int ldc) {
	struct q8_tilecfg cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.palette = 1;
	// Two blocks in flight: A tiles 0 and 3 (16 weight rows × one block),
	// B tiles 1 and 4 (the block of 16 activation rows), C tiles 2 and 5
	// (16 × 16 int32), so that one block's tile work overlaps the other's
	// float32 scaling.
	for (int x = 0; x < 2; x++) {
		cfg.rows[3 * x] = 16, cfg.colsb[3 * x] = 32;
		cfg.rows[3 * x + 1] = 8, cfg.colsb[3 * x + 1] = 64;
		cfg.rows[3 * x + 2] = 16, cfg.colsb[3 * x + 2] = 64;
	}
	_tile_loadconfig(&cfg);
	const int groups = (m + 15) / 16;
	const size_t wstride = (size_t)nb * 34;
	const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(ldc));
	int32_t cbuf[2][256] __attribute__((aligned(64)));
	float dwb[16] __attribute__((aligned(64))); // block b's scales of the 16 weight rows
	// Offsets of the 16 weight rows' first bytes: a gather of 32 bits there
	// reads a block's half scale and its first two values (in bounds).
	const __m512i rowoff = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)wstride));
	for (int t = 0; t < tiles; t++) {
		const uint8_t *wt = w + (size_t)t * 16 * wstride;
		for (int g = 0; g < groups; g++) {
			__m512 acc[16];
			for (int r = 0; r < 16; r++)
				acc[r] = _mm512_setzero_ps();
			const int8_t *pg = pb + (size_t)g * nb * 512;
			const float *dg = dyt + (size_t)g * nb * 16;
			// Software-pipelined: block b+1's tile work (into the other
			// tile set and buffer) is issued before block b's sums, stored
			// an iteration earlier, are read and scaled.
#define Q8_AMX_TILES(A, B, C, blk, buf)                                   \
	do {                                                              \
		_tile_loadd(A, wt + (size_t)(blk) * 34 + 2, wstride);      \
		_tile_loadd(B, pg + (size_t)(blk) * 512, 64);              \
		_tile_zero(C);                                            \
		_tile_dpbssd(C, A, B);                                    \
		_tile_stored(C, buf, 64);                                 \
	} while (0)
			Q8_AMX_TILES(0, 1, 2, 0, cbuf[0]);
			for (int b = 0; b < nb; b++) {
				if (b + 1 < nb) {
					if ((b + 1) & 1)
						Q8_AMX_TILES(3, 4, 5, b + 1, cbuf[1]);
					else
						Q8_AMX_TILES(0, 1, 2, b + 1, cbuf[0]);
				}
				const int32_t *cb = cbuf[b & 1];
				const __m512 dy = _mm512_loadu_ps(dg + (size_t)b * 16);
				const __m512i h = _mm512_i32gather_epi32(rowoff, (const void *)(wt + (size_t)b * 34), 1);
				_mm512_store_ps(dwb, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
				for (int r = 0; r < 16; r++) {
					const __m512 s = _mm512_mul_ps(_mm512_set1_ps(dwb[r]), dy);
					acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cb + r * 16))), s, acc[r]);
				}
			}
#undef Q8_AMX_TILES
			const int rows = m - g * 16 < 16 ? m - g * 16 : 16;
			const __mmask16 keep = (__mmask16)((1u << rows) - 1);
			float *cg = c + (size_t)g * 16 * ldc + (size_t)t * 16;
			for (int r = 0; r < 16; r++)
				_mm512_mask_i32scatter_ps(cg + r, keep, idx, acc[r], 4);
		}
	}
	_tile_release();
}

#else // no AMX: the VNNI kernels run where AMX would
#define Q8_AMX_MAX_BLOCKS 0
static int q8_amx(void) { return 0; }
static void q8_prep_amx(int m, int nb, const int8_t *qa, const float *da, int8_t *pb, float *dyt) {}
static void q8_gemm_amx(int m, int tiles, int nb, const int8_t *pb, const float *dyt, const uint8_t *w, float *c, int ldc) {}
#endif // AMX

#else // not x86-64: q8_simd is false and the Go loops run.

static int q8_simd(void) { return 0; }
static void q8_quantize(const float *a, int m, int k, int8_t *qa, float *da) {}
static void q8_gemm(int m, int n, int nb, const int8_t *qa, const float *da, const uint8_t *w, float *c, int ldc) {}
static void q8_gemm_f32(int m, int n, int k, const float *a, const uint8_t *w, float *c, int ldc) {}
static void q8_widen_rows(const uint8_t *w, int blocks, float *out) {}
static int q8_vnni(void) { return 0; }
static void q8_prep_vnni(int m, int nb, const int8_t *qa, const float *da, uint8_t *ua, float *dae) {}
static void q8_gemm_vnni(int m, int n, int nb, const uint8_t *ua, const float *dae, const uint8_t *w, float *c, int ldc) {}
static void q8_widen_rows_512(const uint8_t *w, int blocks, float *out) {}
static void q8_gemm_f32_512(int m, int n, int k, const float *a, const uint8_t *w, float *c, int ldc) {}
#define Q8_AMX_MAX_BLOCKS 0
static int q8_amx(void) { return 0; }
static void q8_prep_amx(int m, int nb, const int8_t *qa, const float *da, int8_t *pb, float *dyt) {}
static void q8_gemm_amx(int m, int tiles, int nb, const int8_t *pb, const float *dyt, const uint8_t *w, float *c, int ldc) {}

#endif
*/
import "C"

import "unsafe"

// q8HaveAVX2 and q8HaveAVX512 report whether this CPU and build could run
// the AVX2 and the AVX-512 VNNI kernels, whatever FROGNANO_BLAS and
// FROGNANO_Q8 say.
func q8HaveAVX2() bool   { return C.q8_simd() != 0 }
func q8HaveAVX512() bool { return C.q8_vnni() != 0 }

// q8HaveAMX reports whether this CPU has AMX-TILE and AMX-INT8 and the
// kernel lets this process use the tile registers (asked once, for the
// whole process).
func q8HaveAMX() bool { return C.q8_amx() != 0 }

func q8PrepAMX(m, nb int, qa []int8, da []float32, pb []int8, dyt []float32) {
	C.q8_prep_amx(C.int(m), C.int(nb), (*C.int8_t)(unsafe.Pointer(&qa[0])), (*C.float)(unsafe.Pointer(&da[0])),
		(*C.int8_t)(unsafe.Pointer(&pb[0])), (*C.float)(unsafe.Pointer(&dyt[0])))
}

// q8AMXMaxBlocks bounds the blocks per row the AMX kernel takes (its
// scales live on the C stack); longer rows take the VNNI kernel.
const q8AMXMaxBlocks = C.Q8_AMX_MAX_BLOCKS

func q8GemmAMX(m, tiles, nb int, pb []int8, dyt []float32, w []byte, c []float32, ldc int) {
	C.q8_gemm_amx(C.int(m), C.int(tiles), C.int(nb), (*C.int8_t)(unsafe.Pointer(&pb[0])), (*C.float)(unsafe.Pointer(&dyt[0])),
		(*C.uint8_t)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func q8QuantizeC(a []float32, m, k int, qa []int8, da []float32) {
	C.q8_quantize((*C.float)(unsafe.Pointer(&a[0])), C.int(m), C.int(k),
		(*C.int8_t)(unsafe.Pointer(&qa[0])), (*C.float)(unsafe.Pointer(&da[0])))
}

func q8GemmC(m, n, nb int, qa []int8, da []float32, w []byte, c []float32, ldc int) {
	C.q8_gemm(C.int(m), C.int(n), C.int(nb), (*C.int8_t)(unsafe.Pointer(&qa[0])), (*C.float)(unsafe.Pointer(&da[0])),
		(*C.uint8_t)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func q8WidenC(w []byte, blocks int, out []float32) {
	C.q8_widen_rows((*C.uint8_t)(unsafe.Pointer(&w[0])), C.int(blocks), (*C.float)(unsafe.Pointer(&out[0])))
}

func q8GemmF32C(m, n, k int, a []float32, w []byte, c []float32, ldc int) {
	C.q8_gemm_f32(C.int(m), C.int(n), C.int(k), (*C.float)(unsafe.Pointer(&a[0])),
		(*C.uint8_t)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func q8PrepVNNI(m, nb int, qa []int8, da []float32, ua []uint8, dae []float32) {
	C.q8_prep_vnni(C.int(m), C.int(nb), (*C.int8_t)(unsafe.Pointer(&qa[0])), (*C.float)(unsafe.Pointer(&da[0])),
		(*C.uint8_t)(unsafe.Pointer(&ua[0])), (*C.float)(unsafe.Pointer(&dae[0])))
}

func q8GemmVNNI(m, n, nb int, ua []uint8, dae []float32, w []byte, c []float32, ldc int) {
	C.q8_gemm_vnni(C.int(m), C.int(n), C.int(nb), (*C.uint8_t)(unsafe.Pointer(&ua[0])), (*C.float)(unsafe.Pointer(&dae[0])),
		(*C.uint8_t)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func q8Widen512(w []byte, blocks int, out []float32) {
	C.q8_widen_rows_512((*C.uint8_t)(unsafe.Pointer(&w[0])), C.int(blocks), (*C.float)(unsafe.Pointer(&out[0])))
}

func q8GemmF32512(m, n, k int, a []float32, w []byte, c []float32, ldc int) {
	C.q8_gemm_f32_512(C.int(m), C.int(n), C.int(k), (*C.float)(unsafe.Pointer(&a[0])),
		(*C.uint8_t)(unsafe.Pointer(&w[0])), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}
