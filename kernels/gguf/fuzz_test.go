package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzNewReader feeds corrupted files to the parser: it must return an error
// or a File whose every tensor can be read, never panic or over-allocate.
func FuzzNewReader(f *testing.F) {
	b, _ := smallFile(f)
	f.Add(b)
	if g, err := os.ReadFile(filepath.Join("testdata", "quant_golden.gguf")); err == nil {
		f.Add(g[:4096])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		gf, err := NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, ti := range gf.Tensors {
			if _, err := gf.TensorBytes(ti.Name); err != nil {
				t.Fatalf("%s: %v", ti.Name, err)
			}
			if ti.Type.CanDequantize() && ti.NumElements() < 1<<20 {
				if _, err := gf.Float32s(ti.Name); err != nil {
					t.Fatalf("%s: %v", ti.Name, err)
				}
			}
		}
	})
}
