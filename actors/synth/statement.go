package synth

import (
	"context"
	"fmt"
	"strings"

	"github.com/frognano/frognano/actors/harness"
)

// StatementWriter writes a task's problem statement from what validation
// learned. The template writer below is the default; a writer backed by a
// language model (SWE-smith style: shown the bug patch and the failing
// tests, asked for an issue that describes symptoms only) plugs in here.
// Whatever it writes is checked with Leaks before it is stored.
type StatementWriter interface {
	WriteStatement(ctx context.Context, in StatementInput) (string, error)
}

// Hint levels: how much a statement gives away. The level is a parameter of
// a synthesis request (SynthesizeRequest.target.hint_level) and recorded in
// the task's difficulty; one bug becomes one task at the level asked for.
const (
	// HintTests names the failing tests with their truncated error output.
	HintTests = 0
	// HintLocation adds a short issue-style description naming the
	// misbehaving functions and modules, without saying what changed.
	HintLocation = 1
	// HintSource also shows the buggy functions' current source.
	HintSource = 2
	// HintLines also names the lines of each bug (the harness shows a
	// narrow window of code around them: harness.HintLines).
	HintLines = harness.HintLines
	// HintSearch states what HintLines does; the harness also gives the
	// fix's first SEARCH side in patch mode (harness.HintSearch). A task is
	// stored at this level only when that SEARCH side is unique in its
	// file.
	HintSearch = harness.HintSearch
	// HintReplace states what HintLines does; the harness gives the SEARCH
	// side and the start of the replacement up to the word that changes
	// (harness.HintReplace). A task is stored at this level only when
	// HintSearch's condition holds and that start leaves something to
	// write.
	HintReplace  = harness.HintReplace
	MaxHintLevel = HintReplace
)

// StatementInput is what a writer may use. It holds the bug patch for
// writers that describe symptoms from it; it never holds the gold patch,
// and no writer may quote the bug patch's removed lines (they are the fix).
type StatementInput struct {
	Repo       string // e.g. "six" or "github.com/google/uuid"
	Language   string
	HintLevel  int
	Failing    []FailingTest // FAIL_TO_PASS with the bug's error output
	PassToPass int
	Locations  []Location // one per planted bug
	BugPatch   string
}

// FailingTest is a FAIL_TO_PASS test as the bug makes it fail.
type FailingTest struct {
	ID      string
	Message string
}

// Location is where one bug sits: its function, as the agent would search
// for it, and that function's current (buggy) source.
type Location struct {
	Path      string // file, relative to the repository root
	Module    string // Python module or Go package import path
	Function  string // "" at module level; "Class.method", "(*T).M"
	StartLine int    // of Source in the buggy file
	Source    string
	// Lines are the first and last line of the bug in the buggy file
	// (zero when unknown).
	Lines [2]int
}

// TemplateWriter writes statements from fixed templates: deterministic,
// free, and unable to leak anything but what it is given.
type TemplateWriter struct {
	// MaxTests caps the failing tests listed (default 8).
	MaxTests int
	// MaxMessage caps each test's error output in bytes (default 600).
	MaxMessage int
	// NoMessages leaves error output out (used when a message would leak).
	NoMessages bool
}

var _ StatementWriter = TemplateWriter{}

// WriteStatement renders the statement for in.HintLevel; levels above
// MaxHintLevel are treated as MaxHintLevel.
func (w TemplateWriter) WriteStatement(_ context.Context, in StatementInput) (string, error) {
	if len(in.Failing) == 0 {
		return "", fmt.Errorf("no failing tests to describe")
	}
	maxTests, maxMsg := w.MaxTests, w.MaxMessage
	if maxTests <= 0 {
		maxTests = 8
	}
	if maxMsg <= 0 {
		maxMsg = 600
	}
	var b strings.Builder
	n := len(in.Failing)
	if in.HintLevel >= HintLocation && len(in.Locations) > 0 {
		writeIssue(&b, in)
	} else {
		fmt.Fprintf(&b, "%s of %s %s. Fix the code so that %s again, without changing the tests; every other test must keep passing.\n",
			plural(n, "test", "tests"), in.Repo, pick(n, "fails", "fail"), pick(n, "it passes", "they pass"))
	}
	if in.HintLevel >= HintLines {
		writeLines(&b, in.Locations)
	}
	b.WriteString("\nFailing tests:\n")
	for i, t := range in.Failing {
		if i == maxTests {
			fmt.Fprintf(&b, "- … and %d more\n", n-maxTests)
			break
		}
		fmt.Fprintf(&b, "- %s\n", t.ID)
		if msg := trimMessage(t.Message, maxMsg); msg != "" && !w.NoMessages {
			b.WriteString("  ```\n")
			for _, l := range strings.Split(msg, "\n") {
				b.WriteString("  " + l + "\n")
			}
			b.WriteString("  ```\n")
		}
	}
	if in.HintLevel >= HintSource {
		for _, loc := range in.Locations {
			if loc.Source == "" {
				continue
			}
			what := "This is the current code of " + describe(loc)
			fmt.Fprintf(&b, "\n%s (%s, from line %d):\n\n```%s\n%s```\n", what, loc.Path, loc.StartLine, fence(in.Language), ensureNL(loc.Source))
		}
	}
	return b.String(), nil
}

