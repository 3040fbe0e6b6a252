// Shared by the .cu files of libfrognano_cuda.a: the context, error
// plumbing, warp and block reductions, and short-lived device buffers.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>

#include "frognano_cuda.h"

struct fn_ctx {
	int device;
	cudaStream_t stream;
	int sms;
	int pools; // stream-ordered allocation (cudaMallocAsync) is available
};

// FN_ENTER makes ctx's device current on this thread; see frognano_cuda.h.
#define FN_ENTER(ctx)                                            \
	do {                                                         \
		cudaError_t e_ = cudaSetDevice((ctx)->device);           \
		if (e_ != cudaSuccess) return (int)e_;                   \
	} while (0)

#define FN_CHECK(x)                                              \
	do {                                                         \
		cudaError_t e_ = (x);                                    \
		if (e_ != cudaSuccess) return (int)e_;                   \
	} while (0)

// fn_launched reports a failed launch (bad configuration, no kernel image,
// or an earlier kernel's sticky fault).
static inline int fn_launched() { return (int)cudaGetLastError(); }

static inline float *fptr(uint64_t p) { return reinterpret_cast<float *>(static_cast<uintptr_t>(p)); }

static inline bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// valid_block accepts the block sizes the row kernels' reductions handle.
static inline bool valid_block(int block) { return block >= 32 && block <= 1024 && block % 32 == 0; }

// Stream-ordered scratch memory for a single call (token ids, positions,
// attention partials): with memory pools the allocation and the free are
// queued on the stream and cost no synchronisation.
cudaError_t fn_scratch_alloc(fn_ctx *ctx, void **p, size_t bytes);
cudaError_t fn_scratch_free(fn_ctx *ctx, void *p);

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
	return v;
}

// block_sum returns the sum of v over the block to every thread. blockDim.x
// must be a multiple of 32; scratch holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float *scratch) {
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	if (lane == 0) scratch[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < nw ? scratch[lane] : 0.f;
		v = warp_sum(v);
		if (lane == 0) scratch[0] = v;
	}
	__syncthreads();
	v = scratch[0];
	__syncthreads(); // scratch may be reused by the caller's next reduction
	return v;
}
