package python

import (
	"fmt"
	"sync"

	ts "github.com/tree-sitter/go-tree-sitter"
	tspython "github.com/tree-sitter/tree-sitter-python/bindings/go"
)

// This file is the package's only contact with cgo: it parses with
// tree-sitter, copies the tree into plain Go nodes, and frees the C tree
// before returning. Operators then walk Go memory only, so they cannot leak
// or crash in C, and they skip the per-node cgo cost of walking a live tree
// fifteen times.

// node is a copy of one tree-sitter node, anonymous tokens included (the
// operators edit "<", "and", "else" …).
type node struct {
	kind   string
	field  string // field name in the parent ("condition", "left", …), or ""
	start  int    // byte offsets into the source
	end    int
	named  bool
	parent *node
	kids   []*node
}

// child returns the first child in field name.
func (n *node) child(field string) *node {
	for _, k := range n.kids {
		if k.field == field {
			return k
		}
	}
	return nil
}

// children returns every child in field name.
func (n *node) children(field string) []*node {
	var out []*node
	for _, k := range n.kids {
		if k.field == field {
			out = append(out, k)
		}
	}
	return out
}

// named returns the named children that are not comments.
func (n *node) namedKids() []*node {
	var out []*node
	for _, k := range n.kids {
		if k.named && k.kind != "comment" {
			out = append(out, k)
		}
	}
	return out
}

// ancestor returns the nearest ancestor of one of kinds, or nil; it stops
// (returning nil) at any kind in stop.
func (n *node) ancestor(kinds, stop []string) *node {
	for p := n.parent; p != nil; p = p.parent {
		for _, k := range kinds {
			if p.kind == k {
				return p
			}
		}
		for _, k := range stop {
			if p.kind == k {
				return nil
			}
		}
	}
	return nil
}

var (
	langOnce   sync.Once
	lang       *ts.Language
	kindNames  []string
	fieldNames []string
)

func language() *ts.Language {
	langOnce.Do(func() {
		lang = ts.NewLanguage(tspython.Language())
		kindNames = make([]string, lang.NodeKindCount())
		for i := range kindNames {
			kindNames[i] = lang.NodeKindForId(uint16(i))
		}
		fieldNames = make([]string, lang.FieldCount()+1)
		for i := 1; i < len(fieldNames); i++ {
			fieldNames[i] = lang.FieldNameForId(uint16(i))
		}
	})
	return lang
}

// parseError locates the first syntax error in a tree.
type parseError struct {
	off  int
	kind string // "ERROR" or "MISSING <kind>"
}

func (e *parseError) Error() string {
	return fmt.Sprintf("syntax error (%s) at byte %d", e.kind, e.off)
}

// parse copies src's syntax tree into Go nodes. err is non-nil when the tree
// has an ERROR or MISSING node; the nodes are returned anyway. The C tree
// is returned too, for incremental re-parses of mutants; the caller must
// Close it.
func parse(src []byte) (*node, *ts.Tree, error) {
	p := ts.NewParser()
	defer p.Close()
	if err := p.SetLanguage(language()); err != nil {
		return nil, nil, err
	}
	t := p.Parse(src, nil)
	if t == nil {
		return nil, nil, fmt.Errorf("tree-sitter returned no tree")
	}
	c := t.Walk()
	defer c.Close()
	var perr *parseError
	var visit func(parent *node) *node
	visit = func(parent *node) *node {
		n := c.Node()
		id := n.KindId()
		nd := &node{field: fieldNames[c.FieldId()], start: int(n.StartByte()), end: int(n.EndByte()), named: n.IsNamed(), parent: parent}
		if int(id) < len(kindNames) {
			nd.kind = kindNames[id]
		} else {
			nd.kind = n.Kind()
		}
		if perr == nil {
			switch {
			case n.IsError():
				perr = &parseError{off: nd.start, kind: "ERROR"}
			case n.IsMissing():
				perr = &parseError{off: nd.start, kind: "MISSING " + nd.kind}
			}
		}
		if c.GotoFirstChild() {
			for {
				nd.kids = append(nd.kids, visit(nd))
				if !c.GotoNextSibling() {
					break
				}
			}
			c.GotoParent()
		}
		return nd
	}
	root := visit(nil)
	if perr == nil && t.RootNode().HasError() {
		perr = &parseError{off: 0, kind: "ERROR"}
	}
	if perr != nil {
		return root, t, perr
	}
	return root, t, nil
}

// check parses src and reports only whether it is free of syntax errors,
// without copying the tree: the per-mutant check. Given the tree of the
// source src was derived from (orig), it re-parses incrementally: a
// mutant differs from its original in one small region, and tree-sitter
// then reuses every subtree outside it, several times faster than a full
// parse.
func check(src []byte, orig []byte, old *ts.Tree) error {
	p := ts.NewParser()
	defer p.Close()
	if err := p.SetLanguage(language()); err != nil {
		return err
	}
	var prev *ts.Tree
	if old != nil {
		prev = old.Clone()
		defer prev.Close()
		prev.Edit(inputEdit(orig, src))
	}
	t := p.Parse(src, prev)
	if t == nil {
		return fmt.Errorf("tree-sitter returned no tree")
	}
	defer t.Close()
	if t.RootNode().HasError() {
		return &parseError{off: firstError(t.RootNode()), kind: "ERROR"}
	}
	return nil
}

// firstError finds the first ERROR or MISSING node under n, for the
// message only.
func firstError(n *ts.Node) int {
	if n.IsError() || n.IsMissing() {
		return int(n.StartByte())
	}
	for i := uint(0); i < n.ChildCount(); i++ {
		if c := n.Child(i); c != nil && c.HasError() {
			return firstError(c)
		}
	}
	return int(n.StartByte())
}

// inputEdit describes how new differs from old as one replaced region.
func inputEdit(old, new []byte) *ts.InputEdit {
	p := 0
	for p < len(old) && p < len(new) && old[p] == new[p] {
		p++
	}
	s := 0
	for s < len(old)-p && s < len(new)-p && old[len(old)-1-s] == new[len(new)-1-s] {
		s++
	}
	return &ts.InputEdit{
		StartByte:      uint(p),
		OldEndByte:     uint(len(old) - s),
		NewEndByte:     uint(len(new) - s),
		StartPosition:  point(old, p),
		OldEndPosition: point(old, len(old)-s),
		NewEndPosition: point(new, len(new)-s),
	}
}

// point is tree-sitter's (row, byte column) of offset off.
func point(src []byte, off int) ts.Point {
	row, col := 0, 0
	for _, b := range src[:off] {
		if b == '\n' {
			row, col = row+1, 0
		} else {
			col++
		}
	}
	return ts.Point{Row: uint(row), Column: uint(col)}
}
