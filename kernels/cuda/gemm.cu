// The matrix products of training: the three layouts a Linear layer needs
// forward and backward, in fp32 or with bf16 inputs on tensor cores.
//
//   NT  C[M,N] = A[M,K]·B[N,K]ᵀ   the forward (y = x·Wᵀ), fn_matmul's product
//   NN  C[M,N] = A[M,K]·B[K,N]    the input gradient (dx = dy·W)
//   TN  C[M,N] = A[K,M]ᵀ·B[K,N]   the weight gradient (dW = dyᵀ·x)
//
// In every case the result is written or, with accumulate, added to C.
//
// fp32: sgemm, the tiled shared-memory kernel of matmul.cu generalised over
// where K runs in memory. Both operands are staged as k-major slabs
// (S[k][row]); an operand stored with K innermost is transposed on the way
// in (load_kinner, tile.cuh), one stored with K outermost is copied straight
// (load_kouter). The product loop and its bank-conflict-free register tiling
// are matmul.cu's.
//
// bf16: wmma_gemm, nvcuda::wmma 16×16×16 fragments with bf16 inputs and fp32
// accumulation (sm_80 and later, which is every architecture the Makefile
// builds). A block of four warps computes a 64×64 tile of C, each warp a
// 32×32 quarter as 2×2 fragments; the fp32 operands are rounded to bf16
// (round to nearest even) as they are staged in shared memory, so the
// result is exactly the fp32-accumulated product of the rounded inputs, up
// to the order of the additions. This is the mixed-precision regime of
// PyTorch autocast: master weights and every other operation stay fp32.
#include <cuda_bf16.h>
#include <mma.h>

#include "common.cuh"
#include "tile.cuh"