// writeIssue is the issue-style opening of hint levels 1 and up: what
// misbehaves and where, never how.
func writeIssue(b *strings.Builder, in StatementInput) {
	locs := in.Locations
	n := len(in.Failing)
	if len(locs) == 1 {
		fmt.Fprintf(b, "Wrong behaviour in %s\n\n", describe(locs[0]))
		fmt.Fprintf(b, "Since the last change, %s (in `%s`) no longer behaves as the test suite expects: %s that %s it %s%s.\n",
			describe(locs[0]), locs[0].Path, plural(n, "test", "tests"), pick(n, "exercises", "exercise"),
			pick(n, "fails", "fail"), othersPass(in.PassToPass))
		b.WriteString("Please find the defect and fix it without changing the tests.\n")
		return
	}
	fmt.Fprintf(b, "Several functions of %s misbehave\n\nSince the last change, these no longer behave as the test suite expects:\n", in.Repo)
	for _, l := range locs {
		fmt.Fprintf(b, "- %s (in `%s`)\n", describe(l), l.Path)
	}
	fmt.Fprintf(b, "\n%s %s%s. More than one place needs fixing.\n", plural(n, "test", "tests"), pick(n, "fails", "fail"), othersPass(in.PassToPass))
	b.WriteString("Please find the defects and fix them without changing the tests.\n")
}

// othersPass is the clause about the tests that still pass; with none it
// says nothing rather than "while the other 0 tests pass".
func othersPass(n int) string {
	switch n {
	case 0:
		return ""
	case 1:
		return ", while the one other test passes"
	}
	return fmt.Sprintf(", while the other %d tests pass", n)
}

func describe(l Location) string {
	switch {
	case l.Function == "" && l.Module != "":
		return fmt.Sprintf("the module-level code of `%s`", l.Module)
	case l.Function == "":
		return fmt.Sprintf("the top-level code of `%s`", l.Path)
	case l.Module == "":
		return fmt.Sprintf("`%s`", l.Function)
	case strings.HasPrefix(l.Function, "("):
		return fmt.Sprintf("`%s` of package `%s`", l.Function, l.Module)
	default:
		return fmt.Sprintf("`%s.%s`", l.Module, l.Function)
	}
}

func fence(lang string) string {
	if lang == "go" {
		return "go"
	}
	return "python"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func pick(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func ensureNL(s string) string {
	if strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

// trimMessage keeps the first lines of an error message, at most max bytes,
// cut at a line boundary where possible.
func trimMessage(msg string, max int) string {
	msg = strings.TrimSpace(strings.ReplaceAll(msg, "\r", ""))
	lines := strings.Split(msg, "\n")
	if len(lines) > 15 {
		lines = append(lines[:15], "…")
	}
	msg = strings.Join(lines, "\n")
	if len(msg) > max {
		cut := strings.LastIndex(msg[:max], "\n")
		if cut < max/2 {
			cut = max
		}
		msg = strings.ToValidUTF8(msg[:cut], "") + "\n…"
	}
	return msg
}

// Leaks reports whether statement reveals the fix: whether it quotes a line
// the gold patch restores (a line the bug patch removed) that appears
// nowhere in the buggy files. Lines shorter than 6 non-blank bytes ("}",
// "else:") say nothing and are not checked. buggy maps each touched path to
// its content with the bug applied.
func Leaks(statement, goldPatch string, buggy map[string][]byte) bool {
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	stmt := norm(statement)
	file := ""
	for line := range strings.Lines(goldPatch) {
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "+++ "):
			file = strings.TrimPrefix(strings.TrimPrefix(line, "+++ "), "b/")
		case strings.HasPrefix(line, "+"):
			fix := norm(line[1:])
			if len(strings.ReplaceAll(fix, " ", "")) < 6 {
				continue
			}
			if strings.Contains(stmt, fix) && !strings.Contains(norm(string(buggy[file])), fix) {
				return true
			}
		}
	}
	return false
}
