package learner

import (
	"log/slog"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/cpu"
	"github.com/frognano/frognano/kernels/cuda"
	"github.com/frognano/frognano/runtime/capabilities"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// GPUFree is a GPU with its free memory as NVML reports it.
type GPUFree = capabilities.GPUMemory

// freeMemory lists the GPUs with their free memory (the node's NVML probe,
// runtime/capabilities). It is a variable so tests can stand in for a
// machine with GPUs.
var freeMemory = capabilities.GPUMemories

// newCUDA opens the CUDA backend on a GPU; a variable for tests.
var newCUDA = func(uuid string) (kernels.Backend, error) { return cuda.NewByUUID(uuid) }

// SelectBackend picks the backend the Learner trains on. With GPUs in caps
// (runtime/capabilities), a binary built with the cuda tag, and a CUDA
// backend that can train (kernels.GradBackend), it binds to the GPU with
// the most free memory; otherwise, or when opening the GPU fails, it
// returns the CPU backend. The log says which and why.
func SelectBackend(caps *rtmsg.Capabilities, log *slog.Logger) kernels.GradBackend {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fallback := func(reason string, args ...any) kernels.GradBackend {
		b := cpu.New()
		log.Info("learner: training on the CPU", append([]any{"backend", b.Name(), "reason", reason}, args...)...)
		return b
	}
	if len(caps.GetGpus()) == 0 {
		return fallback("no GPU", "gpu_error", caps.GetGpuError())
	}
	if !cuda.Enabled {
		return fallback("built without the cuda build tag")
	}
	gpus, err := freeMemory()
	if err != nil || len(gpus) == 0 {
		return fallback("cannot read GPU memory", "err", err)
	}
	best := pickGPU(gpus)
	b, err := newCUDA(best.UUID)
	if err != nil {
		return fallback("opening the GPU failed", "gpu", best.UUID, "err", err)
	}
	gb, ok := b.(kernels.GradBackend)
	if !ok {
		return fallback("the CUDA backend cannot train", "gpu", best.UUID)
	}
	// On a GPU the products run in bfloat16 on tensor cores, accumulating
	// in float32, with float32 master weights (every other op is float32).
	if p, ok := b.(interface{ SetMatMulPrecision(cuda.Precision) }); ok {
		p.SetMatMulPrecision(cuda.BF16)
	}
	log.Info("learner: training on a GPU", "backend", b.Name(), "gpu", best.UUID, "name", best.Name, "free_bytes", best.FreeBytes, "matmul", "bf16")
	return gb
}

// pickGPU returns the GPU with the most free memory (the first of equals).
func pickGPU(gpus []GPUFree) GPUFree {
	best := gpus[0]
	for _, g := range gpus[1:] {
		if g.FreeBytes > best.FreeBytes {
			best = g
		}
	}
	return best
}