namespace {

// load_kouter copies the slab load_kinner (tile.cuh) copies, from a K×R
// row-major matrix G (K outermost, rows innermost) into S[c][r],
// untransposed: consecutive threads read consecutive rows. VEC reads float4s along the rows and needs
// R%4 == 0 and a 16-byte aligned G (r0 is a multiple of 4).
template <int ROWS, int BK, int NT, bool VEC>
__device__ __forceinline__ void load_kouter(float *__restrict__ S, const float *__restrict__ G, int R, int K,
                                            int r0, int k0, int tid) {
	constexpr int LD = ROWS + 4;
	if constexpr (VEC) {
		constexpr int V = ROWS * BK / 4;
		static_assert(V % NT == 0, "tile not divisible among threads");
#pragma unroll
		for (int i = 0; i < V / NT; ++i) {
			const int e = tid + i * NT;
			const int c = e / (ROWS / 4), r = (e % (ROWS / 4)) * 4;
			const int gr = r0 + r, gc = k0 + c;
			float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
			if (gr < R && gc < K) v = __ldg(reinterpret_cast<const float4 *>(G + (size_t)gc * R + gr));
			*reinterpret_cast<float4 *>(&S[c * LD + r]) = v;
		}
	} else {
		constexpr int E = ROWS * BK;
		static_assert(E % NT == 0, "tile not divisible among threads");
#pragma unroll
		for (int i = 0; i < E / NT; ++i) {
			const int e = tid + i * NT;
			const int c = e / ROWS, r = e % ROWS;
			const int gr = r0 + r, gc = k0 + c;
			S[c * LD + r] = (gr < R && gc < K) ? __ldg(G + (size_t)gc * R + gr) : 0.f;
		}
	}
}

// sgemm: C (+)= op(A)·op(B) in fp32. AK: A is [M,K] (K innermost), else
// [K,M]; BK_INNER: B is [N,K], else [K,N].
template <int BM, int BN, int BK, int TM, int TN, bool AK, bool BKI, bool VA, bool VB, bool ACC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    sgemm(int M, int N, int K, const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C) {
	constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
	constexpr int VH = TM < 4 ? TM : 4, GM = TM / VH; // row groups of VH
	constexpr int VW = TN < 4 ? TN : 4, GN = TN / VW; // column groups of VW
	constexpr int LDA = BM + 4, LDB = BN + 4;
	__shared__ __align__(16) float As[BK * LDA];
	__shared__ __align__(16) float Bs[BK * LDB];

	const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
	const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
	float acc[TM][TN];
#pragma unroll
	for (int i = 0; i < TM; ++i)
#pragma unroll
		for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

	for (int k0 = 0; k0 < K; k0 += BK) {
		if constexpr (AK)
			load_kinner<BM, BK, NT, VA>(As, A, M, K, m0, k0, tid);
		else
			load_kouter<BM, BK, NT, VA>(As, A, M, K, m0, k0, tid);
		if constexpr (BKI)
			load_kinner<BN, BK, NT, VB>(Bs, B, N, K, n0, k0, tid);
		else
			load_kouter<BN, BK, NT, VB>(Bs, B, N, K, n0, k0, tid);
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < BK; ++kk) {
			float a[TM], b[TN];
#pragma unroll
			for (int g = 0; g < GM; ++g) load_shared<VH>(&As[kk * LDA + g * (BM / GM) + ty * VH], &a[g * VH]);
#pragma unroll
			for (int g = 0; g < GN; ++g) load_shared<VW>(&Bs[kk * LDB + g * (BN / GN) + tx * VW], &b[g * VW]);
#pragma unroll
			for (int i = 0; i < TM; ++i)
#pragma unroll
				for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}

#pragma unroll
	for (int i = 0; i < TM; ++i) {
		const int r = m0 + (i / VH) * (BM / GM) + ty * VH + i % VH;
		if (r >= M) continue;
#pragma unroll
		for (int j = 0; j < TN; ++j) {
			const int c = n0 + (j / VW) * (BN / GN) + tx * VW + j % VW;
			if (c < N) {
				float *p = C + (size_t)r * N + c;
				*p = ACC ? *p + acc[i][j] : acc[i][j];
			}
		}
	}
}

// The operand shapes of one product: whether A and B hold K innermost.
struct Layout {
	bool ak, bk;
};

Layout layout_of(int layout) {
	switch (layout) {
	case FN_GEMM_NN:
		return {true, false};
	case FN_GEMM_TN:
		return {false, false};
	}
	return {true, true}; // FN_GEMM_NT
}

template <int BM, int BN, int BK, int TM, int TN, bool AK, bool BKI, bool VA, bool VB>
int launch_sgemm4(fn_ctx *ctx, bool acc, dim3 grid, int M, int N, int K, const float *A, const float *B, float *C) {
	constexpr int threads = (BM / TM) * (BN / TN);
	if (acc)
		sgemm<BM, BN, BK, TM, TN, AK, BKI, VA, VB, true><<<grid, threads, 0, ctx->stream>>>(M, N, K, A, B, C);
	else
		sgemm<BM, BN, BK, TM, TN, AK, BKI, VA, VB, false><<<grid, threads, 0, ctx->stream>>>(M, N, K, A, B, C);
	return fn_launched();
}

// launch_sgemm instantiates the tile for the layout and vectorisation at
// hand: a vector load along K needs K%4 == 0, along M or N needs M%4 or
// N%4 == 0, and both an aligned base.
template <int BM, int BN, int BK, int TM, int TN>
int launch_sgemm(fn_ctx *ctx, Layout l, bool acc, int M, int N, int K, const float *A, const float *B, float *C) {
	const long gy = (M + BM - 1) / BM;
	if (gy > 65535) return FN_ERR_BAD_CONFIG;
	const dim3 grid((N + BN - 1) / BN, (unsigned)gy);
	const bool va = aligned16(A) && (l.ak ? K % 4 == 0 : M % 4 == 0);
	const bool vb = aligned16(B) && (l.bk ? K % 4 == 0 : N % 4 == 0);
#define FN_SGEMM_LAYOUT(AKv, BKv)                                                                                  \
	do {                                                                                                           \
		if (va && vb) return launch_sgemm4<BM, BN, BK, TM, TN, AKv, BKv, true, true>(ctx, acc, grid, M, N, K, A, B, C); \
		if (va) return launch_sgemm4<BM, BN, BK, TM, TN, AKv, BKv, true, false>(ctx, acc, grid, M, N, K, A, B, C);     \
		if (vb) return launch_sgemm4<BM, BN, BK, TM, TN, AKv, BKv, false, true>(ctx, acc, grid, M, N, K, A, B, C);     \
		return launch_sgemm4<BM, BN, BK, TM, TN, AKv, BKv, false, false>(ctx, acc, grid, M, N, K, A, B, C);           \
	} while (0)
	if (l.ak && l.bk) FN_SGEMM_LAYOUT(true, true);
	if (l.ak) FN_SGEMM_LAYOUT(true, false);
	if (l.bk) FN_SGEMM_LAYOUT(false, true);
	FN_SGEMM_LAYOUT(false, false);
#undef FN_SGEMM_LAYOUT
}

// choose_tile picks, as matmul.cu does, the largest tile that still gives
// every multiprocessor a block.
int choose_tile(const fn_ctx *ctx, int M, int N) {
	auto tiles = [&](int t) { return (long)((M + t - 1) / t) * ((N + t - 1) / t); };
	if (tiles(128) >= ctx->sms) return kTile128;
	if (tiles(64) >= ctx->sms) return kTile64;
	return kTile32;
}

// The bf16 tensor-core kernel.
constexpr int kWM = 64, kWN = 64, kWK = 32;         // block tile
constexpr int kWThreads = 128;                      // 4 warps, 2×2
constexpr int kLdA = kWK + 8, kLdB = kWN + 8;       // bf16 leading dimensions: multiples of 8
constexpr int kLdC = kWN + 4;                       // fp32 staging of C: a multiple of 4

// load_bf16 stages a ROWS×COLS slab of an operand as bf16, S[r][c] with
// leading dimension LD. Element (r, c) of the slab is G[(r0+r)*RS +
// (c0+c)*CS] where r0+r < R and c0+c < Cn, zero elsewhere. ROW_FAST says
// which index is contiguous in memory, so that consecutive threads read
// consecutive addresses.
template <int ROWS, int COLS, int LD, bool ROW_FAST>
__device__ __forceinline__ void load_bf16(__nv_bfloat16 *__restrict__ S, const float *__restrict__ G, int R, int Cn,
                                          size_t RS, size_t CS, int r0, int c0, int tid) {
	constexpr int E = ROWS * COLS;
	static_assert(E % kWThreads == 0, "tile not divisible among threads");
#pragma unroll 4 // fully unrolled, the loads in flight cost ~250 registers
	for (int i = 0; i < E / kWThreads; ++i) {
		const int e = tid + i * kWThreads;
		const int r = ROW_FAST ? e % ROWS : e / COLS;
		const int c = ROW_FAST ? e / ROWS : e % COLS;
		const int gr = r0 + r, gc = c0 + c;
		const float v = (gr < R && gc < Cn) ? __ldg(G + (size_t)gr * RS + (size_t)gc * CS) : 0.f;
		S[r * LD + c] = __float2bfloat16_rn(v);
	}
}

template <bool AK, bool BKI, bool ACC>
__global__ void __launch_bounds__(kWThreads)
    wmma_gemm(int M, int N, int K, const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	using namespace nvcuda;
	__shared__ __align__(32) __nv_bfloat16 As[kWM * kLdA]; // As[m][k]
	__shared__ __align__(32) __nv_bfloat16 Bs[kWK * kLdB]; // Bs[k][n]
	__shared__ __align__(32) float Cs[kWM * kLdC];

	const int tid = threadIdx.x, warp = tid >> 5;
	const int wm = warp >> 1, wn = warp & 1;
	const int m0 = blockIdx.y * kWM, n0 = blockIdx.x * kWN;

	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
	for (int i = 0; i < 2; ++i)
#pragma unroll
		for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);

