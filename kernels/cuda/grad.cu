// Backward kernels of the decoder's row-wise and element-wise operations:
// SumRows, EmbeddingBackward, RMSNormBackward, SwiGLUBackward, and the
// token log-probabilities of the policy loss with their gradient.
//
// Every reduction here has a fixed order, so a gradient is the same bits
// from run to run (a checkpoint reloaded and stepped again reproduces the
// loss exactly): column sums go through per-chunk partials that one more
// kernel adds in order, and the embedding gradient is gathered per
// distinct id rather than scattered with atomics.
#include <math.h>

#include <algorithm>

#include "common.cuh"

namespace {

constexpr int kDefaultBlock = 256;

// Column sums. A block of kColX×kColY threads takes kColX columns of a
// chunk of rows: thread (x, y) sums rows y, y+kColY, … of column x, and the
// kColY partial sums meet in shared memory. Consecutive x read consecutive
// addresses.
constexpr int kColX = 32, kColY = 8;

// ColTerm is the value summed down a column: x itself (SumRows), or
// dy·x·rinv[row], the RMSNorm weight gradient.
struct Plain {
	const float *x;
	__device__ __forceinline__ float operator()(size_t r, int c, int cols) const { return x[r * cols + c]; }
};
struct RMSWeight {
	const float *dy, *x;
	const float2 *stats; // per row: 1/rms, and the dx coefficient
	__device__ __forceinline__ float operator()(size_t r, int c, int cols) const {
		return dy[r * cols + c] * x[r * cols + c] * stats[r].x;
	}
};

// col_partial sums rows [chunk·rows_per, (chunk+1)·rows_per) of each
// column. With out_add set (a single chunk) the sum is added to out[c];
// otherwise it is written to out[chunk·cols + c].
template <typename Term>
__global__ void col_partial(Term term, float *__restrict__ out, int rows, int cols, int rows_per, bool out_add) {
	__shared__ float part[kColY][kColX + 1];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int c = blockIdx.x * kColX + tx;
	const int r0 = blockIdx.y * rows_per, r1 = min(rows, r0 + rows_per);
	float acc = 0.f;
	if (c < cols)
		for (int r = r0 + ty; r < r1; r += kColY) acc += term((size_t)r, c, cols);
	part[ty][tx] = acc;
	__syncthreads();
	if (ty != 0 || c >= cols) return;
	float s = 0.f;
#pragma unroll
	for (int y = 0; y < kColY; ++y) s += part[y][tx];
	if (out_add)
		out[c] += s;
	else
		out[(size_t)blockIdx.y * cols + c] = s;
}

// col_final adds the chunks' partial sums, in chunk order, to dst.
__global__ void col_final(float *__restrict__ dst, const float *__restrict__ part, int chunks, int cols) {
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= cols) return;
	float s = 0.f;
	for (int k = 0; k < chunks; ++k) s += part[(size_t)k * cols + c];
	dst[c] += s;
}

// col_sums adds Σ_rows term(row, c) to dst[c] for every column: one pass
// when the columns alone give the device enough blocks, else rows are cut
// into chunks whose partial sums col_final adds.
template <typename Term>
int col_sums(fn_ctx *ctx, Term term, float *dst, int rows, int cols) {
	const int xblocks = (cols + kColX - 1) / kColX;
	const long want = std::max(1L, (2L * ctx->sms + xblocks - 1) / xblocks);
	const long most = std::max(1L, (long)(rows + 63) / 64); // at least 64 rows a chunk
	const int chunks = (int)std::min(std::min(want, most), 65535L);
	const int rows_per = (rows + chunks - 1) / chunks;
	const dim3 block(kColX, kColY);
	if (chunks == 1) {
		col_partial<Term><<<dim3(xblocks, 1), block, 0, ctx->stream>>>(term, dst, rows, cols, rows_per, true);
		return fn_launched();
	}
	void *buf = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &buf, (size_t)chunks * cols * sizeof(float)));
	float *part = (float *)buf;
	col_partial<Term><<<dim3(xblocks, chunks), block, 0, ctx->stream>>>(term, part, rows, cols, rows_per, false);
	int err = fn_launched();
	if (err == 0) {
		col_final<<<(cols + 255) / 256, 256, 0, ctx->stream>>>(dst, part, chunks, cols);
		err = fn_launched();
	}
	const cudaError_t f = fn_scratch_free(ctx, buf);
	return err ? err : (int)f;
}

