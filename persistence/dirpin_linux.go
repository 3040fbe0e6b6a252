//go:build linux

package persistence

import (
	"os"
	"strconv"
)

// pinnedPath is f's entry in /proc/self/fd: a path whose lookups start at
// the directory f holds, wherever it has moved and whatever now has its old
// name. Creating a file in it fails once the directory is deleted.
func pinnedPath(f *os.File) (string, bool) {
	return "/proc/self/fd/" + strconv.FormatUint(uint64(f.Fd()), 10), true
}
