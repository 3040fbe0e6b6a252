package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/frognano/frognano/kernels/mapfile"
)

// TensorInfo describes one tensor. Offset is relative to the start of the
// data section (File.DataOffset).
type TensorInfo struct {
	Name   string
	Dims   []uint64 // ggml order: Dims[0] is the innermost axis
	Type   TensorType
	Offset uint64
}

// NumElements is the product of the dimensions.
func (t TensorInfo) NumElements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Size is the byte size of the tensor's data.
func (t TensorInfo) Size() uint64 {
	tr := tensorTypes[t.Type]
	if tr.blockSize == 0 {
		return 0
	}
	return t.NumElements() / uint64(tr.blockSize) * uint64(tr.typeSize)
}

// RowLen is the number of elements in a row (Dims[0]); 1 for a scalar.
func (t TensorInfo) RowLen() int {
	if len(t.Dims) == 0 {
		return 1
	}
	return int(t.Dims[0])
}

// NumRows is the number of rows (the product of Dims[1:]).
func (t TensorInfo) NumRows() int {
	n := 1
	for _, d := range t.Dims[min(1, len(t.Dims)):] {
		n *= int(d)
	}
	return n
}

// Shape returns the dimensions outermost first, the PyTorch/NumPy order.
func (t TensorInfo) Shape() []int {
	s := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		s[len(t.Dims)-1-i] = int(d)
	}
	return s
}

// File is an opened GGUF file. Its header is parsed eagerly; tensor data is
// read (or mapped) only when asked for. A File is safe for concurrent reads.
type File struct {
	Version    uint32
	Meta       Metadata
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset uint64 // absolute offset of the tensor data section
	Size       int64  // file size in bytes

	r      io.ReaderAt
	mapped []byte // whole file when memory-mapped
	closer func() error
	byName map[string]int
}

// Open memory-maps (or, where mmap is unavailable, lazily reads) a GGUF file.
func Open(path string) (*File, error) {
	mf, err := mapfile.Open(path)
	if err != nil {
		return nil, err
	}
	f, err := parse(mf, mf.Size)
	if err != nil {
		mf.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.mapped, f.closer = mf.Bytes, mf.Close
	return f, nil
}

// NewReader parses a GGUF file from r, which holds size bytes. Tensor data is
// read from r on demand, so r must stay usable while the File is.
func NewReader(r io.ReaderAt, size int64) (*File, error) {
	return parse(r, size)
}

// Close releases the mapping and the file handle (if the File owns them).
// Slices returned by TensorBytes must not be used afterwards.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	c := f.closer
	f.closer = nil
	return c()
}

// decoder reads the header sequentially and turns short reads into
// ErrTruncated errors that say what was being read and where.
type decoder struct {
	br   *bufio.Reader
	off  int64
	size int64
	buf  [8]byte
}

func (d *decoder) truncated(what string, need uint64) error {
	return fmt.Errorf("%w: %s needs %d bytes at offset %d, but the file has %d bytes", ErrTruncated, what, need, d.off, d.size)
}

func (d *decoder) remaining() uint64 {
	if d.off >= d.size {
		return 0
	}
	return uint64(d.size - d.off)
}

func (d *decoder) bytes(p []byte, what string) error {
	if uint64(len(p)) > d.remaining() {
		return d.truncated(what, uint64(len(p)))
	}
	n, err := io.ReadFull(d.br, p)
	if err != nil {
		d.off += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return d.truncated(what, uint64(len(p)-n))
		}
		return err
	}
	d.off += int64(n)
	return nil
}

