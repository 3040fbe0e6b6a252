//go:build !linux

package persistence

import "os"

// pinnedPath is unavailable without Linux's /proc/self/fd: Badger gets the
// plain path, and a DB whose directory is replaced while it is open can
// still touch the replacement (see dirPin).
func pinnedPath(*os.File) (string, bool) { return "", false }
