package mutate_test

import (
	"fmt"

	"github.com/frognano/frognano/actors/synth/mutate"
	_ "github.com/frognano/frognano/actors/synth/mutate/python" // registers Python
)

// The Synthesizer's use: one file, the lines its tests cover, a seed from
// (run, step, task); out come candidate bugs with their fixes.
func ExampleMutator_Mutate() {
	src := "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    return min(x, hi)\n"
	f, _ := mutate.NewFile("pkg/clamp.py", []byte(src), "")
	m := mutate.New(mutate.Config{Operators: []string{mutate.FlipComparison}})
	cands, stats := m.Mutate(f, mutate.LineSet{2: true, 3: true, 4: true}, 1)
	c := cands[0]
	fmt.Print(c.Patch)
	fmt.Println(c.Features.Operators, c.Features.Functions, c.Features.LinesTouched)
	fmt.Println(stats)
	// Output:
	// diff --git a/pkg/clamp.py b/pkg/clamp.py
	// --- a/pkg/clamp.py
	// +++ b/pkg/clamp.py
	// @@ -1,4 +1,4 @@
	//  def clamp(x, lo, hi):
	// -    if x < lo:
	// +    if x > lo:
	//          return lo
	//      return min(x, hi)
	// [flip_comparison] [clamp] 1
	// files=1 sites=1 tried=1 candidates=1
}
