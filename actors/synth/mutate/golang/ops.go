package golang

import (
	"go/ast"
	"go/token"
	"go/types"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// operator is a Go operator: a name and a site finder. Every variant of
// every site is computed by the finder; Apply only draws one.
type operator struct {
	name  string
	sites func(a *analysis) []mutate.Site
}

func (o operator) Name() string              { return o.name }
func (o operator) Language() mutate.Language { return mutate.Go }

func (o operator) Sites(f *mutate.File) []mutate.Site {
	if f.Lang != mutate.Go {
		return nil
	}
	a := analyze(f)
	if !a.ok() {
		return nil
	}
	return o.sites(a)
}

func (o operator) Apply(f *mutate.File, s mutate.Site, rng *rand.Rand) (mutate.Edit, error) {
	return mutate.Pick(o, f, s, rng)
}

// Operators returns the Go operators in mutate.OperatorNames order, less
// the two Go has no form of (see Frontend.NotApplicable).
func Operators() []mutate.Operator {
	return []mutate.Operator{
		operator{mutate.FlipComparison, flipComparison},
		operator{mutate.SwapArithmetic, swapArithmetic},
		operator{mutate.SwapBoolean, swapBoolean},
		operator{mutate.OffByOne, offByOne},
		operator{mutate.NegateCond, negateCondition},
		operator{mutate.RemoveStmt, removeStatement},
		operator{mutate.RemoveBranch, removeBranch},
		operator{mutate.RemoveReturn, removeReturn},
		operator{mutate.SwapArgs, swapArguments},
		operator{mutate.ChangeConst, changeConstant},
		operator{mutate.SwapVariable, swapVariable},
		operator{mutate.RemoveGuard, removeGuard},
		operator{mutate.BreakLoopExit, breakLoopExit},
	}
}

// tokenSite makes a site on an operator token at pos with one variant per
// replacement in alts.
func (a *analysis) tokenSite(op string, n ast.Node, pos token.Pos, tok string, alts []string) (mutate.Site, bool) {
	if len(alts) == 0 {
		return mutate.Site{}, false
	}
	start := a.off(pos)
	end := start + len(tok)
	if a.f.Text(start, end) != tok {
		return mutate.Site{}, false
	}
	vs := make([]mutate.Edit, 0, len(alts))
	for _, alt := range alts {
		vs = append(vs, a.edit(start, end, alt, "`"+tok+"` → `"+alt+"`"))
	}
	return a.site(op, n, start, end, vs), true
}

// flipComparisonTable negates or mirrors a comparison; the one-step moves
// (< ↔ <=) are off_by_one's. Both keep the operand types valid.
var flipComparisonTable = map[token.Token][]string{
	token.LSS: {">=", ">"}, token.LEQ: {">", ">="}, token.GTR: {"<=", "<"}, token.GEQ: {"<", "<="},
	token.EQL: {"!="}, token.NEQ: {"=="},
}

// flip_comparison: the operator of every comparison.
func flipComparison(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		if b, ok := n.(*ast.BinaryExpr); ok {
			if s, ok := a.tokenSite(mutate.FlipComparison, b, b.OpPos, b.Op.String(), flipComparisonTable[b.Op]); ok {
				out = append(out, s)
			}
		}
	})
	return out
}

// arithmeticAlts lists the swaps for op on operands of type t (nil when
// unknown): no "-" for strings, no "%" for floats.
func arithmeticAlts(op token.Token, t types.Type) []string {
	str := isString(t)
	switch op {
	case token.ADD, token.ADD_ASSIGN:
		if str {
			return nil
		}
		if op == token.ADD {
			return []string{"-"}
		}
		return []string{"-="}
	case token.SUB:
		return []string{"+"}
	case token.SUB_ASSIGN:
		return []string{"+="}
	case token.MUL:
		return []string{"/"}
	case token.MUL_ASSIGN:
		return []string{"/="}
	case token.QUO:
		if isInteger(t) {
			return []string{"*", "%"}
		}
		return []string{"*"}
	case token.QUO_ASSIGN:
		return []string{"*="}
	case token.REM:
		return []string{"/"}
	case token.REM_ASSIGN:
		return []string{"/="}
	case token.SHL:
		return []string{">>"}
	case token.SHR:
		return []string{"<<"}
	case token.SHL_ASSIGN:
		return []string{">>="}
	case token.SHR_ASSIGN:
		return []string{"<<="}
	case token.AND:
		return []string{"|"}
	case token.OR:
		return []string{"&"}
	case token.XOR:
		return []string{"|"}
	case token.AND_NOT:
		return []string{"&"}
	case token.AND_ASSIGN:
		return []string{"|="}
	case token.OR_ASSIGN:
		return []string{"&="}
	}
	return nil
}

