// Row-wise kernels: RMSNorm, Softmax and LogSoftmax. One block per row;
// each thread reduces a strided share of the row, then warp shuffles and one
// round through shared memory combine the threads. Rows are read straight
// from global memory in each pass: a row of the widest case (vocabulary
// logits, 49152 floats) stays in L2 between passes.
#include <math.h>

#include "common.cuh"

namespace {

constexpr int kDefaultBlock = 256;

// rmsnorm_rows: y = x / sqrt(mean(x²) + eps) · w. In place is fine: each
// thread reads its own elements before writing them.
__global__ void rmsnorm_rows(float *Y, const float *X, const float *__restrict__ W, int cols, float eps) {
	__shared__ float scratch[32];
	const size_t off = (size_t)blockIdx.x * cols;
	const float *x = X + off;
	float *y = Y + off;
	float ss = 0.f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) ss = fmaf(x[c], x[c], ss);
	ss = block_sum(ss, scratch);
	const float scale = 1.f / sqrtf(ss / (float)cols + eps);
	for (int c = threadIdx.x; c < cols; c += blockDim.x) y[c] = __fmul_rn(x[c] * scale, W[c]);
}

// A running (max, sum of exp(x - max)) pair: merging two is exact up to the
// rounding of the rescaling, so one pass finds both.
struct MaxSum {
	float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
	if (a.m == -INFINITY) return b;
	if (b.m == -INFINITY) return a;
	const float m = fmaxf(a.m, b.m);
	return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum block_maxsum(MaxSum v, MaxSum *scratch) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		MaxSum w = {__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.s, o)};
		v = merge(v, w);
	}
	if (lane == 0) scratch[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < nw ? scratch[lane] : MaxSum{-INFINITY, 0.f};
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) {
			MaxSum w = {__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.s, o)};
			v = merge(v, w);
		}
		if (lane == 0) scratch[0] = v;
	}
	__syncthreads();
	return scratch[0];
}

// softmax_rows writes exp(x - max) / sum, or for log, (x - max) - log(sum):
// subtracting the max first keeps x - max exact where it matters (a row of
// large equal logits), which max + log(sum) rounded to float would not.
template <bool LOG>
__global__ void softmax_rows(float *Y, const float *X, int cols) {
	__shared__ MaxSum scratch[32];
	const size_t off = (size_t)blockIdx.x * cols;
	const float *x = X + off;
	float *y = Y + off;
	// One exponential per element: rescale the sum only when the max grows.
	MaxSum acc = {-INFINITY, 0.f};
	for (int c = threadIdx.x; c < cols; c += blockDim.x) {
		const float v = x[c];
		if (v > acc.m) {
			acc.s = acc.s * expf(acc.m - v) + 1.f;
			acc.m = v;
		} else if (v != -INFINITY) {
			acc.s += expf(v - acc.m);
		}
	}
	const MaxSum r = block_maxsum(acc, scratch);
	if (LOG) {
		const float ls = logf(r.s);
		for (int c = threadIdx.x; c < cols; c += blockDim.x) y[c] = (x[c] - r.m) - ls;
	} else {
		const float inv = 1.f / r.s;
		for (int c = threadIdx.x; c < cols; c += blockDim.x) y[c] = expf(x[c] - r.m) * inv;
	}
}

} // namespace

extern "C" int fn_rmsnorm(fn_ctx *ctx, int block, uint64_t dst, uint64_t x, uint64_t w, int rows, int cols,
                          float eps) {
	FN_ENTER(ctx);
	if (rows == 0 || cols == 0) return 0;
	if (block == 0) block = kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	rmsnorm_rows<<<rows, block, 0, ctx->stream>>>(fptr(dst), fptr(x), fptr(w), cols, eps);
	return fn_launched();
}

extern "C" int fn_softmax(fn_ctx *ctx, int block, int log, uint64_t dst, uint64_t x, int rows, int cols) {
	FN_ENTER(ctx);
	if (rows == 0 || cols == 0) return 0;
	if (block == 0) block = cols >= 8192 ? 1024 : kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	if (log)
		softmax_rows<true><<<rows, block, 0, ctx->stream>>>(fptr(dst), fptr(x), cols);
	else
		softmax_rows<false><<<rows, block, 0, ctx->stream>>>(fptr(dst), fptr(x), cols);
	return fn_launched();
}
