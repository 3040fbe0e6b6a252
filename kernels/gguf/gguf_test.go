package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// allValueKinds has one metadata entry of every GGUF value type, including
// arrays of every element type, empty arrays and arrays of arrays.
func allValueKinds() []KV {
	kvs := []KV{}
	add := func(k string, v any) {
		val, err := ValueOf(v)
		if err != nil {
			panic(err)
		}
		kvs = append(kvs, KV{Key: k, Value: val})
	}
	add("u8", uint8(255))
	add("i8", int8(-128))
	add("u16", uint16(65535))
	add("i16", int16(-32768))
	add("u32", uint32(math.MaxUint32))
	add("i32", int32(math.MinInt32))
	add("u64", uint64(math.MaxUint64))
	add("i64", int64(math.MinInt64))
	add("f32", float32(-1.5e-30))
	add("f64", math.Pi)
	add("bool.t", true)
	add("bool.f", false)
	add("str", "tab\there, nul\x00, ✓ 世界 🐸")
	add("str.empty", "")
	add("a.u8", []uint8{0, 1, 255})
	add("a.i8", []int8{-1, 0, 127})
	add("a.u16", []uint16{1, 65535})
	add("a.i16", []int16{-2, 2})
	add("a.u32", []uint32{7})
	add("a.i32", []int32{-7, 8, 9})
	add("a.u64", []uint64{math.MaxUint64, 0})
	add("a.i64", []int64{math.MinInt64})
	add("a.f32", []float32{1, float32(math.Inf(-1))})
	add("a.f64", []float64{-0.25, 1e300})
	add("a.bool", []bool{true, false, true})
	add("a.str", []string{"a", "", "ü"})
	add("a.empty", []int32{})
	add("a.arr", []Value{
		{Type: TypeArray, Elem: TypeInt32, V: []int32{1, 2}},
		{Type: TypeArray, Elem: TypeString, V: []string{"x"}},
		{Type: TypeArray, Elem: TypeArray, V: []Value{{Type: TypeArray, Elem: TypeUint8, V: []uint8{9}}}},
	})
	return kvs
}

func writeFile(t testing.TB, w *Writer) string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func f32Bytes(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestRoundTripAllMetadataTypes(t *testing.T) {
	for _, tc := range []struct {
		version, align uint32
	}{{2, 0}, {3, 0}, {3, 64}, {2, 1}} {
		w := &Writer{Version: tc.version, Alignment: tc.align}
		want := allValueKinds()
		for _, kv := range want {
			if err := w.Set(kv.Key, kv.Value); err != nil {
				t.Fatal(err)
			}
		}
		a := f32Bytes(1, 2, 3)
		q := make([]byte, 2*18) // two Q4_0 blocks
		for i := range q {
			q[i] = byte(i * 7)
		}
		if err := w.AddTensor("a", F32, []uint64{3}, a); err != nil {
			t.Fatal(err)
		}
		if err := w.AddTensor("b.weight", Q4_0, []uint64{32, 2}, q); err != nil {
			t.Fatal(err)
		}
		f, err := Open(writeFile(t, w))
		if err != nil {
			t.Fatal(err)
		}
		if f.Version != tc.version {
			t.Errorf("version %d, want %d", f.Version, tc.version)
		}
		wantAlign := uint64(tc.align)
		if wantAlign == 0 {
			wantAlign = DefaultAlignment
		}
		// A non-default alignment travels as general.alignment.
		if f.Alignment != wantAlign {
			t.Errorf("alignment %d, want %d", f.Alignment, wantAlign)
		}
		got := f.Meta.KVs
		if wantAlign != DefaultAlignment {
			if last := got[len(got)-1]; last.Key != "general.alignment" || last.Value.V != tc.align {
				t.Errorf("last kv %#v, want general.alignment", last)
			}
			got = got[:len(got)-1]
		}
		if len(got) != len(want) {
			t.Fatalf("%d kvs, want %d", len(got), len(want))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Errorf("kv %d: got %#v, want %#v", i, got[i], want[i])
			}
		}
		for _, name := range []string{"a", "b.weight"} {
			ti, _ := f.Tensor(name)
			if (f.DataOffset+ti.Offset)%wantAlign != 0 {
				t.Errorf("%s not aligned: %d", name, f.DataOffset+ti.Offset)
			}
		}
		gotQ, err := f.TensorBytes("b.weight")
		if err != nil || !bytes.Equal(gotQ, q) {
			t.Errorf("b.weight bytes = %v, %v", gotQ, err)
		}
		fa, err := f.Float32s("a")
		if err != nil || !reflect.DeepEqual(fa, []float32{1, 2, 3}) {
			t.Errorf("a = %v, %v", fa, err)
		}
		f.Close()
	}
}

