package golang

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// analysis is one parse and type-check of a file, shared by every operator
// through File.Memo.
//
// The file is type-checked alone: imports resolve to empty fake packages
// and names from the package's other files are undefined. go/types keeps
// going past those errors and marks what depends on them invalid, so every
// expression built from local declarations still has its type. Operators
// use types where they are known and refuse edits that cannot compile
// (string - string); Check compares a mutant's type errors with the
// original's.
type analysis struct {
	f      *mutate.File
	fset   *token.FileSet
	tf     *token.File
	file   *ast.File
	err    error
	info   *types.Info
	pkg    *types.Package
	errs   map[string]int // the original's type errors, by normalised message
	parent map[ast.Node]ast.Node
	nodes  []ast.Node // pre-order

	mu        sync.Mutex
	skeletons map[int]*skeleton // by index in file.Decls; nil when the skeleton does not parse
}

type memoKey struct{}

func analyze(f *mutate.File) *analysis {
	return f.Memo(memoKey{}, func() any {
		a := &analysis{f: f, fset: token.NewFileSet()}
		a.file, a.err = parser.ParseFile(a.fset, f.Path, f.Src, parser.SkipObjectResolution)
		if a.err != nil {
			return a
		}
		a.tf = a.fset.File(a.file.Pos())
		a.info, a.pkg, a.errs = typecheck(a.fset, a.file, nil)
		a.parent = map[ast.Node]ast.Node{}
		var stack []ast.Node
		ast.Inspect(a.file, func(n ast.Node) bool {
			if n == nil {
				stack = stack[:len(stack)-1]
				return true
			}
			if len(stack) > 0 {
				a.parent[n] = stack[len(stack)-1]
			}
			stack = append(stack, n)
			a.nodes = append(a.nodes, n)
			return true
		})
		return a
	}).(*analysis)
}

func (a *analysis) ok() bool { return a.err == nil }

// softImporter fails every import. go/types then declares a fake package
// whose members are all invalid, silently: the file is checked for what it
// says itself.
type softImporter struct{}

var errNoImports = errors.New("imports are not loaded when mutating one file")

func (softImporter) Import(string) (*types.Package, error) { return nil, errNoImports }

// typecheck checks file alone and returns the type facts and its errors.
// usedElsewhere lists imports used by code the file being checked leaves
// out (see skeleton), so that they are not reported unused.
func typecheck(fset *token.FileSet, file *ast.File, usedElsewhere map[string]bool) (*types.Info, *types.Package, map[string]int) {
	info := &types.Info{
		Types: map[ast.Expr]types.TypeAndValue{},
		Defs:  map[*ast.Ident]types.Object{},
		Uses:  map[*ast.Ident]types.Object{},
	}
	errs := map[string]int{}
	conf := types.Config{
		Importer:    softImporter{},
		FakeImportC: true,
		Error: func(err error) {
			if te, ok := err.(types.Error); ok {
				errs[normalise(te.Msg)]++
				return
			}
			errs[normalise(err.Error())]++
		},
	}
	pkg, _ := conf.Check(file.Name.Name, fset, []*ast.File{file}, info)
	// go/types does not report an unused import of a package it could not
	// load, but the compiler will: count them here.
	used := map[string]bool{}
	for p := range usedElsewhere {
		used[p] = true
	}
	for _, obj := range info.Uses {
		if pn, ok := obj.(*types.PkgName); ok {
			used[pn.Imported().Path()] = true
		}
	}
	for _, spec := range file.Imports {
		path, err := strconv.Unquote(spec.Path.Value)
		if err != nil || path == "C" || (spec.Name != nil && (spec.Name.Name == "_" || spec.Name.Name == ".")) {
			continue
		}
		if !used[path] {
			errs[strconv.Quote(path)+" imported and not used"]++
		}
	}
	return info, pkg, errs
}

// skeleton is the original file reduced for checking mutants of one
// function: every other function keeps its signature but loses its body.
// Nearly every mutant changes one function body, and parsing and checking
// the skeleton plus that body costs a fraction of the whole file.
type skeleton struct {
	prefix, suffix string         // the skeleton before and after the function
	start, end     int            // the function's byte range in the original
	errs           map[string]int // the original function's errors in the skeleton
	usedElsewhere  map[string]bool
}

