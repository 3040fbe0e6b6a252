package gguf

import (
	"fmt"
	"math"
)

// Value is one metadata value. V holds the Go form of the value:
//
//	uint8 int8 uint16 int16 uint32 int32 uint64 int64 float32 float64 bool string
//
// for scalars, a slice of the element's Go type for arrays of scalars or
// strings ([]uint8, []string, ...), and []Value for arrays of arrays. Elem is
// the element type when Type is TypeArray.
type Value struct {
	Type ValueType
	Elem ValueType
	V    any
}

// KV is a metadata entry, in file order.
type KV struct {
	Key   string
	Value Value
}

// ValueOf wraps a Go value of one of the types listed on Value (or a slice of
// them, or []Value for an array of arrays) into a Value.
func ValueOf(v any) (Value, error) {
	switch x := v.(type) {
	case Value:
		return x, nil
	case uint8:
		return Value{Type: TypeUint8, V: x}, nil
	case int8:
		return Value{Type: TypeInt8, V: x}, nil
	case uint16:
		return Value{Type: TypeUint16, V: x}, nil
	case int16:
		return Value{Type: TypeInt16, V: x}, nil
	case uint32:
		return Value{Type: TypeUint32, V: x}, nil
	case int32:
		return Value{Type: TypeInt32, V: x}, nil
	case uint64:
		return Value{Type: TypeUint64, V: x}, nil
	case int64:
		return Value{Type: TypeInt64, V: x}, nil
	case float32:
		return Value{Type: TypeFloat32, V: x}, nil
	case float64:
		return Value{Type: TypeFloat64, V: x}, nil
	case bool:
		return Value{Type: TypeBool, V: x}, nil
	case string:
		return Value{Type: TypeString, V: x}, nil
	case []uint8:
		return Value{Type: TypeArray, Elem: TypeUint8, V: x}, nil
	case []int8:
		return Value{Type: TypeArray, Elem: TypeInt8, V: x}, nil
	case []uint16:
		return Value{Type: TypeArray, Elem: TypeUint16, V: x}, nil
	case []int16:
		return Value{Type: TypeArray, Elem: TypeInt16, V: x}, nil
	case []uint32:
		return Value{Type: TypeArray, Elem: TypeUint32, V: x}, nil
	case []int32:
		return Value{Type: TypeArray, Elem: TypeInt32, V: x}, nil
	case []uint64:
		return Value{Type: TypeArray, Elem: TypeUint64, V: x}, nil
	case []int64:
		return Value{Type: TypeArray, Elem: TypeInt64, V: x}, nil
	case []float32:
		return Value{Type: TypeArray, Elem: TypeFloat32, V: x}, nil
	case []float64:
		return Value{Type: TypeArray, Elem: TypeFloat64, V: x}, nil
	case []bool:
		return Value{Type: TypeArray, Elem: TypeBool, V: x}, nil
	case []string:
		return Value{Type: TypeArray, Elem: TypeString, V: x}, nil
	case []Value:
		return Value{Type: TypeArray, Elem: TypeArray, V: x}, nil
	}
	return Value{}, fmt.Errorf("gguf: no GGUF value type for Go type %T", v)
}

// Len is the number of elements of an array value (0 for scalars).
func (v Value) Len() int {
	switch x := v.V.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float32:
		return len(x)
	case []float64:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []Value:
		return len(x)
	}
	return 0
}

// typeName describes the value's type for error messages, e.g. "array[string]".
func (v Value) typeName() string {
	if v.Type == TypeArray {
		return "array[" + v.Elem.String() + "]"
	}
	return v.Type.String()
}

// Uint returns an integer value of any width as uint64, refusing negatives.
func (v Value) Uint() (uint64, bool) {
	switch x := v.V.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	}
	if i, ok := v.Int(); ok && i >= 0 {
		return uint64(i), true
	}
	return 0, false
}

// Int returns an integer value of any width as int64, refusing uint64 values
// above math.MaxInt64.
func (v Value) Int() (int64, bool) {
	switch x := v.V.(type) {
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	}
	return 0, false
}