func TestAlignmentFromMetadata(t *testing.T) {
	w := &Writer{}
	w.Set("general.alignment", uint32(128))
	w.AddTensor("x", F32, []uint64{1}, f32Bytes(1))
	w.AddTensor("y", F32, []uint64{2}, f32Bytes(2, 3))
	f, err := Open(writeFile(t, w))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Alignment != 128 || f.DataOffset%128 != 0 {
		t.Fatalf("alignment %d data offset %d", f.Alignment, f.DataOffset)
	}
	y, _ := f.Tensor("y")
	if y.Offset != 128 {
		t.Errorf("y offset %d, want 128", y.Offset)
	}
	got, err := f.Float32s("y")
	if err != nil || !reflect.DeepEqual(got, []float32{2, 3}) {
		t.Errorf("y = %v %v", got, err)
	}
}

func TestMetadataAccessors(t *testing.T) {
	w := &Writer{}
	for _, kv := range allValueKinds() {
		w.Set(kv.Key, kv.Value)
	}
	f, err := Open(writeFile(t, w))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := &f.Meta
	if v, err := m.Uint("u16"); err != nil || v != 65535 {
		t.Errorf("Uint(u16) = %v %v", v, err)
	}
	if v, err := m.Int("i8"); err != nil || v != -128 {
		t.Errorf("Int(i8) = %v %v", v, err)
	}
	if _, err := m.Uint("i8"); !errors.Is(err, ErrWrongType) {
		t.Errorf("Uint(i8) err = %v, want ErrWrongType", err)
	}
	if _, err := m.Int("u64"); !errors.Is(err, ErrWrongType) {
		t.Errorf("Int(MaxUint64) err = %v, want ErrWrongType", err)
	}
	if v, err := m.Float("f32"); err != nil || float32(v) != -1.5e-30 {
		t.Errorf("Float(f32) = %v %v", v, err)
	}
	if v, err := m.Strings("a.str"); err != nil || !reflect.DeepEqual(v, []string{"a", "", "ü"}) {
		t.Errorf("Strings = %v %v", v, err)
	}
	if v, err := m.Ints("a.i8"); err != nil || !reflect.DeepEqual(v, []int64{-1, 0, 127}) {
		t.Errorf("Ints = %v %v", v, err)
	}
	if v, err := m.Bool("bool.t"); err != nil || !v {
		t.Errorf("Bool = %v %v", v, err)
	}
	_, err = m.String("nope")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("missing key err = %v", err)
	}
	_, err = m.String("u8")
	if !errors.Is(err, ErrWrongType) || !strings.Contains(err.Error(), "uint8") {
		t.Errorf("wrong type err = %v", err)
	}
}

// smallFile returns a valid file with metadata and two tensors, and the
// offset where its tensor data starts.
func smallFile(t testing.TB) ([]byte, uint64) {
	w := &Writer{}
	w.Set("general.architecture", "llama")
	w.Set("tokenizer.ggml.tokens", []string{"a", "b", "c"})
	w.AddTensor("tok", F32, []uint64{4, 2}, f32Bytes(1, 2, 3, 4, 5, 6, 7, 8))
	w.AddTensor("out", F16, []uint64{2}, []byte{0, 0x3c, 0, 0xc0})
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), f.DataOffset
}

func TestTruncatedHeaderEveryPrefix(t *testing.T) {
	b, dataStart := smallFile(t)
	// Every cut inside the header must be reported as truncation, never a
	// panic or a huge allocation, whatever field it splits.
	for n := 0; n < int(dataStart); n++ {
		_, err := NewReader(bytes.NewReader(b[:n]), int64(n))
		if !errors.Is(err, ErrTruncated) {
			// A cut in the padding after the tensor infos still leaves the
			// header whole; it shows up as tensor data past EOF instead.
			t.Fatalf("prefix %d: err = %v, want ErrTruncated", n, err)
		}
	}
}