// embed_grad adds, for distinct id u, the rows of dy that looked it up (in
// order) to its row of the table: one block per distinct id, so no two
// blocks write the same row.
__global__ void embed_grad(float *__restrict__ dtable, const float *__restrict__ dy, const int32_t *__restrict__ groups,
                           int u, int dim) {
	const int32_t *ids = groups, *offs = groups + u, *rows = groups + 2 * u + 1;
	const int id = ids[blockIdx.x], lo = offs[blockIdx.x], hi = offs[blockIdx.x + 1];
	float *dst = dtable + (size_t)id * dim;
	for (int c = threadIdx.x; c < dim; c += blockDim.x) {
		float s = dst[c]; // added one row at a time, in order, as the CPU twin adds
		for (int i = lo; i < hi; ++i) s += dy[(size_t)rows[i] * dim + c];
		dst[c] = s;
	}
}

// rms_stats finds, per row, rinv = 1/sqrt(mean(x²)+eps) and the coefficient
// rinv³·Σ(dy·w·x)/cols of x in dx.
__global__ void rms_stats(float2 *__restrict__ stats, const float *__restrict__ DY, const float *__restrict__ X,
                          const float *__restrict__ W, int cols, float eps) {
	__shared__ float scratch[32];
	const size_t off = (size_t)blockIdx.x * cols;
	const float *x = X + off, *dy = DY + off;
	float ss = 0.f, dot = 0.f;
	for (int c = threadIdx.x; c < cols; c += blockDim.x) {
		const float v = x[c];
		ss = fmaf(v, v, ss);
		dot = fmaf(dy[c] * W[c], v, dot);
	}
	ss = block_sum(ss, scratch);
	dot = block_sum(dot, scratch);
	if (threadIdx.x == 0) {
		const float rinv = 1.f / sqrtf(ss / (float)cols + eps);
		stats[blockIdx.x] = make_float2(rinv, rinv * rinv * rinv * dot / (float)cols);
	}
}

// rms_dx: dx = rinv·w·dy − coef·x. DX may be DY: each element is read
// before it is written, by the same thread.
__global__ void rms_dx(float *DX, const float *DY, const float *__restrict__ X, const float *__restrict__ W,
                       const float2 *__restrict__ stats, int cols) {
	const size_t off = (size_t)blockIdx.x * cols;
	const float2 s = stats[blockIdx.x];
	for (int c = threadIdx.x; c < cols; c += blockDim.x) DX[off + c] = s.x * W[c] * DY[off + c] - s.y * X[off + c];
}

// swiglu_bwd, for y = silu(g)·u with σ = 1/(1+e^−g):
// dgate = dy·u·σ·(1 + g·(1−σ)), dup = dy·g·σ. Each element's inputs are
// read before its outputs are written, so any output may be an input.
__global__ void swiglu_bwd(float *DG, float *DU, const float *DY, const float *G, const float *U, size_t n) {
	const size_t stride = (size_t)gridDim.x * blockDim.x;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
		const float g = G[i], u = U[i], dy = DY[i];
		const float sg = 1.f / (1.f + expf(-g));
		const float dg = dy * u * sg * (1.f + g * (1.f - sg));
		const float du = dy * g * sg;
		DG[i] = dg;
		DU[i] = du;
	}
}

// A running (max, sum of exp(x − max)) pair, as in norm.cu.
struct MaxSum {
	float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
	if (a.m == -INFINITY) return b;
	if (b.m == -INFINITY) return a;
	const float m = fmaxf(a.m, b.m);
	return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_maxsum(MaxSum v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		MaxSum w = {__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.s, o)};
		v = merge(v, w);
	}
	return v;
}

