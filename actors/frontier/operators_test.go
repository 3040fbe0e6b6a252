package frontier

import (
	"slices"
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// The estimator asks synthesis for every operator mutate has, and for no
// other: an operator added to mutate is one it can ask for, and a name
// mutate does not know would be a setting synthesis refuses.
func TestDefaultOperatorsAreMutates(t *testing.T) {
	got := DefaultParams().Operators
	if !slices.Equal(got, mutate.OperatorNames) {
		t.Fatalf("DefaultParams().Operators = %v, want mutate.OperatorNames %v", got, mutate.OperatorNames)
	}
	got[0] = "changed"
	if mutate.OperatorNames[0] == "changed" {
		t.Fatal("DefaultParams().Operators aliases mutate.OperatorNames")
	}
	if p := (Params{}).withDefaults(); !slices.Equal(p.Operators, mutate.OperatorNames) {
		t.Fatalf("zero Params take operators %v, want mutate.OperatorNames", p.Operators)
	}
}
