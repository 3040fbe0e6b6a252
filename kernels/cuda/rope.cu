// RoPE, half-rotation ("NeoX") form, rounded as the CPU twin and Hugging
// Face round: the inverse frequencies come from the host (computed there in
// float64 and rounded to float32, the CPU twin's very table), the angle is
// the float32 product pos·freq, and its sine and cosine are taken in double
// and rounded. The _rn intrinsics keep nvcc from fusing the rotation's
// multiplies and adds into FMAs, which the CPU twin does not do, so the two
// agree to the last bit in nearly every element.
#include "common.cuh"

namespace {

constexpr int kDefaultBlock = 128;

// rope_rows: one block per row. The row's half-head of sines and cosines is
// computed once into shared memory and used by every head.
__global__ void rope_rows(float *Y, const float *X, const int32_t *__restrict__ pos,
                          const float *__restrict__ inv_freq, int cols, int head_dim) {
	extern __shared__ float sc[]; // [half] sines, then [half] cosines
	const int half = head_dim / 2;
	const size_t off = (size_t)blockIdx.x * cols;
	const float p = (float)pos[blockIdx.x];
	for (int j = threadIdx.x; j < half; j += blockDim.x) {
		double s, c;
		sincos((double)__fmul_rn(p, inv_freq[j]), &s, &c);
		sc[j] = (float)s;
		sc[half + j] = (float)c;
	}
	__syncthreads();
	const float *x = X + off;
	float *y = Y + off;
	for (int i = threadIdx.x; i < cols / 2; i += blockDim.x) {
		const int h = i / half, j = i % half;
		const int i1 = h * head_dim + j, i2 = i1 + half;
		const float a = x[i1], b = x[i2], s = sc[j], c = sc[half + j];
		y[i1] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
		y[i2] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
	}
}

} // namespace

extern "C" int fn_rope(fn_ctx *ctx, int block, uint64_t dst, uint64_t x, const int32_t *pos, const float *inv_freq,
                       int rows, int cols, int head_dim) {
	FN_ENTER(ctx);
	if (rows == 0 || cols == 0) return 0;
	if (block == 0) block = kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	const int half = head_dim / 2;
	// Positions and frequencies go up in one scratch buffer, queued on the
	// stream like everything else (see fn_upload for why the host arrays
	// are free again on return).
	const size_t pbytes = (size_t)rows * sizeof(int32_t), fbytes = (size_t)half * sizeof(float);
	void *buf = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &buf, pbytes + fbytes));
	int32_t *dpos = (int32_t *)buf;
	float *dfreq = (float *)((char *)buf + pbytes);
	cudaError_t e = cudaMemcpyAsync(dpos, pos, pbytes, cudaMemcpyHostToDevice, ctx->stream);
	if (e == cudaSuccess) e = cudaMemcpyAsync(dfreq, inv_freq, fbytes, cudaMemcpyHostToDevice, ctx->stream);
	if (e == cudaSuccess) {
		rope_rows<<<rows, block, 2 * fbytes, ctx->stream>>>(fptr(dst), fptr(x), dpos, dfreq, cols, head_dim);
		e = (cudaError_t)fn_launched();
	}
	cudaError_t f = fn_scratch_free(ctx, buf);
	return (int)(e != cudaSuccess ? e : f);
}