	for (int k0 = 0; k0 < K; k0 += kWK) {
		// A element (m, k): A[m*K + k] when K is innermost, else A[k*M + m].
		if constexpr (AK)
			load_bf16<kWM, kWK, kLdA, false>(As, A, M, K, (size_t)K, 1, m0, k0, tid);
		else
			load_bf16<kWM, kWK, kLdA, true>(As, A, M, K, 1, (size_t)M, m0, k0, tid);
		// B element (k, n): B[n*K + k] when K is innermost, else B[k*N + n].
		if constexpr (BKI)
			load_bf16<kWK, kWN, kLdB, true>(Bs, B, K, N, 1, (size_t)K, k0, n0, tid);
		else
			load_bf16<kWK, kWN, kLdB, false>(Bs, B, K, N, (size_t)N, 1, k0, n0, tid);
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < kWK; kk += 16) {
			wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
			wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b[2];
#pragma unroll
			for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], As + (wm * 32 + i * 16) * kLdA + kk, kLdA);
#pragma unroll
			for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], Bs + kk * kLdB + wn * 32 + j * 16, kLdB);
#pragma unroll
			for (int i = 0; i < 2; ++i)
#pragma unroll
				for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}

#pragma unroll
	for (int i = 0; i < 2; ++i)
#pragma unroll
		for (int j = 0; j < 2; ++j)
			wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * kLdC + wn * 32 + j * 16, acc[i][j], kLdC,
			                        wmma::mem_row_major);
	__syncthreads();
	for (int e = tid; e < kWM * kWN; e += kWThreads) {
		const int r = e / kWN, c = e % kWN;
		const int gr = m0 + r, gc = n0 + c;
		if (gr < M && gc < N) {
			float *p = C + (size_t)gr * N + gc;
			*p = ACC ? *p + Cs[r * kLdC + c] : Cs[r * kLdC + c];
		}
	}