// swap_arithmetic: the operator of an arithmetic or bitwise binary
// expression, of an op-assignment (+= ↔ -=) and of ++/--. String
// concatenation is left alone (string - string does not compile); so is
// a "+" whose operand types are unknown but one side is a string literal.
func swapArithmetic(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		switch x := n.(type) {
		case *ast.BinaryExpr:
			t := a.typeOf(x.X)
			if t == nil {
				t = a.typeOf(x.Y)
			}
			if t == nil && x.Op == token.ADD && (isStringLit(x.X) || isStringLit(x.Y)) {
				return
			}
			if s, ok := a.tokenSite(mutate.SwapArithmetic, x, x.OpPos, x.Op.String(), arithmeticAlts(x.Op, t)); ok {
				out = append(out, s)
			}
		case *ast.AssignStmt:
			if len(x.Lhs) != 1 {
				return
			}
			t := a.typeOf(x.Lhs[0])
			if s, ok := a.tokenSite(mutate.SwapArithmetic, x, x.TokPos, x.Tok.String(), arithmeticAlts(x.Tok, t)); ok {
				out = append(out, s)
			}
		case *ast.IncDecStmt:
			alt := "--"
			if x.Tok == token.DEC {
				alt = "++"
			}
			if s, ok := a.tokenSite(mutate.SwapArithmetic, x, x.TokPos, x.Tok.String(), []string{alt}); ok {
				out = append(out, s)
			}
		}
	})
	return out
}

func isStringLit(e ast.Expr) bool {
	l, ok := e.(*ast.BasicLit)
	return ok && l.Kind == token.STRING
}

// swap_boolean: && ↔ ||.
func swapBoolean(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		b, ok := n.(*ast.BinaryExpr)
		if !ok {
			return
		}
		var alt string
		switch b.Op {
		case token.LAND:
			alt = "||"
		case token.LOR:
			alt = "&&"
		default:
			return
		}
		if s, ok := a.tokenSite(mutate.SwapBoolean, b, b.OpPos, b.Op.String(), []string{alt}); ok {
			out = append(out, s)
		}
	})
	return out
}

var boundaryTable = map[token.Token][]string{token.LSS: {"<="}, token.LEQ: {"<"}, token.GTR: {">="}, token.GEQ: {">"}}

// loopCond reports whether b is a for loop's own condition, which
// break_loop_exit owns.
func (a *analysis) loopCond(b ast.Expr) bool {
	f, ok := a.parent[b].(*ast.ForStmt)
	return ok && f.Cond == b
}

// indexable reports a container whose index is a position: a slice, an
// array (or pointer to one) or a string, not a map or a generic
// instantiation.
func (a *analysis) indexable(x ast.Expr) bool {
	if tv, ok := a.info.Types[x]; ok && tv.IsType() {
		return false
	}
	t := a.typeOf(x)
	if t == nil {
		return false
	}
	u := t.Underlying()
	if p, ok := u.(*types.Pointer); ok {
		u = p.Elem().Underlying()
	}
	switch u := u.(type) {
	case *types.Slice, *types.Array:
		return true
	case *types.Basic:
		return u.Info()&types.IsString != 0
	}
	return false
}

