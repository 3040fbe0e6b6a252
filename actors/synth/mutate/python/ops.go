package python

import (
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// operator is a Python operator: a name and a site finder. Every variant of
// every site is computed by the finder; Apply only draws one.
type operator struct {
	name  string
	sites func(a *analysis) []mutate.Site
}

func (o operator) Name() string              { return o.name }
func (o operator) Language() mutate.Language { return mutate.Python }

func (o operator) Sites(f *mutate.File) []mutate.Site {
	if f.Lang != mutate.Python {
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

// Operators returns the Python operators in mutate.OperatorNames order.
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
		operator{mutate.UnwrapTry, unwrapTry},
		operator{mutate.BreakLoopExit, breakLoopExit},
		operator{mutate.ChangeDefault, changeDefault},
	}
}

// tokenSites makes one site per operator token of the given kinds, with a
// variant per replacement token in table.
func tokenSites(a *analysis, op string, tok *node, table map[string][]string) (mutate.Site, bool) {
	alts := table[tok.kind]
	if len(alts) == 0 {
		return mutate.Site{}, false
	}
	vs := make([]mutate.Edit, 0, len(alts))
	for _, alt := range alts {
		vs = append(vs, a.edit(tok.start, tok.end, alt, "`"+tok.kind+"` → `"+alt+"`"))
	}
	return a.site(op, tok.parent, tok.start, tok.end, vs), true
}

// flipComparisonTable negates or mirrors a comparison; the one-step moves
// (< ↔ <=) are off_by_one's.
var flipComparisonTable = map[string][]string{
	"<": {">=", ">"}, "<=": {">", ">="}, ">": {"<=", "<"}, ">=": {"<", "<="},
	"==": {"!="}, "!=": {"=="}, "in": {"not in"}, "not in": {"in"}, "is": {"is not"}, "is not": {"is"},
}

// flip_comparison: every comparison operator in a comparison_operator
// (chains give one site per operator).
func flipComparison(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		for _, tok := range n.children("operators") {
			if s, ok := tokenSites(a, mutate.FlipComparison, tok, flipComparisonTable); ok {
				out = append(out, s)
			}
		}
	}, "comparison_operator")
	return out
}

var arithmeticTable = map[string][]string{
	"+": {"-"}, "-": {"+"}, "*": {"/", "+"}, "/": {"*", "//"}, "//": {"/", "%"}, "%": {"//"},
	"**": {"*"}, "<<": {">>"}, ">>": {"<<"}, "&": {"|"}, "|": {"&"}, "^": {"|"},
	"+=": {"-="}, "-=": {"+="}, "*=": {"/="}, "/=": {"*="}, "//=": {"/="}, "%=": {"//="},
	"<<=": {">>="}, ">>=": {"<<="}, "&=": {"|="}, "|=": {"&="}, "^=": {"|="},
}

// isStringy reports a string operand, where "+" is concatenation and "%"
// formatting: swapping those only raises TypeError, a crash not a bug.
func isStringy(n *node) bool {
	return n != nil && (n.kind == "string" || n.kind == "concatenated_string")
}

// swap_arithmetic: the operator of a binary_operator or an
// augmented_assignment, except string concatenation and %-formatting.
func swapArithmetic(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		tok := n.child("operator")
		if tok == nil || isStringy(n.child("left")) || isStringy(n.child("right")) || inType(n) {
			return
		}
		if s, ok := tokenSites(a, mutate.SwapArithmetic, tok, arithmeticTable); ok {
			out = append(out, s)
		}
	}, "binary_operator", "augmented_assignment")
	return out
}

// swap_boolean: and ↔ or in a boolean_operator.
func swapBoolean(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		if tok := n.child("operator"); tok != nil {
			if s, ok := tokenSites(a, mutate.SwapBoolean, tok, map[string][]string{"and": {"or"}, "or": {"and"}}); ok {
				out = append(out, s)
			}
		}
	}, "boolean_operator")
	return out
}

