package safetensors

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/frognano/frognano/kernels/gguf"
)

// Writer collects tensors and writes a safetensors file laid out as the
// reference implementation lays it out: "__metadata__" first (keys sorted),
// tensors ordered by descending dtype then name, compact JSON, header padded
// with spaces to a multiple of 8. Given the same tensors it produces the same
// bytes as the Python package.
type Writer struct {
	Metadata map[string]string
	tensors  []writerTensor
}

type writerTensor struct {
	name  string
	dtype DType
	shape []int
	data  []byte
}

// Add appends a tensor given its raw little-endian bytes.
func (w *Writer) Add(name string, dtype DType, shape []int, data []byte) error {
	if name == "__metadata__" {
		return fmt.Errorf("safetensors: %q is reserved", name)
	}
	if dtype.Size() == 0 {
		return fmt.Errorf("%w: %q", ErrUnsupported, dtype)
	}
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("safetensors: tensor %q has negative dimension in %v", name, shape)
		}
		n *= int64(d)
	}
	if int64(len(data)) != n*int64(dtype.Size()) {
		return fmt.Errorf("safetensors: tensor %q (%s %v) needs %d bytes, got %d", name, dtype, shape, n*int64(dtype.Size()), len(data))
	}
	for _, t := range w.tensors {
		if t.name == name {
			return fmt.Errorf("safetensors: duplicate tensor %q", name)
		}
	}
	if shape == nil {
		shape = []int{}
	}
	w.tensors = append(w.tensors, writerTensor{name: name, dtype: dtype, shape: append([]int{}, shape...), data: data})
	return nil
}

// AddFloat32s appends a tensor converted from float32 to dtype (F32, F16 or
// BF16, rounding to nearest even).
func (w *Writer) AddFloat32s(name string, dtype DType, shape []int, values []float32) error {
	b := make([]byte, len(values)*dtype.Size())
	le := binary.LittleEndian
	switch dtype {
	case F32:
		for i, v := range values {
			le.PutUint32(b[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range values {
			le.PutUint16(b[2*i:], gguf.F32ToF16(v))
		}
	case BF16:
		for i, v := range values {
			le.PutUint16(b[2*i:], gguf.F32ToBF16(v))
		}
	default:
		return fmt.Errorf("%w: float conversion to %q; use F32, F16 or BF16", ErrUnsupported, dtype)
	}
	return w.Add(name, dtype, shape, b)
}

// header builds the padded JSON header and returns the tensors in file order.
func (w *Writer) header() ([]byte, []writerTensor) {
	ts := append([]writerTensor(nil), w.tensors...)
	sort.SliceStable(ts, func(i, j int) bool {
		ri, rj := dtypeRank[ts[i].dtype], dtypeRank[ts[j].dtype]
		if ri != rj {
			return ri > rj
		}
		return ts[i].name < ts[j].name
	})
	var sb strings.Builder
	sb.WriteByte('{')
	if len(w.Metadata) > 0 {
		keys := make([]string, 0, len(w.Metadata))
		for k := range w.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		sb.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			quote(&sb, k)
			sb.WriteByte(':')
			quote(&sb, w.Metadata[k])
		}
		sb.WriteByte('}')
	}
	var off int64
	for i, t := range ts {
		if i > 0 || len(w.Metadata) > 0 {
			sb.WriteByte(',')
		}
		quote(&sb, t.name)
		sb.WriteString(`:{"dtype":"`)
		sb.WriteString(string(t.dtype))
		sb.WriteString(`","shape":[`)
		for j, d := range t.shape {
			if j > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.Itoa(d))
		}
		sb.WriteString(`],"data_offsets":[`)
		sb.WriteString(strconv.FormatInt(off, 10))
		sb.WriteByte(',')
		off += int64(len(t.data))
		sb.WriteString(strconv.FormatInt(off, 10))
		sb.WriteString("]}")
	}
	sb.WriteByte('}')
	for sb.Len()%8 != 0 {
		sb.WriteByte(' ')
	}
	return []byte(sb.String()), ts
}

// quote writes s as a JSON string the way serde_json does: only '"', '\\'
// and control characters are escaped.
func quote(sb *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	sb.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			sb.WriteString(`\"`)
		case c == '\\':
			sb.WriteString(`\\`)
		case c == '\n':
			sb.WriteString(`\n`)
		case c == '\r':
			sb.WriteString(`\r`)
		case c == '\t':
			sb.WriteString(`\t`)
		case c == '\b':
			sb.WriteString(`\b`)
		case c == '\f':
			sb.WriteString(`\f`)
		case c < 0x20:
			sb.WriteString(`\u00`)
			sb.WriteByte(hex[c>>4])
			sb.WriteByte(hex[c&15])
		default:
			sb.WriteByte(c)
		}
	}
	sb.WriteByte('"')
}

// WriteTo writes the file.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	hdr, ts := w.header()
	bw := bufio.NewWriterSize(out, 1<<16)
	var n int64
	write := func(b []byte) error {
		m, err := bw.Write(b)
		n += int64(m)
		return err
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	if err := write(lenBuf[:]); err != nil {
		return n, err
	}
	if err := write(hdr); err != nil {
		return n, err
	}
	for _, t := range ts {
		if err := write(t.data); err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}

// WriteFile writes the file to path atomically (a temporary file renamed
// into place), so a crash never leaves a half-written checkpoint behind.
func (w *Writer) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := w.WriteTo(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