#else
	// Unreachable: the Makefile builds sm_80 and later only, and fn_open
	// refuses a device the library has no code for.
	__trap();
#endif
}

template <bool AK, bool BKI>
int launch_wmma2(fn_ctx *ctx, bool acc, dim3 grid, int M, int N, int K, const float *A, const float *B, float *C) {
	if (acc)
		wmma_gemm<AK, BKI, true><<<grid, kWThreads, 0, ctx->stream>>>(M, N, K, A, B, C);
	else
		wmma_gemm<AK, BKI, false><<<grid, kWThreads, 0, ctx->stream>>>(M, N, K, A, B, C);
	return fn_launched();
}

int launch_wmma(fn_ctx *ctx, Layout l, bool acc, int M, int N, int K, const float *A, const float *B, float *C) {
	const long gy = (M + kWM - 1) / kWM;
	if (gy > 65535) return FN_ERR_BAD_CONFIG;
	const dim3 grid((N + kWN - 1) / kWN, (unsigned)gy);
	if (l.ak && l.bk) return launch_wmma2<true, true>(ctx, acc, grid, M, N, K, A, B, C);
	if (l.ak) return launch_wmma2<true, false>(ctx, acc, grid, M, N, K, A, B, C);
	if (l.bk) return launch_wmma2<false, true>(ctx, acc, grid, M, N, K, A, B, C);
	return launch_wmma2<false, false>(ctx, acc, grid, M, N, K, A, B, C);
}

} // namespace

extern "C" int fn_gemm(fn_ctx *ctx, int cfg, int prec, int layout, int accumulate, uint64_t c, uint64_t a,
                       uint64_t b, int m, int n, int k) {
	FN_ENTER(ctx);
	if (layout != FN_GEMM_NT && layout != FN_GEMM_NN && layout != FN_GEMM_TN) return FN_ERR_BAD_CONFIG;
	if (prec != FN_PREC_F32 && prec != FN_PREC_BF16) return FN_ERR_BAD_CONFIG;
	if (m == 0 || n == 0) return 0;
	float *C = fptr(c);
	if (k == 0) {
		if (accumulate) return 0;
		return (int)cudaMemsetAsync(C, 0, (size_t)m * n * sizeof(float), ctx->stream);
	}
	const float *A = fptr(a), *B = fptr(b);
	const Layout l = layout_of(layout);
	const bool acc = accumulate != 0;
	if (prec == FN_PREC_BF16) return launch_wmma(ctx, l, acc, m, n, k, A, B, C); // one tile: cfg is fp32's
	if (layout == FN_GEMM_NT && !acc) return fn_matmul(ctx, cfg, c, a, b, m, n, k);
	if (cfg == kAuto) cfg = choose_tile(ctx, m, n);
	switch (cfg) {
	case kTile32:
		return launch_sgemm<32, 32, 16, 4, 4>(ctx, l, acc, m, n, k, A, B, C);
	case kTile64:
		return launch_sgemm<64, 64, 16, 4, 4>(ctx, l, acc, m, n, k, A, B, C);
	case kTile128:
		return launch_sgemm<128, 128, 8, 8, 8>(ctx, l, acc, m, n, k, A, B, C);
	}
	return FN_ERR_BAD_CONFIG; // gemv (1) is fn_matmul's alone
}
