package blas

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestKernelsFollowCPU loads the libraries in a child process whose
// environment asks OpenBLAS for other kernels (OPENBLAS_CORETYPE=Prescott,
// SSE3 only) and checks that each runs the kernels this CPU's features call
// for: the engine's speed must not depend on what a machine's environment
// says.
func TestKernelsFollowCPU(t *testing.T) {
	if os.Getenv("FROGNANO_BLAS_TEST_CHILD") != "" {
		for _, impl := range libs() {
			os.Stdout.WriteString(impl.Kernels + "\n")
		}
		return
	}
	want := cpuCore()
	if want == "" || len(libs()) == 0 || os.Getenv("FROGNANO_BLAS_CORETYPE") != "" {
		t.Skipf("no library loads here, or no AVX2/AVX-512 (cpuCore %q), or FROGNANO_BLAS_CORETYPE is set", want)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelsFollowCPU$")
	cmd.Env = append(os.Environ(), "FROGNANO_BLAS_TEST_CHILD=1", "OPENBLAS_CORETYPE=Prescott")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	lines := strings.Fields(strings.TrimSuffix(string(out), "PASS\n"))
	if len(lines) != len(libs()) {
		t.Fatalf("child loaded %q, want %d libraries", lines, len(libs()))
	}
	for i, got := range lines {
		if got != want {
			t.Errorf("%s runs %s kernels with OPENBLAS_CORETYPE=Prescott, want %s", libs()[i].Path, got, want)
		}
	}
	if os.Getenv("OPENBLAS_CORETYPE") != "" && os.Getenv("OPENBLAS_CORETYPE") != want {
		t.Logf("this machine sets OPENBLAS_CORETYPE=%s; frognano uses %s", os.Getenv("OPENBLAS_CORETYPE"), want)
	}
}

func TestUseRestores(t *testing.T) {
	before := Impl()
	restore := Use(*goImpl)
	if Impl() != "go" {
		t.Fatalf("Use(go): Impl() = %q", Impl())
	}
	restore()
	if Impl() != before {
		t.Fatalf("after restore: Impl() = %q, want %q", Impl(), before)
	}
}