// off_by_one: a slice/array/string index (x[i] → x[i+1]), a slice bound
// (x[a:b] → x[a:b-1]) and a comparison's boundary (< ↔ <=) outside for
// conditions. Only integer-typed positions move, so the mutant compiles.
func offByOne(a *analysis) []mutate.Site {
	var out []mutate.Site
	bounds := func(n ast.Node, es ...ast.Expr) {
		var vs []mutate.Edit
		for _, e := range es {
			if e == nil || !isInteger(a.typeOf(e)) {
				continue
			}
			vs = append(vs,
				a.nodeEdit(e, a.shift(e, +1, true), "bound + 1"),
				a.nodeEdit(e, a.shift(e, -1, true), "bound - 1"))
		}
		if len(vs) > 0 {
			out = append(out, a.site(mutate.OffByOne, n, a.off(n.Pos()), a.off(n.End()), vs))
		}
	}
	a.each(func(n ast.Node) {
		switch x := n.(type) {
		case *ast.IndexExpr:
			if !a.indexable(x.X) || !isInteger(a.typeOf(x.Index)) {
				return
			}
			out = append(out, a.site(mutate.OffByOne, x, a.off(x.Index.Pos()), a.off(x.Index.End()), []mutate.Edit{
				a.nodeEdit(x.Index, a.shift(x.Index, +1, true), "index + 1"),
				a.nodeEdit(x.Index, a.shift(x.Index, -1, true), "index - 1"),
			}))
		case *ast.SliceExpr:
			bounds(x, x.Low, x.High, x.Max)
		case *ast.BinaryExpr:
			if a.loopCond(x) {
				return
			}
			if s, ok := a.tokenSite(mutate.OffByOne, x, x.OpPos, x.Op.String(), boundaryTable[x.Op]); ok {
				out = append(out, s)
			}
		}
	})
	return out
}

// negate_condition: the condition of an if or a for (c → !c, !c → c);
// literal conditions are left alone.
func negateCondition(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		var c ast.Expr
		switch x := n.(type) {
		case *ast.IfStmt:
			c = x.Cond
		case *ast.ForStmt:
			c = x.Cond
		}
		if c == nil {
			return
		}
		if id, ok := c.(*ast.Ident); ok && (id.Name == "true" || id.Name == "false") {
			return
		}
		out = append(out, a.site(mutate.NegateCond, n, a.off(c.Pos()), a.off(c.End()), []mutate.Edit{
			a.nodeEdit(c, a.negate(c), "negate condition"),
		}))
	})
	return out
}

// hangs are calls whose removal deadlocks a test, or kills the whole test
// binary (unlock of an unlocked mutex), instead of failing one test.
var hangs = map[string]bool{"Lock": true, "RLock": true, "Unlock": true, "RUnlock": true, "Done": true, "Signal": true, "Broadcast": true, "close": true}

// remove_statement: a call or receive statement, a plain or op-assignment
// (not :=, whose variables later code needs) or ++/--, in a statement
// list. Sends, defer, go and calls like Lock, Unlock, Done or close are
// left alone: without them a test hangs or crashes instead of failing.
func removeStatement(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		stmt, ok := n.(ast.Stmt)
		if !ok || !a.inStmtList(stmt) {
			return
		}
		switch x := stmt.(type) {
		case *ast.IncDecStmt:
		case *ast.ExprStmt:
			if call, ok := x.X.(*ast.CallExpr); ok {
				name := ""
				switch fn := call.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				if hangs[name] {
					return
				}
			}
		case *ast.AssignStmt:
			if x.Tok == token.DEFINE {
				return
			}
		default:
			return
		}
		out = append(out, a.site(mutate.RemoveStmt, stmt, a.off(stmt.Pos()), a.off(stmt.End()), []mutate.Edit{
			{Replacements: []mutate.Replacement{a.removeStmt(stmt)}, Summary: "remove statement"},
		}))
	})
	return out
}

// terminal reports a statement that leaves the block: return, break,
// continue, goto, or a call to panic.
func terminal(s ast.Stmt) bool {
	switch x := s.(type) {
	case *ast.ReturnStmt, *ast.BranchStmt:
		return true
	case *ast.ExprStmt:
		if c, ok := x.X.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "panic" {
				return true
			}
		}
	}
	return false
}

// isGuard reports an if with no else whose body only leaves: remove_guard's
// territory.
func isGuard(s *ast.IfStmt) bool {
	return s.Else == nil && len(s.Body.List) == 1 && terminal(s.Body.List[0])
}

