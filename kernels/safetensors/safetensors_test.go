package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func f32le(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	w := &Writer{Metadata: map[string]string{"format": "pt", "note": "quote\" backslash\\ nl\n ✓"}}
	vals := []float32{1, -2.5, 3.0e-3, 65504, 1e-8, float32(math.Inf(1))}
	for _, dt := range []DType{F32, F16, BF16} {
		if err := w.AddFloat32s("w."+string(dt), dt, []int{2, 3}, vals); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Add("ids", I64, []int{2}, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	if err := w.Add("scalar", F32, nil, f32le(7)); err != nil {
		t.Fatal(err)
	}
	if err := w.Add("empty", F16, []int{0, 4}, nil); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "m.safetensors")
	if err := w.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if (8+f.HeaderSize)%8 != 0 {
		t.Errorf("header size %d not padded to 8", f.HeaderSize)
	}
	if !reflect.DeepEqual(f.Metadata, w.Metadata) {
		t.Errorf("metadata %q", f.Metadata)
	}
	want := map[DType][]float32{
		F32:  vals,
		F16:  {1, -2.5, 0.0030002594, 65504, 0, float32(math.Inf(1))},
		BF16: {1, -2.5, 0.0030059814, 65536, 1.0011718e-08, float32(math.Inf(1))},
	}
	for dt, wv := range want {
		got, err := f.Float32s("w." + string(dt))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, wv) {
			t.Errorf("%s: %v, want %v", dt, got, wv)
		}
		ti, _ := f.Tensor("w." + string(dt))
		if ti.DType != dt || !reflect.DeepEqual(ti.Shape, []int{2, 3}) {
			t.Errorf("%s info %+v", dt, ti)
		}
	}
	if s, _ := f.Float32s("scalar"); !reflect.DeepEqual(s, []float32{7}) {
		t.Errorf("scalar %v", s)
	}
	if ti, _ := f.Tensor("scalar"); len(ti.Shape) != 0 {
		t.Errorf("scalar shape %v", ti.Shape)
	}
	if e, err := f.Float32s("empty"); err != nil || len(e) != 0 {
		t.Errorf("empty %v %v", e, err)
	}
	if _, err := f.Float32s("ids"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("I64 as float err = %v", err)
	}
	if b, err := f.TensorBytes("ids"); err != nil || len(b) != 16 {
		t.Errorf("ids bytes %v %v", b, err)
	}
	if _, err := f.TensorBytes("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing err = %v", err)
	}
	// Layout: largest dtype first (I64, then F32 by name, BF16, F16).
	var order []string
	for _, ti := range f.Tensors {
		order = append(order, ti.Name)
	}
	if w := []string{"ids", "scalar", "w.F32", "w.BF16", "empty", "w.F16"}; !reflect.DeepEqual(order, w) {
		t.Errorf("layout %v, want %v", order, w)
	}
}

type expected struct {
	GoldenVersion int               `json:"golden_version"`
	Metadata      map[string]string `json:"metadata"`
	Header        string            `json:"header"`
	Tensors       map[string]struct {
		DType  DType     `json:"dtype"`
		Shape  []int     `json:"shape"`
		Values []float32 `json:"values"`
	} `json:"tensors"`
}

func loadExpected(t *testing.T) expected {
	var e expected
	b, err := os.ReadFile(filepath.Join("testdata", "python_expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	if e.GoldenVersion != 1 {
		t.Fatalf("python_expected.json version %d, want 1: rerun testdata/gen/gen.py", e.GoldenVersion)
	}
	return e
}

// TestReadPythonFile reads a file written by the Python safetensors package
// (testdata/gen/gen.py).
func TestReadPythonFile(t *testing.T) {
	e := loadExpected(t)
	f, err := Open(filepath.Join("testdata", "python.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !reflect.DeepEqual(f.Metadata, e.Metadata) {
		t.Errorf("metadata %v, want %v", f.Metadata, e.Metadata)
	}
	if len(f.Tensors) != len(e.Tensors) {
		t.Errorf("%d tensors, want %d", len(f.Tensors), len(e.Tensors))
	}
	for name, want := range e.Tensors {
		ti, ok := f.Tensor(name)
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if ti.DType != want.DType || !reflect.DeepEqual(ti.Shape, want.Shape) {
			t.Errorf("%s: %s %v, want %s %v", name, ti.DType, ti.Shape, want.DType, want.Shape)
		}
		got, err := f.Float32s(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want.Values) || (len(got) > 0 && !reflect.DeepEqual(got, want.Values)) {
			t.Errorf("%s = %v, want %v", name, got, want.Values)
		}
	}
}

// TestWriterMatchesPython rewrites the Python file's tensors with the Go
// writer and expects the very same bytes.
func TestWriterMatchesPython(t *testing.T) {
	pyBytes, err := os.ReadFile(filepath.Join("testdata", "python.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	py, err := NewReader(bytes.NewReader(pyBytes), int64(len(pyBytes)))
	if err != nil {
		t.Fatal(err)
	}
	w := &Writer{Metadata: py.Metadata}
	for _, ti := range py.Tensors {
		b, _ := py.TensorBytes(ti.Name)
		if err := w.Add(ti.Name, ti.DType, ti.Shape, b); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), pyBytes) {
		t.Errorf("Go writer output differs from the Python package's:\n go: %q\n py: %q", buf.Bytes()[8:8+py.HeaderSize], pyBytes[8:8+py.HeaderSize])
	}
}

func fileWith(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func TestErrors(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	cases := []struct {
		name string
		data []byte
		want error
		msg  string
	}{
		{"short", []byte{1, 2, 3}, ErrTruncated, "header length"},
		{"header past EOF", fileWith(ok, make([]byte, 8))[:20], ErrTruncated, "header of"},
		{"data past EOF", fileWith(ok, make([]byte, 5)), ErrTruncated, `"a"`},
		{"huge header", binary.LittleEndian.AppendUint64(nil, 1<<40), ErrMalformed, "limit"},
		{"not json", fileWith("{nope", nil), ErrMalformed, "JSON"},
		{"not object", fileWith("[1]     ", nil), ErrMalformed, "'{'"},
		{"bad dtype", fileWith(`{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), ErrUnsupported, `"Q4"`},
		{"size mismatch", fileWith(`{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)), ErrMalformed, "span of 4"},
		{"hole", fileWith(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), ErrMalformed, "holes"},
		{"extra data", fileWith(ok, make([]byte, 12)), ErrMalformed, "cover 8"},
		{"unknown field", fileWith(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, make([]byte, 8)), ErrMalformed, `"a"`},
		{"bad metadata", fileWith(`{"__metadata__":{"k":1}}`, nil), ErrMalformed, "__metadata__"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tc.data), int64(len(tc.data)))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %v, want %v mentioning %s", err, tc.want, tc.msg)
			}
		})
	}
	// The unpadded valid header is accepted (padding is the writer's duty).
	d := fileWith(ok, make([]byte, 8))
	if _, err := NewReader(bytes.NewReader(d), int64(len(d))); err != nil {
		t.Errorf("valid file: %v", err)
	}
	w := &Writer{}
	if err := w.Add("x", F32, []int{3}, make([]byte, 8)); err == nil {
		t.Error("Add accepted 8 bytes for 3 F32")
	}
	if err := w.AddFloat32s("x", I32, []int{1}, []float32{1}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("AddFloat32s(I32) err = %v", err)
	}
}
