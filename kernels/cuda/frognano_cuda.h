/*
 * frognano_cuda.h is the whole C surface of libfrognano_cuda.a, the library
 * `make -C kernels/cuda` builds from the .cu files beside it. It is the only
 * header cgo reads, and it uses plain C types only, so compiling the Go side
 * needs neither nvcc nor the CUDA headers.
 *
 * Device addresses cross the boundary as uint64_t rather than pointers: Go
 * keeps them as integers and never dereferences them, and cgo's pointer
 * checks have nothing to say about them. Every function returns 0 or an
 * error code (a cudaError_t, or one of FN_ERR_* below); fn_error_name and
 * fn_error_string describe a code.
 *
 * Each call first makes ctx's device current on the calling thread: Go moves
 * goroutines between threads, and CUDA's current device is per thread.
 * Kernels and copies are queued on ctx's stream; only fn_sync and
 * fn_download wait for them.
 */
#ifndef FROGNANO_CUDA_H
#define FROGNANO_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes of our own, above every cudaError_t. */
enum {
	FN_ERR_BAD_CONFIG = 10001, /* a launch configuration the kernel cannot use */
	FN_ERR_HEAD_DIM = 10002,   /* attention head dimension above FN_MAX_HEAD_DIM */
};

/* The largest attention head dimension the attention kernel supports. */
#define FN_MAX_HEAD_DIM 256

typedef struct fn_ctx fn_ctx;

typedef struct {
	char name[256];
	unsigned char uuid[16];
	int major, minor;      /* compute capability */
	int sms;               /* streaming multiprocessors */
	size_t total_mem;      /* bytes */
	int mem_pools;         /* supports stream-ordered allocation */
} fn_device_info;

const char *fn_error_name(int code);
const char *fn_error_string(int code);

int fn_device_count(int *n);
int fn_device_info_get(int device, fn_device_info *out);

/* fn_open binds device, creates a stream and checks that the library holds
 * kernels the device can run. */
int fn_open(int device, fn_ctx **out);
int fn_sync(fn_ctx *ctx);

/* Memory. fn_alloc zero-fills when zero is set; fn_free is stream-ordered,
 * so it may be called while kernels that read p are still queued. */
int fn_alloc(fn_ctx *ctx, size_t bytes, int zero, uint64_t *out);
int fn_free(fn_ctx *ctx, uint64_t p);
int fn_upload(fn_ctx *ctx, uint64_t dst, const float *src, size_t n);
int fn_download(fn_ctx *ctx, float *dst, uint64_t src, size_t n);
int fn_copy(fn_ctx *ctx, uint64_t dst, uint64_t src, size_t n);
int fn_zero(fn_ctx *ctx, uint64_t dst, size_t n);

/* Operations; shapes were checked by the caller. cfg and block choose a
 * launch configuration, 0 for the library's own choice (tests sweep them). */
int fn_matmul(fn_ctx *ctx, int cfg, uint64_t c, uint64_t a, uint64_t b, int m, int n, int k);
int fn_embedding(fn_ctx *ctx, uint64_t dst, uint64_t table, const int32_t *ids, int n, int dim);
int fn_rmsnorm(fn_ctx *ctx, int block, uint64_t dst, uint64_t x, uint64_t w, int rows, int cols, float eps);
int fn_rope(fn_ctx *ctx, int block, uint64_t dst, uint64_t x, const int32_t *pos, const float *inv_freq,
            int rows, int cols, int head_dim);
int fn_attention(fn_ctx *ctx, int warps, int splits, uint64_t dst, uint64_t q, uint64_t k, uint64_t v,
                 int t, int s, int n_heads, int n_kv_heads, int head_dim, float scale);
int fn_swiglu(fn_ctx *ctx, int block, uint64_t dst, uint64_t gate, uint64_t up, size_t n);
int fn_add(fn_ctx *ctx, int block, uint64_t dst, uint64_t a, uint64_t b, size_t n);
int fn_softmax(fn_ctx *ctx, int block, int log, uint64_t dst, uint64_t x, int rows, int cols);

