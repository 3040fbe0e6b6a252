package golang

import (
	"go/build"
	"os"
	"path/filepath"
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// BenchmarkMutate measures candidate generation on a real file,
// strings/strings.go from GOROOT: parse and type-check, every operator's
// sites, one draw per site, the parse and type-check of each mutant, and
// both diffs. It reports candidates per second.
func BenchmarkMutate(b *testing.B) {
	src, err := os.ReadFile(filepath.Join(build.Default.GOROOT, "src", "strings", "strings.go"))
	if err != nil {
		b.Skip(err)
	}
	m := mutate.New(mutate.Config{})
	total := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A fresh File each time, so the analysis is measured too.
		f, _ := mutate.NewFile("strings/strings.go", src, mutate.Go)
		c, _ := m.Mutate(f, nil, uint64(i))
		total += len(c)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "candidates/s")
}