// skeletonFor returns (and caches) the skeleton around file.Decls[i].
func (a *analysis) skeletonFor(i int) *skeleton {
	a.mu.Lock()
	defer a.mu.Unlock()
	if sk, ok := a.skeletons[i]; ok {
		return sk
	}
	d := a.file.Decls[i]
	sk := &skeleton{start: a.off(d.Pos()), end: a.off(d.End()), usedElsewhere: map[string]bool{}}
	for id, obj := range a.info.Uses {
		if pn, ok := obj.(*types.PkgName); ok && (id.Pos() < d.Pos() || id.Pos() >= d.End()) {
			sk.usedElsewhere[pn.Imported().Path()] = true
		}
	}
	var pre, suf strings.Builder
	at := 0
	for j := range i {
		if fd, ok := a.file.Decls[j].(*ast.FuncDecl); ok && fd.Body != nil {
			pre.Write(a.f.Src[at:a.off(fd.Body.Lbrace)])
			at = a.off(fd.Body.Rbrace) + 1
		}
	}
	pre.Write(a.f.Src[at:sk.start])
	at = sk.end
	for _, dj := range a.file.Decls[i+1:] {
		if fd, ok := dj.(*ast.FuncDecl); ok && fd.Body != nil {
			suf.Write(a.f.Src[at:a.off(fd.Body.Lbrace)])
			at = a.off(fd.Body.Rbrace) + 1
		}
	}
	suf.Write(a.f.Src[at:])
	sk.prefix, sk.suffix = pre.String(), suf.String()
	fset := token.NewFileSet()
	if file, err := parser.ParseFile(fset, a.f.Path, sk.prefix+a.f.Text(sk.start, sk.end)+sk.suffix, parser.SkipObjectResolution); err == nil {
		_, _, sk.errs = typecheck(fset, file, sk.usedElsewhere)
	} else {
		sk = nil
	}
	if a.skeletons == nil {
		a.skeletons = map[int]*skeleton{}
	}
	a.skeletons[i] = sk
	return sk
}

// funcDeclAt returns the index of the function declaration whose body
// holds the byte range [lo, hi) of the original, or -1.
func (a *analysis) funcDeclAt(lo, hi int) int {
	for i, d := range a.file.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		if a.off(fd.Body.Lbrace) < lo && hi <= a.off(fd.Body.Rbrace) {
			return i
		}
	}
	return -1
}

var position = regexp.MustCompile(`[\w./-]*\.go:\d+(:\d+)?`)

// normalise drops positions from an error message, so the same error in a
// mutant (whose lines may have moved) matches the original's.
func normalise(msg string) string { return position.ReplaceAllString(msg, "") }

func (a *analysis) off(p token.Pos) int { return a.tf.Offset(p) }

func (a *analysis) text(n ast.Node) string { return a.f.Text(a.off(n.Pos()), a.off(n.End())) }

// typeOf returns the type of e, or nil where go/types could not know it.
func (a *analysis) typeOf(e ast.Expr) types.Type {
	tv, ok := a.info.Types[e]
	if !ok || tv.Type == nil || tv.Type == types.Typ[types.Invalid] {
		return nil
	}
	return tv.Type
}

func basicInfo(t types.Type) types.BasicInfo {
	if t == nil {
		return 0
	}
	if b, ok := t.Underlying().(*types.Basic); ok {
		return b.Info()
	}
	return 0
}

func isInteger(t types.Type) bool { return basicInfo(t)&types.IsInteger != 0 }
func isString(t types.Type) bool  { return basicInfo(t)&types.IsString != 0 }

// funcOf names the function declaration enclosing n ("Name", "T.Name",
// "(*T).Name"); function literals belong to their declaration.
func (a *analysis) funcOf(n ast.Node) mutate.Func {
	decls := a.file.Decls
	i := sort.Search(len(decls), func(i int) bool { return decls[i].End() > n.Pos() })
	if i == len(decls) {
		return mutate.Func{}
	}
	fd, ok := decls[i].(*ast.FuncDecl)
	if !ok || fd.Pos() > n.Pos() {
		return mutate.Func{}
	}
	name := fd.Name.Name
	if fd.Recv != nil && len(fd.Recv.List) == 1 {
		recv := fd.Recv.List[0].Type
		star := false
		if s, ok := recv.(*ast.StarExpr); ok {
			recv, star = s.X, true
		}
		switch r := recv.(type) {
		case *ast.IndexExpr:
			recv = r.X
		case *ast.IndexListExpr:
			recv = r.X
		}
		rn := a.text(recv)
		if star {
			name = "(*" + rn + ")." + name
		} else {
			name = rn + "." + name
		}
	}
	return mutate.Func{Name: name, StartLine: a.f.Line(a.off(fd.Pos())), EndLine: a.f.Line(a.off(fd.End()) - 1)}
}

// site builds a site over [start, end) at n.
func (a *analysis) site(op string, n ast.Node, start, end int, variants []mutate.Edit) mutate.Site {
	s := mutate.Site{Operator: op, Start: start, End: end, Func: a.funcOf(n), Node: strings.TrimPrefix(fmt.Sprintf("%T", n), "*ast."), Variants: variants}
	a.f.Span(&s)
	return s
}

// edit is a one-replacement edit of Src[start:end].
func (a *analysis) edit(start, end int, s, summary string) mutate.Edit {
	return mutate.Edit{Replacements: []mutate.Replacement{a.f.Replace(start, end, s)}, Summary: summary}
}

// nodeEdit replaces node n's text.
func (a *analysis) nodeEdit(n ast.Node, s, summary string) mutate.Edit {
	return a.edit(a.off(n.Pos()), a.off(n.End()), s, summary)
}

// each calls fn for every node, in source order.
func (a *analysis) each(fn func(n ast.Node)) {
	for _, n := range a.nodes {
		fn(n)
	}
}

