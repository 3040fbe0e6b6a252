package python

import (
	"runtime"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/frognano/frognano/actors/synth/mutate"
	ts "github.com/tree-sitter/go-tree-sitter"
)

// analysis is one parse of a file, shared by every operator through
// File.Memo.
type analysis struct {
	f     *mutate.File
	root  *node
	tree  *ts.Tree // the C tree, kept for incremental re-parses; closed when the analysis is collected
	err   error
	nodes []*node // pre-order
}

type memoKey struct{}

func analyze(f *mutate.File) *analysis {
	return f.Memo(memoKey{}, func() any {
		root, tree, err := parse(f.Src)
		a := &analysis{f: f, root: root, tree: tree, err: err}
		if tree != nil {
			runtime.AddCleanup(a, func(t *ts.Tree) { t.Close() }, tree)
		}
		if root != nil {
			var walk func(n *node)
			walk = func(n *node) {
				a.nodes = append(a.nodes, n)
				for _, k := range n.kids {
					walk(k)
				}
			}
			walk(root)
		}
		return a
	}).(*analysis)
}

func (a *analysis) ok() bool { return a.root != nil && a.err == nil }

func (a *analysis) text(n *node) string { return string(a.f.Src[n.start:n.end]) }

// each calls fn for every node of one of kinds, in source order.
func (a *analysis) each(fn func(n *node), kinds ...string) {
	for _, n := range a.nodes {
		for _, k := range kinds {
			if n.kind == k {
				fn(n)
				break
			}
		}
	}
}

