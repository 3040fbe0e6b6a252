package kbench

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCleanEnv(t *testing.T) {
	env := []string{"A=1", "OPENBLAS_CORETYPE=Haswell", "OPENBLAS_L2_SIZE=512", "OPENBLAS_NUM_THREADS=2"}
	got := CleanEnv(env)
	if want := []string{"A=1", "OPENBLAS_NUM_THREADS=2"}; !slices.Equal(got, want) {
		t.Fatalf("CleanEnv = %q, want %q", got, want)
	}
	if len(env) != 4 {
		t.Fatal("CleanEnv changed its argument")
	}
}

func TestTimeShape(t *testing.T) {
	for _, op := range []string{"NT", "NN", "TN"} {
		if g := timeShape(Shape{Op: op, M: 16, N: 64, K: 32}, time.Millisecond); !(g > 0) {
			t.Fatalf("%s: %v GFLOP/s", op, g)
		}
	}
}

func TestWriteTableGoal(t *testing.T) {
	r := &Report{
		Impls:       []string{"lib"},
		Shapes:      []Shape{{"NT", 1, 8, 8, "x"}, {"NT", 16, 8, 8, "y"}, {"TN", 128, 8, 8, "z"}},
		NumPyGFLOPs: []float64{100, 100, 100},
		GFLOPs:      [][]float64{{10, 95, 89}},
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "NOT met; lowest ratio 0.89 at TN 128x8x8") {
		t.Fatalf("the m=1 row must not count, the TN row must:\n%s", b.String())
	}
	r.GFLOPs[0][2] = 90
	b.Reset()
	r.WriteTable(&b)
	if !strings.Contains(b.String(), "goal (frognano ≥ 0.9× NumPy on every shape with m ≥ 16): met") {
		t.Fatalf("want met:\n%s", b.String())
	}
}

func TestISACoreType(t *testing.T) {
	for isa, want := range map[string]string{"": "", "native": "", "avx2": "Haswell"} {
		if got, err := ISACoreType(isa); err != nil || got != want {
			t.Errorf("ISACoreType(%q) = %q, %v; want %q", isa, got, err, want)
		}
	}
	if _, err := ISACoreType("avx512vnni"); err == nil || !strings.Contains(err.Error(), "avx2") {
		t.Errorf("an unknown ISA: %v, want an error naming the choices", err)
	}
	if os.Getenv("FROGNANO_BLAS_CORETYPE") != "Haswell" {
		if _, err := Run(t.Context(), Options{ISA: "avx2", Venv: "/nonexistent"}); err == nil || !strings.Contains(err.Error(), "FROGNANO_BLAS_CORETYPE=Haswell") {
			t.Errorf("Run with --isa avx2 in a process loaded for the CPU: %v, want an error saying how to start it", err)
		}
	}
}
