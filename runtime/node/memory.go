package node

import (
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/frognano/frognano/runtime/config"
)

// applyMemoryLimit sets the Go runtime's soft memory limit from
// node.memory_limit (spec), for a process that may use total bytes. An
// empty spec leaves a limit the GOMEMLIMIT environment variable (goenv)
// set, as the runtime read it at start, and otherwise applies
// config.DefaultMemoryShare. Without a limit the collector lets the heap
// grow to twice what was live after the last collection (GOGC=100): for a
// policy of a few GB with its caches and a Learner's activations, that
// headroom alone held gigabytes no one used (a Qwen2.5-Coder-0.5B run
// reached 14.9 GB resident for about 7 GB live), enough to run a machine
// that holds two such processes out of memory. The limit is process-wide,
// as the Go runtime's is: the last node started in a process sets it.
func applyMemoryLimit(spec, goenv string, total uint64, log *slog.Logger) error {
	if spec == "" && goenv != "" {
		log.Info("memory limit", "limit_bytes", debug.SetMemoryLimit(-1), "from", "GOMEMLIMIT")
		return nil
	}
	if spec == "" && total == 0 {
		log.Warn("no memory limit: this process's memory is unknown (set node.memory_limit to a size)")
		return nil
	}
	limit, err := config.ParseMemoryLimit(spec, total)
	if err != nil {
		return err
	}
	if limit == 0 {
		debug.SetMemoryLimit(int64(^uint64(0) >> 1)) // the runtime's "no limit"
		log.Info("memory limit off", "from", "node.memory_limit")
		return nil
	}
	if total > 0 && uint64(limit) > total {
		log.Warn("node.memory_limit is above the memory this process may use: the kernel, not the collector, will stop the heap there",
			"limit_bytes", limit, "memory_bytes", total)
	}
	debug.SetMemoryLimit(limit)
	from := "node.memory_limit"
	if spec == "" {
		from = fmt.Sprintf("default (%s of %d bytes)", config.DefaultMemoryShare, total)
	}
	log.Info("memory limit", "limit_bytes", limit, "from", from)
	return nil
}
