// Package gguf reads and writes GGUF model files (versions 2 and 3), the
// format llama.cpp and ggml use for quantised checkpoints. The reader maps the
// file into memory (or reads it lazily through an io.ReaderAt), so opening a
// multi-gigabyte model costs only its header; tensor bytes are touched when a
// tensor is asked for, and can be dequantised to float32.
//
// Dimensions follow ggml: Dims[0] is the innermost (fastest-varying) axis, so
// a [rows, cols] PyTorch weight appears as Dims = {cols, rows}. A "row" below
// is Dims[0] contiguous elements.
package gguf

import (
	"errors"
	"fmt"
	"strings"
)

// Errors returned (wrapped, with details) by the reader.
var (
	ErrBadMagic           = errors.New("gguf: bad magic")
	ErrUnsupportedVersion = errors.New("gguf: unsupported version")
	ErrTruncated          = errors.New("gguf: truncated file")
	ErrUnsupportedType    = errors.New("gguf: unsupported tensor type")
	ErrMalformed          = errors.New("gguf: malformed file")
	ErrNotFound           = errors.New("gguf: not found")
	ErrWrongType          = errors.New("gguf: wrong value type")
)

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// DefaultAlignment is the tensor data alignment used when a file does not set
// general.alignment.
const DefaultAlignment = 32

// ValueType is the type tag of a metadata value.
type ValueType uint32

// Metadata value types, numbered as in the GGUF specification.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// size is the encoded size of a fixed-size scalar type, 0 for string/array.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// TensorType is a ggml tensor element type (ggml_type).
type TensorType uint32

// Tensor types, numbered as in ggml.h. Only some of them can be dequantised
// (see CanDequantize); all of them can be located and read as raw bytes.
const (
	F32     TensorType = 0
	F16     TensorType = 1
	Q4_0    TensorType = 2
	Q4_1    TensorType = 3
	Q5_0    TensorType = 6
	Q5_1    TensorType = 7
	Q8_0    TensorType = 8
	Q8_1    TensorType = 9
	Q2_K    TensorType = 10
	Q3_K    TensorType = 11
	Q4_K    TensorType = 12
	Q5_K    TensorType = 13
	Q6_K    TensorType = 14
	Q8_K    TensorType = 15
	IQ2_XXS TensorType = 16
	IQ2_XS  TensorType = 17
	IQ3_XXS TensorType = 18
	IQ1_S   TensorType = 19
	IQ4_NL  TensorType = 20
	IQ3_S   TensorType = 21
	IQ2_S   TensorType = 22
	IQ4_XS  TensorType = 23
	I8      TensorType = 24
	I16     TensorType = 25
	I32     TensorType = 26
	I64     TensorType = 27
	F64     TensorType = 28
	IQ1_M   TensorType = 29
	BF16    TensorType = 30
	TQ1_0   TensorType = 34
	TQ2_0   TensorType = 35
	MXFP4   TensorType = 39
)

// QK_K is the super-block size of the k-quants.
const QK_K = 256

type typeTraits struct {
	name      string
	blockSize int // elements per block
	typeSize  int // bytes per block
}

var tensorTypes = map[TensorType]typeTraits{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	Q4_0:    {"Q4_0", 32, 2 + 16},
	Q4_1:    {"Q4_1", 32, 2 + 2 + 16},
	Q5_0:    {"Q5_0", 32, 2 + 4 + 16},
	Q5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0:    {"Q8_0", 32, 2 + 32},
	Q8_1:    {"Q8_1", 32, 4 + 4 + 32},
	Q2_K:    {"Q2_K", 256, 2 + 2 + QK_K/16 + QK_K/4},
	Q3_K:    {"Q3_K", 256, 2 + QK_K/4 + QK_K/8 + 12},
	Q4_K:    {"Q4_K", 256, 2 + 2 + QK_K/2 + 12},
	Q5_K:    {"Q5_K", 256, 2 + 2 + QK_K/2 + QK_K/8 + 12},
	Q6_K:    {"Q6_K", 256, 2 + QK_K/2 + QK_K/4 + QK_K/16},
	Q8_K:    {"Q8_K", 256, 4 + QK_K + QK_K/8},
	IQ2_XXS: {"IQ2_XXS", 256, 2 + QK_K/4},
	IQ2_XS:  {"IQ2_XS", 256, 2 + QK_K/4 + QK_K/32},
	IQ3_XXS: {"IQ3_XXS", 256, 2 + QK_K/4 + QK_K/8},
	IQ1_S:   {"IQ1_S", 256, 2 + QK_K/8 + QK_K/16},
	IQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	IQ3_S:   {"IQ3_S", 256, 2 + QK_K/4 + QK_K/8 + QK_K/32 + 4},
	IQ2_S:   {"IQ2_S", 256, 2 + QK_K/4 + QK_K/16},
	IQ4_XS:  {"IQ4_XS", 256, 2 + 2 + QK_K/2 + QK_K/64},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	F64:     {"F64", 1, 8},
	IQ1_M:   {"IQ1_M", 256, QK_K/8 + QK_K/16 + QK_K/32},
	BF16:    {"BF16", 1, 2},
	TQ1_0:   {"TQ1_0", 256, 2 + 4*13},
	TQ2_0:   {"TQ2_0", 256, 2 + 64},
	MXFP4:   {"MXFP4", 32, 1 + 16},
}

func (t TensorType) String() string {
	if tr, ok := tensorTypes[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("TensorType(%d)", uint32(t))
}

// Known reports whether the type's block layout is known, so that tensors of
// this type can be sized and read as raw bytes.
func (t TensorType) Known() bool {
	_, ok := tensorTypes[t]
	return ok
}

// BlockSize is the number of elements in one quantisation block (1 for plain
// float and integer types).
func (t TensorType) BlockSize() int { return tensorTypes[t].blockSize }

// TypeSize is the number of bytes one block occupies.
func (t TensorType) TypeSize() int { return tensorTypes[t].typeSize }

// dequantizable lists the types Dequantize supports, in the order error
// messages name them.
var dequantizable = []TensorType{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K}

// CanDequantize reports whether Dequantize supports the type.
func (t TensorType) CanDequantize() bool {
	for _, d := range dequantizable {
		if t == d {
			return true
		}
	}
	return false
}

// DequantizableTypes names the types Dequantize supports, for error messages:
// "F32, F16, …, Q6_K".
func DequantizableTypes() string {
	names := make([]string, len(dequantizable))
	for i, t := range dequantizable {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// RowBytes is the byte size of n elements of type t; n must be a multiple of
// the block size.
func (t TensorType) RowBytes(n int) int {
	tr := tensorTypes[t]
	if tr.blockSize == 0 {
		return 0
	}
	return n / tr.blockSize * tr.typeSize
}