// remove_branch: an else (if a {A} else {B} → if a {A}), one link of an
// else-if chain (if a {A} else if b {B} else {C} → if a {A} else {C}), a
// case of a switch with several, or a whole if without else that is not a
// guard. select cases are left alone: without one, a test tends to hang.
func removeBranch(a *analysis) []mutate.Site {
	var out []mutate.Site
	add := func(n ast.Node, r mutate.Replacement, summary string) {
		out = append(out, a.site(mutate.RemoveBranch, n, r.Start, max(r.End, r.Start), []mutate.Edit{{Replacements: []mutate.Replacement{r}, Summary: summary}}))
	}
	a.each(func(n ast.Node) {
		switch x := n.(type) {
		case *ast.IfStmt:
			if outer, ok := a.parent[x].(*ast.IfStmt); ok && outer.Else == x {
				// An else-if link: replace it by what follows it.
				if x.Else != nil {
					add(x, a.f.Replace(a.off(x.Pos()), a.off(x.End()), a.text(x.Else)), "remove else-if branch")
				} else {
					add(x, a.f.Replace(a.off(outer.Body.End()), a.off(x.End()), ""), "remove else-if branch")
				}
				return
			}
			if blk, ok := x.Else.(*ast.BlockStmt); ok {
				add(blk, a.f.Replace(a.off(x.Body.End()), a.off(blk.End()), ""), "remove else")
			}
			if x.Else == nil && !isGuard(x) && a.inStmtList(x) {
				add(x, a.removeStmt(x), "remove if")
			}
		case *ast.SwitchStmt, *ast.TypeSwitchStmt:
			var body *ast.BlockStmt
			switch s := x.(type) {
			case *ast.SwitchStmt:
				body = s.Body
			case *ast.TypeSwitchStmt:
				body = s.Body
			}
			if len(body.List) < 2 {
				return
			}
			for _, c := range body.List {
				r, alone := a.f.DeleteLines(a.off(c.Pos()), a.off(c.End()), "")
				if alone {
					add(c, r, "remove case")
				}
			}
		}
	})
	return out
}

// zero writes the zero value of a result of type t declared as texpr: 0,
// "", false, nil, T{} for structs and arrays, *new(T) for type parameters
// and anything else.
func (a *analysis) zero(t types.Type, texpr ast.Expr) string {
	if t != nil {
		switch u := t.Underlying().(type) {
		case *types.Basic:
			switch {
			case u.Info()&types.IsBoolean != 0:
				return "false"
			case u.Info()&types.IsString != 0:
				return `""`
			case u.Info()&types.IsNumeric != 0:
				return "0"
			case u.Kind() == types.UnsafePointer:
				return "nil"
			}
		case *types.Pointer, *types.Slice, *types.Map, *types.Chan, *types.Signature:
			return "nil"
		case *types.Interface:
			if _, tp := t.(*types.TypeParam); !tp {
				return "nil"
			}
		case *types.Struct, *types.Array:
			return a.text(texpr) + "{}"
		}
		return "*new(" + a.text(texpr) + ")"
	}
	switch e := texpr.(type) {
	case *ast.StarExpr, *ast.ArrayType, *ast.MapType, *ast.ChanType, *ast.FuncType, *ast.InterfaceType:
		if at, ok := e.(*ast.ArrayType); ok && at.Len != nil {
			return a.text(at) + "{}"
		}
		return "nil"
	case *ast.Ident:
		switch e.Name {
		case "error", "any":
			return "nil"
		case "string":
			return `""`
		case "bool":
			return "false"
		case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "uintptr",
			"float32", "float64", "byte", "rune", "complex64", "complex128":
			return "0"
		}
	}
	return "*new(" + a.text(texpr) + ")"
}

// remove_return: in return x, y, one result becomes its type's zero value
// (return n, err → return 0, err; return v, nil stays typed); with named
// results, a bare return is a variant too.
func removeReturn(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		ret, ok := n.(*ast.ReturnStmt)
		if !ok || len(ret.Results) == 0 {
			return
		}
		_, ft := a.enclosingFunc(ret)
		if ft == nil || ft.Results == nil {
			return
		}
		var rtypes []ast.Expr
		named := false
		for _, fld := range ft.Results.List {
			k := max(len(fld.Names), 1)
			named = named || len(fld.Names) > 0
			for range k {
				rtypes = append(rtypes, fld.Type)
			}
		}
		if len(rtypes) != len(ret.Results) {
			return // return f() with f returning several values
		}
		var vs []mutate.Edit
		for i, r := range ret.Results {
			var t types.Type
			if tv, ok := a.info.Types[rtypes[i]]; ok && tv.Type != types.Typ[types.Invalid] {
				t = tv.Type
			}
			z := a.zero(t, rtypes[i])
			if a.text(r) == z {
				continue
			}
			vs = append(vs, a.nodeEdit(r, z, "result "+strconv.Itoa(i+1)+" → "+z))
		}
		if named && !a.bareSame(ret, ft) {
			vs = append(vs, a.nodeEdit(ret, "return", "bare return"))
		}
		if len(vs) > 0 {
			out = append(out, a.site(mutate.RemoveReturn, ret, a.off(ret.Pos()), a.off(ret.End()), vs))
		}
	})
	return out
}

