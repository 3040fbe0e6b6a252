package python

import (
	"sort"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// binding is where a function first binds a local name.
type binding struct {
	name  string
	at    int  // byte offset of the first binding; the def's start for parameters
	vari  bool // a variable (parameter, assignment, loop/with/except target, :=), not a def, class or import
	splat bool // *args or **kwargs: a container, not the same kind as a plain variable
}

// scope is one function's locals.
type scope struct {
	fn      *node
	first   map[string]binding
	order   []binding
	globals map[string]bool // names declared global or nonlocal: not locals
}

func (s *scope) bind(name string, at int, vari bool) { s.bindKind(name, at, vari, false) }

func (s *scope) bindKind(name string, at int, vari, splat bool) {
	if _, ok := s.first[name]; ok || name == "" {
		return
	}
	b := binding{name: name, at: at, vari: vari, splat: splat}
	s.first[name] = b
	s.order = append(s.order, b)
}

// nested are nodes that open their own scope: their bindings are not the
// function's.
var nested = map[string]bool{
	"function_definition": true, "class_definition": true, "lambda": true,
	"list_comprehension": true, "set_comprehension": true, "dictionary_comprehension": true, "generator_expression": true,
}

// scopeOf collects fn's parameters and the names its body binds.
func (a *analysis) scopeOf(fn *node) *scope {
	s := &scope{fn: fn, first: map[string]binding{}, globals: map[string]bool{}}
	if params := fn.child("parameters"); params != nil {
		for _, p := range params.namedKids() {
			var id *node
			splat := false
			switch p.kind {
			case "identifier":
				id = p
			case "default_parameter", "typed_default_parameter":
				id = p.child("name")
			case "list_splat_pattern", "dictionary_splat_pattern":
				id, splat = firstIdent(p), true
			case "typed_parameter":
				for _, k := range p.kids {
					switch k.kind {
					case "identifier":
						id = k
					case "list_splat_pattern", "dictionary_splat_pattern":
						id, splat = firstIdent(k), true
					}
					if id != nil {
						break
					}
				}
			}
			if id != nil && id.kind == "identifier" {
				s.bindKind(a.text(id), fn.start, true, splat)
			}
		}
	}
	var targets func(n *node)
	targets = func(n *node) {
		switch n.kind {
		case "identifier":
			s.bind(a.text(n), n.start, true)
		case "pattern_list", "tuple_pattern", "list_pattern", "list_splat_pattern", "tuple", "list", "parenthesized_expression", "as_pattern_target":
			for _, k := range n.namedKids() {
				targets(k)
			}
		}
	}
	var walk func(n *node)
	walk = func(n *node) {
		switch n.kind {
		case "function_definition", "class_definition":
			if name := n.child("name"); name != nil {
				s.bind(a.text(name), name.start, false)
			}
			return
		case "assignment", "augmented_assignment", "for_statement":
			if l := n.child("left"); l != nil {
				targets(l)
			}
		case "as_pattern_target":
			targets(n)
		case "named_expression":
			if name := n.child("name"); name != nil {
				s.bind(a.text(name), name.start, true)
			}
		case "global_statement", "nonlocal_statement":
			for _, k := range n.namedKids() {
				s.globals[a.text(k)] = true
			}
		case "aliased_import":
			if al := n.child("alias"); al != nil {
				s.bind(a.text(al), al.start, false)
			}
			return
		case "import_statement", "import_from_statement":
			for _, k := range n.children("name") {
				if k.kind == "dotted_name" {
					if id := firstIdent(k); id != nil {
						s.bind(a.text(id), id.start, false)
					}
				} else {
					walk(k)
				}
			}
			return
		}
		if n != fn && nested[n.kind] {
			return
		}
		for _, k := range n.kids {
			walk(k)
		}
	}
	if body := fn.child("body"); body != nil {
		walk(body)
	}
	return s
}

func firstIdent(n *node) *node {
	for _, k := range n.kids {
		if k.kind == "identifier" {
			return k
		}
	}
	return nil
}

// load reports whether identifier id reads a variable (as opposed to
// naming an attribute, a keyword, a parameter, an import, a call's callee
// or a store target).
func load(id *node) bool {
	p := id.parent
	if p == nil {
		return false
	}
	switch p.kind {
	case "attribute":
		return id.field != "attribute"
	case "keyword_argument", "function_definition", "class_definition", "named_expression":
		return id.field != "name"
	case "call":
		return id.field != "function"
	case "parameters", "lambda_parameters", "default_parameter", "typed_parameter", "typed_default_parameter",
		"list_splat_pattern", "dictionary_splat_pattern", "dotted_name", "aliased_import",
		"global_statement", "nonlocal_statement", "as_pattern_target", "decorator", "keyword_pattern":
		return false
	}
	// Store targets, possibly inside tuple/list patterns.
	n := id
targets:
	for n.parent != nil {
		switch n.parent.kind {
		case "pattern_list", "tuple_pattern", "list_pattern":
			n = n.parent
		case "assignment", "augmented_assignment", "for_statement", "for_in_clause":
			if n.field == "left" {
				return false
			}
			break targets
		default:
			break targets
		}
	}
	for q := p; q != nil; q = q.parent {
		switch q.kind {
		case "type", "case_pattern":
			return false
		case "block", "module":
			return true
		}
	}
	return true
}

// swap_variable: a read of a local variable or parameter becomes another
// one the function binds before that point (self and cls excepted, names
// bound only inside a comprehension excepted, *args and **kwargs only for
// each other): the classic "used the wrong variable" bug. One variant per candidate name.
func swapVariable(a *analysis) []mutate.Site {
	var out []mutate.Site
	a.each(func(fn *node) {
		s := a.scopeOf(fn)
		if len(s.order) < 2 {
			return
		}
		body := fn.child("body")
		if body == nil {
			return
		}
		var walk func(n *node, shadow map[string]bool)
		walk = func(n *node, shadow map[string]bool) {
			switch n.kind {
			case "function_definition", "class_definition", "lambda":
				return
			case "list_comprehension", "set_comprehension", "dictionary_comprehension", "generator_expression":
				inner := map[string]bool{}
				for k := range shadow {
					inner[k] = true
				}
				for _, c := range n.kids {
					if c.kind == "for_in_clause" {
						if l := c.child("left"); l != nil {
							collectNames(a, l, inner)
						}
					}
				}
				shadow = inner
			case "identifier":
				a.variableSite(s, n, shadow, &out)
				return
			}
			for _, k := range n.kids {
				walk(k, shadow)
			}
		}
		walk(body, map[string]bool{})
	}, "function_definition")
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

func collectNames(a *analysis, n *node, into map[string]bool) {
	if n.kind == "identifier" {
		into[a.text(n)] = true
		return
	}
	for _, k := range n.namedKids() {
		collectNames(a, k, into)
	}
}

func (a *analysis) variableSite(s *scope, id *node, shadow map[string]bool, out *[]mutate.Site) {
	name := a.text(id)
	b, local := s.first[name]
	if !local || !b.vari || s.globals[name] || shadow[name] || name == "self" || name == "cls" || !load(id) {
		return
	}
	var vs []mutate.Edit
	for _, c := range s.order {
		if c.name == name || !c.vari || c.splat != b.splat || c.at >= id.start || c.name == "self" || c.name == "cls" || s.globals[c.name] || shadow[c.name] || c.name == "_" {
			continue
		}
		vs = append(vs, a.edit(id.start, id.end, c.name, name+" → "+c.name))
	}
	if len(vs) > 0 {
		*out = append(*out, a.site(mutate.SwapVariable, id, id.start, id.end, vs))
	}
}
