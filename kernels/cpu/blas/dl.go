//go:build cgo && !purego

package blas

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

// The CBLAS entry points, called through pointers found by dlsym: each
// library is opened at run time, so the build needs no BLAS headers and no
// BLAS library, and one process may hold several (frognano bench kernels
// measures them side by side). blasint is int in both libraries loaded here
// (Debian's libopenblas0 and the 32-bit-integer scipy-openblas32 build).
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                         const float *, int, float, float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int,
                         float, float *, int);
typedef void (*set_threads_fn)(int);
typedef char *(*string_fn)(void);

typedef struct {
	sgemm_fn sgemm;
	sgemv_fn sgemv;
	char config[256]; // openblas_get_config: "OpenBLAS 0.3.34 DYNAMIC_ARCH ..."
	char core[64];    // openblas_get_corename: the kernels in use
	void *handle;
	char prefix[8];
} blaslib;

enum { RowMajor = 101, NoTrans = 111, Trans = 112 };

// sym finds prefix+name: the scipy-openblas builds prefix every symbol with
// "scipy_", Debian's has no prefix.
static void *sym(void *h, const char *prefix, const char *name) {
	char buf[96];
	snprintf(buf, sizeof buf, "%s%s", prefix, name);
	return dlsym(h, buf);
}

// restore sets or unsets an environment variable to a value saved by save.
static char *save(const char *name) {
	const char *v = getenv(name);
	return v ? strdup(v) : NULL;
}
static void restore(const char *name, char *saved) {
	if (saved) {
		setenv(name, saved, 1);
		free(saved);
	} else {
		unsetenv(name);
	}
}

// load opens the library at path with the kernels named by core ("" lets
// OpenBLAS detect the CPU itself) and one thread. OpenBLAS reads
// OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS once, while it is being loaded,
// so both are set for the dlopen only and put back as they were: the engine
// does not depend on what the machine's environment says (some machines set
// OPENBLAS_CORETYPE=Haswell for the sake of older builds, which halves the
// speed of AVX-512 kernels). It returns NULL with the reason in err.
static blaslib *load(const char *path, const char *core, const char *threads, char *err, size_t errlen) {
	char *oldCore = save("OPENBLAS_CORETYPE"), *oldThreads = save("OPENBLAS_NUM_THREADS");
	if (core[0]) {
		setenv("OPENBLAS_CORETYPE", core, 1);
	} else {
		unsetenv("OPENBLAS_CORETYPE");
	}
	setenv("OPENBLAS_NUM_THREADS", threads, 1);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	restore("OPENBLAS_CORETYPE", oldCore);
	restore("OPENBLAS_NUM_THREADS", oldThreads);
	if (!h) {
		snprintf(err, errlen, "%s", dlerror());
		return NULL;
	}
	const char *prefix = sym(h, "scipy_", "cblas_sgemm") ? "scipy_" : "";
	blaslib *l = calloc(1, sizeof *l);
	l->sgemm = (sgemm_fn)sym(h, prefix, "cblas_sgemm");
	l->sgemv = (sgemv_fn)sym(h, prefix, "cblas_sgemv");
	set_threads_fn setThreads = (set_threads_fn)sym(h, prefix, "openblas_set_num_threads");
	string_fn config = (string_fn)sym(h, prefix, "openblas_get_config");
	string_fn corename = (string_fn)sym(h, prefix, "openblas_get_corename");
	if (!l->sgemm || !l->sgemv || !setThreads || !config || !corename) {
		snprintf(err, errlen, "%s: not an OpenBLAS with CBLAS (no %scblas_sgemm, cblas_sgemv, openblas_set_num_threads, openblas_get_config or openblas_get_corename)", path, prefix);
		free(l);
		dlclose(h);
		return NULL;
	}
	// The single-threaded instance: work is split across cores in Go;
	// OpenBLAS's own workers would spin after each call and compete with
	// the goroutines of the other kernels.
	setThreads(atoi(threads));
	l->handle = h;
	snprintf(l->prefix, sizeof l->prefix, "%s", prefix);
	snprintf(l->config, sizeof l->config, "%s", config());
	snprintf(l->core, sizeof l->core, "%s", corename());
	return l;
}

