// MatMul: C[M,N] = A[M,K]·B[N,K]ᵀ, fp32 in and out, fp32 accumulation.
//
// B is a PyTorch Linear weight ([out, in]), so both operands run along K in
// memory. Two kernels:
//
//   - sgemm_nt, a tiled shared-memory SGEMM: a block computes a BM×BN tile of
//     C, staging BK-wide slabs of A and B in shared memory transposed
//     (k-major), and each thread accumulates a TM×TN sub-tile in registers.
//     A thread's rows and columns are taken in groups of four spread across
//     the tile (row g·BM/GM + 4·ty + e), so that a quarter-warp's float4
//     reads of a shared slab are contiguous and free of bank conflicts.
//   - gemv_nt, for a few rows (decoding): one warp per column of C, reading
//     that row of B once, coalesced, for up to eight rows of A at a time.
//     With M that small the product is a stream over B, and a tile would
//     leave most of its threads idle.
//
// Launch configurations are numbered (fn_matmul's cfg) so tests can force
// each one on shapes that are not multiples of its tile; 0 picks by shape.
#include "common.cuh"
#include "tile.cuh"

namespace {

template <int BM, int BN, int BK, int TM, int TN, bool VEC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    sgemm_nt(int M, int N, int K, const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C) {
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
		load_kinner<BM, BK, NT, VEC>(As, A, M, K, m0, k0, tid);
		load_kinner<BN, BK, NT, VEC>(Bs, B, N, K, n0, k0, tid);
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
			if (c < N) C[(size_t)r * N + c] = acc[i][j];
		}
	}
}

constexpr int kGemvRows = 8;   // rows of A per warp
constexpr int kGemvBlock = 256; // 8 warps, 8 columns of C per block

template <bool VEC>
__global__ void __launch_bounds__(kGemvBlock)
    gemv_nt(int M, int N, int K, const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C) {
	const int lane = threadIdx.x & 31;
	const int j = blockIdx.x * (kGemvBlock / 32) + (threadIdx.x >> 5);
	if (j >= N) return; // the whole warp leaves together
	const int r0 = blockIdx.y * kGemvRows;
	const int rows = min(kGemvRows, M - r0);
	const float *__restrict__ b = B + (size_t)j * K;
	const float *__restrict__ a = A + (size_t)r0 * K;
	float acc[kGemvRows];
#pragma unroll
	for (int r = 0; r < kGemvRows; ++r) acc[r] = 0.f;
	if constexpr (VEC) {
		for (int k = lane * 4; k < K; k += 128) {
			const float4 bv = __ldg(reinterpret_cast<const float4 *>(b + k));
#pragma unroll
			for (int r = 0; r < kGemvRows; ++r) {
				if (r < rows) {
					const float4 av = __ldg(reinterpret_cast<const float4 *>(a + (size_t)r * K + k));
					acc[r] = fmaf(av.x, bv.x, acc[r]);
					acc[r] = fmaf(av.y, bv.y, acc[r]);
					acc[r] = fmaf(av.z, bv.z, acc[r]);
					acc[r] = fmaf(av.w, bv.w, acc[r]);
				}
			}
		}
	} else {
		for (int k = lane; k < K; k += 32) {
			const float bv = __ldg(b + k);
#pragma unroll
			for (int r = 0; r < kGemvRows; ++r)
				if (r < rows) acc[r] = fmaf(__ldg(a + (size_t)r * K + k), bv, acc[r]);
		}
	}
#pragma unroll
	for (int r = 0; r < kGemvRows; ++r) {
		const float v = warp_sum(acc[r]);
		if (lane == 0 && r < rows) C[(size_t)(r0 + r) * N + j] = v;
	}
}

template <int BM, int BN, int BK, int TM, int TN>
int launch_tiled(fn_ctx *ctx, bool vec, int M, int N, int K, const float *A, const float *B, float *C) {
	const long gy = (M + BM - 1) / BM;
	if (gy > 65535) return FN_ERR_BAD_CONFIG;
	const dim3 grid((N + BN - 1) / BN, (unsigned)gy);
	const int threads = (BM / TM) * (BN / TN);
	if (vec)
		sgemm_nt<BM, BN, BK, TM, TN, true><<<grid, threads, 0, ctx->stream>>>(M, N, K, A, B, C);
	else
		sgemm_nt<BM, BN, BK, TM, TN, false><<<grid, threads, 0, ctx->stream>>>(M, N, K, A, B, C);
	return fn_launched();
}

int launch_gemv(fn_ctx *ctx, bool vec, int M, int N, int K, const float *A, const float *B, float *C) {
	const long gy = (M + kGemvRows - 1) / kGemvRows;
	if (gy > 65535) return FN_ERR_BAD_CONFIG;
	const dim3 grid((N + kGemvBlock / 32 - 1) / (kGemvBlock / 32), (unsigned)gy);
	if (vec)
		gemv_nt<true><<<grid, kGemvBlock, 0, ctx->stream>>>(M, N, K, A, B, C);
	else
		gemv_nt<false><<<grid, kGemvBlock, 0, ctx->stream>>>(M, N, K, A, B, C);
	return fn_launched();
}

// choose picks the largest tile that still gives every multiprocessor a
// block: big tiles reuse each loaded element more, but a grid smaller than
// the machine leaves it idle.
int choose(const fn_ctx *ctx, int M, int N) {
	if (M <= kGemvRows) return kGemv;
	auto tiles = [&](int t) { return (long)((M + t - 1) / t) * ((N + t - 1) / t); };
	if (tiles(128) >= ctx->sms) return kTile128;
	if (tiles(64) >= ctx->sms) return kTile64;
	return kTile32;
}

} // namespace

extern "C" int fn_matmul(fn_ctx *ctx, int cfg, uint64_t c, uint64_t a, uint64_t b, int m, int n, int k) {
	FN_ENTER(ctx);
	if (m == 0 || n == 0) return 0;
	float *C = fptr(c);
	if (k == 0) return (int)cudaMemsetAsync(C, 0, (size_t)m * n * sizeof(float), ctx->stream);
	const float *A = fptr(a), *B = fptr(b);
	const bool vec = k % 4 == 0 && aligned16(A) && aligned16(B);
	if (cfg == kAuto) cfg = choose(ctx, m, n);
	switch (cfg) {
	case kGemv:
		return launch_gemv(ctx, vec, m, n, k, A, B, C);
	case kTile32:
		return launch_tiled<32, 32, 16, 4, 4>(ctx, vec, m, n, k, A, B, C);
	case kTile64:
		return launch_tiled<64, 64, 16, 4, 4>(ctx, vec, m, n, k, A, B, C);
	case kTile128:
		return launch_tiled<128, 128, 8, 8, 8>(ctx, vec, m, n, k, A, B, C);
	}
	return FN_ERR_BAD_CONFIG;
}