// row_maxsum returns the row's max and Σ exp(x − max) to every thread.
__device__ __forceinline__ MaxSum row_maxsum(const float *x, int cols, MaxSum *scratch) {
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
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	acc = warp_maxsum(acc);
	if (lane == 0) scratch[warp] = acc;
	__syncthreads();
	if (warp == 0) {
		acc = warp_maxsum(lane < nw ? scratch[lane] : MaxSum{-INFINITY, 0.f});
		if (lane == 0) scratch[0] = acc;
	}
	__syncthreads();
	return scratch[0];
}

// token_logp: out[r] = (x[target] − max) − log Σ exp(x − max).
__global__ void token_logp(float *__restrict__ out, const float *__restrict__ X, const int32_t *__restrict__ targets,
                           int cols) {
	__shared__ MaxSum scratch[32];
	const float *x = X + (size_t)blockIdx.x * cols;
	const MaxSum r = row_maxsum(x, cols, scratch);
	if (threadIdx.x == 0) out[blockIdx.x] = (x[targets[blockIdx.x]] - r.m) - logf(r.s);
}

// token_logp_bwd: y = dlogp[r]·(onehot(target) − softmax(x)). Y may be X:
// the reduction has read the whole row before any element is written, and
// each element is then read and written by the same thread. A row whose
// dlogp is 0 (a token outside the loss) is zeroed without reading its
// logits, as the CPU twin does, so a non-finite logit there stays out.
__global__ void token_logp_bwd(float *Y, const float *X, const int32_t *__restrict__ targets,
                               const float *__restrict__ dlogp, int cols) {
	__shared__ MaxSum scratch[32];
	const size_t off = (size_t)blockIdx.x * cols;
	const float *x = X + off;
	float *y = Y + off;
	const float g = dlogp[blockIdx.x];
	if (g == 0.f) { // block-uniform
		for (int c = threadIdx.x; c < cols; c += blockDim.x) y[c] = 0.f;
		return;
	}
	const MaxSum r = row_maxsum(x, cols, scratch);
	const float inv = 1.f / r.s;
	const int tgt = targets[blockIdx.x];
	for (int c = threadIdx.x; c < cols; c += blockDim.x) {
		const float p = expf(x[c] - r.m) * inv;
		y[c] = g * ((c == tgt ? 1.f : 0.f) - p);
	}
}

} // namespace

extern "C" int fn_sum_rows(fn_ctx *ctx, uint64_t dst, uint64_t x, int rows, int cols) {
	FN_ENTER(ctx);
	if (rows == 0 || cols == 0) return 0;
	return col_sums(ctx, Plain{fptr(x)}, fptr(dst), rows, cols);
}

extern "C" int fn_embedding_backward(fn_ctx *ctx, uint64_t dtable, uint64_t dy, const int32_t *groups, int u, int n,
                                     int dim) {
	FN_ENTER(ctx);
	if (u == 0 || n == 0 || dim == 0) return 0;
	const size_t bytes = (size_t)(2 * u + 1 + n) * sizeof(int32_t);
	void *dg = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &dg, bytes));
	cudaError_t e = cudaMemcpyAsync(dg, groups, bytes, cudaMemcpyHostToDevice, ctx->stream);
	if (e == cudaSuccess) {
		const int block = dim >= 1024 ? 256 : (dim >= 256 ? 128 : 32);
		embed_grad<<<u, block, 0, ctx->stream>>>(fptr(dtable), fptr(dy), (const int32_t *)dg, u, dim);
		e = (cudaError_t)fn_launched();
	}
	cudaError_t f = fn_scratch_free(ctx, dg);
	return (int)(e != cudaSuccess ? e : f);
}

