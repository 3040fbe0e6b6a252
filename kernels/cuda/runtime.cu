// Devices, the context, memory and errors: everything in the library that is
// not a kernel.
#include <stdlib.h>
#include <string.h>

#include "common.cuh"

extern "C" const char *fn_error_name(int code) {
	switch (code) {
	case FN_ERR_BAD_CONFIG:
		return "fnErrorBadConfig";
	case FN_ERR_HEAD_DIM:
		return "fnErrorHeadDim";
	}
	return cudaGetErrorName((cudaError_t)code);
}

extern "C" const char *fn_error_string(int code) {
	switch (code) {
	case FN_ERR_BAD_CONFIG:
		return "launch configuration not supported by the kernel";
	case FN_ERR_HEAD_DIM:
		return "attention head dimension above 256";
	}
	return cudaGetErrorString((cudaError_t)code);
}

extern "C" int fn_device_count(int *n) {
	*n = 0;
	return (int)cudaGetDeviceCount(n);
}

extern "C" int fn_device_info_get(int device, fn_device_info *out) {
	cudaDeviceProp p;
	FN_CHECK(cudaGetDeviceProperties(&p, device));
	memset(out, 0, sizeof *out);
	static_assert(sizeof out->name == sizeof p.name, "device name size");
	memcpy(out->name, p.name, sizeof out->name);
	out->name[sizeof out->name - 1] = 0;
	memcpy(out->uuid, p.uuid.bytes, sizeof out->uuid);
	out->major = p.major;
	out->minor = p.minor;
	out->sms = p.multiProcessorCount;
	out->total_mem = p.totalGlobalMem;
	int pools = 0;
	FN_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
	out->mem_pools = pools;
	return 0;
}

// probe is launched once by fn_open: a launch fails with
// cudaErrorNoKernelImageForDevice when the library holds no code the device
// can run, which is better said at open than at the first MatMul.
__global__ void probe_kernel(int *p) {
	if (p) *p = 1;
}

extern "C" int fn_open(int device, fn_ctx **out) {
	*out = nullptr;
	FN_CHECK(cudaSetDevice(device));
	fn_device_info info;
	int err = fn_device_info_get(device, &info);
	if (err) return err;
	cudaStream_t stream;
	FN_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	probe_kernel<<<1, 1, 0, stream>>>(nullptr);
	cudaError_t e = cudaGetLastError();
	if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
	if (e != cudaSuccess) {
		cudaStreamDestroy(stream);
		return (int)e;
	}
	if (info.mem_pools) {
		// Keep freed memory in the pool rather than handing it back to the
		// driver at every synchronisation: activations are allocated and
		// dropped step after step.
		cudaMemPool_t pool;
		if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
			uint64_t keep = UINT64_MAX;
			cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
		}
	}
	fn_ctx *ctx = (fn_ctx *)calloc(1, sizeof *ctx);
	if (!ctx) {
		cudaStreamDestroy(stream);
		return (int)cudaErrorMemoryAllocation;
	}
	ctx->device = device;
	ctx->stream = stream;
	ctx->sms = info.sms;
	ctx->pools = info.mem_pools;
	*out = ctx;
	return 0;
}

extern "C" int fn_sync(fn_ctx *ctx) {
	FN_ENTER(ctx);
	return (int)cudaStreamSynchronize(ctx->stream);
}

cudaError_t fn_scratch_alloc(fn_ctx *ctx, void **p, size_t bytes) {
	if (ctx->pools) return cudaMallocAsync(p, bytes, ctx->stream);
	return cudaMalloc(p, bytes);
}

cudaError_t fn_scratch_free(fn_ctx *ctx, void *p) {
	if (!p) return cudaSuccess;
	if (ctx->pools) return cudaFreeAsync(p, ctx->stream);
	return cudaFree(p); // synchronises with the device: correct, and slow
}

extern "C" int fn_alloc(fn_ctx *ctx, size_t bytes, int zero, uint64_t *out) {
	FN_ENTER(ctx);
	void *p = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &p, bytes));
	cudaError_t e = zero ? cudaMemsetAsync(p, 0, bytes, ctx->stream) : cudaSuccess;
	if (e != cudaSuccess) {
		fn_scratch_free(ctx, p);
		return (int)e;
	}
	*out = (uint64_t)(uintptr_t)p;
	return 0;
}

extern "C" int fn_free(fn_ctx *ctx, uint64_t p) {
	FN_ENTER(ctx);
	return (int)fn_scratch_free(ctx, (void *)(uintptr_t)p);
}

// fn_upload reads pageable host memory. cudaMemcpyAsync from pageable
// memory returns only once src has been staged, so the caller's buffer is
// free again on return, as cgo requires of Go memory passed to C.
extern "C" int fn_upload(fn_ctx *ctx, uint64_t dst, const float *src, size_t n) {
	FN_ENTER(ctx);
	return (int)cudaMemcpyAsync(fptr(dst), src, n * sizeof(float), cudaMemcpyHostToDevice, ctx->stream);
}

// fn_download waits for everything queued before it, so it is also where a
// kernel's asynchronous fault is reported.
extern "C" int fn_download(fn_ctx *ctx, float *dst, uint64_t src, size_t n) {
	FN_ENTER(ctx);
	FN_CHECK(cudaMemcpyAsync(dst, fptr(src), n * sizeof(float), cudaMemcpyDeviceToHost, ctx->stream));
	return (int)cudaStreamSynchronize(ctx->stream);
}

extern "C" int fn_copy(fn_ctx *ctx, uint64_t dst, uint64_t src, size_t n) {
	FN_ENTER(ctx);
	if (dst == src || n == 0) return 0;
	size_t bytes = n * sizeof(float);
	uint64_t lo = dst < src ? dst : src, hi = dst < src ? src : dst;
	if (hi - lo >= bytes) {
		return (int)cudaMemcpyAsync(fptr(dst), fptr(src), bytes, cudaMemcpyDeviceToDevice, ctx->stream);
	}
	// Overlapping ranges: cudaMemcpy's result is undefined there, so go
	// through a scratch copy, as memmove would.
	void *tmp = nullptr;
	FN_CHECK(fn_scratch_alloc(ctx, &tmp, bytes));
	cudaError_t e = cudaMemcpyAsync(tmp, fptr(src), bytes, cudaMemcpyDeviceToDevice, ctx->stream);
	if (e == cudaSuccess) e = cudaMemcpyAsync(fptr(dst), tmp, bytes, cudaMemcpyDeviceToDevice, ctx->stream);
	cudaError_t f = fn_scratch_free(ctx, tmp);
	return (int)(e != cudaSuccess ? e : f);
}

extern "C" int fn_zero(fn_ctx *ctx, uint64_t dst, size_t n) {
	FN_ENTER(ctx);
	return (int)cudaMemsetAsync(fptr(dst), 0, n * sizeof(float), ctx->stream);
}