// bareSame reports a return whose every result is its named result or
// a zero literal: a bare return there may well mean the same thing.
func (a *analysis) bareSame(ret *ast.ReturnStmt, ft *ast.FuncType) bool {
	i := 0
	for _, fld := range ft.Results.List {
		for _, name := range fld.Names {
			t := a.text(ret.Results[i])
			if t != name.Name && t != "nil" && t != "0" && t != `""` && t != "false" {
				return false
			}
			i++
		}
	}
	return true
}

// noSwap are builtins whose argument order is not a plausible bug or can
// never compile swapped.
var noSwap = map[string]bool{"append": true, "make": true, "new": true, "delete": true, "min": true, "max": true, "complex": true, "panic": true, "print": true, "println": true}

// swap_arguments: two adjacent arguments of a call (f(a, b) → f(b, a))
// whose types are identical, or unknown; one variant per such pair.
func swapArguments(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return
		}
		if tv, ok := a.info.Types[call.Fun]; ok && tv.IsType() {
			return // a conversion
		}
		if id, ok := call.Fun.(*ast.Ident); ok && noSwap[id.Name] {
			if _, builtin := a.info.Uses[id].(*types.Builtin); builtin || a.info.Uses[id] == nil {
				return
			}
		}
		last := len(call.Args)
		if call.Ellipsis.IsValid() {
			last--
		}
		var vs []mutate.Edit
		for i := 0; i+1 < last; i++ {
			x, y := call.Args[i], call.Args[i+1]
			tx, ty := a.typeOf(x), a.typeOf(y)
			if (tx != nil || ty != nil) && (tx == nil || ty == nil || !types.Identical(tx, ty)) {
				continue
			}
			if a.text(x) == a.text(y) {
				continue
			}
			vs = append(vs, mutate.Edit{Replacements: []mutate.Replacement{
				a.f.Replace(a.off(x.Pos()), a.off(x.End()), a.text(y)),
				a.f.Replace(a.off(y.Pos()), a.off(y.End()), a.text(x)),
			}, Summary: "swap arguments " + strconv.Itoa(i+1) + " and " + strconv.Itoa(i+2)})
		}
		if len(vs) > 0 {
			out = append(out, a.site(mutate.SwapArgs, call, a.off(call.Lparen), a.off(call.Rparen)+1, vs))
		}
	})
	return out
}

// numberVariants: 0 ↔ 1, else ±1; floats +1 or ×2.
func numberVariants(lit *ast.BasicLit) []string {
	if lit.Kind == token.INT {
		v, ok := decimal(lit.Value)
		if !ok {
			return nil
		}
		switch v {
		case 0:
			return []string{"1"}
		case 1:
			return []string{"0", "2"}
		}
		return []string{strconv.Itoa(v + 1), strconv.Itoa(v - 1)}
	}
	if strings.ContainsAny(lit.Value, "_xXpPi") {
		return nil
	}
	v, err := strconv.ParseFloat(lit.Value, 64)
	if err != nil {
		return nil
	}
	vs := []string{floatLit(v + 1)}
	if v != 0 {
		vs = append(vs, floatLit(v*2))
	}
	return vs
}

func floatLit(v float64) string {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return s
}

