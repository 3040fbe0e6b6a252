// Package golang is the Go language for package mutate: go/parser and
// go/types (the file type-checked alone, imports left unloaded) find the
// sites, edits are byte ranges from token positions, and every mutant is
// parsed and type-checked again before it is offered. Importing it, even
// for its side effect, registers the language.
//
// The operators, by mutate name (each function's comment in ops.go says
// exactly where it applies): flip_comparison, swap_arithmetic,
// swap_boolean, off_by_one, negate_condition, remove_statement,
// remove_branch, remove_return, swap_arguments, change_constant,
// swap_variable, remove_guard, break_loop_exit. change_default and
// unwrap_try have no Go form (see Frontend.NotApplicable).
package golang

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"

	"github.com/frognano/frognano/actors/synth/mutate"
)

func init() { mutate.Register(Frontend{}) }

// Frontend is Go's mutate.Frontend. Check parses the mutant with go/parser
// and type-checks it alone, like the original: a mutant that has a type
// error the original did not have (string - string, an unused variable, a
// missing return) does not compile and is rejected.
type Frontend struct{}

func (Frontend) Language() mutate.Language { return mutate.Go }
func (Frontend) Extensions() []string      { return []string{".go"} }

func (Frontend) Parse(f *mutate.File) error { return analyze(f).err }

func (Frontend) Operators() []mutate.Operator { return Operators() }

// NotApplicable says why two operator kinds have no Go form.
func (Frontend) NotApplicable() map[string]string {
	return map[string]string{
		mutate.ChangeDefault: "Go has no default arguments",
		mutate.UnwrapTry:     "Go has no try/except; dropping an `if err != nil` guard is remove_guard",
	}
}

// Check reports complete when every expression the edit wrote has a
// known type: then go/types has checked exactly what the compiler would,
// and the mutant compiles wherever the original does. Pure deletions are
// complete too (what they can break, unused variables and missing returns,
// go/types sees without types from imports).
//
// A mutant confined to one function body, nearly all of them, is checked in
// the skeleton of the file (every other function without its body) against
// the original's errors in the same skeleton: the same verdict as checking
// the whole file, at a fraction of the cost on big files.
func (Frontend) Check(orig *mutate.File, mutated []byte) (bool, error) {
	return check(orig, mutated, true)
}

// check is Check; useSkeleton false forces the whole-file check, which the
// skeleton must agree with.
func check(orig *mutate.File, mutated []byte, useSkeleton bool) (bool, error) {
	a := analyze(orig)
	fset := token.NewFileSet()
	var file *ast.File
	var err error
	// The changed bytes: [lo, hi) in the mutant, [lo, origHi) in the original.
	p := 0
	for p < len(mutated) && p < len(orig.Src) && mutated[p] == orig.Src[p] {
		p++
	}
	s := 0
	for s < len(mutated)-p && s < len(orig.Src)-p && mutated[len(mutated)-1-s] == orig.Src[len(orig.Src)-1-s] {
		s++
	}
	lo, hi, origHi := p, len(mutated)-s, len(orig.Src)-s
	// A change inside one function body is checked in the skeleton (the
	// file with every other body dropped); anything else in the whole file.
	baseErrs, used, shift := a.errs, map[string]bool(nil), 0
	if i := a.funcDeclAt(lo, origHi); i >= 0 && useSkeleton {
		if sk := a.skeletonFor(i); sk != nil {
			end := sk.end + len(mutated) - len(orig.Src)
			text := sk.prefix + string(mutated[sk.start:end]) + sk.suffix
			fset = token.NewFileSet()
			if file, err = parser.ParseFile(fset, orig.Path, text, parser.SkipObjectResolution); err != nil {
				return false, &mutate.Rejection{Reason: mutate.ReasonMutantParse, Err: err}
			}
			baseErrs, used, shift = sk.errs, sk.usedElsewhere, len(sk.prefix)-sk.start
		}
	}
	if file == nil {
		if file, err = parser.ParseFile(fset, orig.Path, mutated, parser.SkipObjectResolution); err != nil {
			return false, &mutate.Rejection{Reason: mutate.ReasonMutantParse, Err: err}
		}
	}
	info, _, errs := typecheck(fset, file, used)
	for msg, n := range errs {
		if n > baseErrs[msg] {
			return false, &mutate.Rejection{Reason: mutate.ReasonMutantType, Err: typeError(msg)}
		}
	}
	if lo >= hi {
		return true, nil
	}
	lo, hi = lo+shift, hi+shift
	tf := fset.File(file.Pos())
	complete := true
	ast.Inspect(file, func(n ast.Node) bool {
		if n == nil || !complete {
			return false
		}
		ns, ne := tf.Offset(n.Pos()), tf.Offset(n.End())
		if ne <= lo || ns >= hi {
			return false
		}
		if e, ok := n.(ast.Expr); ok && !known(info, e) {
			complete = false
		}
		return true
	})
	return complete, nil
}

// known reports whether go/types knows the type of value expression e.
// Invalid expressions (anything built on a fake import) are not recorded
// at all, so a missing entry is what "unknown" looks like.
func known(info *types.Info, e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		if e.Name == "_" {
			return true
		}
		if tv, ok := info.Types[e]; ok {
			return tv.Type != types.Typ[types.Invalid]
		}
		obj := info.Uses[e]
		if obj == nil {
			obj = info.Defs[e]
		}
		switch o := obj.(type) {
		case nil:
			return false
		case *types.PkgName:
			return o.Imported().Complete()
		case *types.Label:
			return true
		}
		return obj.Type() != nil && obj.Type() != types.Typ[types.Invalid]
	case *ast.BasicLit, *ast.CompositeLit, *ast.FuncLit, *ast.ParenExpr, *ast.SelectorExpr, *ast.IndexExpr,
		*ast.IndexListExpr, *ast.SliceExpr, *ast.TypeAssertExpr, *ast.CallExpr, *ast.StarExpr, *ast.UnaryExpr, *ast.BinaryExpr:
		tv, ok := info.Types[e]
		return ok && tv.Type != types.Typ[types.Invalid]
	}
	return true // key-value pairs and type literals: their parts are checked
}

type typeError string

func (e typeError) Error() string { return string(e) }
