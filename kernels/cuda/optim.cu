// What an optimizer step needs beyond the gradients: Axpy, Scale and Fill
// over whole tensors, the float64 sum of squares behind the global gradient
// norm, and AdamW. All are bandwidth-bound grid-stride loops, over float4s
// where every operand is 16-byte aligned, with a grid that fills the device
// once (elementwise.cu's scheme).
#include <math.h>

#include <algorithm>

#include "common.cuh"

namespace {

constexpr int kDefaultBlock = 256;

// grid_for is the number of blocks for work items: enough for 8 per
// multiprocessor, fewer for small inputs.
unsigned grid_for(const fn_ctx *ctx, size_t work, int block) {
	return (unsigned)std::max<size_t>(1, std::min<size_t>((work + block - 1) / block, (size_t)ctx->sms * 8));
}

// axpy: Y += alpha·X, rounded twice (no FMA) as the CPU twin rounds, so
// the two agree to the bit. Y may be X.
template <bool VEC>
__global__ void axpy(float *Y, const float *X, float alpha, size_t n) {
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if constexpr (VEC) {
		const size_t n4 = n / 4;
		for (; i < n4; i += stride) {
			const float4 x = reinterpret_cast<const float4 *>(X)[i];
			float4 y = reinterpret_cast<float4 *>(Y)[i];
			y.x = __fadd_rn(y.x, __fmul_rn(alpha, x.x));
			y.y = __fadd_rn(y.y, __fmul_rn(alpha, x.y));
			y.z = __fadd_rn(y.z, __fmul_rn(alpha, x.z));
			y.w = __fadd_rn(y.w, __fmul_rn(alpha, x.w));
			reinterpret_cast<float4 *>(Y)[i] = y;
		}
		i = n4 * 4 + (size_t)blockIdx.x * blockDim.x + threadIdx.x; // the tail
	}
	for (; i < n; i += stride) Y[i] = __fadd_rn(Y[i], __fmul_rn(alpha, X[i]));
}

// scale_fill: Y = alpha·Y, or Y = v everywhere when FILL.
template <bool FILL, bool VEC>
__global__ void scale_fill(float *Y, float a, size_t n) {
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if constexpr (VEC) {
		const size_t n4 = n / 4;
		for (; i < n4; i += stride) {
			float4 y = FILL ? make_float4(a, a, a, a) : reinterpret_cast<float4 *>(Y)[i];
			if (!FILL) y.x *= a, y.y *= a, y.z *= a, y.w *= a;
			reinterpret_cast<float4 *>(Y)[i] = y;
		}
		i = n4 * 4 + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	}
	for (; i < n; i += stride) Y[i] = FILL ? a : Y[i] * a;
}

// block_sum_d is block_sum in float64; scratch holds 32 doubles.
__device__ __forceinline__ double block_sum_d(double v, double *scratch) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
	if (lane == 0) scratch[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < nw ? scratch[lane] : 0.0;
#pragma unroll
		for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
		if (lane == 0) scratch[0] = v;
	}
	__syncthreads();
	return scratch[0];
}

// sumsq_partial writes each block's Σ x² (squares and sums in float64, so
// neither overflows nor loses the small terms; a NaN or Inf carries
// through) to part[blockIdx.x].
__global__ void sumsq_partial(double *__restrict__ part, const float *__restrict__ X, size_t n) {
	__shared__ double scratch[32];
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	double acc = 0.0;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		const double x = X[i];
		acc = fma(x, x, acc);
	}
	acc = block_sum_d(acc, scratch);
	if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

// sumsq_final adds the partials, in a fixed order, into part[nparts].
__global__ void sumsq_final(double *part, int nparts) {
	__shared__ double scratch[32];
	double acc = 0.0;
	for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += part[i];
	acc = block_sum_d(acc, scratch);
	if (threadIdx.x == 0) part[nparts] = acc;
}

// adamw_step is torch.optim.AdamW's single-tensor step (torch 2.x) for one
// element, with its float32 operations in its order and no contraction
// into FMAs, so that it agrees with the CPU twin to the bit:
//   p *= decay                       decay = 1 − lr·wd
//   m  = lerp(m, g, w1)              m + w1·(g − m) for w1 < ½, else g − (g − m)·(1 − w1)
//   v  = v·β2 + (w2·g)·g             w2 = 1 − β2
//   p += neg_step · m / (sqrt(v)/bc2_sqrt + eps),  neg_step = −lr/(1 − β1^step)
// The scalars come from the host, computed in float64 and rounded once.
struct AdamW {
	float w1, beta2, w2, eps, decay, neg_step, bc2_sqrt;
	bool lerp_low;

	__device__ __forceinline__ void operator()(float &p, float g, float &m, float &v) const {
		m = lerp_low ? __fadd_rn(m, __fmul_rn(w1, __fsub_rn(g, m)))
		             : __fsub_rn(g, __fmul_rn(__fsub_rn(g, m), __fsub_rn(1.f, w1)));
		v = __fadd_rn(__fmul_rn(v, beta2), __fmul_rn(__fmul_rn(w2, g), g));
		const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), eps);
		p = __fadd_rn(__fmul_rn(p, decay), __fmul_rn(neg_step, __fdiv_rn(m, denom)));
	}
};

