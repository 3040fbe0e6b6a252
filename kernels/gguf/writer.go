package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Writer assembles a GGUF file: metadata in insertion order, then tensor
// infos, then the aligned tensor data. Used by tests to handcraft files and
// by checkpoint export.
type Writer struct {
	// Version is written in the header; 0 means 3.
	Version uint32
	// Alignment of tensor data; 0 means general.alignment if set, else 32.
	Alignment uint32

	meta    Metadata
	tensors []writerTensor
}

type writerTensor struct {
	info TensorInfo
	data []byte
}

// Set adds (or replaces) a metadata entry. v is a Value or any Go value
// ValueOf accepts.
func (w *Writer) Set(key string, v any) error {
	val, err := ValueOf(v)
	if err != nil {
		return fmt.Errorf("metadata %q: %w", key, err)
	}
	w.meta.add(key, val)
	return nil
}

// AddTensor appends a tensor. dims are in ggml order (innermost first) and
// data must be exactly the tensor's encoded size.
func (w *Writer) AddTensor(name string, t TensorType, dims []uint64, data []byte) error {
	ti := TensorInfo{Name: name, Type: t, Dims: append([]uint64(nil), dims...)}
	if !t.Known() {
		return fmt.Errorf("%w: tensor %q type %s", ErrUnsupportedType, name, t)
	}
	if len(dims) > maxDims {
		return fmt.Errorf("gguf: tensor %q has %d dimensions, at most %d allowed", name, len(dims), maxDims)
	}
	if len(dims) > 0 && dims[0]%uint64(t.BlockSize()) != 0 {
		return fmt.Errorf("gguf: tensor %q row length %d is not a multiple of the %s block size %d", name, dims[0], t, t.BlockSize())
	}
	if uint64(len(data)) != ti.Size() {
		return fmt.Errorf("gguf: tensor %q (%s %v) needs %d bytes, got %d", name, t, dims, ti.Size(), len(data))
	}
	for _, x := range w.tensors {
		if x.info.Name == name {
			return fmt.Errorf("gguf: duplicate tensor %q", name)
		}
	}
	w.tensors = append(w.tensors, writerTensor{info: ti, data: data})
	return nil
}

type countWriter struct {
	w *bufio.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteTo writes the file.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	version := w.Version
	if version == 0 {
		version = 3
	}
	meta := w.meta
	align := uint64(w.Alignment)
	v, hasKey := meta.Lookup("general.alignment")
	switch {
	case hasKey:
		a, ok := v.Uint()
		if !ok || (align != 0 && a != align) {
			return 0, fmt.Errorf("gguf: general.alignment %v disagrees with Writer.Alignment %d", v.V, align)
		}
		align = a
	case align == 0:
		align = DefaultAlignment
	case align != DefaultAlignment:
		// Readers only know a non-default alignment from the metadata.
		meta = Metadata{KVs: append([]KV(nil), meta.KVs...)}
		meta.KVs = append(meta.KVs, KV{Key: "general.alignment", Value: Value{Type: TypeUint32, V: uint32(align)}})
	}
	if align == 0 || align&(align-1) != 0 {
		return 0, fmt.Errorf("gguf: alignment %d is not a power of two", align)
	}
	cw := &countWriter{w: bufio.NewWriterSize(out, 1<<16)}
	e := encoder{w: cw}
	e.raw([]byte(Magic))
	e.u32(version)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(meta.KVs)))
	for _, kv := range meta.KVs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type))
		e.value(kv.Value)
	}
	off := uint64(0)
	for i := range w.tensors {
		t := &w.tensors[i].info
		t.Offset = off
		off = alignUp(off+t.Size(), align)
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	e.pad(align)
	for _, t := range w.tensors {
		e.raw(t.data)
		e.pad(align)
	}
	if e.err == nil {
		e.err = cw.w.Flush()
	}
	return cw.n, e.err
}

type encoder struct {
	w   *countWriter
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) pad(align uint64) {
	if n := alignUp(uint64(e.w.n), align) - uint64(e.w.n); n > 0 {
		e.raw(make([]byte, n))
	}
}

func (e *encoder) u8(v uint8) { e.buf[0] = v; e.raw(e.buf[:1]) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:], v)
	e.raw(e.buf[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:], v)
	e.raw(e.buf[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:], v)
	e.raw(e.buf[:8])
}
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }

func (e *encoder) value(v Value) {
	switch x := v.V.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case string:
		e.str(x)
	default:
		// arrays
		e.u32(uint32(v.Elem))
		n := v.Len()
		e.u64(uint64(n))
		if vs, ok := x.([]Value); ok {
			for _, el := range vs {
				e.value(el)
			}
			return
		}
		for i := range n {
			e.value(elemAt(v, i))
		}
	}
}
