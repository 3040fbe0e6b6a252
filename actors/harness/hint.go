package harness

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// Hint levels the harness acts on. The synthesizer writes each level's
// problem statement (actors/synth: 0 tests, 1 location, 2 buggy source, 3
// the bug's lines); the harness adds, per level, how much code a patch
// prompt shows (excerptBudget) and, at HintSearch, the start of the answer.
const (
	// HintLines names the file, function and lines of the bug; the patch
	// prompt shows a narrow window around them.
	HintLines = 3
	// HintSearch also gives the answer's first SEARCH side in patch mode:
	// the assistant turn starts with the path, "<<<<<<< SEARCH", the buggy
	// lines and "=======", so only the replacement is the policy's to
	// write. In agent mode it is played like HintLines.
	HintSearch = 4
	// HintReplace also starts the replacement: the answer goes on after
	// the part of the fix's first replacement that the SEARCH side shares
	// with it, cut back to the word before the first character they differ
	// in (ReplaceHint), so that the policy writes the changed word and what
	// follows. A partial solution as a hint that fades (QuestA,
	// arXiv 2507.13266; shared/LEARNING.md): the curriculum's floor for a
	// policy that solves almost nothing at HintSearch. In agent mode it is
	// played like HintLines.
	HintReplace = 5
)

// ErrNoReplaceHint is a fix whose first replacement leaves nothing to
// write once HintReplace's part of it is given (it only deletes the
// SEARCH side's last lines).
var ErrNoReplaceHint = errors.New("no replacement hint")

// ErrNoSearchHint is a gold patch from which no SEARCH side can be given.
var ErrNoSearchHint = errors.New("no SEARCH hint")

// shortSearch is the length (without blanks) under which the buggy lines
// alone are too little to find uniquely, so one line of context on each
// side joins them.
const shortSearch = 24