func (d *decoder) u32(what string) (uint32, error) {
	if err := d.bytes(d.buf[:4], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(d.buf[:4]), nil
}

func (d *decoder) u64(what string) (uint64, error) {
	if err := d.bytes(d.buf[:8], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(d.buf[:8]), nil
}

func (d *decoder) str(what string) (string, error) {
	n, err := d.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > d.remaining() {
		return "", d.truncated(what, n)
	}
	b := make([]byte, n)
	if err := d.bytes(b, what); err != nil {
		return "", err
	}
	return string(b), nil
}

const maxDims = 4 // GGML_MAX_DIMS

func parse(r io.ReaderAt, size int64) (*File, error) {
	d := &decoder{br: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 1<<16), size: size}
	var magic [4]byte
	if err := d.bytes(magic[:], "magic"); err != nil {
		return nil, err
	}
	if string(magic[:]) != Magic {
		return nil, fmt.Errorf("%w: found %q (% x), want %q", ErrBadMagic, magic[:], magic[:], Magic)
	}
	version, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 2 || version == 3:
	case version == 1:
		return nil, fmt.Errorf("%w: found version 1 (32-bit counts, pre-2023 files), this reader supports versions 2 and 3", ErrUnsupportedVersion)
	case version&0xFFFF == 0 && (version>>24 == 2 || version>>24 == 3):
		return nil, fmt.Errorf("%w: found big-endian GGUF version %d, this reader supports little-endian files only", ErrUnsupportedVersion, version>>24)
	default:
		return nil, fmt.Errorf("%w: found version %d, this reader supports versions 2 and 3", ErrUnsupportedVersion, version)
	}
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// Every KV takes at least 8+4 bytes and every tensor info 8+4+8+4+8,
	// so counts that cannot fit are a truncated (or corrupt) header.
	if nKV > d.remaining()/12 {
		return nil, fmt.Errorf("%w: header declares %d metadata entries, more than the remaining %d bytes can hold", ErrTruncated, nKV, d.remaining())
	}
	if nTensors > d.remaining()/32 {
		return nil, fmt.Errorf("%w: header declares %d tensors, more than the remaining %d bytes can hold", ErrTruncated, nTensors, d.remaining())
	}
	f := &File{Version: version, Size: size, r: r, Alignment: DefaultAlignment}
	for i := range nKV {
		key, err := d.str(fmt.Sprintf("metadata key #%d", i))
		if err != nil {
			return nil, err
		}
		if _, dup := f.Meta.Lookup(key); dup {
			return nil, fmt.Errorf("%w: duplicate metadata key %q", ErrMalformed, key)
		}
		t, err := d.u32(fmt.Sprintf("type of metadata %q", key))
		if err != nil {
			return nil, err
		}
		v, err := d.value(ValueType(t), key, 0)
		if err != nil {
			return nil, err
		}
		f.Meta.add(key, v)
	}
	if v, ok := f.Meta.Lookup("general.alignment"); ok {
		a, ok := v.Uint()
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%w: general.alignment is %v (%s), want a power of two", ErrMalformed, v.V, v.typeName())
		}
		f.Alignment = a
	}
	f.Tensors = make([]TensorInfo, 0, nTensors)
	f.byName = make(map[string]int, nTensors)
	for i := range nTensors {
		name, err := d.str(fmt.Sprintf("name of tensor #%d", i))
		if err != nil {
			return nil, err
		}
		nd, err := d.u32(fmt.Sprintf("dimension count of tensor %q", name))
		if err != nil {
			return nil, err
		}
		if nd > maxDims {
			return nil, fmt.Errorf("%w: tensor %q has %d dimensions, ggml allows at most %d", ErrMalformed, name, nd, maxDims)
		}
		ti := TensorInfo{Name: name, Dims: make([]uint64, nd)}
		elems := uint64(1)
		for j := range ti.Dims {
			if ti.Dims[j], err = d.u64(fmt.Sprintf("dimension %d of tensor %q", j, name)); err != nil {
				return nil, err
			}
			if ti.Dims[j] != 0 && elems > math.MaxInt64/ti.Dims[j] {
				return nil, fmt.Errorf("%w: tensor %q has dimensions %v whose product overflows", ErrMalformed, name, ti.Dims)
			}
			elems *= ti.Dims[j]
		}
		t, err := d.u32(fmt.Sprintf("type of tensor %q", name))
		if err != nil {
			return nil, err
		}
		ti.Type = TensorType(t)
		if ti.Offset, err = d.u64(fmt.Sprintf("data offset of tensor %q", name)); err != nil {
			return nil, err
		}
		if !ti.Type.Known() {
			return nil, fmt.Errorf("%w: tensor %q has type %s, whose block layout this reader does not know", ErrUnsupportedType, name, ti.Type)
		}
		if elems/uint64(ti.Type.BlockSize()) > math.MaxInt64/uint64(ti.Type.TypeSize()) {
			return nil, fmt.Errorf("%w: tensor %q (%s %v) is larger than any file", ErrMalformed, name, ti.Type, ti.Dims)
		}
		if bs := uint64(ti.Type.BlockSize()); len(ti.Dims) > 0 && ti.Dims[0]%bs != 0 {
			return nil, fmt.Errorf("%w: tensor %q of type %s has row length %d, not a multiple of the block size %d", ErrMalformed, name, ti.Type, ti.Dims[0], bs)
		}
		if _, dup := f.byName[name]; dup {
			return nil, fmt.Errorf("%w: duplicate tensor name %q", ErrMalformed, name)
		}
		f.byName[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
	}
	f.DataOffset = alignUp(uint64(d.off), f.Alignment)
	for _, ti := range f.Tensors {
		if ti.Offset%f.Alignment != 0 {
			return nil, fmt.Errorf("%w: tensor %q data offset %d is not a multiple of the alignment %d", ErrMalformed, ti.Name, ti.Offset, f.Alignment)
		}
		end := f.DataOffset + ti.Offset + ti.Size()
		if ti.Offset > uint64(size) || ti.Size() > uint64(size) || end > uint64(size) {
			return nil, fmt.Errorf("%w: data of tensor %q (%s, %d bytes) spans offsets %d..%d, past the end of the file (%d bytes)",
				ErrTruncated, ti.Name, ti.Type, ti.Size(), f.DataOffset+ti.Offset, end, size)
		}
	}
	return f, nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

func (d *decoder) value(t ValueType, key string, depth int) (Value, error) {
	what := fmt.Sprintf("value of metadata %q", key)
	if sz := t.size(); sz > 0 {
		if err := d.bytes(d.buf[:sz], what); err != nil {
			return Value{}, err
		}
		return scalar(t, d.buf[:sz]), nil
	}
	switch t {
	case TypeString:
		s, err := d.str(what)
		return Value{Type: TypeString, V: s}, err
	case TypeArray:
		if depth > 8 {
			return Value{}, fmt.Errorf("%w: metadata %q nests arrays more than 8 deep", ErrMalformed, key)
		}
		et, err := d.u32("element type of " + what)
		if err != nil {
			return Value{}, err
		}
		n, err := d.u64("length of " + what)
		if err != nil {
			return Value{}, err
		}
		return d.array(ValueType(et), n, key, depth)
	}
	return Value{}, fmt.Errorf("%w: metadata %q has unknown value type %d", ErrMalformed, key, uint32(t))
}

func (d *decoder) array(et ValueType, n uint64, key string, depth int) (Value, error) {
	what := fmt.Sprintf("array metadata %q (%d x %s)", key, n, et)
	minSize := uint64(et.size())
	switch et {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 12
	}
	if minSize == 0 {
		return Value{}, fmt.Errorf("%w: metadata %q is an array of unknown element type %d", ErrMalformed, key, uint32(et))
	}
	if n > d.remaining()/minSize {
		return Value{}, d.truncated(what, n*minSize)
	}
	v := Value{Type: TypeArray, Elem: et}
	switch et {
	case TypeString:
		s := make([]string, n)
		for i := range s {
			var err error
			if s[i], err = d.str(what); err != nil {
				return Value{}, err
			}
		}
		v.V = s
		return v, nil
	case TypeArray:
		s := make([]Value, n)
		for i := range s {
			var err error
			if s[i], err = d.value(TypeArray, key, depth+1); err != nil {
				return Value{}, err
			}
		}
		v.V = s
		return v, nil
	}
	raw := make([]byte, n*minSize)
	if err := d.bytes(raw, what); err != nil {
		return Value{}, err
	}
	v.V = decodeScalarArray(et, raw, int(n))
	return v, nil
}

func scalar(t ValueType, b []byte) Value {
	le := binary.LittleEndian
	v := Value{Type: t}
	switch t {
	case TypeUint8:
		v.V = b[0]
	case TypeInt8:
		v.V = int8(b[0])
	case TypeBool:
		v.V = b[0] != 0
	case TypeUint16:
		v.V = le.Uint16(b)
	case TypeInt16:
		v.V = int16(le.Uint16(b))
	case TypeUint32:
		v.V = le.Uint32(b)
	case TypeInt32:
		v.V = int32(le.Uint32(b))
	case TypeFloat32:
		v.V = math.Float32frombits(le.Uint32(b))
	case TypeUint64:
		v.V = le.Uint64(b)
	case TypeInt64:
		v.V = int64(le.Uint64(b))
	case TypeFloat64:
		v.V = math.Float64frombits(le.Uint64(b))
	}
	return v
}

func decodeScalarArray(t ValueType, b []byte, n int) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return append([]uint8(nil), b...)
	case TypeInt8:
		s := make([]int8, n)
		for i := range s {
			s[i] = int8(b[i])
		}
		return s
	case TypeBool:
		s := make([]bool, n)
		for i := range s {
			s[i] = b[i] != 0
		}
		return s
	case TypeUint16:
		s := make([]uint16, n)
		for i := range s {
			s[i] = le.Uint16(b[2*i:])
		}
		return s
	case TypeInt16:
		s := make([]int16, n)
		for i := range s {
			s[i] = int16(le.Uint16(b[2*i:]))
		}
		return s
	case TypeUint32:
		s := make([]uint32, n)
		for i := range s {
			s[i] = le.Uint32(b[4*i:])
		}
		return s
	case TypeInt32:
		s := make([]int32, n)
		for i := range s {
			s[i] = int32(le.Uint32(b[4*i:]))
		}
		return s
	case TypeFloat32:
		s := make([]float32, n)
		for i := range s {
			s[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		return s
	case TypeUint64:
		s := make([]uint64, n)
		for i := range s {
			s[i] = le.Uint64(b[8*i:])
		}
		return s
	case TypeInt64:
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(le.Uint64(b[8*i:]))
		}
		return s
	case TypeFloat64:
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Float64frombits(le.Uint64(b[8*i:]))
		}
		return s
	}
	return nil
}

