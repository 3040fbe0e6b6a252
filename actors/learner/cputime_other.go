//go:build !unix

package learner

import "time"

// cpuTime is unknown off Unix.
func cpuTime() time.Duration { return 0 }
