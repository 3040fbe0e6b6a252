//go:build cuda

package cuda

import (
	"errors"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/frognano/frognano/kernels/kernelstest"
	"github.com/frognano/frognano/kernels/tensor"
)

var (
	backendOnce sync.Once
	backend     *Backend
	backendErr  error
)

// testBackend opens the device under test once, or skips the test when
// there is none. FROGNANO_CUDA_DEVICE picks the device (default 0);
// FROGNANO_REQUIRE_CUDA=1 turns the skip into a failure, so that a run on a
// GPU machine (gpucheck.sh) cannot pass by skipping.
func testBackend(tb testing.TB) *Backend {
	tb.Helper()
	backendOnce.Do(func() {
		idx := 0
		if s := os.Getenv("FROGNANO_CUDA_DEVICE"); s != "" {
			idx, backendErr = strconv.Atoi(s)
		}
		if backendErr == nil {
			backend, backendErr = New(idx)
		}
	})
	if backendErr != nil {
		if os.Getenv("FROGNANO_REQUIRE_CUDA") != "" {
			tb.Fatalf("FROGNANO_REQUIRE_CUDA is set but no CUDA device could be opened: %v", backendErr)
		}
		tb.Skipf("no CUDA device, skipping: %v", backendErr)
	}
	return backend
}

// with is b under forced launch configurations; it shares b's device, so
// tensors pass freely between the two.
func (b *Backend) with(c launch) *Backend {
	nb := *b
	nb.cfg = c
	return &nb
}

func TestConformance(t *testing.T) {
	kernelstest.Run(t, testBackend(t), "../testdata")
}

// TestConformanceConfigs reruns the suite (hand-computed tables, golden
// files, KV cache, panics) with each kernel's launch configuration forced
// away from the library's choice.
func TestConformanceConfigs(t *testing.T) {
	b := testBackend(t)
	for _, c := range []struct {
		name string
		cfg  launch
	}{
		{"gemv", launch{matmul: 1}},
		{"tile32", launch{matmul: 2}},
		{"tile64", launch{matmul: 3}},
		{"tile128", launch{matmul: 4}},
		{"blocks32", launch{rowBlock: 32, elemBlock: 32}},
		{"blocks1024", launch{rowBlock: 1024, elemBlock: 1024}},
		{"attention1x1", launch{attnWarps: 1, attnSplits: 1}},
		{"attention8x3", launch{attnWarps: 8, attnSplits: 3}},
		{"attention3x64", launch{attnWarps: 3, attnSplits: 64}},
	} {
		t.Run(c.name, func(t *testing.T) { kernelstest.Run(t, b.with(c.cfg), "../testdata") })
	}
}

// TestDevices runs everywhere: without a GPU it checks that the failure
// says so and wraps ErrNoDevice; with one, that devices are described and
// can be bound by UUID, and that a wrong index or UUID is refused.
func TestDevices(t *testing.T) {
	devs, err := Devices()
	if err != nil {
		if !errors.Is(err, ErrNoDevice) {
			t.Fatalf("Devices failed without wrapping ErrNoDevice: %v", err)
		}
		if _, err2 := New(0); !errors.Is(err2, ErrNoDevice) {
			t.Fatalf("New(0) = %v, want an error wrapping ErrNoDevice", err2)
		}
		t.Logf("no CUDA device, as reported: %v", err)
		return
	}
	uuid := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	for _, d := range devs {
		t.Logf("device %d: %s %s, sm_%d%d, %d SMs, %.1f GiB", d.Index, d.UUID, d.Name, d.Major, d.Minor,
			d.Multiprocessors, float64(d.MemoryBytes)/(1<<30))
		if !uuid.MatchString(d.UUID) || d.Name == "" || d.Multiprocessors <= 0 || d.MemoryBytes == 0 {
			t.Errorf("device %d described as %+v", d.Index, d)
		}
	}
	b, err := NewByUUID(devs[0].UUID)
	if err != nil {
		t.Fatalf("NewByUUID(%s): %v", devs[0].UUID, err)
	}
	if b.Device() != devs[0] {
		t.Errorf("bound %+v, want %+v", b.Device(), devs[0])
	}
	for _, f := range []func() (*Backend, error){
		func() (*Backend, error) { return New(-1) },
		func() (*Backend, error) { return New(len(devs)) },
		func() (*Backend, error) { return NewByUUID("GPU-00000000-0000-0000-0000-000000000000") },
	} {
		if _, err := f(); !errors.Is(err, ErrNoDevice) {
			t.Errorf("got %v, want an error wrapping ErrNoDevice", err)
		}
	}
}

// TestCUDAErrorsPanicAsErrors forces a launch configuration the kernel
// refuses and checks that the C error code comes back as a *Error panic,
// which a supervisor can recover and inspect, and that the device still
// works afterwards (the error is not a fatal one).
func TestCUDAErrorsPanicAsErrors(t *testing.T) {
	b := testBackend(t)
	x := b.New(2, 64)
	func() {
		defer func() {
			r := recover()
			var e *Error
			if err, ok := r.(error); !ok || !errors.As(err, &e) {
				t.Fatalf("recovered %v (%T), want a *cuda.Error", r, r)
			}
			if e.Op != "RMSNorm" || e.Code != 10001 || e.Fatal() {
				t.Errorf("got %+v, want RMSNorm's non-fatal bad-configuration error", e)
			}
			t.Logf("panicked with: %v", e)
		}()
		b.with(launch{rowBlock: 33}).RMSNorm(x, x, b.New(64), 1e-5)
	}()
	if err := b.Synchronize(); err != nil {
		t.Fatalf("device broken after a refused launch: %v", err)
	}
}

// TestReclaimUnreachable allocates more device memory in all than the GPU
// has, dropping each tensor at once: allocation must recover by collecting
// the unreachable ones rather than fail.
func TestReclaimUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates more than the device's memory")
	}
	b := testBackend(t)
	const chunk = 1 << 30 // bytes
	rounds := int(b.Device().MemoryBytes/chunk) + 8
	for range rounds {
		b.New(chunk / 4)
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
}

// TestConcurrent runs the same work from several goroutines at once, on
// distinct destinations, and demands the single-threaded results.
func TestConcurrent(t *testing.T) {
	b := testBackend(t)
	const m, n, k, workers = 33, 1536, 576, 8
	a := randHost(newRand(11), 1, m, k)
	w := randHost(newRand(12), 1, n, k)
	da, dw := b.FromHost(a), b.FromHost(w)
	want := make([]float32, m*n)
	ref := b.New(m, n)
	b.MatMul(ref, da, dw)
	b.Softmax(ref, ref)
	b.ToHost(want, ref)
	var wg sync.WaitGroup
	errs := make([]string, workers)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				out := b.New(m, n)
				b.MatMul(out, da, dw)
				b.Softmax(out, out)
				got := make([]float32, m*n)
				b.ToHost(got, out)
				if msg := kernelstest.Mismatch(got, want, kernelstest.Tolerance{}); msg != "" {
					errs[i] = msg
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("goroutine %d: %s", i, e)
		}
	}
}

// TestFromHostCopies checks that FromHost, unlike the CPU backend, leaves
// the host tensor to its owner.
func TestFromHostCopies(t *testing.T) {
	b := testBackend(t)
	h := tensor.From([]float32{1, 2, 3}, 3)
	d := b.FromHost(h)
	h.Data()[0] = 9
	got := make([]float32, 3)
	b.ToHost(got, d)
	if got[0] != 1 {
		t.Fatalf("device tensor changed with the host one: %v", got)
	}
}
