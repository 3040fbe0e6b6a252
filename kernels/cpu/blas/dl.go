//go:build cgo && !purego

package blas

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
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
static blaslib *load(const char *path, const char *core, char *err, size_t errlen) {
	char *oldCore = save("OPENBLAS_CORETYPE"), *oldThreads = save("OPENBLAS_NUM_THREADS");
	if (core[0]) {
		setenv("OPENBLAS_CORETYPE", core, 1);
	} else {
		unsetenv("OPENBLAS_CORETYPE");
	}
	setenv("OPENBLAS_NUM_THREADS", "1", 1);
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
	// Work is split across cores in Go; OpenBLAS's own workers would spin
	// after each call and compete with the goroutines of the other kernels.
	setThreads(1);
	snprintf(l->config, sizeof l->config, "%s", config());
	snprintf(l->core, sizeof l->core, "%s", corename());
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

// gemvRows is the row count below which a product is done as one sgemv per
// row: OpenBLAS 0.3.21's sgemm is slow for a few rows (measured on Zen 5:
// 2 rows of 1536×576 take 2× longer as sgemm than as two sgemv calls; at 8
// rows they are even).
const gemvRows = 8

// lib is one loaded OpenBLAS.
type lib struct{ c *C.blaslib }

// cpuCore is the OpenBLAS kernel set for this CPU's features: SkylakeX
// where AVX-512 (F, BW, DQ, VL, CD) is there, Haswell where AVX2 and FMA
// are, else "" for OpenBLAS's own detection.
func cpuCore() string { return C.GoString(C.coreFor()) }

// openLib loads the OpenBLAS at path (a file name the dynamic linker
// resolves, or a path) with the given kernel set and reports its version and
// kernels.
func openLib(path, core string) (l *lib, version, kernels string, err error) {
	cpath, ccore := C.CString(path), C.CString(core)
	defer C.free(unsafe.Pointer(cpath))
	defer C.free(unsafe.Pointer(ccore))
	var msg [512]C.char
	c := C.load(cpath, ccore, &msg[0], C.size_t(len(msg)))
	if c == nil {
		return nil, "", "", errors.New(C.GoString(&msg[0]))
	}
	config := strings.Fields(C.GoString(&c.config[0]))
	version = "?"
	if len(config) > 1 {
		version = config[1]
	}
	return &lib{c}, version, C.GoString(&c.core[0]), nil
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