func TestErrors(t *testing.T) {
	good, dataStart := smallFile(t)
	patch := func(off int, v ...byte) []byte {
		b := append([]byte(nil), good...)
		copy(b[off:], v)
		return b
	}
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	cases := []struct {
		name string
		data []byte
		want error
		msg  []string
	}{
		{"bad magic", patch(0, 'G', 'G', 'M', 'L'), ErrBadMagic, []string{`"GGML"`}},
		{"safetensors given", []byte("\x08\x00\x00\x00\x00\x00\x00\x00{}      "), ErrBadMagic, []string{"want \"GGUF\""}},
		{"version 1", patch(4, le32(1)...), ErrUnsupportedVersion, []string{"version 1"}},
		{"version 4", patch(4, le32(4)...), ErrUnsupportedVersion, []string{"version 4"}},
		{"big endian", patch(4, 0, 0, 0, 3), ErrUnsupportedVersion, []string{"big-endian"}},
		{"empty", nil, ErrTruncated, []string{"magic"}},
		{"data past EOF", good[:len(good)-30], ErrTruncated, []string{`"out"`, "past the end"}},
		{"data cut at start", good[:dataStart+1], ErrTruncated, []string{`"tok"`}},
		{"huge kv count", patch(16, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0), ErrTruncated, []string{"metadata entries"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tc.data), int64(len(tc.data)))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			for _, s := range tc.msg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %s", err, s)
				}
			}
		})
	}
}

func TestTensorTypeErrors(t *testing.T) {
	// A known but non-dequantisable type opens fine, can be read raw, and
	// names itself when dequantised.
	w := &Writer{}
	w.AddTensor("iq", IQ2_XXS, []uint64{256}, make([]byte, IQ2_XXS.TypeSize()))
	p := writeFile(t, w)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := f.TensorBytes("iq"); err != nil || len(b) != 66 {
		t.Errorf("raw bytes: %d %v", len(b), err)
	}
	_, err = f.Float32s("iq")
	if !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), "IQ2_XXS") || !strings.Contains(err.Error(), `"iq"`) {
		t.Errorf("dequant err = %v", err)
	}
	f.Close()

	// An unknown type number cannot even be sized: Open fails naming it.
	b, _ := os.ReadFile(p)
	f2, _ := NewReader(bytes.NewReader(b), int64(len(b)))
	_ = f2
	idx := bytes.Index(b, []byte("iq")) + 2 + 4 + 8 // name, n_dims, dim0
	binary.LittleEndian.PutUint32(b[idx:], 99)
	_, err = NewReader(bytes.NewReader(b), int64(len(b)))
	if !errors.Is(err, ErrUnsupportedType) || !strings.Contains(err.Error(), "TensorType(99)") {
		t.Errorf("unknown type err = %v", err)
	}

	if _, err := f.Float32s("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing tensor err = %v", err)
	}
}

func TestMalformed(t *testing.T) {
	w := &Writer{}
	w.Set("general.alignment", uint32(48))
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err == nil {
		t.Fatal("writer accepted alignment 48")
	}
	// Hand-patch a valid file's general.alignment to 48.
	w = &Writer{}
	w.Set("general.alignment", uint32(64))
	buf.Reset()
	w.WriteTo(&buf)
	b := buf.Bytes()
	binary.LittleEndian.PutUint32(b[bytes.Index(b, []byte("general.alignment"))+17+4:], 48)
	_, err := NewReader(bytes.NewReader(b), int64(len(b)))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "general.alignment") {
		t.Errorf("alignment 48 err = %v", err)
	}
	w = &Writer{}
	if err := w.AddTensor("q", Q4_0, []uint64{16}, make([]byte, 9)); err == nil {
		t.Error("writer accepted a Q4_0 row of 16")
	}
	if err := w.AddTensor("f", F32, []uint64{2}, make([]byte, 4)); err == nil {
		t.Error("writer accepted short data")
	}
}

