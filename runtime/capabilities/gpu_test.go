package capabilities

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"google.golang.org/protobuf/proto"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

type fakeGPU struct {
	name, uuid string
	mem        uint64
	memErr     nvml.Return
}

// fakeNVML is an NVML with the given devices that counts Init and Shutdown,
// so tests can check the library is shut down whenever it was initialised.
func fakeNVML(initRet nvml.Return, gpus []fakeGPU) (lib *mock.Interface, inits, shutdowns *int) {
	inits, shutdowns = new(int), new(int)
	devs := make([]nvml.Device, len(gpus))
	for i, g := range gpus {
		devs[i] = &mock.Device{
			GetNameFunc: func() (string, nvml.Return) { return g.name, nvml.SUCCESS },
			GetUUIDFunc: func() (string, nvml.Return) { return g.uuid, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				if g.memErr != nvml.SUCCESS {
					return nvml.Memory{}, g.memErr
				}
				return nvml.Memory{Total: g.mem, Free: g.mem / 2}, nvml.SUCCESS
			},
		}
	}
	lib = &mock.Interface{
		InitFunc:           func() nvml.Return { *inits++; return initRet },
		ShutdownFunc:       func() nvml.Return { *shutdowns++; return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			return devs[i], nvml.SUCCESS
		},
	}
	return lib, inits, shutdowns
}

func TestListGPUs(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name      string
		initRet   nvml.Return
		gpus      []fakeGPU
		want      []*rtmsg.GPU
		wantErr   string // substring; "" means no error
		shutdowns int
	}{
		{
			name: "two GPUs",
			gpus: []fakeGPU{
				{name: "NVIDIA H200", uuid: "GPU-aaaa", mem: 141 * gib},
				{name: "NVIDIA H200", uuid: "GPU-bbbb", mem: 141 * gib},
			},
			want: []*rtmsg.GPU{
				{Index: 0, Uuid: "GPU-aaaa", Name: "NVIDIA H200", MemoryBytes: 141 * gib},
				{Index: 1, Uuid: "GPU-bbbb", Name: "NVIDIA H200", MemoryBytes: 141 * gib},
			},
			shutdowns: 1,
		},
		{
			// go-nvlib skips DGX display adapters; the index of the GPU
			// after one must stay NVML's, not be renumbered.
			name: "display adapter skipped, index kept",
			gpus: []fakeGPU{
				{name: "DGX Display", uuid: "GPU-disp", mem: gib},
				{name: "NVIDIA A100-SXM4-80GB", uuid: "GPU-cccc", mem: 80 * gib},
			},
			want: []*rtmsg.GPU{
				{Index: 1, Uuid: "GPU-cccc", Name: "NVIDIA A100-SXM4-80GB", MemoryBytes: 80 * gib},
			},
			shutdowns: 1,
		},
		{name: "no GPUs", shutdowns: 1},
		{
			name:    "no driver library",
			initRet: nvml.ERROR_LIBRARY_NOT_FOUND,
			wantErr: "libnvidia-ml.so.1",
		},
		{
			name:    "driver not loaded",
			initRet: nvml.ERROR_DRIVER_NOT_LOADED,
			wantErr: "NVML init",
		},
		{
			// One broken device loses the whole list rather than
			// reporting a partial one under the same indices.
			name: "device error",
			gpus: []fakeGPU{
				{name: "NVIDIA H200", uuid: "GPU-aaaa", mem: gib},
				{name: "NVIDIA H200", uuid: "GPU-bbbb", memErr: nvml.ERROR_GPU_IS_LOST},
			},
			wantErr:   "GPU 1 memory",
			shutdowns: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib, inits, shutdowns := fakeNVML(tt.initRet, tt.gpus)
			got, err := listGPUs(lib)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("listGPUs() error = %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("listGPUs() error = %v, want one containing %q", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("listGPUs() = %v, want %v", got, tt.want)
			}
			for i := range got {
				if !proto.Equal(got[i], tt.want[i]) {
					t.Errorf("GPU %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
			if *inits != 1 || *shutdowns != tt.shutdowns {
				t.Errorf("Init called %d times, Shutdown %d; want 1 and %d", *inits, *shutdowns, tt.shutdowns)
			}
		})
	}
}

func TestListGPUsRecoversPanic(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { panic("driver exploded") }}
	got, err := listGPUs(lib)
	if got != nil || err == nil || !strings.Contains(err.Error(), "driver exploded") {
		t.Errorf("listGPUs() = %v, %v; want no GPUs and the panic as an error", got, err)
	}
}

// TestListGPUsRealNVML runs against whatever driver this machine has. Without
// one (CI, most dev machines) it must report an error rather than crash.
func TestListGPUsRealNVML(t *testing.T) {
	gpus, err := listGPUs(nvml.New())
	if err != nil {
		if len(gpus) != 0 {
			t.Errorf("got %d GPUs alongside error %v", len(gpus), err)
		}
		t.Logf("no GPUs here: %v", err)
		return
	}
	for _, g := range gpus {
		if g.Uuid == "" || g.Name == "" || g.MemoryBytes == 0 {
			t.Errorf("incomplete GPU %v", g)
		}
	}
	t.Logf("GPUs: %v", gpus)
}