template <bool VEC>
__global__ void adamw(float *__restrict__ P, const float *__restrict__ G, float *__restrict__ M, float *__restrict__ V,
                      size_t n, AdamW op) {
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if constexpr (VEC) {
		const size_t n4 = n / 4;
		for (; i < n4; i += stride) {
			float4 p = reinterpret_cast<float4 *>(P)[i], m = reinterpret_cast<float4 *>(M)[i];
			float4 v = reinterpret_cast<float4 *>(V)[i];
			const float4 g = reinterpret_cast<const float4 *>(G)[i];
			op(p.x, g.x, m.x, v.x);
			op(p.y, g.y, m.y, v.y);
			op(p.z, g.z, m.z, v.z);
			op(p.w, g.w, m.w, v.w);
			reinterpret_cast<float4 *>(P)[i] = p;
			reinterpret_cast<float4 *>(M)[i] = m;
			reinterpret_cast<float4 *>(V)[i] = v;
		}
		i = n4 * 4 + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	}
	for (; i < n; i += stride) {
		float p = P[i], m = M[i], v = V[i];
		op(p, G[i], m, v);
		P[i] = p;
		M[i] = m;
		V[i] = v;
	}
}

} // namespace

extern "C" int fn_axpy(fn_ctx *ctx, int block, uint64_t dst, uint64_t x, float alpha, size_t n) {
	FN_ENTER(ctx);
	if (n == 0) return 0;
	if (block == 0) block = kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	float *Y = fptr(dst);
	const float *X = fptr(x);
	const bool vec = aligned16(Y) && aligned16(X);
	const unsigned grid = grid_for(ctx, vec ? (n + 3) / 4 : n, block);
	if (vec)
		axpy<true><<<grid, block, 0, ctx->stream>>>(Y, X, alpha, n);
	else
		axpy<false><<<grid, block, 0, ctx->stream>>>(Y, X, alpha, n);
	return fn_launched();
}

static int launch_scale_fill(fn_ctx *ctx, int block, bool fill, uint64_t dst, float a, size_t n) {
	if (n == 0) return 0;
	if (block == 0) block = kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	float *Y = fptr(dst);
	const bool vec = aligned16(Y);
	const unsigned grid = grid_for(ctx, vec ? (n + 3) / 4 : n, block);
	if (fill && vec)
		scale_fill<true, true><<<grid, block, 0, ctx->stream>>>(Y, a, n);
	else if (fill)
		scale_fill<true, false><<<grid, block, 0, ctx->stream>>>(Y, a, n);
	else if (vec)
		scale_fill<false, true><<<grid, block, 0, ctx->stream>>>(Y, a, n);
	else
		scale_fill<false, false><<<grid, block, 0, ctx->stream>>>(Y, a, n);
	return fn_launched();
}

extern "C" int fn_scale(fn_ctx *ctx, int block, uint64_t dst, float alpha, size_t n) {
	FN_ENTER(ctx);
	return launch_scale_fill(ctx, block, false, dst, alpha, n);
}

extern "C" int fn_fill(fn_ctx *ctx, int block, uint64_t dst, float v, size_t n) {
	FN_ENTER(ctx);
	return launch_scale_fill(ctx, block, true, dst, v, n);
}

extern "C" int fn_sum_squares(fn_ctx *ctx, int block, uint64_t x, size_t n, double *out) {
	FN_ENTER(ctx);
	*out = 0;
	if (n == 0) return 0;
	if (block == 0) block = kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	const unsigned grid = grid_for(ctx, n, block);
	void *buf = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &buf, (grid + 1) * sizeof(double)));
	double *part = (double *)buf;
	sumsq_partial<<<grid, block, 0, ctx->stream>>>(part, fptr(x), n);
	cudaError_t e = (cudaError_t)fn_launched();
	if (e == cudaSuccess) {
		sumsq_final<<<1, 256, 0, ctx->stream>>>(part, (int)grid);
		e = (cudaError_t)fn_launched();
	}
	if (e == cudaSuccess) e = cudaMemcpyAsync(out, part + grid, sizeof(double), cudaMemcpyDeviceToHost, ctx->stream);
	if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
	cudaError_t f = fn_scratch_free(ctx, buf);
	return (int)(e != cudaSuccess ? e : f);
}

extern "C" int fn_adamw(fn_ctx *ctx, int block, uint64_t p, uint64_t g, uint64_t m, uint64_t v, size_t n, float w1,
                        float beta2, float w2, float eps, float decay, float neg_step, float bc2_sqrt) {
	FN_ENTER(ctx);
	if (n == 0) return 0;
	if (block == 0) block = kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	float *P = fptr(p), *M = fptr(m), *V = fptr(v);
	const float *G = fptr(g);
	const AdamW op = {w1, beta2, w2, eps, decay, neg_step, bc2_sqrt, w1 < 0.5f};
	const bool vec = aligned16(P) && aligned16(G) && aligned16(M) && aligned16(V);
	const unsigned grid = grid_for(ctx, vec ? (n + 3) / 4 : n, block);
	if (vec)
		adamw<true><<<grid, block, 0, ctx->stream>>>(P, G, M, V, n, op);
	else
		adamw<false><<<grid, block, 0, ctx->stream>>>(P, G, M, V, n, op);
	return fn_launched();
}