extern "C" int fn_rmsnorm_backward(fn_ctx *ctx, int block, uint64_t dx, uint64_t dw, uint64_t dy, uint64_t x,
                                   uint64_t w, int rows, int cols, float eps) {
	FN_ENTER(ctx);
	if (rows == 0 || cols == 0) return 0;
	if (block == 0) block = kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	void *buf = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &buf, (size_t)rows * sizeof(float2)));
	float2 *stats = (float2 *)buf;
	const float *DY = fptr(dy), *X = fptr(x), *W = fptr(w);
	// Statistics, then the weight gradient from dy, and only then dx, which
	// may overwrite dy.
	rms_stats<<<rows, block, 0, ctx->stream>>>(stats, DY, X, W, cols, eps);
	int err = fn_launched();
	if (err == 0) err = col_sums(ctx, RMSWeight{DY, X, stats}, fptr(dw), rows, cols);
	if (err == 0) {
		rms_dx<<<rows, block, 0, ctx->stream>>>(fptr(dx), DY, X, W, stats, cols);
		err = fn_launched();
	}
	const cudaError_t f = fn_scratch_free(ctx, buf);
	return err ? err : (int)f;
}

extern "C" int fn_swiglu_backward(fn_ctx *ctx, int block, uint64_t dgate, uint64_t dup, uint64_t dy, uint64_t gate,
                                  uint64_t up, size_t n) {
	FN_ENTER(ctx);
	if (n == 0) return 0;
	if (block == 0) block = kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	const size_t grid = std::min<size_t>((n + block - 1) / block, (size_t)ctx->sms * 8);
	swiglu_bwd<<<(unsigned)grid, block, 0, ctx->stream>>>(fptr(dgate), fptr(dup), fptr(dy), fptr(gate), fptr(up), n);
	return fn_launched();
}

extern "C" int fn_token_logprobs(fn_ctx *ctx, int block, float *dst, uint64_t logits, const int32_t *targets,
                                 int rows, int cols) {
	FN_ENTER(ctx);
	if (rows == 0) return 0;
	if (block == 0) block = cols >= 8192 ? 1024 : kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	// Targets in, log-probabilities out, through one scratch buffer.
	const size_t tbytes = (size_t)rows * sizeof(int32_t), obytes = (size_t)rows * sizeof(float);
	void *buf = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &buf, tbytes + obytes));
	int32_t *dt = (int32_t *)buf;
	float *out = (float *)((char *)buf + tbytes);
	cudaError_t e = cudaMemcpyAsync(dt, targets, tbytes, cudaMemcpyHostToDevice, ctx->stream);
	if (e == cudaSuccess) {
		token_logp<<<rows, block, 0, ctx->stream>>>(out, fptr(logits), dt, cols);
		e = (cudaError_t)fn_launched();
	}
	if (e == cudaSuccess) e = cudaMemcpyAsync(dst, out, obytes, cudaMemcpyDeviceToHost, ctx->stream);
	if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
	cudaError_t f = fn_scratch_free(ctx, buf);
	return (int)(e != cudaSuccess ? e : f);
}

extern "C" int fn_token_logprobs_backward(fn_ctx *ctx, int block, uint64_t dlogits, uint64_t logits,
                                          const int32_t *targets, const float *dlogp, int rows, int cols) {
	FN_ENTER(ctx);
	if (rows == 0 || cols == 0) return 0;
	if (block == 0) block = cols >= 8192 ? 1024 : kDefaultBlock;
	if (!valid_block(block)) return FN_ERR_BAD_CONFIG;
	const size_t tbytes = (size_t)rows * sizeof(int32_t), gbytes = (size_t)rows * sizeof(float);
	void *buf = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &buf, tbytes + gbytes));
	int32_t *dt = (int32_t *)buf;
	float *dg = (float *)((char *)buf + tbytes);
	cudaError_t e = cudaMemcpyAsync(dt, targets, tbytes, cudaMemcpyHostToDevice, ctx->stream);
	if (e == cudaSuccess) e = cudaMemcpyAsync(dg, dlogp, gbytes, cudaMemcpyHostToDevice, ctx->stream);
	if (e == cudaSuccess) {
		token_logp_bwd<<<rows, block, 0, ctx->stream>>>(fptr(dlogits), fptr(logits), dt, dg, cols);
		e = (cudaError_t)fn_launched();
	}
	cudaError_t f = fn_scratch_free(ctx, buf);
	return (int)(e != cudaSuccess ? e : f);
}