var boundaryTable = map[string][]string{"<": {"<="}, "<=": {"<"}, ">": {">="}, ">=": {">"}}

// rangeCall returns the positional arguments of a call to range().
func (a *analysis) rangeCall(n *node) []*node {
	if n.kind != "call" {
		return nil
	}
	fn, args := n.child("function"), n.child("arguments")
	if fn == nil || args == nil || args.kind != "argument_list" || a.text(fn) != "range" {
		return nil
	}
	pos := args.namedKids()
	if len(pos) == 0 || len(pos) > 3 {
		return nil
	}
	for _, p := range pos {
		if p.kind == "keyword_argument" || p.kind == "list_splat" || p.kind == "dictionary_splat" {
			return nil
		}
	}
	return pos
}

// rangeVariants moves range()'s stop by one either way and its start up
// by one.
func (a *analysis) rangeVariants(args []*node) []mutate.Edit {
	stop := args[0]
	if len(args) > 1 {
		stop = args[1]
	}
	vs := []mutate.Edit{
		a.edit(stop.start, stop.end, a.shift(stop, -1), "range stop - 1"),
		a.edit(stop.start, stop.end, a.shift(stop, +1), "range stop + 1"),
	}
	if len(args) > 1 {
		vs = append(vs, a.edit(args[0].start, args[0].end, a.shift(args[0], +1), "range start + 1"))
	}
	return vs
}

// loopHeader reports whether n is a loop's own condition or iterable,
// which break_loop_exit owns.
func loopHeader(n *node) bool {
	p := n.parent
	return p != nil && ((p.kind == "while_statement" && n.field == "condition") || (p.kind == "for_statement" && n.field == "right"))
}

// typeLike reports an index that is a type ("Dict[str, int]"), not a
// position.
func (a *analysis) typeLike(n *node) bool {
	t := a.text(n)
	switch t {
	case "int", "str", "float", "bool", "bytes", "object", "type", "None", "Any":
		return true
	}
	return n.kind == "identifier" && t != "" && t[0] >= 'A' && t[0] <= 'Z'
}

// off_by_one: range() bounds (outside loop headers), a subscript's index
// (x[i] → x[i + 1], x[0] → x[1]), a slice bound, and a comparison's
// boundary (< ↔ <=) outside loop conditions.
func offByOne(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		switch n.kind {
		case "call":
			if args := a.rangeCall(n); args != nil && !loopHeader(n) {
				out = append(out, a.site(mutate.OffByOne, n, n.start, n.end, a.rangeVariants(args)))
			}
		case "subscript":
			idx := n.children("subscript")
			val := n.child("value")
			if len(idx) != 1 || inType(n) || val == nil || a.typeLike(val) {
				return
			}
			i := idx[0]
			switch i.kind {
			case "slice":
				var vs []mutate.Edit
				for _, b := range i.namedKids() {
					if b.kind == "string" || b.kind == "none" {
						continue
					}
					vs = append(vs,
						a.edit(b.start, b.end, a.shift(b, +1), "slice bound + 1"),
						a.edit(b.start, b.end, a.shift(b, -1), "slice bound - 1"))
				}
				if len(vs) > 0 {
					out = append(out, a.site(mutate.OffByOne, n, i.start, i.end, vs))
				}
			case "string", "concatenated_string", "tuple", "none", "true", "false", "float", "list_splat":
			default:
				if a.typeLike(i) {
					return
				}
				out = append(out, a.site(mutate.OffByOne, n, i.start, i.end, []mutate.Edit{
					a.edit(i.start, i.end, a.shift(i, +1), "index + 1"),
					a.edit(i.start, i.end, a.shift(i, -1), "index - 1"),
				}))
			}
		case "comparison_operator":
			if loopHeader(n) {
				return
			}
			for _, tok := range n.children("operators") {
				if s, ok := tokenSites(a, mutate.OffByOne, tok, boundaryTable); ok {
					out = append(out, s)
				}
			}
		}
	}, "call", "subscript", "comparison_operator")
	return out
}

