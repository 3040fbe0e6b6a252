//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package gguf

import (
	"errors"
	"os"
)

// Without mmap the File reads tensor data lazily with ReadAt.
func mmapFile(*os.File, int64) ([]byte, error) { return nil, errors.New("mmap unsupported") }

func munmapFile([]byte) error { return nil }
