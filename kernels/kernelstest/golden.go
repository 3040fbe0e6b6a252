package kernelstest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/frognano/frognano/kernels/tensor"
)

// Golden file format, written by kernels/testdata/gen/gen_ops.py (little
// endian):
//
//	file   = magic "FNGT" | version u32 | count u32 | count × tensor
//	tensor = name_len u32 | name | ndim u32 | ndim × dim u32 | float32 data
const (
	goldenMagic   = "FNGT"
	goldenVersion = 1
)

// Golden holds the tensors of one golden file by name ("case/tensor").
type Golden map[string]*tensor.Tensor

// ReadGolden reads a golden file.
func ReadGolden(path string) (Golden, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	g, err := parseGolden(data)
	if err != nil {
		return nil, fmt.Errorf("golden %s: %w", path, err)
	}
	return g, nil
}

func parseGolden(data []byte) (Golden, error) {
	r := bytes.NewReader(data)
	magic := make([]byte, 4)
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != goldenMagic {
		return nil, errors.New("bad magic")
	}
	var hdr struct{ Version, Count uint32 }
	if err := binary.Read(r, binary.LittleEndian, &hdr); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if hdr.Version != goldenVersion {
		return nil, fmt.Errorf("version %d, want %d", hdr.Version, goldenVersion)
	}
	g := make(Golden, hdr.Count)
	for i := range hdr.Count {
		var n uint32
		if err := binary.Read(r, binary.LittleEndian, &n); err != nil || int64(n) > int64(r.Len()) {
			return nil, fmt.Errorf("tensor %d: bad name length", i)
		}
		name := make([]byte, n)
		io.ReadFull(r, name)
		var ndim uint32
		if err := binary.Read(r, binary.LittleEndian, &ndim); err != nil || ndim > 8 {
			return nil, fmt.Errorf("%s: bad rank", name)
		}
		dims := make([]uint32, ndim)
		if err := binary.Read(r, binary.LittleEndian, dims); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		shape, count := make([]int, ndim), int64(1)
		for j, d := range dims {
			shape[j] = int(d)
			count *= int64(d)
		}
		if count*4 > int64(r.Len()) {
			return nil, fmt.Errorf("%s: truncated", name)
		}
		vals := make([]float32, count)
		binary.Read(r, binary.LittleEndian, vals)
		if _, dup := g[string(name)]; dup {
			return nil, fmt.Errorf("duplicate tensor %s", name)
		}
		g[string(name)] = tensor.From(vals, shape...)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%d trailing bytes", r.Len())
	}
	return g, nil
}

// Cases lists the case names (the part before "/"), sorted.
func (g Golden) Cases() []string {
	seen := map[string]bool{}
	var cases []string
	for name := range g {
		c, _, _ := strings.Cut(name, "/")
		if !seen[c] {
			seen[c] = true
			cases = append(cases, c)
		}
	}
	sort.Strings(cases)
	return cases
}

// Ints converts an integer-valued parameter tensor.
func Ints(t *tensor.Tensor) []int32 {
	out := make([]int32, t.Len())
	for i, v := range t.Data() {
		if v != float32(int32(v)) {
			panic(fmt.Sprintf("kernelstest: %v is not an integer", v))
		}
		out[i] = int32(v)
	}
	return out
}

// Tolerance bounds |got - want| by Abs + Rel·|want|.
type Tolerance struct{ Abs, Rel float64 }

// FP32 is the default for float32 kernels checked against float64
// references.
var FP32 = Tolerance{Abs: 1e-5, Rel: 1e-5}

// Mismatch describes the first element of got outside tol of want, or
// returns "" when all agree. Infinities must match exactly; NaN never
// matches.
func Mismatch(got, want []float32, tol Tolerance) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsInf(w, 0) {
			if g != w {
				return fmt.Sprintf("[%d] = %v, want %v", i, g, w)
			}
			continue
		}
		if d := math.Abs(g - w); !(d <= tol.Abs+tol.Rel*math.Abs(w)) {
			return fmt.Sprintf("[%d] = %v, want %v (|diff| %.3g > %.3g)", i, g, w, d, tol.Abs+tol.Rel*math.Abs(w))
		}
	}
	return ""
}
