package node

import (
	"log/slog"
	"runtime/debug"

	"github.com/frognano/frognano/runtime/capabilities"
	"github.com/frognano/frognano/runtime/config"
)

// applyMemoryLimit sets the Go runtime's soft memory limit from
// node.memory_limit (spec), for a process that may use total bytes. Empty
// is the default of capabilities.SetMemoryLimit (which the binaries also
// apply before any node starts): GOMEMLIMIT when the environment (goenv)
// sets it, else a limit that follows the live heap. An explicit size or
// share is a fixed limit and wins over GOMEMLIMIT; "off" lifts the limit.
// The limit is process-wide, as the Go runtime's is: the last node started
// in a process sets it.
func applyMemoryLimit(spec, goenv string, total uint64, log *slog.Logger) error {
	if spec == "" {
		if goenv != "" {
			log.Info("memory limit from GOMEMLIMIT", "limit_bytes", debug.SetMemoryLimit(-1))
			return nil
		}
		base := capabilities.SetMemoryLimit(capabilities.DefaultMemoryFraction)
		log.Info("memory limit follows the live heap", "base_bytes", base,
			"base_share", capabilities.DefaultMemoryFraction, "ceiling_share", capabilities.CeilingFraction)
		return nil
	}
	limit, err := config.ParseMemoryLimit(spec, total)
	if err != nil {
		return err
	}
	capabilities.FixMemoryLimit(limit)
	if limit == 0 {
		log.Info("memory limit off", "from", "node.memory_limit")
		return nil
	}
	if total > 0 && uint64(limit) > total {
		log.Warn("node.memory_limit is above the memory this process may use: the kernel, not the collector, will stop the heap there",
			"limit_bytes", limit, "memory_bytes", total)
	}
	log.Info("memory limit", "limit_bytes", limit, "from", "node.memory_limit")
	return nil
}
