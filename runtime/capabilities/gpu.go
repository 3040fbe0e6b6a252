package capabilities

import (
	"fmt"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// newNVML is a variable so tests can swap in a mock NVML.
var newNVML = func() nvml.Interface { return nvml.New() }

// GPUMemory is one GPU and its memory as NVML reports it at the moment of
// the probe. Index is NVML's (PCI bus order; see listGPUs).
type GPUMemory struct {
	Index      int
	UUID       string
	Name       string
	TotalBytes uint64
	FreeBytes  uint64
}

// GPUMemories lists the GPUs NVML sees with their total and free memory
// now; the Learner reads free memory through it to choose a GPU. It fails as
// Probe's GPU discovery does: no driver, a broken one or a device that does
// not answer yields no GPUs and an error saying why.
func GPUMemories() ([]GPUMemory, error) { return probeGPUs(newNVML()) }

// listGPUs lists the GPUs NVML sees. Any failure, most commonly
// libnvidia-ml.so.1 not being installed, yields no GPUs and an error saying
// why; a node without a driver is an ordinary CPU node.
//
// Index is NVML's index, which follows PCI bus order; CUDA's default order
// can differ, so whoever binds a Learner to a GPU should select it by UUID
// (CUDA_VISIBLE_DEVICES accepts UUIDs).
func listGPUs(lib nvml.Interface) ([]*rtmsg.GPU, error) {
	mems, err := probeGPUs(lib)
	if err != nil {
		return nil, err
	}
	var gpus []*rtmsg.GPU
	for _, m := range mems {
		gpus = append(gpus, &rtmsg.GPU{Index: int32(m.Index), Uuid: m.UUID, Name: m.Name, MemoryBytes: m.TotalBytes})
	}
	return gpus, nil
}

// probeGPUs is the one NVML probe: init, visit every device, shut down.
func probeGPUs(lib nvml.Interface) (gpus []GPUMemory, err error) {
	// go-nvml calls into C; a broken driver should cost the GPUs, not the
	// node.
	defer func() {
		if r := recover(); r != nil {
			gpus, err = nil, fmt.Errorf("NVML panicked: %v", r)
		}
	}()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		// Init returns ERROR_LIBRARY_NOT_FOUND for any dlopen failure and
		// drops dlerror's text, so name the library for the operator.
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("NVML init: %v (is the NVIDIA driver's libnvidia-ml.so.1 installed?)", ret)
		}
		return nil, fmt.Errorf("NVML init: %v", ret)
	}
	defer lib.Shutdown()

	err = device.New(lib).VisitDevices(func(i int, d device.Device) error {
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d UUID: %v", i, ret)
		}
		name, ret := d.GetName()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d name: %v", i, ret)
		}
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d memory: %v", i, ret)
		}
		gpus = append(gpus, GPUMemory{Index: i, UUID: uuid, Name: name, TotalBytes: mem.Total, FreeBytes: mem.Free})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	return gpus, nil
}