// stringVariants shorten a one-line string literal by its last character
// (an escape sequence counts as one) or empty it; an empty one gets a space.
func (a *analysis) stringVariants(lit *ast.BasicLit) []mutate.Edit {
	v := lit.Value
	if len(v) < 2 || strings.Contains(v, "\n") {
		return nil
	}
	start := a.off(lit.Pos())
	cs, ce := start+1, start+len(v)-1 // content, without quotes
	if cs == ce {
		return []mutate.Edit{a.edit(cs, ce, " ", "empty string → \" \"")}
	}
	content := v[1 : len(v)-1]
	drop := lastUnit(content, v[0] == '"')
	vs := []mutate.Edit{a.edit(ce-drop, ce, "", "drop last character")}
	if drop < len(content) {
		vs = append(vs, a.edit(cs, ce, "", "empty string"))
	}
	return vs
}

// lastUnit is the byte length of the last character of a literal's
// content: an escape sequence in an interpreted string, else a rune.
func lastUnit(content string, interpreted bool) int {
	if interpreted {
		// Find where the last escape starts, if it ends the string.
		for i := len(content) - 1; i >= 0 && i >= len(content)-10; i-- {
			if content[i] != '\\' {
				continue
			}
			bs := 0
			for j := i; j >= 0 && content[j] == '\\'; j-- {
				bs++
			}
			if bs%2 == 1 && validEscape(content[i:]) {
				return len(content) - i
			}
		}
	}
	_, size := utf8.DecodeLastRuneInString(content)
	return size
}

// validEscape reports whether s is exactly one Go escape sequence.
func validEscape(s string) bool {
	if len(s) < 2 || s[0] != '\\' {
		return false
	}
	switch s[1] {
	case 'a', 'b', 'f', 'n', 'r', 't', 'v', '\\', '"', '\'':
		return len(s) == 2
	case 'x':
		return len(s) == 4
	case 'u':
		return len(s) == 6
	case 'U':
		return len(s) == 10
	case '0', '1', '2', '3', '4', '5', '6', '7':
		return len(s) == 4
	}
	return false
}

// change_constant: a decimal integer (0 ↔ 1, ±1), a float (+1, ×2), true ↔
// false, or a one-line string literal (last character dropped, emptied);
// not import paths, struct tags or array lengths in types.
func changeConstant(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		var vs []mutate.Edit
		switch x := n.(type) {
		case *ast.BasicLit:
			switch a.parent[x].(type) {
			case *ast.ImportSpec, *ast.Field, *ast.ArrayType:
				return
			}
			switch x.Kind {
			case token.INT, token.FLOAT:
				for _, v := range numberVariants(x) {
					vs = append(vs, a.nodeEdit(x, v, x.Value+" → "+v))
				}
			case token.STRING:
				vs = a.stringVariants(x)
			}
		case *ast.Ident:
			if x.Name != "true" && x.Name != "false" {
				return
			}
			if obj := a.info.Uses[x]; obj == nil || obj.Parent() != types.Universe {
				return
			}
			alt := map[string]string{"true": "false", "false": "true"}[x.Name]
			vs = []mutate.Edit{a.nodeEdit(x, alt, x.Name+" → "+alt)}
		default:
			return
		}
		if len(vs) > 0 {
			out = append(out, a.site(mutate.ChangeConst, n, a.off(n.Pos()), a.off(n.End()), vs))
		}
	})
	return out
}

// swap_variable: a read of a local variable becomes another local of
// identical type that is in scope there and declared earlier (go/types
// scopes): compiles by construction. One variant per candidate.
func swapVariable(a *analysis) []mutate.Site {
	var out []mutate.Site
	if a.pkg == nil {
		return nil
	}
	pkgScope := a.pkg.Scope()
	a.each(func(n ast.Node) {
		id, ok := n.(*ast.Ident)
		if !ok || id.Name == "_" {
			return
		}
		v, ok := a.info.Uses[id].(*types.Var)
		if !ok || v.IsField() || v.Parent() == nil || v.Parent() == pkgScope || v.Parent() == types.Universe {
			return
		}
		if t := v.Type(); t == nil || t == types.Typ[types.Invalid] {
			return
		}
		if sel, ok := a.parent[id].(*ast.SelectorExpr); ok && sel.Sel == id {
			return
		}
		inner := pkgScope.Innermost(id.Pos())
		if inner == nil {
			return
		}
		seen := map[string]bool{id.Name: true}
		var vs []mutate.Edit
		for s := inner; s != nil && s != pkgScope && s != types.Universe; s = s.Parent() {
			for _, name := range s.Names() {
				if seen[name] || name == "_" {
					continue
				}
				seen[name] = true
				c, ok := s.Lookup(name).(*types.Var)
				if !ok || c == v || c.IsField() || c.Pos() >= id.Pos() || !types.Identical(c.Type(), v.Type()) {
					continue
				}
				if _, vis := inner.LookupParent(name, id.Pos()); vis != c {
					continue // shadowed, or declared after this point
				}
				vs = append(vs, a.nodeEdit(id, name, id.Name+" → "+name))
			}
		}
		if len(vs) > 0 {
			out = append(out, a.site(mutate.SwapVariable, id, a.off(id.Pos()), a.off(id.End()), vs))
		}
	})
	return out
}