// inStmtList reports whether stmt sits directly in a statement list (a
// block or a case body), where it can be deleted.
func (a *analysis) inStmtList(stmt ast.Stmt) bool {
	switch a.parent[stmt].(type) {
	case *ast.BlockStmt, *ast.CaseClause, *ast.CommClause:
		return true
	}
	return false
}

// removeStmt deletes a statement together with its line.
func (a *analysis) removeStmt(stmt ast.Stmt) mutate.Replacement {
	r, _ := a.f.DeleteLines(a.off(stmt.Pos()), a.off(stmt.End()), "//")
	return r
}

// primary are expressions that "!" or "+ 1" can follow or precede without
// parentheses.
func primary(e ast.Expr) bool {
	switch e.(type) {
	case *ast.Ident, *ast.BasicLit, *ast.CallExpr, *ast.SelectorExpr, *ast.IndexExpr, *ast.IndexListExpr,
		*ast.SliceExpr, *ast.ParenExpr, *ast.CompositeLit, *ast.TypeAssertExpr, *ast.StarExpr:
		return true
	}
	return false
}

// negate writes !c, unwrapping an existing ! and parenthesizing what !
// would split.
func (a *analysis) negate(c ast.Expr) string {
	if u, ok := c.(*ast.UnaryExpr); ok && u.Op == token.NOT {
		if p, ok := u.X.(*ast.ParenExpr); ok {
			return a.text(p.X)
		}
		return a.text(u.X)
	}
	if primary(c) {
		return "!" + a.text(c)
	}
	return "!(" + a.text(c) + ")"
}

// intLit parses a plain decimal integer literal.
func intLit(e ast.Expr) (int, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.INT {
		return 0, false
	}
	return decimal(lit.Value)
}

func decimal(s string) (int, bool) {
	if s == "" || len(s) > 12 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	v := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// shift writes e plus delta the way gofmt would print it (compact inside
// an index, spaced elsewhere), folding literals so that the mutant never
// reads n-1+1.
func (a *analysis) shift(e ast.Expr, delta int, compact bool) string {
	op := func(neg bool) string {
		s := " + "
		if neg {
			s = " - "
		}
		if compact {
			s = strings.TrimSpace(s)
		}
		return s
	}
	if v, ok := intLit(e); ok {
		if v+delta >= 0 {
			return strconv.Itoa(v + delta)
		}
	}
	if b, ok := e.(*ast.BinaryExpr); ok && (b.Op == token.ADD || b.Op == token.SUB) {
		if v, ok := intLit(b.Y); ok {
			if b.Op == token.SUB {
				v = -v
			}
			v += delta
			left := a.text(b.X)
			switch {
			case v == 0:
				return left
			case v > 0:
				return left + op(false) + strconv.Itoa(v)
			default:
				return left + op(true) + strconv.Itoa(-v)
			}
		}
	}
	t := a.text(e)
	if _, ok := e.(*ast.BinaryExpr); !ok && !primary(e) {
		if _, unary := e.(*ast.UnaryExpr); !unary {
			t = "(" + t + ")"
		}
	}
	if delta < 0 {
		return t + op(true) + strconv.Itoa(-delta)
	}
	return t + op(false) + strconv.Itoa(delta)
}

// enclosingFunc returns the innermost function (declaration or literal)
// around n and its signature type.
func (a *analysis) enclosingFunc(n ast.Node) (ast.Node, *ast.FuncType) {
	for p := a.parent[n]; p != nil; p = a.parent[p] {
		switch f := p.(type) {
		case *ast.FuncLit:
			return f, f.Type
		case *ast.FuncDecl:
			return f, f.Type
		}
	}
	return nil, nil
}

// loopOf returns the for/range statement a break or continue leaves, or
// nil when the innermost breakable statement is a switch or select (where
// break means something else) or a label points elsewhere.
func (a *analysis) loopOf(br *ast.BranchStmt) ast.Stmt {
	for p := a.parent[br]; p != nil; p = a.parent[p] {
		switch s := p.(type) {
		case *ast.ForStmt, *ast.RangeStmt:
			if br.Label == nil {
				return s.(ast.Stmt)
			}
			if l, ok := a.parent[s].(*ast.LabeledStmt); ok && l.Label.Name == br.Label.Name {
				return s.(ast.Stmt)
			}
		case *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
			if br.Label == nil && br.Tok == token.BREAK {
				return nil
			}
		case *ast.FuncLit, *ast.FuncDecl:
			return nil
		}
	}
	return nil
}

// directLoop is loopOf for continue → break: the loop must also be the
// innermost breakable statement, or break would leave a switch instead.
func (a *analysis) directLoop(br *ast.BranchStmt) ast.Stmt {
	if br.Label != nil {
		return nil
	}
	for p := a.parent[br]; p != nil; p = a.parent[p] {
		switch s := p.(type) {
		case *ast.ForStmt, *ast.RangeStmt:
			return s.(ast.Stmt)
		case *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt, *ast.FuncLit, *ast.FuncDecl:
			return nil
		}
	}
	return nil
}
