package synth

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/frognano/frognano/actors/harness"
	"github.com/frognano/frognano/actors/synth/mutate"
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

// mutationLines are the lines of the buggy file that mutation mu wrote
// (for a deletion, the line that follows it), given all the replacements
// made in its file (earlier ones shift its lines).
func mutationLines(mu mutate.Mutation, all []mutate.Replacement) [2]int {
	var out [2]int
	for _, r := range mu.Edit.Replacements {
		shift := 0
		for _, o := range all {
			if o.Start < r.Start {
				shift += strings.Count(o.New, "\n") - strings.Count(o.Old, "\n")
			}
		}
		from := mu.File.Line(r.Start) + shift
		to := from + strings.Count(strings.TrimSuffix(r.New, "\n"), "\n")
		if out[0] == 0 || from < out[0] {
			out[0] = from
		}
		out[1] = max(out[1], to)
	}
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

// answerHintOK reports whether a fix can be given at hint level: from
// HintSearch on, its first SEARCH side is unique (searchHintUnique); from
// HintReplace on, the start of its replacement is not empty (else the task
// would play exactly as at HintSearch) and leaves the policy something to
// write (harness.ReplaceHint).
func answerHintOK(level int, gold string, buggy map[string][]byte) bool {
	if level < HintSearch {
		return true
	}
	if !searchHintUnique(gold, buggy) {
		return false
	}
	if level < HintReplace {
		return true
	}
	e, err := harness.SearchHint(gold)
	if err != nil {
		return false
	}
	start, err := harness.ReplaceHint(e)
	return err == nil && start != ""
}

// bugEdits are candidate c's replacements per file, sorted, and the files
// as the bugs leave them.
func bugEdits(c candidate) (map[*mutate.File][]mutate.Replacement, map[string][]byte) {
	byFile := map[*mutate.File][]mutate.Replacement{}
	for _, mu := range c.Mutations {
		byFile[mu.File] = append(byFile[mu.File], mu.Edit.Replacements...)
	}
	buggy := make(map[string][]byte, len(byFile))
	for f, rs := range byFile {
		rs = slices.Clone(rs)
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
		byFile[f] = rs
		buggy[f.Path] = mutate.ApplyReplacements(f.Src, rs)
	}
	return byFile, buggy
}

// buggyOf is the files candidate c's bugs change, as they leave them.
func buggyOf(c candidate) map[string][]byte {
	_, buggy := bugEdits(c)
	return buggy
}