// remove_guard: an if without else whose body only returns, breaks,
// continues or panics (if err != nil { return err }, if n < 0 { panic(…) })
// is deleted. A variable the guard alone read would then be unused, which
// Go rejects, so the edit also discards it where it was declared (x, err
// := f() → x, _ := f(); err := f() → _ = f()), the way real code drops an
// error. With an init statement (if err := f(); err != nil {…}) the call
// is kept as a statement.
func removeGuard(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		g, ok := n.(*ast.IfStmt)
		if !ok || !isGuard(g) || !a.inStmtList(g) {
			return
		}
		if g.Init != nil {
			as, ok := g.Init.(*ast.AssignStmt)
			if !ok || len(as.Rhs) != 1 {
				return
			}
			if _, ok := as.Rhs[0].(*ast.CallExpr); !ok {
				return
			}
			r := a.f.Replace(a.off(g.Pos()), a.off(g.End()), a.text(as.Rhs[0]))
			out = append(out, a.site(mutate.RemoveGuard, g, a.off(g.Pos()), a.off(g.End()), []mutate.Edit{{Replacements: []mutate.Replacement{r}, Summary: "remove guard, keep call"}}))
			return
		}
		rs := []mutate.Replacement{a.removeStmt(g)}
		for _, v := range a.onlyReadIn(g) {
			fix, ok := a.discard(v)
			if !ok {
				return
			}
			rs = append(rs, fix...)
		}
		sortReplacements(rs)
		for i := 1; i < len(rs); i++ {
			if rs[i].Start < rs[i-1].End {
				return
			}
		}
		out = append(out, a.site(mutate.RemoveGuard, g, a.off(g.Pos()), a.off(g.End()), []mutate.Edit{{Replacements: rs, Summary: "remove guard"}}))
	})
	return out
}

func sortReplacements(rs []mutate.Replacement) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].Start < rs[j-1].Start; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// onlyReadIn returns the local variables read inside node n and nowhere
// else: removing n leaves them unused.
func (a *analysis) onlyReadIn(n ast.Node) []*types.Var {
	inside := map[*types.Var]bool{}
	ast.Inspect(n, func(x ast.Node) bool {
		if id, ok := x.(*ast.Ident); ok {
			if v, ok := a.info.Uses[id].(*types.Var); ok && !v.IsField() && v.Parent() != a.pkg.Scope() {
				inside[v] = true
			}
		}
		return true
	})
	var out []*types.Var
	for _, id := range a.sortedUses() {
		v, ok := a.info.Uses[id].(*types.Var)
		if !ok || !inside[v] {
			continue
		}
		if id.Pos() < n.Pos() || id.Pos() >= n.End() {
			if a.isRead(id) {
				inside[v] = false
			}
		}
	}
	for _, id := range a.sortedUses() {
		if v, ok := a.info.Uses[id].(*types.Var); ok && inside[v] {
			out = append(out, v)
			inside[v] = false
		}
	}
	return out
}