// SearchHint is the first edit of a task's fix as HintSearch gives it,
// from the first hunk of its gold patch: Search holds the lines the fix
// replaces (the buggy lines, current code), with one line of context on
// each side when they are empty or short; Replace holds what the fix puts
// in their place. The synthesizer stores a task at HintSearch only when
// Search occurs exactly once in the buggy file.
func SearchHint(goldPatch string) (Edit, error) {
	path, lines, err := firstHunk(goldPatch)
	if err != nil {
		return Edit{}, err
	}
	first, last := -1, -1
	for i, l := range lines {
		if l[0] != ' ' {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return Edit{}, fmt.Errorf("%w: the first hunk changes nothing", ErrNoSearchHint)
	}
	side := func(from, to int, keep byte) string {
		var b strings.Builder
		for _, l := range lines[from:to] {
			if l[0] == ' ' || l[0] == keep {
				b.WriteString(l[1:])
			}
		}
		return b.String()
	}
	from, to := first, last+1
	if s := side(from, to, '-'); len(strings.Join(strings.Fields(s), "")) < shortSearch {
		if from > 0 {
			from--
		}
		if to < len(lines) {
			to++
		}
	}
	e := Edit{Path: path, Search: side(from, to, '-'), Replace: side(from, to, '+')}
	if strings.TrimSpace(e.Search) == "" {
		return Edit{}, fmt.Errorf("%w: the first hunk has no line to search for", ErrNoSearchHint)
	}
	return e, nil
}

// ReplaceHint is the start of e.Replace that HintReplace gives: the text
// e.Search and e.Replace begin with, cut back to a word boundary before the
// first character they differ in: to the start of the blanks before the
// word that differs ("x = y" and "x = z" give "x ="; the policy writes
// " z", with its space, as a tokenizer splits it), or to the start of the
// line when that word is the line's first. The rest of e.Replace, the
// policy's to write, holds the difference: an error wraps ErrNoReplaceHint
// when the rest is blank (a fix that deletes the SEARCH side's last lines:
// there would be nothing to write) or when the two sides are equal.
func ReplaceHint(e Edit) (string, error) {
	n := 0
	for n < len(e.Search) && n < len(e.Replace) && e.Search[n] == e.Replace[n] {
		n++
	}
	if n == len(e.Search) && n == len(e.Replace) {
		return "", fmt.Errorf("%w: the replacement equals the SEARCH side", ErrNoReplaceHint)
	}
	cut := 0
	if j := strings.LastIndexAny(e.Replace[:n], " \t\n"); j >= 0 {
		if e.Replace[j] == '\n' {
			cut = j + 1
		} else {
			cut = j
			for cut > 0 && (e.Replace[cut-1] == ' ' || e.Replace[cut-1] == '\t') {
				cut--
			}
		}
	}
	if strings.TrimSpace(e.Replace[cut:]) == "" {
		return "", fmt.Errorf("%w: what is left of the replacement is blank (the fix deletes the SEARCH side's last lines, or adds only blanks)", ErrNoReplaceHint)
	}
	return e.Replace[:cut], nil
}

// firstHunk is the path and the lines (each with its ' ', '-' or '+'
// prefix and its newline) of a unified diff's first hunk, read by the
// counts of its header.
func firstHunk(patch string) (string, []string, error) {
	var path string
	all := strings.SplitAfter(patch, "\n")
	for i, line := range all {
		body := strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(body, "+++ ") {
			path = strings.TrimPrefix(strings.TrimPrefix(body, "+++ "), "b/")
			continue
		}
		m := hunkCounts.FindStringSubmatch(body)
		if m == nil {
			continue
		}
		if path == "" || path == "/dev/null" {
			return "", nil, fmt.Errorf("%w: hunk without a file", ErrNoSearchHint)
		}
		old, neu := count(m[1]), count(m[2])
		var lines []string
		for _, l := range all[i+1:] {
			if old == 0 && neu == 0 {
				break
			}
			b := strings.TrimSuffix(l, "\n")
			switch {
			case strings.HasPrefix(b, `\ No newline`):
				continue
			case b == "" || b[0] == ' ':
				old, neu = old-1, neu-1
				lines = append(lines, " "+strings.TrimPrefix(ensureNewline(l), " "))
			case b[0] == '-':
				old--
				lines = append(lines, ensureNewline(l))
			case b[0] == '+':
				neu--
				lines = append(lines, ensureNewline(l))
			default:
				return "", nil, fmt.Errorf("%w: a hunk line starts with %q", ErrNoSearchHint, b[:1])
			}
		}
		if old != 0 || neu != 0 {
			return "", nil, fmt.Errorf("%w: the first hunk is shorter than its header says", ErrNoSearchHint)
		}
		return path, lines, nil
	}
	return "", nil, fmt.Errorf("%w: the patch has no hunks", ErrNoSearchHint)
}

var hunkCounts = regexp.MustCompile(`^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@`)

// count is a hunk header's line count ("" means 1).
func count(s string) int {
	if s == "" {
		return 1
	}
	n, _ := strconv.Atoi(s)
	return n
}

// answerPrefill is what a patch-mode answer starts with at the task's hint
// level ("" below HintSearch): the first block up to its divider, and from
// HintReplace on the replacement's start (ReplaceHint).
func answerPrefill(task *records.Task) (string, error) {
	level := task.GetDifficulty().GetHintLevel()
	if level < HintSearch {
		return "", nil
	}
	e, err := SearchHint(task.GetGoldPatch())
	if err != nil {
		return "", fmt.Errorf("%w: task %s: %w", ErrBadTask, task.GetId(), err)
	}
	var start string
	if level >= HintReplace {
		if start, err = ReplaceHint(e); err != nil {
			return "", fmt.Errorf("%w: task %s: %w", ErrBadTask, task.GetId(), err)
		}
	}
	return e.Path + "\n" + searchMark + "\n" + e.Search + dividerMark + "\n" + start, nil
}
