// Package safetensors reads and writes Hugging Face safetensors files: an
// 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, padded with spaces to a multiple of 8, then the
// tensor bytes. Checkpoints are exported in this format so other tools can
// load them; HF-layout models are read from it.
//
// The reader maps the file and validates it the way the reference
// implementation does: every byte of the data section belongs to exactly one
// tensor, and each tensor's byte range matches its dtype and shape.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/frognano/frognano/kernels/gguf"

	"github.com/frognano/frognano/kernels/mapfile"
)

// Errors returned (wrapped, with details).
var (
	ErrTruncated   = errors.New("safetensors: truncated file")
	ErrMalformed   = errors.New("safetensors: malformed file")
	ErrUnsupported = errors.New("safetensors: unsupported dtype")
	ErrNotFound    = errors.New("safetensors: tensor not found")
)

// MaxHeaderSize is the largest JSON header accepted (the reference
// implementation's limit).
const MaxHeaderSize = 100 << 20

// DType is a safetensors element type name as it appears in the header.
type DType string

// Element types. Float32s and the Writer's float conversion handle F32, F16,
// BF16 (and F64 on read); the others can be read and written as raw bytes.
const (
	BOOL    DType = "BOOL"
	U8      DType = "U8"
	I8      DType = "I8"
	F8_E5M2 DType = "F8_E5M2"
	F8_E4M3 DType = "F8_E4M3"
	I16     DType = "I16"
	U16     DType = "U16"
	F16     DType = "F16"
	BF16    DType = "BF16"
	I32     DType = "I32"
	U32     DType = "U32"
	F32     DType = "F32"
	F64     DType = "F64"
	I64     DType = "I64"
	U64     DType = "U64"
)

// dtypeRank orders dtypes as the reference implementation's Dtype enum does;
// its writer lays tensors out by descending rank, then name.
var dtypeRank = map[DType]int{
	BOOL: 0, U8: 1, I8: 2, F8_E5M2: 3, F8_E4M3: 4, I16: 5, U16: 6, F16: 7, BF16: 8,
	I32: 9, U32: 10, F32: 11, F64: 12, I64: 13, U64: 14,
}

// Size is the byte size of one element, 0 for an unknown dtype.
func (d DType) Size() int {
	switch d {
	case BOOL, U8, I8, F8_E5M2, F8_E4M3:
		return 1
	case I16, U16, F16, BF16:
		return 2
	case I32, U32, F32:
		return 4
	case F64, I64, U64:
		return 8
	}
	return 0
}

