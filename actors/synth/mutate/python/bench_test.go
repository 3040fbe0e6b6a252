package python

import (
	"os"
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// BenchmarkMutate measures candidate generation on a real module: parse,
// every operator's sites, one draw per site, the re-parse of each mutant,
// and both diffs. It reports candidates per second.
func BenchmarkMutate(b *testing.B) {
	src, err := os.ReadFile("testdata/inflection.py")
	if err != nil {
		b.Fatal(err)
	}
	m := mutate.New(mutate.Config{})
	total := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A fresh File each time, so the parse is measured too.
		f, _ := mutate.NewFile("inflection.py", src, mutate.Python)
		c, _ := m.Mutate(f, nil, uint64(i))
		total += len(c)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "candidates/s")
}
