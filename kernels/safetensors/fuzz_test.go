package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzNewReader: corrupted files give errors, never panics.
func FuzzNewReader(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "python.safetensors")); err == nil {
		f.Add(b)
	}
	f.Add(fileWith(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Fuzz(func(t *testing.T, data []byte) {
		sf, err := NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, ti := range sf.Tensors {
			if _, err := sf.TensorBytes(ti.Name); err != nil {
				t.Fatalf("%s: %v", ti.Name, err)
			}
			switch ti.DType {
			case F32, F16, BF16, F64:
				if _, err := sf.Float32s(ti.Name); err != nil {
					t.Fatalf("%s: %v", ti.Name, err)
				}
			}
		}
	})
}