// TensorInfo describes one tensor; Begin and End are byte offsets into the
// data section (after the header).
type TensorInfo struct {
	Name       string
	DType      DType
	Shape      []int
	Begin, End int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// File is an opened safetensors file. Tensors are sorted by offset.
type File struct {
	Metadata   map[string]string
	Tensors    []TensorInfo
	HeaderSize int64 // JSON header bytes, padding included
	Size       int64

	r      io.ReaderAt
	mapped []byte
	closer func() error
	byName map[string]int
}

// Open maps (or, where mmap is unavailable, lazily reads) a safetensors file.
func Open(path string) (*File, error) {
	mf, err := mapfile.Open(path)
	if err != nil {
		return nil, err
	}
	f, err := NewReader(mf, mf.Size)
	if err != nil {
		mf.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.mapped, f.closer = mf.Bytes, mf.Close
	return f, nil
}

// Close releases the mapping and file handle. Slices returned by TensorBytes
// must not be used afterwards.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	c := f.closer
	f.closer = nil
	return c()
}

type headerEntry struct {
	DType       DType    `json:"dtype"`
	Shape       []int    `json:"shape"`
	DataOffsets [2]int64 `json:"data_offsets"`
}

// NewReader parses a safetensors file of size bytes from r; tensor data is
// read from r on demand.
func NewReader(r io.ReaderAt, size int64) (*File, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, fmt.Errorf("%w: %d bytes, the header length alone needs 8", ErrTruncated, size)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d-byte limit (not a safetensors file?)", ErrMalformed, n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, fmt.Errorf("%w: header of %d bytes runs past the end of the file (%d bytes)", ErrTruncated, n, size)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("safetensors: reading header: %w", err)
	}
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, fmt.Errorf("%w: header does not start with '{'", ErrMalformed)
	}
	if !utf8.Valid(hdr) {
		return nil, fmt.Errorf("%w: header is not valid UTF-8", ErrMalformed)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("%w: header JSON: %v", ErrMalformed, err)
	}
	f := &File{HeaderSize: int64(n), Size: size, r: r, byName: make(map[string]int, len(raw))}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return nil, fmt.Errorf("%w: __metadata__ must map strings to strings: %v", ErrMalformed, err)
			}
			continue
		}
		var e headerEntry
		dec := json.NewDecoder(strings.NewReader(string(msg)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrMalformed, name, err)
		}
		t := TensorInfo{Name: name, DType: e.DType, Shape: e.Shape, Begin: e.DataOffsets[0], End: e.DataOffsets[1]}
		if t.DType.Size() == 0 {
			return nil, fmt.Errorf("%w: tensor %q has dtype %q", ErrUnsupported, name, t.DType)
		}
		if t.Shape == nil {
			return nil, fmt.Errorf("%w: tensor %q has no shape", ErrMalformed, name)
		}
		elems := int64(1)
		for _, d := range t.Shape {
			if d < 0 || (d > 0 && elems > math.MaxInt64/int64(d)/8) {
				return nil, fmt.Errorf("%w: tensor %q has shape %v", ErrMalformed, name, t.Shape)
			}
			elems *= int64(d)
		}
		if t.Begin < 0 || t.End < t.Begin || t.End-t.Begin != elems*int64(t.DType.Size()) {
			return nil, fmt.Errorf("%w: tensor %q (%s %v) has data_offsets [%d, %d], want a span of %d bytes",
				ErrMalformed, name, t.DType, t.Shape, t.Begin, t.End, elems*int64(t.DType.Size()))
		}
		f.Tensors = append(f.Tensors, t)
	}
	sort.Slice(f.Tensors, func(i, j int) bool {
		a, b := f.Tensors[i], f.Tensors[j]
		return a.Begin < b.Begin || (a.Begin == b.Begin && a.End < b.End)
	})
	var end int64
	for i, t := range f.Tensors {
		if t.Begin != end {
			return nil, fmt.Errorf("%w: tensor %q starts at byte %d of the data, want %d (holes and overlaps are not allowed)", ErrMalformed, t.Name, t.Begin, end)
		}
		end = t.End
		f.byName[t.Name] = i
	}
	if data := size - 8 - int64(n); end != data {
		if end > data {
			last := f.Tensors[len(f.Tensors)-1]
			return nil, fmt.Errorf("%w: tensor %q ends at data byte %d, but the file holds only %d data bytes", ErrTruncated, last.Name, end, data)
		}
		return nil, fmt.Errorf("%w: tensors cover %d data bytes, but the file holds %d", ErrMalformed, end, data)
	}
	return f, nil
}

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// TensorBytes returns the raw little-endian bytes of the named tensor. For a
// mapped file the slice aliases the read-only mapping.
func (f *File) TensorBytes(name string) ([]byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	start := 8 + f.HeaderSize + t.Begin
	if f.mapped != nil {
		return f.mapped[start : start+t.End-t.Begin : start+t.End-t.Begin], nil
	}
	b := make([]byte, t.End-t.Begin)
	if _, err := f.r.ReadAt(b, start); err != nil && !(errors.Is(err, io.EOF) && len(b) == 0) {
		return nil, fmt.Errorf("safetensors: reading %q: %w", name, err)
	}
	return b, nil
}

// Float32s returns the named tensor converted to float32 (from F32, F16,
// BF16 or F64), row-major in Shape order.
func (f *File) Float32s(name string) ([]float32, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	b, err := f.TensorBytes(name)
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.NumElements())
	le := binary.LittleEndian
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = gguf.F16ToF32(le.Uint16(b[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = gguf.BF16ToF32(le.Uint16(b[2*i:]))
		}
	case F64:
		for i := range out {
			out[i] = float32(math.Float64frombits(le.Uint64(b[8*i:])))
		}
	default:
		return nil, fmt.Errorf("%w: tensor %q is %s; float conversion supports F32, F16, BF16, F64", ErrUnsupported, name, t.DType)
	}
	return out, nil
}