// Float returns a float32 or float64 value as float64.
func (v Value) Float() (float64, bool) {
	switch x := v.V.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// Metadata is the ordered key/value section of a GGUF file.
type Metadata struct {
	KVs   []KV
	index map[string]int
}

func (m *Metadata) add(key string, v Value) {
	if m.index == nil {
		m.index = make(map[string]int)
	}
	if i, ok := m.index[key]; ok {
		m.KVs[i].Value = v
		return
	}
	m.index[key] = len(m.KVs)
	m.KVs = append(m.KVs, KV{Key: key, Value: v})
}

// Lookup returns the value stored under key.
func (m *Metadata) Lookup(key string) (Value, bool) {
	i, ok := m.index[key]
	if !ok {
		return Value{}, false
	}
	return m.KVs[i].Value, true
}

func (m *Metadata) get(key string) (Value, error) {
	v, ok := m.Lookup(key)
	if !ok {
		return Value{}, fmt.Errorf("%w: metadata key %q", ErrNotFound, key)
	}
	return v, nil
}

func wrongType(key string, v Value, want string) error {
	return fmt.Errorf("%w: metadata key %q is %s, want %s", ErrWrongType, key, v.typeName(), want)
}

// String returns a string value.
func (m *Metadata) String(key string) (string, error) {
	v, err := m.get(key)
	if err != nil {
		return "", err
	}
	s, ok := v.V.(string)
	if !ok {
		return "", wrongType(key, v, "string")
	}
	return s, nil
}

// Uint returns a non-negative integer value of any width.
func (m *Metadata) Uint(key string) (uint64, error) {
	v, err := m.get(key)
	if err != nil {
		return 0, err
	}
	u, ok := v.Uint()
	if !ok {
		return 0, wrongType(key, v, "a non-negative integer")
	}
	return u, nil
}

// Int returns an integer value of any width.
func (m *Metadata) Int(key string) (int64, error) {
	v, err := m.get(key)
	if err != nil {
		return 0, err
	}
	i, ok := v.Int()
	if !ok {
		return 0, wrongType(key, v, "an integer")
	}
	return i, nil
}

// Float returns a float32 or float64 value.
func (m *Metadata) Float(key string) (float64, error) {
	v, err := m.get(key)
	if err != nil {
		return 0, err
	}
	f, ok := v.Float()
	if !ok {
		return 0, wrongType(key, v, "a float")
	}
	return f, nil
}

// Bool returns a bool value.
func (m *Metadata) Bool(key string) (bool, error) {
	v, err := m.get(key)
	if err != nil {
		return false, err
	}
	b, ok := v.V.(bool)
	if !ok {
		return false, wrongType(key, v, "bool")
	}
	return b, nil
}

// Strings returns an array of strings.
func (m *Metadata) Strings(key string) ([]string, error) {
	v, err := m.get(key)
	if err != nil {
		return nil, err
	}
	s, ok := v.V.([]string)
	if !ok {
		return nil, wrongType(key, v, "array[string]")
	}
	return s, nil
}

// Ints returns an array of integers of any width as int64s.
func (m *Metadata) Ints(key string) ([]int64, error) {
	v, err := m.get(key)
	if err != nil {
		return nil, err
	}
	if v.Type != TypeArray || v.Elem == TypeArray || v.Elem.size() == 0 || v.Elem == TypeBool || v.Elem == TypeFloat32 || v.Elem == TypeFloat64 {
		return nil, wrongType(key, v, "an array of integers")
	}
	out := make([]int64, 0, v.Len())
	for i := range v.Len() {
		e, _ := elemAt(v, i).Int()
		out = append(out, e)
	}
	return out, nil
}

// elemAt returns element i of a scalar array as a scalar Value.
func elemAt(v Value, i int) Value {
	switch x := v.V.(type) {
	case []uint8:
		return Value{Type: TypeUint8, V: x[i]}
	case []int8:
		return Value{Type: TypeInt8, V: x[i]}
	case []uint16:
		return Value{Type: TypeUint16, V: x[i]}
	case []int16:
		return Value{Type: TypeInt16, V: x[i]}
	case []uint32:
		return Value{Type: TypeUint32, V: x[i]}
	case []int32:
		return Value{Type: TypeInt32, V: x[i]}
	case []uint64:
		return Value{Type: TypeUint64, V: x[i]}
	case []int64:
		return Value{Type: TypeInt64, V: x[i]}
	case []float32:
		return Value{Type: TypeFloat32, V: x[i]}
	case []float64:
		return Value{Type: TypeFloat64, V: x[i]}
	case []bool:
		return Value{Type: TypeBool, V: x[i]}
	case []string:
		return Value{Type: TypeString, V: x[i]}
	case []Value:
		return x[i]
	}
	return Value{}
}