func TestOpenAndNewReaderAgree(t *testing.T) {
	b, _ := smallFile(t)
	p := filepath.Join(t.TempDir(), "x.gguf")
	os.WriteFile(p, b, 0o644)
	mf, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	fh, _ := os.Open(p)
	defer fh.Close()
	rf, err := NewReader(fh, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tok", "out"} {
		a, err1 := mf.Float32s(name)
		c, err2 := rf.Float32s(name)
		if err1 != nil || err2 != nil || !reflect.DeepEqual(a, c) {
			t.Errorf("%s: mmap %v %v, reader %v %v", name, a, err1, c, err2)
		}
	}
	row, err := rf.Rows("tok", 1, 1)
	if err != nil || !reflect.DeepEqual(row, []float32{5, 6, 7, 8}) {
		t.Errorf("Rows = %v %v", row, err)
	}
	if _, err := rf.Rows("tok", 1, 2); err == nil {
		t.Error("Rows past the end succeeded")
	}
	out, _ := mf.Float32s("out")
	if !reflect.DeepEqual(out, []float32{1, -2}) {
		t.Errorf("F16 out = %v", out)
	}
}

func TestModelParams(t *testing.T) {
	w := &Writer{}
	w.Set("general.architecture", "qwen3")
	w.Set("qwen3.embedding_length", uint32(1024))
	w.Set("qwen3.block_count", uint32(28))
	w.Set("qwen3.attention.head_count", uint32(16))
	w.Set("qwen3.attention.head_count_kv", uint32(8))
	w.Set("qwen3.feed_forward_length", uint32(3072))
	w.Set("qwen3.context_length", uint32(40960))
	w.Set("qwen3.attention.key_length", uint32(128))
	w.Set("qwen3.rope.freq_base", float32(1e6))
	w.Set("qwen3.attention.layer_norm_rms_epsilon", float32(1e-6))
	w.Set("tokenizer.ggml.tokens", []string{"a", "b"})
	f, err := Open(writeFile(t, w))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := f.ModelParams()
	if err != nil {
		t.Fatal(err)
	}
	want := ModelParams{Architecture: "qwen3", EmbeddingLength: 1024, BlockCount: 28, HeadCount: 16, HeadCountKV: 8,
		FeedForwardLength: 3072, ContextLength: 40960, KeyLength: 128, ValueLength: 128, RopeDimension: 128,
		RopeFreqBase: 1e6, RMSNormEpsilon: 1e-6, VocabSize: 2}
	if got != want {
		t.Errorf("got %+v\nwant %+v", got, want)
	}

	w = &Writer{}
	w.Set("general.architecture", "llama")
	w.Set("llama.embedding_length", uint32(64))
	w.Set("llama.block_count", uint32(2))
	w.Set("llama.attention.head_count", uint32(4))
	w.Set("llama.feed_forward_length", uint32(128))
	w.Set("llama.context_length", uint32(256))
	f2, _ := Open(writeFile(t, w))
	defer f2.Close()
	_, err = f2.ModelParams()
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "llama.attention.layer_norm_rms_epsilon") {
		t.Errorf("missing eps err = %v", err)
	}
	w.Set("llama.attention.layer_norm_rms_epsilon", float32(1e-5))
	f3, _ := Open(writeFile(t, w))
	defer f3.Close()
	p, err := f3.ModelParams()
	if err != nil {
		t.Fatal(err)
	}
	if p.HeadCountKV != 4 || p.KeyLength != 16 || p.RopeFreqBase != 10000 || p.RopeDimension != 16 {
		t.Errorf("defaults: %+v", p)
	}
}

func TestF16Exhaustive(t *testing.T) {
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if f != f { // NaN
			if g := F32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x -> %#04x", h, g)
			}
			continue
		}
		if g := F32ToF16(f); g != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, g)
		}
	}
	// BF16 likewise round-trips every non-NaN pattern.
	for h := range 1 << 16 {
		if f := BF16ToF32(uint16(h)); f == f && F32ToBF16(f) != uint16(h) {
			t.Fatalf("bf16 %#04x", h)
		}
	}
}
