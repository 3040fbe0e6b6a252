//go:build cuda

// Package cuda is the GPU backend: kernels.Backend over NVIDIA device
// memory, each operation a CUDA kernel of our own (the .cu files here,
// built into libfrognano_cuda.a by `make cuda`), checked against the CPU
// twin in kernels/cpu by kernels/kernelstest and by this package's tests.
//
// It is the only package that imports "C" for CUDA, and only when built
// with -tags cuda; without the tag nocuda.go stands in, and New reports
// ErrNotBuilt. No C type appears in the API.
//
// Tensors live in device memory and are freed when the garbage collector
// finds them unreachable (the collector cannot see device memory, so an
// allocation that fails first collects and retries). Operations are queued
// on one CUDA stream per Backend and return before the device has run
// them; ToHost and Synchronize wait. Misuse panics as in the CPU backend; a
// CUDA failure panics with an *Error, and after a Fatal one the device is
// unusable for the rest of the process, which is why the Learner should run
// in a supervised child process.
//
// To build: `make cuda` (nvcc from scripts/install-cuda.sh) writes
// libfrognano_cuda.a here; then `go test -tags cuda ./kernels/cuda/`, which
// skips without a GPU. gpucheck.sh runs the whole check on a GPU machine.
package cuda

/*
#cgo LDFLAGS: -L${SRCDIR} -lfrognano_cuda -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++
#include <stdlib.h>
#include "frognano_cuda.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/frognano/frognano/kernels"
)

// The CUDA runtime is linked statically (libcudart_static.a): a binary then
// needs only the driver's libcuda.so.1, which the runtime opens itself at
// the first CUDA call, so the same binary starts on a machine without the
// driver (New reports ErrNoDevice) and runs against whatever CUDA version
// the GPU machine's driver supports (11.8 or later).

// Enabled reports whether this build has the CUDA backend.
const Enabled = true

var (
	// ErrNoDevice is wrapped by New and Devices when no usable CUDA device
	// is present: no driver, no GPU, or an index or UUID that names none.
	// Callers fall back to the CPU backend.
	ErrNoDevice = errors.New("cuda: no CUDA device")
	// ErrNotBuilt is returned by New in builds without the cuda tag.
	ErrNotBuilt = errors.New("cuda: frognano was built without the cuda build tag (make cuda; go build -tags cuda)")
	// ErrOutOfMemory matches (errors.Is) an *Error from a failed allocation.
	ErrOutOfMemory = errors.New("cuda: out of device memory")
)

// Error is a failure reported by the CUDA runtime or the kernel library.
// Operations panic with it, as they have no error result.
type Error struct {
	Op   string // the backend operation, "MatMul"
	Code int    // cudaError_t, or the library's own codes above 10000
	Name string // "cudaErrorIllegalAddress"
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Op, e.Name, e.Code, e.Msg)
}

// Is makes errors.Is(err, ErrOutOfMemory) work.
func (e *Error) Is(target error) bool {
	return target == ErrOutOfMemory && e.Code == cudaErrorMemoryAllocation
}

// Fatal reports an error that corrupts the CUDA context (an illegal memory
// access, a failed kernel): every later call on the device fails too, and
// only a new process recovers.
func (e *Error) Fatal() bool {
	switch e.Code {
	case 700, 702, 710, 714, 715, 716, 717, 718, 719:
		return true
	}
	return false
}

const (
	cudaErrorMemoryAllocation   = 2
	cudaErrorInsufficientDriver = 35
	cudaErrorNoDevice           = 100
)

func newError(op string, code C.int) *Error {
	return &Error{Op: op, Code: int(code), Name: C.GoString(C.fn_error_name(code)), Msg: C.GoString(C.fn_error_string(code))}
}

// Device describes a GPU as CUDA numbers it.
type Device struct {
	// Index is CUDA's ordinal, which follows CUDA_DEVICE_ORDER (fastest
	// first by default) and CUDA_VISIBLE_DEVICES, not NVML's PCI order:
	// bind by UUID when the GPU was chosen through NVML.
	Index           int
	UUID            string // "GPU-…", as nvidia-smi and NVML print it
	Name            string
	Major, Minor    int // compute capability
	Multiprocessors int
	MemoryBytes     uint64
}

// Devices lists the CUDA devices, or returns an error wrapping ErrNoDevice
// when there are none or the driver is missing.
func Devices() ([]Device, error) {
	var n C.int
	if code := C.fn_device_count(&n); code != 0 {
		err := fmt.Errorf("%w: %w", ErrNoDevice, newError("cudaGetDeviceCount", code))
		if code == cudaErrorInsufficientDriver {
			err = fmt.Errorf("%w (is the NVIDIA driver, libcuda.so.1, installed and at least CUDA 11.8?)", err)
		}
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the driver reports no devices", ErrNoDevice)
	}
	devs := make([]Device, n)
	for i := range devs {
		var info C.fn_device_info
		if code := C.fn_device_info_get(C.int(i), &info); code != 0 {
			return nil, newError("cudaGetDeviceProperties", code)
		}
		devs[i] = Device{
			Index:           i,
			UUID:            formatUUID(C.GoBytes(unsafe.Pointer(&info.uuid[0]), 16)),
			Name:            C.GoString(&info.name[0]),
			Major:           int(info.major),
			Minor:           int(info.minor),
			Multiprocessors: int(info.sms),
			MemoryBytes:     uint64(info.total_mem),
		}
	}
	return devs, nil
}

// formatUUID writes a device UUID as NVML does.
func formatUUID(b []byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Backend computes on one GPU. It is safe for concurrent use: every call
// makes its device current on the calling thread and queues on the
// Backend's stream.
type Backend struct {
	dev  *device
	cfg  launch
	prec Precision // of MatMul, MatMulNN and MatMulTN (grad.go)
}

// launch holds launch configurations; zero fields let the library choose.
// Only tests set them, to sweep every configuration against the CPU twin.
type launch struct {
	matmul     int // 1 gemv, 2/3/4 tiles of 32/64/128 (matmul.cu)
	rowBlock   int // threads per row in RMSNorm, Softmax and RoPE
	elemBlock  int // threads per block in SwiGLU and Add
	attnWarps  int // query rows per attention block
	attnSplits int // key ranges per (row, head) in attention
	gemm       int // 2/3/4 fp32 tiles of 32/64/128 in MatMulNN and MatMulTN (gemm.cu)
	attnBwd    int // rows (warps) per block in AttentionBackward (attention_bwd.cu)
}

// device is what Backends of one context and their tensors share.
type device struct {
	ctx   *C.fn_ctx
	info  Device
	freed atomic.Uint64 // bytes handed back by cleanups, for reclaim
}

var _ kernels.Backend = (*Backend)(nil)

// New binds the CUDA device with the given index (see Device.Index).
func New(deviceIndex int) (*Backend, error) {
	devs, err := Devices()
	if err != nil {
		return nil, err
	}
	if deviceIndex < 0 || deviceIndex >= len(devs) {
		return nil, fmt.Errorf("%w: no device %d among the %d visible", ErrNoDevice, deviceIndex, len(devs))
	}
	return open(devs[deviceIndex])
}

// NewByUUID binds the device with the given UUID ("GPU-…", with or without
// the prefix), the identity NVML and the node's capabilities report.
func NewByUUID(uuid string) (*Backend, error) {
	devs, err := Devices()
	if err != nil {
		return nil, err
	}
	want := strings.TrimPrefix(strings.ToLower(uuid), "gpu-")
	for _, d := range devs {
		if strings.TrimPrefix(strings.ToLower(d.UUID), "gpu-") == want {
			return open(d)
		}
	}
	return nil, fmt.Errorf("%w: no device with UUID %s", ErrNoDevice, uuid)
}

func open(d Device) (*Backend, error) {
	var ctx *C.fn_ctx
	if code := C.fn_open(C.int(d.Index), &ctx); code != 0 {
		err := error(newError("open", code))
		if code == 209 { // cudaErrorNoKernelImageForDevice
			err = fmt.Errorf("%w: %s has compute capability %d.%d; the library was built for sm_80, sm_90 and compute_90 PTX (ARCHS in kernels/cuda/Makefile)", err, d.Name, d.Major, d.Minor)
		}
		return nil, err
	}
	return &Backend{dev: &device{ctx: ctx, info: d}}, nil
}

// Name identifies the backend and its GPU.
func (b *Backend) Name() string { return "cuda/" + b.dev.info.Name }

// Device describes the GPU this backend runs on.
func (b *Backend) Device() Device { return b.dev.info }

// Synchronize waits for every queued operation and reports the first CUDA
// failure among them as an error instead of a panic.
func (b *Backend) Synchronize() error {
	if code := C.fn_sync(b.dev.ctx); code != 0 {
		return newError("Synchronize", code)
	}
	return nil
}

// check panics with the CUDA error behind a non-zero code.
func check(op string, code C.int) {
	if code != 0 {
		panic(newError(op, code))
	}
}

// alloc returns n floats of device memory, zero-filled if asked, freed by a
// cleanup once the buffer is unreachable.
func (d *device) alloc(n int, zero bool) *buffer {
	buf := &buffer{}
	if n == 0 {
		return buf
	}
	bytes := C.size_t(4 * n)
	z := C.int(0)
	if zero {
		z = 1
	}
	var p C.uint64_t
	code := C.fn_alloc(d.ctx, bytes, z, &p)
	if code == cudaErrorMemoryAllocation {
		d.reclaim()
		code = C.fn_alloc(d.ctx, bytes, z, &p)
	}
	if code != 0 {
		err := newError("alloc", code)
		err.Msg += fmt.Sprintf(" (%d bytes)", 4*n)
		panic(err)
	}
	buf.ptr = uint64(p)
	ctx, size := d.ctx, uint64(4*n)
	runtime.AddCleanup(buf, func(p uint64) {
		// A failure here has no caller to go to; a broken context shows at
		// the next operation anyway.
		C.fn_free(ctx, C.uint64_t(p))
		d.freed.Add(size)
	}, buf.ptr)
	return buf
}

// reclaim runs the garbage collector so that cleanups free the device
// memory of unreachable tensors, waits until they stop arriving, and waits
// for the stream so the frees have happened.
func (d *device) reclaim() {
	runtime.GC()
	last, quiet := d.freed.Load(), 0
	for i := 0; i < 100 && quiet < 3; i++ {
		time.Sleep(time.Millisecond)
		if now := d.freed.Load(); now != last {
			last, quiet = now, 0
		} else {
			quiet++
		}
	}
	C.fn_sync(d.ctx)
}
