package mutate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// ApplyReplacements returns src with rs applied. rs must be sorted by Start
// and disjoint (an Edit's replacements are).
func ApplyReplacements(src []byte, rs []Replacement) []byte {
	var b bytes.Buffer
	b.Grow(len(src) + 64)
	at := 0
	for _, r := range rs {
		b.Write(src[at:r.Start])
		b.WriteString(r.New)
		at = r.End
	}
	b.Write(src[at:])
	return b.Bytes()
}

// Invert returns the replacements that turn ApplyReplacements(src, rs) back
// into src: offsets move into the mutated text and Old and New trade places.
func Invert(rs []Replacement) []Replacement {
	out := make([]Replacement, len(rs))
	shift := 0
	for i, r := range rs {
		start := r.Start + shift
		out[i] = Replacement{Start: start, End: start + len(r.New), Old: r.New, New: r.Old}
		shift += len(r.New) - (r.End - r.Start)
	}
	return out
}

// contextLines is git's default.
const contextLines = 3

// change is one run of replaced lines: old lines [at, at+len(old)) become new.
type change struct {
	at       int
	old, new []string
}

// UnifiedDiff renders the git-style diff (a/ and b/ prefixes, 3 lines of
// context) that turns old into ApplyReplacements(old, rs). It works from the
// replacements instead of a line-matching algorithm: the edit already says
// which lines changed, so the diff is exact, linear in the file size, and
// never "finds" a different alignment than the mutation made. It returns ""
// when nothing changes.
func UnifiedDiff(path string, old []byte, rs []Replacement) string {
	starts := lineStarts(old)
	if len(old) == 0 {
		starts = nil
	}
	lineOf := func(off int) int { // 0-based
		return sort.Search(len(starts), func(i int) bool { return starts[i] > off }) - 1
	}
	lineEnd := func(l int) int { // offset just past line l, newline included
		if l+1 < len(starts) {
			return starts[l+1]
		}
		return len(old)
	}

	// Group replacements by the lines they touch; grow a group while its new
	// text would run into the following line.
	type group struct {
		l0, l1 int
		rs     []Replacement
	}
	var groups []group
	for _, r := range rs {
		l0 := max(lineOf(r.Start), 0)
		l1 := l0
		if r.End > r.Start {
			l1 = max(lineOf(r.End-1), 0)
		}
		if n := len(groups); n > 0 && l0 <= groups[n-1].l1 {
			groups[n-1].l1 = max(groups[n-1].l1, l1)
			groups[n-1].rs = append(groups[n-1].rs, r)
			continue
		}
		groups = append(groups, group{l0: l0, l1: l1, rs: []Replacement{r}})
	}
	var changes []change
	for i := 0; i < len(groups); i++ {
		g := groups[i]
		var newText []byte
		for {
			bs, be := 0, 0
			if len(starts) > 0 {
				bs, be = starts[g.l0], lineEnd(g.l1)
			}
			local := make([]Replacement, len(g.rs))
			for j, r := range g.rs {
				local[j] = Replacement{Start: r.Start - bs, End: r.End - bs, New: r.New}
			}
			newText = ApplyReplacements(old[bs:be], local)
			if be < len(old) && len(newText) > 0 && newText[len(newText)-1] != '\n' {
				g.l1++
				for i+1 < len(groups) && groups[i+1].l0 <= g.l1 {
					g.l1 = max(g.l1, groups[i+1].l1)
					g.rs = append(g.rs, groups[i+1].rs...)
					i++
				}
				continue
			}
			var oldText []byte
			if len(starts) > 0 {
				oldText = old[bs:be]
			}
			oldLines, newLines := splitLines(oldText), splitLines(newText)
			// Keep only the lines that differ.
			p := 0
			for p < len(oldLines) && p < len(newLines) && oldLines[p] == newLines[p] {
				p++
			}
			s := 0
			for s < len(oldLines)-p && s < len(newLines)-p && oldLines[len(oldLines)-1-s] == newLines[len(newLines)-1-s] {
				s++
			}
			if len(oldLines)-p-s > 0 || len(newLines)-p-s > 0 {
				changes = append(changes, change{at: g.l0 + p, old: oldLines[p : len(oldLines)-s], new: newLines[p : len(newLines)-s]})
			}
			break
		}
	}
	if len(changes) == 0 {
		return ""
	}

	oldLines := splitLines(old)
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n", path, path, path, path)
	delta := 0 // new line index minus old line index before the current change
	for i := 0; i < len(changes); {
		// Changes whose context overlaps share a hunk.
		j := i + 1
		for j < len(changes) && changes[j].at-(changes[j-1].at+len(changes[j-1].old)) <= 2*contextLines {
			j++
		}
		first, last := changes[i], changes[j-1]
		hs := max(first.at-contextLines, 0)
		he := min(last.at+len(last.old)+contextLines, len(oldLines))
		var body strings.Builder
		oldCount, newCount := 0, 0
		at := hs
		hunkDelta := delta
		for _, c := range changes[i:j] {
			for ; at < c.at; at++ {
				writeLine(&body, ' ', oldLines[at])
				oldCount++
				newCount++
			}
			for _, l := range c.old {
				writeLine(&body, '-', l)
				oldCount++
			}
			for _, l := range c.new {
				writeLine(&body, '+', l)
				newCount++
			}
			at += len(c.old)
			delta += len(c.new) - len(c.old)
		}
		for ; at < he; at++ {
			writeLine(&body, ' ', oldLines[at])
			oldCount++
			newCount++
		}
		oldStart, newStart := hs+1, hs+hunkDelta+1
		if oldCount == 0 {
			oldStart--
		}
		if newCount == 0 {
			newStart--
		}
		fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@\n", oldStart, oldCount, newStart, newCount)
		b.WriteString(body.String())
		i = j
	}
	return b.String()
}

func writeLine(b *strings.Builder, prefix byte, line string) {
	b.WriteByte(prefix)
	b.WriteString(line)
	if !strings.HasSuffix(line, "\n") {
		b.WriteString("\n\\ No newline at end of file\n")
	}
}

// splitLines splits after each '\n'; a final line without one is kept.
func splitLines(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			out = append(out, string(b))
			break
		}
		out = append(out, string(b[:i+1]))
		b = b[i+1:]
	}
	return out
}

// PatchKey is the deduplication key of a patch: a hash of its files and of
// its context, removed and added lines with all whitespace dropped, in file
// order. Hunk headers are left out, so the same bug keys the same wherever
// the file has moved, and two operators that write `i+1` and `i + 1` agree.
func PatchKey(patch string) string {
	type section struct {
		path  string
		lines []string
	}
	var secs []section
	for line := range strings.Lines(patch) {
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "diff --git "):
			secs = append(secs, section{path: line})
		case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "+++ "), strings.HasPrefix(line, "@@"), strings.HasPrefix(line, `\`):
		case len(line) > 0 && len(secs) > 0 && (line[0] == ' ' || line[0] == '-' || line[0] == '+'):
			secs[len(secs)-1].lines = append(secs[len(secs)-1].lines, line[:1]+dropSpace(line[1:]))
		}
	}
	sort.SliceStable(secs, func(i, j int) bool { return secs[i].path < secs[j].path })
	h := sha256.New()
	for _, s := range secs {
		h.Write([]byte(s.path))
		h.Write([]byte{0})
		for _, l := range s.lines {
			h.Write([]byte(l))
			h.Write([]byte{0})
		}
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func dropSpace(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
}