/* Training: the operations of kernels.GradBackend (gemm.cu,
 * attention_bwd.cu, grad.cu, optim.cu). */

/* fn_gemm's layouts, for C[m,n] (+)= op(A)·op(B) with a sum over k:
 * NT: A[m,k]·B[n,k]ᵀ (the forward product, fn_matmul's), NN: A[m,k]·B[k,n],
 * TN: A[k,m]ᵀ·B[k,n]. */
enum { FN_GEMM_NT = 0, FN_GEMM_NN = 1, FN_GEMM_TN = 2 };
/* fn_gemm's precisions: fp32 throughout, or inputs rounded to bf16 and
 * multiplied on tensor cores with fp32 accumulation. */
enum { FN_PREC_F32 = 0, FN_PREC_BF16 = 1 };

/* fn_gemm's cfg picks the fp32 kernel: fn_matmul's numbering for NT without
 * accumulate (it is fn_matmul then), else 2/3/4 for tiles of 32/64/128;
 * bf16 has a single kernel and ignores cfg. */
int fn_gemm(fn_ctx *ctx, int cfg, int prec, int layout, int accumulate, uint64_t c, uint64_t a, uint64_t b,
            int m, int n, int k);
/* fn_sum_rows adds the column sums of x[rows, cols] to dst[cols]. */
int fn_sum_rows(fn_ctx *ctx, uint64_t dst, uint64_t x, int rows, int cols);
/* fn_embedding_backward takes the ids grouped by the caller: groups[0:u]
 * the distinct ids, groups[u:2u+1] offsets into groups[2u+1:2u+1+n], the
 * rows of dy holding each id, in order. */
int fn_embedding_backward(fn_ctx *ctx, uint64_t dtable, uint64_t dy, const int32_t *groups, int u, int n, int dim);
int fn_rmsnorm_backward(fn_ctx *ctx, int block, uint64_t dx, uint64_t dw, uint64_t dy, uint64_t x, uint64_t w,
                        int rows, int cols, float eps);
int fn_attention_backward(fn_ctx *ctx, int warps, uint64_t dq, uint64_t dk, uint64_t dv, uint64_t dy, uint64_t q,
                          uint64_t k, uint64_t v, int t, int n_heads, int n_kv_heads, int head_dim, float scale);
int fn_swiglu_backward(fn_ctx *ctx, int block, uint64_t dgate, uint64_t dup, uint64_t dy, uint64_t gate,
                       uint64_t up, size_t n);
/* fn_token_logprobs writes rows floats to host memory and waits for them. */
int fn_token_logprobs(fn_ctx *ctx, int block, float *dst, uint64_t logits, const int32_t *targets, int rows,
                      int cols);
int fn_token_logprobs_backward(fn_ctx *ctx, int block, uint64_t dlogits, uint64_t logits, const int32_t *targets,
                               const float *dlogp, int rows, int cols);
int fn_axpy(fn_ctx *ctx, int block, uint64_t dst, uint64_t x, float alpha, size_t n);
int fn_scale(fn_ctx *ctx, int block, uint64_t dst, float alpha, size_t n);
int fn_fill(fn_ctx *ctx, int block, uint64_t dst, float v, size_t n);
/* fn_sum_squares writes Σ x² (float64) to host memory and waits for it. */
int fn_sum_squares(fn_ctx *ctx, int block, uint64_t x, size_t n, double *out);
/* fn_adamw takes the scalars torch.optim.AdamW derives on the host (in
 * float64, rounded once): w1 = 1-beta1 (the lerp weight of m), beta2,
 * w2 = 1-beta2, eps, decay = 1-lr·weight_decay,
 * neg_step = -lr/(1-beta1^step) and bc2_sqrt = sqrt(1-beta2^step). */
int fn_adamw(fn_ctx *ctx, int block, uint64_t p, uint64_t g, uint64_t m, uint64_t v, size_t n, float w1,
             float beta2, float w2, float eps, float decay, float neg_step, float bc2_sqrt);

#ifdef __cplusplus
}
#endif

#endif
