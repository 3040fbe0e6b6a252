package mutate

import (
	"bytes"
	"fmt"
	"sort"
	"sync"
)

// File is one source file to mutate. Src must not change after NewFile:
// operators share one parse of it through Memo, and sites are byte offsets
// into it.
type File struct {
	Path string // slash-separated, relative to the repository root; used in diffs
	Src  []byte
	Lang Language

	linesOnce sync.Once
	lineStart []int // byte offset of each line's first byte

	memoMu sync.Mutex
	memo   map[any]any
}

// NewFile wraps src for mutation. An empty lang is detected from the path's
// extension among the registered languages.
func NewFile(path string, src []byte, lang Language) (*File, error) {
	if lang == "" {
		l, ok := Detect(path)
		if !ok {
			return nil, fmt.Errorf("mutate: no registered language for %q", path)
		}
		lang = l
	}
	return &File{Path: path, Src: src, Lang: lang}, nil
}

// Memo returns the value cached under key, building it on first use. A
// language caches its parse here so that fifteen operators parse a file once.
func (f *File) Memo(key any, build func() any) any {
	f.memoMu.Lock()
	defer f.memoMu.Unlock()
	if v, ok := f.memo[key]; ok {
		return v
	}
	if f.memo == nil {
		f.memo = map[any]any{}
	}
	v := build()
	f.memo[key] = v
	return v
}

func (f *File) lines() []int {
	f.linesOnce.Do(func() {
		f.lineStart = lineStarts(f.Src)
	})
	return f.lineStart
}

func lineStarts(src []byte) []int {
	starts := []int{0}
	for i, b := range src {
		if b == '\n' && i+1 < len(src) {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// Line returns the 1-based line holding byte off.
func (f *File) Line(off int) int {
	ls := f.lines()
	return sort.Search(len(ls), func(i int) bool { return ls[i] > off })
}

// LineCount is the number of lines (a final line without '\n' counts).
func (f *File) LineCount() int {
	if len(f.Src) == 0 {
		return 0
	}
	return len(f.lines())
}

// LineStart returns the offset of the first byte of off's line.
func (f *File) LineStart(off int) int {
	ls := f.lines()
	return ls[f.Line(off)-1]
}

// LineEnd returns the offset of the '\n' ending off's line, or len(Src).
func (f *File) LineEnd(off int) int {
	if i := bytes.IndexByte(f.Src[min(off, len(f.Src)):], '\n'); i >= 0 {
		return off + i
	}
	return len(f.Src)
}

// Indent returns the leading blanks of off's line.
func (f *File) Indent(off int) string {
	s := f.LineStart(off)
	e := s
	for e < len(f.Src) && (f.Src[e] == ' ' || f.Src[e] == '\t') {
		e++
	}
	return string(f.Src[s:e])
}

// Text returns Src[start:end] as a string.
func (f *File) Text(start, end int) string { return string(f.Src[start:end]) }

// Replace builds the replacement of Src[start:end] by s.
func (f *File) Replace(start, end int, s string) Replacement {
	return Replacement{Start: start, End: end, Old: string(f.Src[start:end]), New: s}
}

// Span fills a site's line span from its byte range.
func (f *File) Span(s *Site) {
	s.Line = f.Line(s.Start)
	s.EndLine = f.Line(max(s.Start, s.End-1))
}

// DeleteLines removes Src[start:end], a statement or clause. When it is
// alone on its lines, the lines go with it so no blank line betrays the bug;
// a comment after it on its last line is kept. alone is false when other
// code shares its first or last line; the caller decides whether a bare
// deletion is still valid syntax there.
func (f *File) DeleteLines(start, end int, comment string) (r Replacement, alone bool) {
	ls := f.LineStart(start)
	le := f.LineEnd(max(start, end-1))
	if end > le { // the range already ends with its newline
		le = end - 1
	}
	before := f.Src[ls:start]
	after := f.Src[min(end, le):le]
	blankBefore := len(bytes.Trim(before, " \t")) == 0
	trimmed := bytes.TrimLeft(after, " \t")
	switch {
	case blankBefore && len(bytes.TrimRight(trimmed, " \t\r")) == 0:
		if le < len(f.Src) {
			return f.Replace(ls, le+1, ""), true
		}
		return f.Replace(ls, le, ""), true
	case blankBefore && comment != "" && bytes.HasPrefix(trimmed, []byte(comment)):
		return f.Replace(start, le-len(trimmed), ""), true
	}
	return f.Replace(start, end, ""), false
}
