package capabilities

import (
	"fmt"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	messages "github.com/frognano/frognano/actors/messages/v1"
)

// newNVML is a variable so tests can swap in a mock NVML.
var newNVML = func() nvml.Interface { return nvml.New() }

// listGPUs lists the GPUs NVML sees. Any failure, most commonly
// libnvidia-ml.so.1 not being installed, yields no GPUs and an error saying
// why; a node without a driver is an ordinary CPU node.
//
// Index is NVML's index, which follows PCI bus order; CUDA's default order
// can differ, so whoever binds a Learner to a GPU should select it by UUID
// (CUDA_VISIBLE_DEVICES accepts UUIDs).
func listGPUs(lib nvml.Interface) (gpus []*messages.GPU, err error) {
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
		gpus = append(gpus, &messages.GPU{
			Index:       int32(i),
			Uuid:        uuid,
			Name:        name,
			MemoryBytes: mem.Total,
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	return gpus, nil
}
