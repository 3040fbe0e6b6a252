//go:build !cuda

// Package cuda is the GPU backend, built only with -tags cuda (see
// cuda.go). This file is its twin for every other build: it uses no cgo and
// registers nothing, and New reports ErrNotBuilt, so code that asks for a
// GPU compiles everywhere and falls back to the CPU backend at run time.
// The exported API mirrors cuda.go's.
package cuda

import (
	"errors"
	"fmt"

	"github.com/frognano/frognano/kernels"
)

// Enabled reports whether this build has the CUDA backend.
const Enabled = false

// MaxHeadDim mirrors the CUDA build's limit on attention head dimensions.
const MaxHeadDim = 256

var (
	// ErrNoDevice is wrapped when no usable CUDA device is present.
	ErrNoDevice = errors.New("cuda: no CUDA device")
	// ErrNotBuilt is returned by New in builds without the cuda tag.
	ErrNotBuilt = errors.New("cuda: frognano was built without the cuda build tag (make cuda; go build -tags cuda)")
	// ErrOutOfMemory matches an *Error from a failed allocation.
	ErrOutOfMemory = errors.New("cuda: out of device memory")
)

// Error is a failure reported by the CUDA runtime; never produced here.
type Error struct {
	Op   string
	Code int
	Name string
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Op, e.Name, e.Code, e.Msg)
}

// Fatal reports an error that leaves the device unusable.
func (e *Error) Fatal() bool { return false }

// Device describes a GPU as CUDA numbers it.
type Device struct {
	Index           int
	UUID            string
	Name            string
	Major, Minor    int
	Multiprocessors int
	MemoryBytes     uint64
}

// Backend stands in for the CUDA backend; New never returns one, and the
// embedded interface only gives it kernels.Backend's method set.
type Backend struct{ kernels.Backend }

// Device describes the GPU; there is none in this build.
func (*Backend) Device() Device { return Device{} }

// Synchronize has nothing to wait for in this build.
func (*Backend) Synchronize() error { return ErrNotBuilt }

// Devices reports ErrNotBuilt.
func Devices() ([]Device, error) { return nil, ErrNotBuilt }

// New reports ErrNotBuilt.
func New(deviceIndex int) (*Backend, error) { return nil, ErrNotBuilt }

// NewByUUID reports ErrNotBuilt.
func NewByUUID(uuid string) (*Backend, error) { return nil, ErrNotBuilt }