// The parallel instance: a second, private copy of the library whose
// level-3 work OpenBLAS splits into jobs that share their packed panels (as
// NumPy's threaded sgemm does), run by frognano's goroutines through
// OpenBLAS's threads callback (0.3.27 and later) instead of OpenBLAS's
// own pool. Its pool threads are created at load but never given work, and
// fall asleep at once (OPENBLAS_THREAD_TIMEOUT=4, the least).
typedef void (*dojob_fn)(int, void *, int);
typedef void (*threads_cb)(int, dojob_fn, int, size_t, void *, int);
typedef void (*set_cb_fn)(threads_cb);

extern void frognanoBlasJobs(uintptr_t dojob, int numjobs, size_t elsize, void *jobdata, int arg);

static void jobsCallback(int sync, dojob_fn dojob, int numjobs, size_t elsize, void *jobdata, int arg) {
	(void)sync; // every call waits for its jobs
	frognanoBlasJobs((uintptr_t)dojob, numjobs, elsize, jobdata, arg);
}

void frognanoBlasRunJob(uintptr_t dojob, int i, void *jobdata, size_t elsize, int arg) {
	((dojob_fn)dojob)(i, (char *)jobdata + (size_t)i * elsize, arg);
}

// loadParallel loads a private copy of the library at path (copied into a
// memfd, so the dynamic linker sees a new file and keeps its state apart
// from the single-threaded instance's) with the given number of threads
// and frognano's callback. It returns NULL with the reason in err; a
// library without the callback (older than 0.3.27) is one such reason.
static blaslib *loadParallel(const char *path, const char *core, int threads, char *err, size_t errlen) {
	void *h0 = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h0) {
		snprintf(err, errlen, "%s", dlerror());
		return NULL;
	}
	const char *prefix0 = sym(h0, "scipy_", "cblas_sgemm") ? "scipy_" : "";
	int hasCallback = sym(h0, prefix0, "openblas_set_threads_callback_function") != NULL;
	char real[PATH_MAX];
	Dl_info info;
	void *any = sym(h0, prefix0, "cblas_sgemm");
	int named = any && dladdr(any, &info) && info.dli_fname && realpath(info.dli_fname, real);
	dlclose(h0);
	if (!hasCallback) {
		snprintf(err, errlen, "%s: no %sopenblas_set_threads_callback_function (OpenBLAS older than 0.3.27)", path, prefix0);
		return NULL;
	}
	if (!named) {
		snprintf(err, errlen, "%s: cannot find the file it was loaded from", path);
		return NULL;
	}
	int src = open(real, O_RDONLY | O_CLOEXEC);
	if (src < 0) {
		snprintf(err, errlen, "%s: %s", real, strerror(errno));
		return NULL;
	}
	int fd = memfd_create("frognano-openblas", MFD_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "memfd_create: %s", strerror(errno));
		close(src);
		return NULL;
	}
	char buf[1 << 16];
	ssize_t r;
	while ((r = read(src, buf, sizeof buf)) > 0) {
		for (ssize_t off = 0; off < r;) {
			ssize_t w = write(fd, buf + off, r - off);
			if (w < 0) {
				snprintf(err, errlen, "copying %s: %s", real, strerror(errno));
				close(src);
				close(fd);
				return NULL;
			}
			off += w;
		}
	}
	close(src);
	if (r < 0) {
		snprintf(err, errlen, "reading %s: %s", real, strerror(errno));
		close(fd);
		return NULL;
	}
	char fdpath[64];
	snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
	char *oldTimeout = save("OPENBLAS_THREAD_TIMEOUT");
	setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
	char nthreads[16];
	snprintf(nthreads, sizeof nthreads, "%d", threads);
	blaslib *l = load(fdpath, core, nthreads, err, errlen);
	restore("OPENBLAS_THREAD_TIMEOUT", oldTimeout);
	close(fd); // the mapping keeps the file
	if (!l) {
		return NULL;
	}
	((set_cb_fn)sym(l->handle, l->prefix, "openblas_set_threads_callback_function"))(jobsCallback);
	return l;
}

static void sgemm(const blaslib *l, int transA, int transB, int m, int n, int k, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc) {
	l->sgemm(RowMajor, transA ? Trans : NoTrans, transB ? Trans : NoTrans, m, n, k, 1, a, lda, b, ldb, beta, c, ldc);
}

static void sgemv(const blaslib *l, int trans, int rows, int cols, const float *a, int lda, const float *x, float *y) {
	l->sgemv(RowMajor, trans ? Trans : NoTrans, rows, cols, 1, a, lda, x, 1, 0, y, 1);
}

// The kernels OpenBLAS calls these by, for an x86-64 CPU's features
// (__builtin_cpu_supports also checks that the OS saves the AVX-512 state).
static const char *coreFor(void) {
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512cd")) {
		return "SkylakeX";
	}
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
		return "Haswell";
	}
