package examples_test

import (
	"fmt"
	"testing"

	"example.com/gosuite/examples"
)

func TestExternal(t *testing.T) {
	if examples.Double(3) != 6 {
		t.Fatal("Double(3) != 6")
	}
}

func FuzzDouble(f *testing.F) {
	f.Add(5)
	f.Fuzz(func(t *testing.T, x int) {
		if examples.Double(x) != x+x {
			t.Fatal("Double is not x+x")
		}
	})
}

func ExampleDouble() {
	fmt.Println(examples.Double(21))
	// Output: 42
}
