package synth

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/frognano/frognano/actors/harness"
)

// writeLines is the HintLines sentence: where each bug sits, by line.
func writeLines(b *strings.Builder, locs []Location) {
	for _, l := range locs {
		if l.Lines[0] <= 0 {
			continue
		}
		where := fmt.Sprintf("line %d", l.Lines[0])
		if l.Lines[1] > l.Lines[0] {
			where = fmt.Sprintf("lines %d-%d", l.Lines[0], l.Lines[1])
		}
		fn := ""
		if l.Function != "" {
			fn = " (in " + describe(l) + ")"
		}
		fmt.Fprintf(b, "The defect is at %s of `%s`%s.\n", where, l.Path, fn)
	}
}

var bugHunk = regexp.MustCompile(`^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@`)

// bugLines are, per file, the lines of the buggy file that a bug patch
// wrote: for each hunk, its first and last added line, or the line after
// the removal for a hunk that only removes.
func bugLines(bugPatch string) map[string][][2]int {
	out := map[string][][2]int{}
	var (
		file string
		line int // the next line of the buggy file
		cur  [2]int
		in   bool
	)
	flush := func() {
		if in && cur[0] > 0 {
			out[file] = append(out[file], cur)
		}
		cur, in = [2]int{}, false
	}
	for l := range strings.Lines(bugPatch) {
		l = strings.TrimSuffix(l, "\n")
		switch {
		case strings.HasPrefix(l, "+++ "):
			flush()
			file = strings.TrimPrefix(strings.TrimPrefix(l, "+++ "), "b/")
		case strings.HasPrefix(l, "--- ") && !in, strings.HasPrefix(l, "diff --git "):
			flush()
		case strings.HasPrefix(l, "@@"):
			flush()
			if m := bugHunk.FindStringSubmatch(l); m != nil {
				line, _ = strconv.Atoi(m[1])
				in = true
			}
		case !in:
		case strings.HasPrefix(l, "+"):
			if cur[0] == 0 {
				cur[0] = line
			}
			cur[1] = line
			line++
		case strings.HasPrefix(l, "-"):
			if cur[0] == 0 {
				cur = [2]int{line, line}
			}
		case strings.HasPrefix(l, `\`):
		default:
			line++
		}
	}
	flush()
	return out
}

// searchHintUnique reports whether the fix's first SEARCH side, as
// HintSearch gives it, occurs exactly once in its buggy file.
func searchHintUnique(gold string, buggy map[string][]byte) bool {
	e, err := harness.SearchHint(gold)
	if err != nil {
		return false
	}
	src, ok := buggy[e.Path]
	return ok && strings.Count(string(src), e.Search) == 1
}
