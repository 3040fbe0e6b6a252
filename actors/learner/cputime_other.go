//go:build !unix

package learner

import "time"

// CPUTime is unknown off Unix.
func CPUTime() time.Duration { return 0 }
