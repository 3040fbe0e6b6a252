package tensor

import "testing"

func TestRowsCols(t *testing.T) {
	tests := []struct {
		shape      []int
		rows, cols int
	}{
		{[]int{}, 1, 1},
		{[]int{5}, 1, 5},
		{[]int{3, 4}, 3, 4},
		{[]int{2, 3, 4}, 6, 4},
		{[]int{0, 4}, 0, 4},
		{[]int{3, 0}, 3, 0},
	}
	for _, tt := range tests {
		x := New(tt.shape...)
		if x.Rows() != tt.rows || x.Cols() != tt.cols {
			t.Errorf("shape %v: rows, cols = %d, %d; want %d, %d", tt.shape, x.Rows(), x.Cols(), tt.rows, tt.cols)
		}
	}
}

func TestSliceSharesStorage(t *testing.T) {
	x := From([]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 3, 2, 2)
	s := x.Slice(1, 3)
	if got, want := s.Shape(), []int{2, 2, 2}; !SameShape(got, want) {
		t.Fatalf("shape %v, want %v", got, want)
	}
	if s.Data()[0] != 4 || s.Len() != 8 {
		t.Fatalf("slice data %v", s.Data())
	}
	s.Row(0)[1] = 100
	if x.Data()[5] != 100 {
		t.Fatalf("write through the view did not reach the tensor: %v", x.Data())
	}
	// Appending to a row must not run into the next one.
	r := x.Row(0)
	_ = append(r, -1)
	if x.Data()[2] != 2 {
		t.Fatalf("append to a row clobbered its neighbour: %v", x.Data())
	}
	if e := x.Slice(3, 3); e.Len() != 0 || e.Shape()[0] != 0 {
		t.Fatalf("empty slice %v", e)
	}
}

func TestShapeIsCopied(t *testing.T) {
	shape := []int{2, 3}
	x := New(shape...)
	shape[0] = 7
	if x.Shape()[0] != 2 {
		t.Fatalf("New kept the caller's shape slice")
	}
	y := x.Reshape(3, 2)
	if x.Shape()[0] != 2 || y.Shape()[0] != 3 {
		t.Fatalf("Reshape changed the source shape: %v %v", x.Shape(), y.Shape())
	}
	z := x.Slice(0, 1)
	if x.Shape()[0] != 2 || z.Shape()[0] != 1 {
		t.Fatalf("Slice changed the source shape: %v %v", x.Shape(), z.Shape())
	}
}

func TestPanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
	}{
		{"From wrong length", func() { From(make([]float32, 5), 2, 3) }},
		{"negative dimension", func() { New(2, -1) }},
		{"Reshape wrong count", func() { New(2, 3).Reshape(4, 2) }},
		{"Slice past end", func() { New(2, 3).Slice(1, 3) }},
		{"Slice reversed", func() { New(2, 3).Slice(2, 1) }},
		{"Slice scalar", func() { New().Slice(0, 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tt.f()
		})
	}
}
