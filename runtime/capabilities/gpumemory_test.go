package capabilities

import (
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPUMemories is Probe's NVML probe with free memory kept: same devices,
// same order, same errors, and the library shut down after use.
func TestGPUMemories(t *testing.T) {
	const gib = 1 << 30
	old := newNVML
	t.Cleanup(func() { newNVML = old })

	lib, inits, shutdowns := fakeNVML(nvml.SUCCESS, []fakeGPU{
		{name: "NVIDIA H100", uuid: "GPU-a", mem: 80 * gib},
		{name: "NVIDIA L4", uuid: "GPU-b", mem: 24 * gib},
	})
	newNVML = func() nvml.Interface { return lib }
	got, err := GPUMemories()
	if err != nil {
		t.Fatal(err)
	}
	want := []GPUMemory{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA H100", TotalBytes: 80 * gib, FreeBytes: 40 * gib},
		{Index: 1, UUID: "GPU-b", Name: "NVIDIA L4", TotalBytes: 24 * gib, FreeBytes: 12 * gib},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("GPUMemories() = %v, want %v", got, want)
	}
	if *inits != 1 || *shutdowns != 1 {
		t.Errorf("Init called %d times, Shutdown %d; want 1 and 1", *inits, *shutdowns)
	}

	lib, _, _ = fakeNVML(nvml.ERROR_LIBRARY_NOT_FOUND, nil)
	if got, err := GPUMemories(); got != nil || err == nil || !strings.Contains(err.Error(), "libnvidia-ml.so.1") {
		t.Errorf("without a driver GPUMemories() = %v, %v; want no GPUs and an error naming the library", got, err)
	}
	lib, _, _ = fakeNVML(nvml.SUCCESS, []fakeGPU{{name: "x", uuid: "GPU-x", memErr: nvml.ERROR_GPU_IS_LOST}})
	if got, err := GPUMemories(); got != nil || err == nil || !strings.Contains(err.Error(), "GPU 0 memory") {
		t.Errorf("with a lost GPU GPUMemories() = %v, %v; want no GPUs and the device's error", got, err)
	}
}
