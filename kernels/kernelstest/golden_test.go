package kernelstest

import (
	"bytes"
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// file builds a golden file by hand, the way gen_ops.py writes one.
func file(magic string, version uint32, tensors ...func(*bytes.Buffer)) []byte {
	var b bytes.Buffer
	b.WriteString(magic)
	binary.Write(&b, binary.LittleEndian, []uint32{version, uint32(len(tensors))})
	for _, t := range tensors {
		t(&b)
	}
	return b.Bytes()
}

func tensorRec(name string, dims []uint32, vals ...float32) func(*bytes.Buffer) {
	return func(b *bytes.Buffer) {
		binary.Write(b, binary.LittleEndian, uint32(len(name)))
		b.WriteString(name)
		binary.Write(b, binary.LittleEndian, uint32(len(dims)))
		binary.Write(b, binary.LittleEndian, dims)
		binary.Write(b, binary.LittleEndian, vals)
	}
}

func TestParseGolden(t *testing.T) {
	data := file("FNGT", 1,
		tensorRec("a/x", []uint32{2, 3}, 1, 2, 3, 4, 5, 6),
		tensorRec("b/eps", []uint32{1}, 1e-6),
		tensorRec("a/empty", []uint32{0, 4}))
	g, err := parseGolden(data)
	if err != nil {
		t.Fatal(err)
	}
	x := g["a/x"]
	if x == nil || x.Rows() != 2 || x.Cols() != 3 || x.Data()[5] != 6 {
		t.Fatalf("a/x = %v", x)
	}
	if g["b/eps"].Data()[0] != float32(1e-6) || g["a/empty"].Len() != 0 {
		t.Fatalf("b/eps = %v, a/empty = %v", g["b/eps"], g["a/empty"])
	}
	if got := strings.Join(g.Cases(), ","); got != "a,b" {
		t.Fatalf("cases %q", got)
	}
}

func TestParseGoldenErrors(t *testing.T) {
	good := tensorRec("a/x", []uint32{2}, 1, 2)
	full := file("FNGT", 1, good)
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"magic", file("GGUF", 1, good), "magic"},
		{"version", file("FNGT", 2, good), "version"},
		{"truncated data", full[:len(full)-1], "truncated"},
		{"trailing bytes", append(append([]byte(nil), full...), 0), "trailing"},
		{"duplicate", file("FNGT", 1, good, good), "duplicate"},
		{"empty", nil, "magic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseGolden(tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

// TestCommittedGoldenFiles reads every committed file, so a file the
// generator no longer writes, or a format change, fails here first.
func TestCommittedGoldenFiles(t *testing.T) {
	paths, err := filepath.Glob("../testdata/*.golden")
	if err != nil || len(paths) < 8 {
		t.Fatalf("golden files: %v %v", paths, err)
	}
	for _, p := range paths {
		g, err := ReadGolden(p)
		if err != nil {
			t.Error(err)
			continue
		}
		for name, x := range g {
			if !strings.Contains(name, "/") {
				t.Errorf("%s: tensor %q has no case prefix", p, name)
			}
			for _, v := range x.Data() {
				if math.IsNaN(float64(v)) {
					t.Errorf("%s: %s holds NaN", p, name)
					break
				}
			}
		}
	}
}

func TestMismatch(t *testing.T) {
	inf := float32(math.Inf(-1))
	nan := float32(math.NaN())
	tol := Tolerance{Abs: 1e-3, Rel: 1e-2}
	tests := []struct {
		name      string
		got, want []float32
		ok        bool
	}{
		{"equal", []float32{1, 2}, []float32{1, 2}, true},
		{"within abs", []float32{0.0009}, []float32{0}, true},
		{"within rel", []float32{100.9}, []float32{100}, true},
		{"outside", []float32{101.2}, []float32{100}, false},
		{"infinities", []float32{inf}, []float32{inf}, true},
		{"finite for inf", []float32{-1e30}, []float32{inf}, false},
		{"nan", []float32{nan}, []float32{0}, false},
		{"length", []float32{1}, []float32{1, 2}, false},
	}
	for _, tt := range tests {
		if msg := Mismatch(tt.got, tt.want, tol); (msg == "") != tt.ok {
			t.Errorf("%s: Mismatch = %q", tt.name, msg)
		}
	}
}
