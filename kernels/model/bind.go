package model

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/tensor"
)

// source is a model file's tensors by name, dequantised to float32 on
// request, shapes outermost first (PyTorch order).
type source interface {
	// shape reports a tensor's dimensions, or false when it is absent.
	shape(name string) ([]int, bool)
	// load reads and dequantises a tensor.
	load(name string) (*tensor.Tensor, error)
	// hasPrefix reports whether any tensor's name starts with prefix+".".
	hasPrefix(prefix string) bool
}

// binder fills a layer struct's tensor fields from a source by the names in
// their struct tags (tag key "gguf" or "hf").
type binder struct {
	b   kernels.Backend
	src source
	tag string
	// fix rewrites a tensor after loading (llama.cpp's Q/K permutation).
	fix  func(name string, t *tensor.Tensor) error
	used map[string]bool
	// skip, if set, names tensors not to read: a shared load takes them
	// from the process's cache (share.go) and sets them after bind.
	skip func(name string) bool
}

var tensorType = reflect.TypeFor[kernels.Tensor]()

// bind fills the struct v points to, its names under prefix.
func (bd *binder) bind(v reflect.Value, prefix string) error {
	v = v.Elem()
	ty := v.Type()
	for i := range ty.NumField() {
		f := ty.Field(i)
		tag, ok := f.Tag.Lookup(bd.tag)
		if !ok {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		optional := opts == "optional"
		full := join(prefix, name)
		fv := v.Field(i)
		switch {
		case f.Type == tensorType:
			if _, ok := bd.src.shape(full); !ok {
				if optional {
					continue
				}
				return fmt.Errorf("%w: tensor %q is missing", ErrMalformed, full)
			}
			if bd.skip != nil && bd.skip(full) {
				bd.used[full] = true
				continue
			}
			t, err := bd.src.load(full)
			if err != nil {
				return fmt.Errorf("tensor %q: %w", full, err)
			}
			if bd.fix != nil {
				if err := bd.fix(full, t); err != nil {
					return err
				}
			}
			bd.used[full] = true
			fv.Set(reflect.ValueOf(bd.b.FromHost(t)))
		case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct:
			if optional && !bd.src.hasPrefix(full) {
				continue
			}
			p := reflect.New(f.Type.Elem())
			if err := bd.bind(p, full); err != nil {
				return err
			}
			fv.Set(p)
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			// The caller sized the slice (one Block per layer).
			for j := range fv.Len() {
				if err := bd.bind(fv.Index(j).Addr(), join(full, fmt.Sprint(j))); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("model: cannot bind field %s of type %s", f.Name, f.Type)
		}
	}
	return nil
}

func join(prefix, name string) string {
	switch {
	case prefix == "":
		return name
	case name == "":
		return prefix
	}
	return prefix + "." + name
}
