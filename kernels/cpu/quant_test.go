package cpu

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/frognano/frognano/kernels/tensor"
)

// TestQuantizedMatMul checks MatMul by a Q8_0 QuantTensor, whole and as a
// row slice, against float64 products with its dequantized values, within
// 1% of Σ|a||w| (the int8 activations move each value by at most half a
// step, amax/254; kernels/cpu/blas bounds the kernels tightly).
func TestQuantizedMatMul(t *testing.T) {
	b := New()
	r := rand.New(rand.NewPCG(1, 1))
	m, n, k := 5, 48, 96
	wv := make([]float32, n*k)
	for i := range wv {
		wv[i] = float32(r.NormFloat64() * 0.1)
	}
	av := make([]float32, m*k)
	for i := range av {
		av[i] = float32(r.NormFloat64())
	}
	for _, typ := range QuantTypes {
		t.Run(typ, func(t *testing.T) { checkQuantized(t, typ, wv, av, m, n, k) })
	}
	if _, err := b.Quantize(tensor.New(4, 32), "q4_k"); !errors.Is(err, ErrQuantType) {
		t.Errorf("q4_k: %v, want ErrQuantType", err)
	}
	if _, err := b.Quantize(tensor.New(4, 48), "q8_0"); !errors.Is(err, ErrQuantType) {
		t.Errorf("rows of 48: %v, want ErrQuantType", err)
	}
}

func checkQuantized(t *testing.T, typ string, wv, av []float32, m, n, k int) {
	b := New()
	qt, err := b.Quantize(tensor.From(append([]float32(nil), wv...), n, k), typ)
	if err != nil {
		t.Fatal(err)
	}
	q := qt.(*QuantTensor)
	if got := q.Shape(); got[0] != n || got[1] != k || q.Type() != typ || q.Bytes() != n*k/32*34 {
		t.Fatalf("shape %v type %s bytes %d", got, q.Type(), q.Bytes())
	}
	wd := q.Dequantize()
	for i := range wv { // Q8_0 keeps each value within half a step of amax/127
		if d := math.Abs(float64(wd[i] - wv[i])); d > 0.6/127*0.5 {
			t.Fatalf("dequantized [%d] = %v, was %v", i, wd[i], wv[i])
		}
	}
	a := tensor.From(av, m, k)
	check := func(name string, w *QuantTensor, row0 int) {
		rows := w.Shape()[0]
		dst := tensor.New(m, rows)
		b.MatMul(dst, a, w)
		for i := range m {
			for j := range rows {
				var ref, mag float64
				for t := range k {
					ref += float64(av[i*k+t]) * float64(wd[(row0+j)*k+t])
					mag += math.Abs(float64(av[i*k+t]) * float64(wd[(row0+j)*k+t]))
				}
				if d := math.Abs(float64(dst.Row(i)[j]) - ref); d > 0.01*mag {
					t.Fatalf("%s [%d,%d] = %v, reference %v (Σ|a||w| %v)", name, i, j, dst.Row(i)[j], ref, mag)
				}
			}
		}
	}
	check("whole", q, 0)
	check("rows 16..40", b.Slice(q, 16, 40).(*QuantTensor), 16)
}

// TestQ8RequantizeLossless: serving a Q8_0 file's weights, dequantized at
// load and quantized again, gives its blocks back bit for bit.
func TestQ8RequantizeLossless(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	w := make([]float32, 64*96)
	for i := range w {
		w[i] = float32(r.NormFloat64() * math.Pow(10, -3*r.Float64()))
	}
	file, err := New().Quantize(tensor.From(w, 64, 96), "q8_0")
	if err != nil {
		t.Fatal(err)
	}
	again, err := New().Quantize(tensor.From(file.(*QuantTensor).Dequantize(), 64, 96), "q8_0")
	if err != nil {
		t.Fatal(err)
	}
	a, b := file.(*QuantTensor).data, again.(*QuantTensor).data
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("byte %d (block %d): %d, requantized %d", i, i/34, a[i], b[i])
		}
	}
}
