package capabilities

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestProbeThisMachine checks the probe end to end on the machine the tests
// run on. It expects no NVIDIA driver, as on CI; on a GPU machine it checks
// the GPUs look sane instead.
func TestProbeThisMachine(t *testing.T) {
	caps := Probe(context.Background(), Options{
		// Keep a local containerd out of this test; TestProbeContainerd
		// covers it.
		ContainerdAddress: filepath.Join(t.TempDir(), "none.sock"),
		Timeout:           10 * time.Second,
	})
	if caps.Cores < 1 {
		t.Errorf("cores = %d, want >= 1", caps.Cores)
	}
	if caps.MemoryBytes == 0 {
		t.Error("memory_bytes = 0")
	}
	if caps.Containerd {
		t.Error("containerd = true at a missing socket")
	}
	if len(caps.Gpus) == 0 && caps.GpuError == "" {
		t.Error("no GPUs and no gpu_error saying why")
	}
	if len(caps.Gpus) > 0 {
		t.Logf("this machine has GPUs: %v", caps.Gpus)
	} else if _, err := listGPUs(newNVML()); err == nil {
		t.Error("Probe found no GPUs but NVML lists some")
	}
	t.Logf("capabilities: %v", caps)
}

// TestProbeHonoursTimeout: a GPU discovery that hangs (a wedged driver can
// block in nvmlInit) must not hold the probe past its timeout.
func TestProbeHonoursTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	old := newNVML
	t.Cleanup(func() { newNVML = old })
	newNVML = func() nvml.Interface {
		lib, _, _ := fakeNVML(0, nil)
		init := lib.InitFunc
		lib.InitFunc = func() nvml.Return { <-release; return init() }
		return lib
	}

	const timeout = 300 * time.Millisecond
	start := time.Now()
	caps := Probe(context.Background(), Options{
		ContainerdAddress: filepath.Join(t.TempDir(), "none.sock"),
		Timeout:           timeout,
	})
	if took := time.Since(start); took > timeout+slack {
		t.Errorf("probe took %v with timeout %v", took, timeout)
	}
	if len(caps.Gpus) != 0 || caps.GpuError == "" {
		t.Errorf("gpus = %v, gpu_error = %q; want none and a reason", caps.Gpus, caps.GpuError)
	}
	if caps.Cores < 1 || caps.MemoryBytes == 0 {
		t.Errorf("host part missing after a GPU timeout: %v", caps)
	}
}
