//go:build !unix

package model

import "time"

// processCPU is unknown here; benchmarks then report no CPU-time rate.
func processCPU() time.Duration { return 0 }