#endif
	return "";
}
*/
import "C"

import (
	"errors"
	"strings"
	"unsafe"
)

// cgoEnabled reports whether this build can load a BLAS library.
const cgoEnabled = true

// lib is one loaded OpenBLAS: the single-threaded instance every piece of
// a product split in Go calls, and the parallel one (nil without it) that
// computes a whole product with OpenBLAS's own split, its jobs run by
// frognano's goroutines.
type lib struct {
	c          *C.blaslib
	par        *C.blaslib
	parThreads int    // the parallel instance's threads
	parErr     string // why there is no parallel instance
}

// cpuCore is the OpenBLAS kernel set for this CPU's features: SkylakeX
// where AVX-512 (F, BW, DQ, VL, CD) is there, Haswell where AVX2 and FMA
// are, else "" for OpenBLAS's own detection.
func cpuCore() string { return C.GoString(C.coreFor()) }

// openLib loads the OpenBLAS at path (a file name the dynamic linker
// resolves, or a path) with the given kernel set and reports its version and
// kernels. With more than one thread it loads the parallel instance too,
// for Threads() jobs; that one failing to load is not an error.
func openLib(path, core string) (l *lib, version, kernels string, err error) {
	cpath, ccore, one := C.CString(path), C.CString(core), C.CString("1")
	defer C.free(unsafe.Pointer(cpath))
	defer C.free(unsafe.Pointer(ccore))
	defer C.free(unsafe.Pointer(one))
	var msg [512]C.char
	c := C.load(cpath, ccore, one, &msg[0], C.size_t(len(msg)))
	if c == nil {
		return nil, "", "", errors.New(C.GoString(&msg[0]))
	}
	config := strings.Fields(C.GoString(&c.config[0]))
	version = "?"
	if len(config) > 1 {
		version = config[1]
	}
	l = &lib{c: c, parErr: "one thread"}
	if t := Threads(); t > 1 {
		if p := C.loadParallel(cpath, ccore, C.int(t), &msg[0], C.size_t(len(msg))); p != nil {
			l.par, l.parThreads, l.parErr = p, t, ""
		} else {
			l.parErr = C.GoString(&msg[0])
		}
	}
	return l, version, C.GoString(&c.core[0]), nil
}

// parallel reports how many jobs the parallel instance splits a product
// into, 0 without one.
func (l *lib) parallel() int {
	if l.par == nil {
		return 0
	}
	return l.parThreads
}

// gemmParallel is gemmFull on the parallel instance: one sgemm that
// OpenBLAS splits into up to parallel() jobs sharing their packed panels,
// run by frognanoBlasJobs. The caller holds parallel()−1 helpers.
func (l *lib) gemmParallel(transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	var beta C.float
	if accumulate {
		beta = 1
	}
	C.sgemm(l.par, cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), ptr(a, 0), C.int(lda), ptr(b, 0), C.int(ldb), beta, ptr(c, 0), C.int(ldc))
}

func ptr(x []float32, i int) *C.float { return (*C.float)(unsafe.Pointer(&x[i])) }

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// gemm is Gemm after validation, with m, n, k > 0.
func (l *lib) gemm(transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < gemvRows {
		// Row i of c is b·a_i (b is n×k) or bᵀ·a_i (b is k×n).
		rows, cols := n, k
		if !transB {
			rows, cols = k, n
		}
		for i := range m {
			C.sgemv(l.c, cbool(!transB), C.int(rows), C.int(cols), ptr(b, 0), C.int(ldb), ptr(a, i*lda), ptr(c, i*ldc))
		}
		return
	}
	C.sgemm(l.c, 0, cbool(transB), C.int(m), C.int(n), C.int(k), ptr(a, 0), C.int(lda), ptr(b, 0), C.int(ldb), 0, ptr(c, 0), C.int(ldc))
}

// gemmFull is GemmFull after validation, with m, n, k > 0: one sgemm.
func (l *lib) gemmFull(transA, transB, accumulate bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if !transA && !accumulate {
		l.gemm(transB, m, n, k, a, lda, b, ldb, c, ldc) // with its few-rows path
		return
	}
	var beta C.float
	if accumulate {
		beta = 1
	}
	C.sgemm(l.c, cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), ptr(a, 0), C.int(lda), ptr(b, 0), C.int(ldb), beta, ptr(c, 0), C.int(ldc))
}
