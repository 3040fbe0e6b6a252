//go:build !cuda

package cuda

import (
	"errors"
	"testing"

	"github.com/frognano/frognano/kernels"
)

// The twin must compile into every build and refuse politely: callers ask
// for a GPU unconditionally and fall back to the CPU backend on error.
var _ kernels.Backend = (*Backend)(nil)

func TestNotBuilt(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled in a build without the cuda tag")
	}
	if b, err := New(0); b != nil || !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("New(0) = %v, %v; want nil, ErrNotBuilt", b, err)
	}
	if _, err := NewByUUID("GPU-0"); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("NewByUUID: %v, want ErrNotBuilt", err)
	}
	if _, err := Devices(); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("Devices: %v, want ErrNotBuilt", err)
	}
}
