package sim

import (
	"slices"
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// The simulated world's operators are mutate's first WorldOperators, so its
// tasks name operators the real estimator and Synthesizer know, and the
// estimator under test asks synthesis for exactly the world's operators.
func TestWorldOperatorsAreMutates(t *testing.T) {
	c := DefaultConfig()
	if WorldOperators > len(mutate.OperatorNames) {
		t.Fatalf("WorldOperators = %d, mutate has %d", WorldOperators, len(mutate.OperatorNames))
	}
	if want := mutate.OperatorNames[:WorldOperators]; !slices.Equal(c.Operators, want) {
		t.Fatalf("DefaultConfig().Operators = %v, want mutate's first %d %v", c.Operators, WorldOperators, want)
	}
	c = Config{}.withDefaults()
	if !slices.Equal(c.Params.Operators, c.Operators) {
		t.Fatalf("the estimator asks for %v, the world has %v", c.Params.Operators, c.Operators)
	}
	c.Operators[0] = "changed"
	if mutate.OperatorNames[0] == "changed" {
		t.Fatal("DefaultConfig().Operators aliases mutate.OperatorNames")
	}
}