// negate_condition: the condition of if, elif, while and of a conditional
// expression (c → not c, not c → c). Literal conditions (while True) are
// left alone: negating them only disables code.
func negateCondition(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		var c *node
		if n.kind == "conditional_expression" {
			if kids := n.namedKids(); len(kids) == 3 {
				c = kids[1]
			}
		} else {
			c = n.child("condition")
		}
		if c == nil || c.kind == "true" || c.kind == "false" || c.kind == "integer" {
			return
		}
		out = append(out, a.site(mutate.NegateCond, n, c.start, c.end, []mutate.Edit{
			a.edit(c.start, c.end, a.negate(c), "negate condition"),
		}))
	}, "if_statement", "elif_clause", "while_statement", "conditional_expression")
	return out
}

// removable reports an expression statement worth deleting: not a
// docstring or bare string, not "...".
func removable(stmt *node) bool {
	kids := stmt.namedKids()
	if len(kids) != 1 {
		return true
	}
	switch kids[0].kind {
	case "string", "concatenated_string", "ellipsis", "integer", "none":
		return false
	}
	return true
}

// remove_statement: an expression statement (call, assignment, augmented
// assignment, yield …) or a del, wherever it has its own line; a block's
// last statement becomes "pass".
func removeStatement(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		if n.kind == "expression_statement" && !removable(n) {
			return
		}
		r, ok := a.removeStmt(n)
		if !ok {
			return
		}
		out = append(out, a.site(mutate.RemoveStmt, n, n.start, n.end, []mutate.Edit{{Replacements: []mutate.Replacement{r}, Summary: "remove statement"}}))
	}, "expression_statement", "delete_statement")
	return out
}

// guard reports an if with no elif/else whose body is one raise, return,
// continue or break: remove_guard's territory.
func guard(n *node) bool {
	if n.kind != "if_statement" || n.child("alternative") != nil {
		return false
	}
	body := n.child("consequence")
	if body == nil {
		return false
	}
	kids := body.namedKids()
	if len(kids) != 1 {
		return false
	}
	switch kids[0].kind {
	case "raise_statement", "return_statement", "continue_statement", "break_statement":
		return true
	}
	return false
}

// untestable are module-level conditions no test exercises.
func (a *analysis) untestable(n *node) bool {
	c := n.child("condition")
	if c == nil {
		return false
	}
	t := a.text(c)
	return strings.Contains(t, "__name__") || strings.Contains(t, "TYPE_CHECKING")
}

// remove_branch: an elif or else clause (of if, for, while), one case of
// a match with several, the body of an if that has an else (→ pass), or a
// whole if without else that is not a guard.
func removeBranch(a *analysis) []mutate.Site {
	var out []mutate.Site
	drop := func(clause *node, summary string) {
		if !a.ownLine(clause) {
			return
		}
		r, alone := a.f.DeleteLines(clause.start, clause.end, "")
		if !alone {
			return
		}
		out = append(out, a.site(mutate.RemoveBranch, clause, clause.start, clause.end, []mutate.Edit{{Replacements: []mutate.Replacement{r}, Summary: summary}}))
	}
	a.each(func(n *node) {
		switch n.kind {
		case "if_statement":
			if a.untestable(n) {
				return
			}
			alts := n.children("alternative")
			body := n.child("consequence")
			if len(alts) == 0 {
				if guard(n) {
					return
				}
				if r, ok := a.removeStmt(n); ok {
					out = append(out, a.site(mutate.RemoveBranch, n, n.start, n.end, []mutate.Edit{{Replacements: []mutate.Replacement{r}, Summary: "remove if"}}))
				}
				return
			}
			if body != nil && a.text(body) != "pass" {
				out = append(out, a.site(mutate.RemoveBranch, body, body.start, body.end, []mutate.Edit{
					a.edit(body.start, body.end, "pass", "if body → pass"),
				}))
			}
			for _, alt := range alts {
				drop(alt, "remove "+strings.TrimSuffix(alt.kind, "_clause"))
			}
		case "for_statement", "while_statement":
			if alt := n.child("alternative"); alt != nil {
				drop(alt, "remove loop else")
			}
		case "match_statement":
			body := n.child("body")
			if body == nil {
				return
			}
			cases := body.children("alternative")
			if len(cases) < 2 {
				return
			}
			for _, c := range cases {
				drop(c, "remove case")
			}
		}
	}, "if_statement", "for_statement", "while_statement", "match_statement")
	return out
}