// funcOf names the function enclosing n, qualified by enclosing classes
// and functions ("Parser.parse.inner").
func (a *analysis) funcOf(n *node) mutate.Func {
	var def *node
	var parts []string
	for p := n.parent; p != nil; p = p.parent {
		if p.kind != "function_definition" && p.kind != "class_definition" {
			continue
		}
		if p.kind == "function_definition" && def == nil {
			def = p
		}
		if def != nil {
			if name := p.child("name"); name != nil {
				parts = append(parts, a.text(name))
			}
		}
	}
	if def == nil {
		return mutate.Func{}
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return mutate.Func{Name: strings.Join(parts, "."), StartLine: a.f.Line(def.start), EndLine: a.f.Line(max(def.start, def.end-1))}
}

// site builds a site over [start, end) at n.
func (a *analysis) site(op string, n *node, start, end int, variants []mutate.Edit) mutate.Site {
	s := mutate.Site{Operator: op, Start: start, End: end, Func: a.funcOf(n), Node: n.kind, Variants: variants}
	a.f.Span(&s)
	return s
}

// edit is a one-replacement edit of Src[start:end].
func (a *analysis) edit(start, end int, s, summary string) mutate.Edit {
	return mutate.Edit{Replacements: []mutate.Replacement{a.f.Replace(start, end, s)}, Summary: summary}
}

// sole reports whether stmt is the only statement of its block, so removing
// it must leave "pass" behind.
func sole(stmt *node) bool {
	p := stmt.parent
	if p == nil || p.kind != "block" {
		return false
	}
	kids := p.namedKids()
	return len(kids) == 1 && kids[0] == stmt
}

// removeStmt deletes a statement (and its line), or turns it into "pass"
// when it is its block's only one. ok is false when another statement
// shares its line, where a bare deletion would leave a stray ";".
func (a *analysis) removeStmt(stmt *node) (mutate.Replacement, bool) {
	if sole(stmt) {
		return a.f.Replace(stmt.start, stmt.end, "pass"), true
	}
	if stmt.parent == nil || (stmt.parent.kind != "block" && stmt.parent.kind != "module") {
		return mutate.Replacement{}, false
	}
	return a.f.DeleteLines(stmt.start, stmt.end, "#")
}

// ownLine reports whether n starts its line (only blanks before it).
func (a *analysis) ownLine(n *node) bool {
	return strings.TrimLeft(a.f.Text(a.f.LineStart(n.start), n.start), " \t") == ""
}

// decimal parses a plain decimal integer literal.
func decimal(s string) (int, bool) {
	if s == "" || len(s) > 12 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	return v, err == nil
}

// arithSafe are kinds that bind at least as tightly as "+", so "X + 1"
// needs no parentheses.
var arithSafe = map[string]bool{
	"identifier": true, "integer": true, "float": true, "call": true, "attribute": true,
	"subscript": true, "parenthesized_expression": true, "list": true, "tuple": true,
	"dictionary": true, "string": true, "unary_operator": true, "await": true,
	"true": true, "false": true, "none": true,
}

// tighterThanShift are the binary operators "X op Y + 1" keeps together.
var tighterThanShift = map[string]bool{"+": true, "-": true, "*": true, "/": true, "//": true, "%": true, "**": true, "@": true}

// shift writes expression n plus delta (±1) the way a programmer would:
// literals are folded (3 → 4, n - 1 → n), so the mutant never reads
// "n - 1 + 1" (which would also be no bug at all).
func (a *analysis) shift(n *node, delta int) string {
	t := a.text(n)
	switch n.kind {
	case "integer":
		if v, ok := decimal(t); ok {
			return strconv.Itoa(v + delta)
		}
	case "unary_operator":
		arg := n.child("argument")
		if op := n.child("operator"); op != nil && op.kind == "-" && arg != nil && arg.kind == "integer" {
			if v, ok := decimal(a.text(arg)); ok {
				return strconv.Itoa(-v + delta)
			}
		}
	case "binary_operator":
		op, l, r := n.child("operator"), n.child("left"), n.child("right")
		if op != nil && l != nil && r != nil && (op.kind == "+" || op.kind == "-") && r.kind == "integer" {
			if v, ok := decimal(a.text(r)); ok {
				if op.kind == "-" {
					v = -v
				}
				v += delta
				left := a.text(l)
				switch {
				case v == 0:
					return left
				case v > 0:
					return left + " + " + strconv.Itoa(v)
				default:
					return left + " - " + strconv.Itoa(-v)
				}
			}
		}
	}
	if n.kind == "binary_operator" {
		if op := n.child("operator"); op == nil || !tighterThanShift[op.kind] {
			t = "(" + t + ")"
		}
	} else if !arithSafe[n.kind] {
		t = "(" + t + ")"
	}
	if delta < 0 {
		return t + " - " + strconv.Itoa(-delta)
	}
	return t + " + " + strconv.Itoa(delta)
}

// negate writes "not c", unwrapping an existing "not" and parenthesizing
// what "not" would otherwise split ("not a and b").
func (a *analysis) negate(n *node) string {
	switch n.kind {
	case "not_operator":
		if arg := n.child("argument"); arg != nil {
			return a.text(arg)
		}
	case "boolean_operator", "conditional_expression", "lambda", "named_expression":
		return "not (" + a.text(n) + ")"
	}
	return "not " + a.text(n)
}

// inType reports whether n sits in a type annotation, where mutating
// changes nothing at run time.
func inType(n *node) bool {
	for p := n.parent; p != nil; p = p.parent {
		switch p.kind {
		case "type":
			return true
		case "block", "module", "expression_statement":
			return false
		}
	}
	return false
}

// dropLastUnit removes the last character of a string literal's content,
// taking an escape sequence ("\n") whole so the literal stays well formed.
func (a *analysis) dropLastUnit(content *node) (int, int) {
	if n := len(content.kids); n > 0 {
		last := content.kids[n-1]
		if last.end == content.end && (last.kind == "escape_sequence" || last.kind == "escape_interpolation") {
			return last.start, last.end
		}
	}
	_, size := utf8.DecodeLastRune(a.f.Src[content.start:content.end])
	return content.end - size, content.end
}

// loopOf returns the loop a break/continue belongs to.
func loopOf(n *node) *node {
	return n.ancestor([]string{"for_statement", "while_statement"}, []string{"function_definition", "class_definition", "lambda"})
}

// infinite reports a "while True:" style loop, whose only exit is break.
func (a *analysis) infinite(loop *node) bool {
	if loop == nil || loop.kind != "while_statement" {
		return false
	}
	c := loop.child("condition")
	if c == nil {
		return false
	}
	t := a.text(c)
	return c.kind == "true" || t == "1"
}