// sortedUses lists the identifiers that refer to objects, in source order.
func (a *analysis) sortedUses() []*ast.Ident {
	var ids []*ast.Ident
	for _, n := range a.nodes {
		if id, ok := n.(*ast.Ident); ok {
			if _, ok := a.info.Uses[id]; ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// isRead reports whether id is read (not only assigned with =), the way
// Go's "declared and not used" counts uses.
func (a *analysis) isRead(id *ast.Ident) bool {
	if as, ok := a.parent[id].(*ast.AssignStmt); ok && as.Tok == token.ASSIGN {
		for _, l := range as.Lhs {
			if l == id {
				return false
			}
		}
	}
	return true
}

// discard rewrites the := that declares v so v is no longer declared: the
// name becomes _, and := becomes = when no new variable would remain. A
// parameter needs nothing (it may go unused). ok is false when v is
// declared some other way (var, range, type switch): not worth chasing.
func (a *analysis) discard(v *types.Var) ([]mutate.Replacement, bool) {
	for _, n := range a.nodes {
		if ft, ok := n.(*ast.FuncType); ok {
			for _, fl := range []*ast.FieldList{ft.Params, ft.Results} {
				if fl == nil {
					continue
				}
				for _, fld := range fl.List {
					for _, name := range fld.Names {
						if a.info.Defs[name] == v {
							return nil, true // parameters may go unused
						}
					}
				}
			}
		}
	}
	for _, n := range a.nodes {
		as, ok := n.(*ast.AssignStmt)
		if !ok || as.Tok != token.DEFINE {
			continue
		}
		idx := -1
		others := 0
		for i, l := range as.Lhs {
			id, ok := l.(*ast.Ident)
			if !ok {
				continue
			}
			if a.info.Defs[id] == v {
				idx = i
			} else if a.info.Defs[id] != nil && id.Name != "_" {
				others++
			}
		}
		if idx < 0 {
			continue
		}
		id := as.Lhs[idx]
		if len(as.Lhs) == 1 {
			// err := f() → _ = f()
			return []mutate.Replacement{a.f.Replace(a.off(id.Pos()), a.off(as.TokPos)+len(":="), "_ =")}, true
		}
		rs := []mutate.Replacement{a.f.Replace(a.off(id.Pos()), a.off(id.End()), "_")}
		if others == 0 {
			rs = append(rs, a.f.Replace(a.off(as.TokPos), a.off(as.TokPos)+len(":="), "="))
		}
		return rs, true
	}
	return nil, false
}

// break_loop_exit: a break that leaves a loop is removed or becomes
// continue; a continue becomes break; a for condition's boundary moves (i
// < n → i <= n); a range over an integer moves by one. Bare for {} loops
// are left alone: without their break the mutant hangs instead of failing.
func breakLoopExit(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n ast.Node) {
		switch x := n.(type) {
		case *ast.BranchStmt:
			switch x.Tok {
			case token.BREAK:
				loop := a.loopOf(x)
				if loop == nil {
					return
				}
				if f, ok := loop.(*ast.ForStmt); ok && f.Cond == nil {
					return
				}
				var vs []mutate.Edit
				if a.inStmtList(x) {
					vs = append(vs, mutate.Edit{Replacements: []mutate.Replacement{a.removeStmt(x)}, Summary: "remove break"})
				}
				if a.directLoop(x) != nil || x.Label != nil {
					vs = append(vs, a.nodeEdit(x, strings.Replace(a.text(x), "break", "continue", 1), "break → continue"))
				}
				if len(vs) > 0 {
					out = append(out, a.site(mutate.BreakLoopExit, x, a.off(x.Pos()), a.off(x.End()), vs))
				}
			case token.CONTINUE:
				if x.Label != nil || a.directLoop(x) == nil {
					return
				}
				out = append(out, a.site(mutate.BreakLoopExit, x, a.off(x.Pos()), a.off(x.End()), []mutate.Edit{a.nodeEdit(x, "break", "continue → break")}))
			}
		case *ast.ForStmt:
			b, ok := x.Cond.(*ast.BinaryExpr)
			if !ok {
				return
			}
			if s, ok := a.tokenSite(mutate.BreakLoopExit, b, b.OpPos, b.Op.String(), boundaryTable[b.Op]); ok {
				out = append(out, s)
			}
		case *ast.RangeStmt:
			if x.X == nil || !isInteger(a.typeOf(x.X)) {
				return
			}
			out = append(out, a.site(mutate.BreakLoopExit, x, a.off(x.X.Pos()), a.off(x.X.End()), []mutate.Edit{
				a.nodeEdit(x.X, a.shift(x.X, -1, false), "range bound - 1"),
				a.nodeEdit(x.X, a.shift(x.X, +1, false), "range bound + 1"),
			}))
		}
	})
	return out
}