// Tensor returns the description of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

func (f *File) tensor(name string) (TensorInfo, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return TensorInfo{}, fmt.Errorf("%w: tensor %q", ErrNotFound, name)
	}
	return t, nil
}

// span returns n bytes of tensor data starting at byte off within tensor t.
// When the file is mapped the slice aliases the mapping and must not be
// written to.
func (f *File) span(t TensorInfo, off, n uint64) ([]byte, error) {
	start := f.DataOffset + t.Offset + off
	if f.mapped != nil {
		return f.mapped[start : start+n : start+n], nil
	}
	b := make([]byte, n)
	if _, err := f.r.ReadAt(b, int64(start)); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: reading tensor %q: %v", ErrTruncated, t.Name, err)
		}
		return nil, fmt.Errorf("gguf: reading tensor %q: %w", t.Name, err)
	}
	return b, nil
}

// TensorBytes returns the raw (possibly quantised) bytes of the named tensor.
// For a memory-mapped file the slice aliases the read-only mapping: do not
// modify it, and do not use it after Close.
func (f *File) TensorBytes(name string) ([]byte, error) {
	t, err := f.tensor(name)
	if err != nil {
		return nil, err
	}
	return f.span(t, 0, t.Size())
}

// Float32s dequantises the whole named tensor to float32, in ggml element
// order (row-major over Dims reversed).
func (f *File) Float32s(name string) ([]float32, error) {
	t, err := f.tensor(name)
	if err != nil {
		return nil, err
	}
	return f.rows(t, 0, t.NumRows())
}

// Rows dequantises count rows (each RowLen elements) starting at row start of
// the named tensor, reading only those bytes. For an embedding table stored
// as Dims {dim, vocab}, row i is the embedding of token i.
func (f *File) Rows(name string, start, count int) ([]float32, error) {
	t, err := f.tensor(name)
	if err != nil {
		return nil, err
	}
	if start < 0 || count < 0 || start+count > t.NumRows() {
		return nil, fmt.Errorf("gguf: rows %d..%d of tensor %q out of range: it has %d rows", start, start+count, name, t.NumRows())
	}
	return f.rows(t, start, count)
}

func (f *File) rows(t TensorInfo, start, count int) ([]float32, error) {
	if !t.Type.CanDequantize() {
		return nil, fmt.Errorf("%w: tensor %q has type %s; dequantisation supports %s", ErrUnsupportedType, t.Name, t.Type, DequantizableTypes())
	}
	rowBytes := uint64(t.Type.RowBytes(t.RowLen()))
	src, err := f.span(t, uint64(start)*rowBytes, uint64(count)*rowBytes)
	if err != nil {
		return nil, err
	}
	dst := make([]float32, count*t.RowLen())
	if err := Dequantize(t.Type, src, dst); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return dst, nil
}
