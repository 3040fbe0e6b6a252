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

#ifdef __cplusplus
}
#endif

#endif
