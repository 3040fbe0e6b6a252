// Package python is the Python language for package mutate: tree-sitter
// (the official Go bindings and Python grammar) parses each file once, the
// tree is copied into Go nodes for the operators to walk, and mutants are
// re-parsed incrementally against the original tree. Importing it, even
// for its side effect, registers the language.
//
// The operators, by mutate name (each function's comment in ops.go and
// scope.go says exactly where it applies): flip_comparison, swap_arithmetic,
// swap_boolean, off_by_one, negate_condition, remove_statement,
// remove_branch, remove_return, swap_arguments, change_constant,
// swap_variable, remove_guard, unwrap_try, break_loop_exit, change_default.
package python

import (
	"runtime"

	"github.com/frognano/frognano/actors/synth/mutate"
)

func init() { mutate.Register(Frontend{}) }

// Frontend is Python's mutate.Frontend: tree-sitter parses the original
// and every mutant; a mutant with any ERROR or MISSING node is rejected.
// tree-sitter is error-tolerant, so this is the only signal that an edit
// broke the syntax.
type Frontend struct{}

func (Frontend) Language() mutate.Language { return mutate.Python }
func (Frontend) Extensions() []string      { return []string{".py", ".pyi"} }

func (Frontend) Parse(f *mutate.File) error { return analyze(f).err }

// Check is complete whenever the mutant parses: syntax is all that Python
// checks before running (the operators never produce the few constructs
// CPython's compiler rejects after parsing, such as break outside a loop).
func (Frontend) Check(orig *mutate.File, mutated []byte) (bool, error) {
	a := analyze(orig)
	err := check(mutated, orig.Src, a.tree)
	runtime.KeepAlive(a) // a's cleanup closes a.tree
	if err != nil {
		return false, &mutate.Rejection{Reason: mutate.ReasonMutantParse, Err: err}
	}
	return true, nil
}

func (Frontend) Operators() []mutate.Operator { return Operators() }

// NotApplicable is empty: every operator kind has a Python form.
func (Frontend) NotApplicable() map[string]string { return map[string]string{} }