// remove_return: "return x" → "return" and, where falling through differs
// from returning (the return is not its function's last statement),
// "return x" → "pass". "return None" is left alone: "return" means the same.
func removeReturn(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		kids := n.namedKids()
		if len(kids) != 1 || kids[0].kind == "none" {
			return
		}
		vs := []mutate.Edit{a.edit(n.start, n.end, "return", "return x → return")}
		p := n.parent
		last := p != nil && p.kind == "block" && p.parent != nil && p.parent.kind == "function_definition"
		if last {
			ks := p.namedKids()
			last = ks[len(ks)-1] == n
		}
		if !last && a.ownLine(n) {
			vs = append(vs, a.edit(n.start, n.end, "pass", "return x → pass"))
		}
		out = append(out, a.site(mutate.RemoveReturn, n, n.start, n.end, vs))
	}, "return_statement")
	return out
}

// symmetric are builtins whose positional arguments commute.
var symmetric = map[string]bool{"max": true, "min": true}

// swap_arguments: two adjacent positional arguments of a call (f(a, b) →
// f(b, a)); one variant per adjacent pair whose texts differ.
func swapArguments(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		fn, args := n.child("function"), n.child("arguments")
		if fn == nil || args == nil || args.kind != "argument_list" || symmetric[a.text(fn)] {
			return
		}
		kids := args.namedKids()
		var vs []mutate.Edit
		for i := 0; i+1 < len(kids); i++ {
			x, y := kids[i], kids[i+1]
			if !positional(x) || !positional(y) || a.text(x) == a.text(y) {
				continue
			}
			vs = append(vs, mutate.Edit{Replacements: []mutate.Replacement{
				a.f.Replace(x.start, x.end, a.text(y)),
				a.f.Replace(y.start, y.end, a.text(x)),
			}, Summary: "swap arguments " + strconv.Itoa(i+1) + " and " + strconv.Itoa(i+2)})
		}
		if len(vs) > 0 {
			out = append(out, a.site(mutate.SwapArgs, n, args.start, args.end, vs))
		}
	}, "call")
	return out
}

func positional(n *node) bool {
	switch n.kind {
	case "keyword_argument", "list_splat", "dictionary_splat", "parenthesized_list_splat":
		return false
	}
	return true
}

// inDefault reports n inside a parameter default, change_default's job.
func inDefault(n *node) bool {
	return n.ancestor([]string{"default_parameter", "typed_default_parameter"}, []string{"block", "lambda"}) != nil
}

