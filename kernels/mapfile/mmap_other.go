//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package mapfile

import (
	"errors"
	"os"
)

// Without mmap a File is read lazily with ReadAt.
func mmapFile(*os.File, int64) ([]byte, error) { return nil, errors.New("mmap unsupported") }

func munmapFile([]byte) error { return nil }
