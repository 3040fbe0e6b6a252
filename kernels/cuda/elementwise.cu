// Element-wise kernels (SwiGLU, Add) and the embedding gather. All are
// bandwidth-bound: grid-stride loops over float4s when every operand is
// 16-byte aligned, scalars otherwise, with a grid sized to fill the device
// once rather than one thread per element.
#include <math.h>

#include <algorithm>

#include "common.cuh"

namespace {

constexpr int kDefaultBlock = 256;

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.f + expf(-g)) * u; }

struct SwiGLU {
	__device__ __forceinline__ float operator()(float g, float u) const { return silu_mul(g, u); }
};
struct Sum {
	__device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};

// binary computes Y = op(A, B); Y may be A or B (each element is read
// before it is written, by the same thread).
template <typename Op, bool VEC>
__global__ void binary(float *Y, const float *A, const float *B, size_t n) {
	const Op op;
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if constexpr (VEC) {
		const size_t n4 = n / 4;
		for (; i < n4; i += stride) {
			const float4 a = reinterpret_cast<const float4 *>(A)[i];
			const float4 b = reinterpret_cast<const float4 *>(B)[i];
			reinterpret_cast<float4 *>(Y)[i] = make_float4(op(a.x, b.x), op(a.y, b.y), op(a.z, b.z), op(a.w, b.w));
		}
		// The tail of fewer than four, one thread each.
		i = n4 * 4 + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	}
	for (; i < n; i += stride) Y[i] = op(A[i], B[i]);
}

template <typename Op>
int launch_binary(fn_ctx *ctx, int block, uint64_t dst, uint64_t a, uint64_t b, size_t n) {
	if (n == 0) return 0;
	if (block == 0) block = kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	float *Y = fptr(dst);
	const float *A = fptr(a), *B = fptr(b);
	const bool vec = aligned16(Y) && aligned16(A) && aligned16(B);
	const size_t work = vec ? (n + 3) / 4 : n;
	// Enough blocks for 8 per multiprocessor, fewer for small inputs.
	const size_t grid = std::min<size_t>((work + block - 1) / block, (size_t)ctx->sms * 8);
	if (vec)
		binary<Op, true><<<(unsigned)grid, block, 0, ctx->stream>>>(Y, A, B, n);
	else
		binary<Op, false><<<(unsigned)grid, block, 0, ctx->stream>>>(Y, A, B, n);
	return fn_launched();
}

// gather copies row ids[i] of table into row i of Y, one block per row.
__global__ void gather(float *__restrict__ Y, const float *__restrict__ table, const int32_t *__restrict__ ids,
                       int dim) {
	const float *src = table + (size_t)ids[blockIdx.x] * dim;
	float *dst = Y + (size_t)blockIdx.x * dim;
	for (int c = threadIdx.x; c < dim; c += blockDim.x) dst[c] = __ldg(src + c);
}

} // namespace

extern "C" int fn_swiglu(fn_ctx *ctx, int block, uint64_t dst, uint64_t gate, uint64_t up, size_t n) {
	FN_ENTER(ctx);
	return launch_binary<SwiGLU>(ctx, block, dst, gate, up, n);
}

extern "C" int fn_add(fn_ctx *ctx, int block, uint64_t dst, uint64_t a, uint64_t b, size_t n) {
	FN_ENTER(ctx);
	return launch_binary<Sum>(ctx, block, dst, a, b, n);
}

extern "C" int fn_embedding(fn_ctx *ctx, uint64_t dst, uint64_t table, const int32_t *ids, int n, int dim) {
	FN_ENTER(ctx);
	if (n == 0 || dim == 0) return 0;
	void *dids = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &dids, (size_t)n * sizeof(int32_t)));
	cudaError_t e = cudaMemcpyAsync(dids, ids, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, ctx->stream);
	if (e == cudaSuccess) {
		const int block = dim >= 1024 ? 256 : (dim >= 256 ? 128 : 32);
		gather<<<n, block, 0, ctx->stream>>>(fptr(dst), fptr(table), (const int32_t *)dids, dim);
		e = (cudaError_t)fn_launched();
	}
	cudaError_t f = fn_scratch_free(ctx, dids);
	return (int)(e != cudaSuccess ? e : f);
}