// numberVariants are the changes to a numeric literal: 0 ↔ 1, else ±1;
// floats move by one or double.
func numberVariants(t string, kind string) []string {
	if kind == "integer" {
		v, ok := decimal(t)
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
	if strings.ContainsAny(t, "_jJ") {
		return nil
	}
	v, err := strconv.ParseFloat(t, 64)
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

// stringVariants shorten a one-line, non-f-string literal by its last
// character (or empty it), or fill an empty one.
func (a *analysis) stringVariants(n *node) []mutate.Edit {
	var content, end *node
	for _, k := range n.kids {
		switch k.kind {
		case "interpolation":
			return nil
		case "string_content":
			if content != nil {
				return nil
			}
			content = k
		case "string_end":
			end = k
		}
	}
	if end == nil || strings.Contains(a.text(n), "\n") {
		return nil
	}
	if content == nil {
		return []mutate.Edit{a.edit(end.start, end.start, " ", "empty string → \" \"")}
	}
	s, e := a.dropLastUnit(content)
	vs := []mutate.Edit{a.edit(s, e, "", "drop last character")}
	if s > content.start {
		vs = append(vs, a.edit(content.start, content.end, "", "empty string"))
	}
	return vs
}

// change_constant: a numeric literal (0 ↔ 1, ±1; floats +1 or ×2), True ↔
// False, or a string literal (last character dropped, emptied); not in
// parameter defaults (change_default), type annotations, docstrings or
// f-strings.
func changeConstant(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		if inDefault(n) || inType(n) {
			return
		}
		var vs []mutate.Edit
		switch n.kind {
		case "integer", "float":
			for _, v := range numberVariants(a.text(n), n.kind) {
				vs = append(vs, a.edit(n.start, n.end, v, a.text(n)+" → "+v))
			}
		case "true":
			vs = []mutate.Edit{a.edit(n.start, n.end, "False", "True → False")}
		case "false":
			vs = []mutate.Edit{a.edit(n.start, n.end, "True", "False → True")}
		case "string":
			if p := n.parent; p != nil && p.kind == "expression_statement" {
				return // docstring or bare string
			}
			vs = a.stringVariants(n)
		}
		if len(vs) > 0 {
			out = append(out, a.site(mutate.ChangeConst, n, n.start, n.end, vs))
		}
	}, "integer", "float", "true", "false", "string")
	return out
}

// change_default: a parameter's default value (def f(x=1) → x=2 or
// x=None); None defaults are left alone.
func changeDefault(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		v := n.child("value")
		if v == nil || v.kind == "none" {
			return
		}
		t := a.text(v)
		var alts []string
		switch v.kind {
		case "integer", "float":
			alts = numberVariants(t, v.kind)
		case "true":
			alts = []string{"False"}
		case "false":
			alts = []string{"True"}
		case "string":
			if t != `""` && t != "''" {
				alts = []string{`""`}
			}
		}
		alts = append(alts, "None")
		vs := make([]mutate.Edit, 0, len(alts))
		for _, alt := range alts {
			vs = append(vs, a.edit(v.start, v.end, alt, "default "+t+" → "+alt))
		}
		out = append(out, a.site(mutate.ChangeDefault, n, v.start, v.end, vs))
	}, "default_parameter", "typed_default_parameter")
	return out
}

// remove_guard: an if with no elif/else whose body only raises, returns,
// continues or breaks, and an assert; the whole statement goes.
func removeGuard(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		if n.kind == "if_statement" && !guard(n) {
			return
		}
		r, ok := a.removeStmt(n)
		if !ok {
			return
		}
		out = append(out, a.site(mutate.RemoveGuard, n, n.start, n.end, []mutate.Edit{{Replacements: []mutate.Replacement{r}, Summary: "remove " + strings.TrimSuffix(n.kind, "_statement")}}))
	}, "if_statement", "assert_statement")
	return out
}

// unwrap_try: a try with except clauses becomes its body (then its else
// and finally bodies) dedented in place; with several handlers, dropping
// one is a variant too.
func unwrapTry(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		var handlers []*node
		var blocks []*node
		body := n.child("body")
		if body == nil || !a.ownLine(n) {
			return
		}
		blocks = append(blocks, body)
		for _, k := range n.kids {
			switch k.kind {
			case "except_clause", "except_group_clause":
				handlers = append(handlers, k)
			case "else_clause":
				if b := k.child("body"); b != nil {
					blocks = append(blocks, b)
				}
			case "finally_clause":
				for _, b := range k.kids {
					if b.kind == "block" {
						blocks = append(blocks, b)
					}
				}
			}
		}
		if len(handlers) == 0 {
			return
		}
		var vs []mutate.Edit
		if text, ok := a.dedentBlocks(n, blocks); ok {
			start := a.f.LineStart(n.start)
			end := a.f.LineEnd(n.end - 1)
			if end < len(a.f.Src) {
				end++
			}
			vs = append(vs, a.edit(start, end, text, "unwrap try"))
		}
		if len(handlers) > 1 {
			for _, h := range handlers {
				if r, alone := a.f.DeleteLines(h.start, h.end, ""); alone && a.ownLine(h) {
					vs = append(vs, mutate.Edit{Replacements: []mutate.Replacement{r}, Summary: "remove except clause"})
				}
			}
		}
		if len(vs) > 0 {
			out = append(out, a.site(mutate.UnwrapTry, n, n.start, n.end, vs))
		}
	}, "try_statement")
	return out
}

// dedentBlocks joins the blocks' lines, moved left to the try's indent. It
// refuses blocks that share a line with their header and blocks holding a
// multi-line string, whose content dedenting would change.
func (a *analysis) dedentBlocks(try *node, blocks []*node) (string, bool) {
	outer := a.f.Indent(try.start)
	var b strings.Builder
	for _, blk := range blocks {
		stmts := blk.namedKids()
		if len(stmts) == 0 || !a.ownLine(stmts[0]) {
			return "", false
		}
		inner := a.f.Indent(stmts[0].start)
		if len(inner) <= len(outer) || !strings.HasPrefix(inner, outer) {
			return "", false
		}
		last := stmts[len(stmts)-1]
		for _, n := range a.nodes {
			if n.start >= blk.start && n.end <= last.end && (n.kind == "string" || n.kind == "concatenated_string") && strings.Contains(a.text(n), "\n") {
				return "", false
			}
		}
		start := a.f.LineStart(stmts[0].start)
		end := a.f.LineEnd(last.end - 1)
		if end < len(a.f.Src) {
			end++
		}
		for line := range strings.Lines(a.f.Text(start, end)) {
			// Continuation lines and comments indented less than the
			// block are legal anywhere; leave them.
			if strings.HasPrefix(line, inner) {
				line = outer + line[len(inner):]
			}
			b.WriteString(line)
		}
	}
	text := b.String()
	if !strings.HasSuffix(text, "\n") && a.f.LineEnd(try.end-1) < len(a.f.Src) {
		text += "\n"
	}
	return text, true
}

// break_loop_exit: a break is removed or becomes continue, a continue
// becomes break, and a loop's own bound moves by one (while i < n → i <= n,
// for i in range(n) → range(n ± 1)). Loops whose only exit is the break
// (while True) are left alone: the mutant would hang, not fail.
func breakLoopExit(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(n *node) {
		switch n.kind {
		case "break_statement":
			loop := loopOf(n)
			if loop == nil || a.infinite(loop) {
				return
			}
			var vs []mutate.Edit
			if r, ok := a.removeStmt(n); ok {
				vs = append(vs, mutate.Edit{Replacements: []mutate.Replacement{r}, Summary: "remove break"})
			}
			vs = append(vs, a.edit(n.start, n.end, "continue", "break → continue"))
			out = append(out, a.site(mutate.BreakLoopExit, n, n.start, n.end, vs))
		case "continue_statement":
			if loopOf(n) == nil {
				return
			}
			out = append(out, a.site(mutate.BreakLoopExit, n, n.start, n.end, []mutate.Edit{a.edit(n.start, n.end, "break", "continue → break")}))
		case "while_statement":
			c := n.child("condition")
			if c == nil || c.kind != "comparison_operator" {
				return
			}
			ops := c.children("operators")
			if len(ops) != 1 {
				return
			}
			if s, ok := tokenSites(a, mutate.BreakLoopExit, ops[0], boundaryTable); ok {
				out = append(out, s)
			}
		case "for_statement":
			r := n.child("right")
			if r == nil {
				return
			}
			if args := a.rangeCall(r); args != nil {
				out = append(out, a.site(mutate.BreakLoopExit, r, r.start, r.end, a.rangeVariants(args)))
			}
		}
	}, "break_statement", "continue_statement", "while_statement", "for_statement")
	return out
}
