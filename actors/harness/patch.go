package harness

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/tokenizer"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Patch mode asks for the fix in one answer of search/replace blocks, the
// format aider made common, each after the path of the file it edits:
//
//	path/to/file.py
//	<<<<<<< SEARCH
//	exact lines of the current file
//	=======
//	the lines that replace them
//	>>>>>>> REPLACE
//
// A block may sit inside a ``` fence; the path is the last non-blank line
// before "<<<<<<< SEARCH" that is not a fence (backticks around it are
// dropped). SEARCH must occur exactly once in the file as it is after the
// earlier blocks. Edits are all-or-nothing: if any block is malformed or
// does not apply, nothing is written and the episode ends edit_failed.

// PatchSystemPrompt is the system turn of patch mode.
const PatchSystemPrompt = `You are a software engineer fixing a bug. You are shown a bug report and the code. Answer with the fix as search/replace blocks: the file path on its own line, then
<<<<<<< SEARCH
the exact lines to replace, copied from the code shown
=======
the new lines
>>>>>>> REPLACE
Use one block per change and keep each SEARCH short but unique. Do not change the tests.`

// ErrBadTask is a task that does not fit its sandbox (its bug patch names a
// file the repository lacks): a bad record, not an episode's ending.
var ErrBadTask = errors.New("task does not fit its sandbox")

// Edit is one search/replace block.
type Edit struct {
	Path    string
	Search  string
	Replace string
}

// Kinds of edit failures, for errors.Is; EditError names the block.
var (
	ErrMalformedEdit  = errors.New("malformed edit block")
	ErrNoPath         = errors.New("edit block without a file path")
	ErrEmptySearch    = errors.New("empty SEARCH")
	ErrSearchNotFound = errors.New("SEARCH text not found")
	ErrSearchTwice    = errors.New("SEARCH text occurs more than once")
	ErrEditFile       = errors.New("file cannot be edited")
)

// EditError is a block that could not be parsed or applied.
type EditError struct {
	Index  int // block number, from 0
	Path   string
	Err    error
	Detail string
}

func (e *EditError) Error() string {
	s := fmt.Sprintf("edit %d", e.Index)
	if e.Path != "" {
		s += " (" + e.Path + ")"
	}
	s += ": " + e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *EditError) Unwrap() error { return e.Err }

const (
	searchMark  = "<<<<<<< SEARCH"
	dividerMark = "======="
	replaceMark = ">>>>>>> REPLACE"
)

// ParseEdits reads the search/replace blocks of an answer. defaultPath is
// used for a block without a path (when the prompt showed one file), "" to
// refuse such blocks. No blocks at all is not an error: nil, nil.
func ParseEdits(text, defaultPath string) ([]Edit, error) {
	lines := strings.SplitAfter(text, "\n")
	var edits []Edit
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != searchMark {
			continue
		}
		idx := len(edits)
		path := ""
		for j := i - 1; j >= 0; j-- {
			l := strings.TrimSpace(lines[j])
			if l == "" || strings.HasPrefix(l, "```") {
				continue
			}
			if l == replaceMark {
				break // the previous block's end: no path of its own
			}
			path = strings.Trim(l, "`*: ")
			break
		}
		if path == "" {
			path = defaultPath
		}
		if path == "" {
			return nil, &EditError{Index: idx, Err: ErrNoPath}
		}
		var search, repl strings.Builder
		j, stage := i+1, 0
		for ; j < len(lines); j++ {
			l := strings.TrimRight(lines[j], "\r\n")
			switch {
			case stage == 0 && strings.TrimSpace(l) == dividerMark:
				stage = 1
				continue
			case stage == 1 && strings.TrimSpace(l) == replaceMark:
				stage = 2
			case strings.TrimSpace(l) == searchMark:
				return nil, &EditError{Index: idx, Path: path, Err: ErrMalformedEdit, Detail: "a new SEARCH before this block's " + map[int]string{0: dividerMark, 1: replaceMark}[stage]}
			}
			if stage == 2 {
				break
			}
			if stage == 0 {
				search.WriteString(lines[j])
			} else {
				repl.WriteString(lines[j])
			}
		}
		switch stage {
		case 0:
			return nil, &EditError{Index: idx, Path: path, Err: ErrMalformedEdit, Detail: "no " + dividerMark + " line"}
		case 1:
			return nil, &EditError{Index: idx, Path: path, Err: ErrMalformedEdit, Detail: "no " + replaceMark + " line"}
		}
		if strings.TrimSpace(search.String()) == "" {
			return nil, &EditError{Index: idx, Path: path, Err: ErrEmptySearch}
		}
		edits = append(edits, Edit{Path: path, Search: search.String(), Replace: repl.String()})
		i = j
	}
	return edits, nil
}

// ApplyEdits applies edits to the files of sb, all or nothing: every file
// is read and edited in memory first, and written only when every block
// applied. An *EditError is the answer's fault; any other error is the
// sandbox's.
func ApplyEdits(ctx context.Context, sb Sandbox, edits []Edit) ([]string, error) {
	files := map[string]string{}
	var order []string
	for i, ed := range edits {
		content, ok := files[ed.Path]
		if !ok {
			b, err := sb.ReadFile(ctx, ed.Path)
			if err != nil {
				var pe *fs.PathError
				if errors.As(err, &pe) {
					return nil, &EditError{Index: i, Path: ed.Path, Err: ErrEditFile, Detail: err.Error()}
				}
				return nil, err
			}
			content = string(b)
			order = append(order, ed.Path)
		}
		switch n := strings.Count(content, ed.Search); n {
		case 0:
			return nil, &EditError{Index: i, Path: ed.Path, Err: ErrSearchNotFound}
		case 1:
		default:
			return nil, &EditError{Index: i, Path: ed.Path, Err: ErrSearchTwice, Detail: strconv.Itoa(n) + " times"}
		}
		files[ed.Path] = strings.Replace(content, ed.Search, ed.Replace, 1)
	}
	for _, p := range order {
		if err := sb.WriteFile(ctx, p, []byte(files[p])); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				return nil, &EditError{Path: p, Err: ErrEditFile, Detail: err.Error()}
			}
			return nil, err
		}
	}
	return order, nil
}

// Excerpt is code shown in a patch-mode prompt.
type Excerpt struct {
	Path     string
	From, To int // lines, from 1, inclusive
	Lines    int // of the whole file
	Text     string
}

// excerptBudget is how much code a patch prompt shows at each hint level:
// the less the statement says, the more code the model must search.
var excerptBudget = map[int]struct{ lines, bytes int }{
	0: {400, 14 << 10}, // the whole file when it fits
	1: {80, 6 << 10},   // the neighbourhood of the bug
	2: {40, 3 << 10},   // the statement already shows the function
	3: {24, 2 << 10},   // the statement names the lines too
	4: {24, 2 << 10},   // and the answer's first SEARCH side is given
}

var hunkHeader = regexp.MustCompile(`^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@`)

// bugSites are the lines of the buggy files that the task's bug patch
// wrote, per file.
func bugSites(bugPatch string) (map[string][2]int, []string) {
	sites := map[string][2]int{}
	var order []string
	file := ""
	for line := range strings.Lines(bugPatch) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "+++ "):
			file = strings.TrimPrefix(strings.TrimPrefix(line, "+++ "), "b/")
			if file == "/dev/null" {
				file = ""
			}
		case file != "" && strings.HasPrefix(line, "@@"):
			m := hunkHeader.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			from, _ := strconv.Atoi(m[1])
			n := 1
			if m[2] != "" {
				n, _ = strconv.Atoi(m[2])
			}
			to := from + max(n, 1) - 1
			s, ok := sites[file]
			if !ok {
				order = append(order, file)
				s = [2]int{from, to}
			}
			s[0], s[1] = min(s[0], from), max(s[1], to)
			sites[file] = s
		}
	}
	return sites, order
}

// bugFiles are the files a task's bug touched, as the sandbox has them.
type bugFiles struct {
	order []string
	sites map[string][2]int
	lines map[string][]string
}

func readBugFiles(ctx context.Context, sb Sandbox, task *records.Task) (*bugFiles, error) {
	sites, order := bugSites(task.GetBugPatch())
	if len(order) == 0 {
		return nil, fmt.Errorf("%w: task %s: its bug patch names no file", ErrBadTask, task.GetId())
	}
	f := &bugFiles{order: order, sites: sites, lines: map[string][]string{}}
	for _, p := range order {
		b, err := sb.ReadFile(ctx, p)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("%w: read %s for the prompt: %w", ErrBadTask, p, err)
			}
			return nil, fmt.Errorf("read %s for the prompt: %w", p, err)
		}
		lines := strings.SplitAfter(string(b), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		f.lines[p] = lines
	}
	return f, nil
}

// The fewest lines and bytes a window is cut to, per file, when the prompt
// must shrink to fit the context.
const (
	minExcerptLines = 8
	minExcerptBytes = 512
)

// budgetAt is a file's window, in lines and bytes, at the hint level's
// budget halved shrink times, never below the floors above.
func (f *bugFiles) budgetAt(task *records.Task, shrink int) (lines, bytes int) {
	budget, ok := excerptBudget[int(task.GetDifficulty().GetHintLevel())]
	if !ok {
		budget = excerptBudget[HintSearch]
	}
	shrink = min(shrink, 30)
	lines = max(max(budget.lines/len(f.order), 20)>>shrink, minExcerptLines)
	bytes = max((budget.bytes/len(f.order))>>shrink, minExcerptBytes)
	return lines, bytes
}

// cut is the code a patch-mode prompt shows for task: for each file the
// bug touched, the whole file when it fits budgetAt(shrink), otherwise a
// window of it around the bug (patch mode raises shrink until the prompt
// fits the episode's context). At hint level 0 the window's offset from the
// bug comes from a hash of the task id, so the bug is not always in the
// middle.
func (f *bugFiles) cut(task *records.Task, shrink int) []Excerpt {
	level := int(task.GetDifficulty().GetHintLevel())
	per, perBytes := f.budgetAt(task, shrink)
	var out []Excerpt
	for _, p := range f.order {
		lines := f.lines[p]
		site := f.sites[p]
		from, to := 1, len(lines)
		span := func() int { return len(strings.Join(lines[from-1:to], "")) }
		if to-from+1 > per || span() > perBytes {
			n := per
			lead := n / 2
			if level == 0 {
				h := fnv.New32a()
				h.Write([]byte(task.GetId()))
				lead = 5 + int(h.Sum32()%uint32(max(n-10, 1)))
			}
			from = max(1, site[0]-lead)
			to = min(len(lines), from+n-1)
			from = max(1, min(from, to-n+1))
			for to > from && span() > perBytes {
				// Shrink from the side farther from the bug.
				if site[0]-from > to-site[1] {
					from++
				} else {
					to--
				}
			}
		}
		out = append(out, Excerpt{Path: p, From: from, To: to, Lines: len(lines), Text: strings.Join(lines[from-1:to], "")})
	}
	return out
}

// narrowest reports whether shrink has reached the floors, so that
// shrinking further would show no less code.
func (f *bugFiles) narrowest(task *records.Task, shrink int) bool {
	lines, bytes := f.budgetAt(task, shrink)
	return lines == minExcerptLines && bytes == minExcerptBytes
}

// patchPrompt is the user turn of patch mode.
func patchPrompt(task *records.Task, ex []Excerpt) string {
	var b strings.Builder
	b.WriteString(strings.TrimRight(task.GetProblemStatement(), "\n"))
	b.WriteString("\n\n# Code\n")
	lang := "python"
	if task.GetLanguage() == "go" {
		lang = "go"
	}
	for _, e := range ex {
		if e.From == 1 && e.To == e.Lines {
			fmt.Fprintf(&b, "\n%s\n```%s\n%s```\n", e.Path, lang, ensureNewline(e.Text))
		} else {
			fmt.Fprintf(&b, "\n%s (lines %d-%d of %d)\n```%s\n%s```\n", e.Path, e.From, e.To, e.Lines, lang, ensureNewline(e.Text))
		}
	}
	b.WriteString("\nAnswer with search/replace blocks that fix the bug.\n")
	return b.String()
}

func ensureNewline(s string) string {
	if s == "" || strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}

// patch is patch mode: one prompt with the code, one answer of edits.
func (e *episode) patch() error {
	ts := time.Now()
	code, err := readBugFiles(e.wctx, e.ws, e.task)
	e.res.SandboxSeconds += time.Since(ts).Seconds()
	if err != nil {
		if end, detail, ok, cerr := e.interrupted(err); ok {
			if cerr != nil {
				return cerr
			}
			return e.end(end, detail)
		}
		if errors.Is(err, ErrBadTask) {
			return fmt.Errorf("harness: patch mode: %w", err)
		}
		return e.end(EndSandboxFailure, err.Error())
	}
	// The code shown shrinks, window by window, until the prompt leaves
	// room for a whole answer (or cannot shrink any more).
	prefill, err := answerPrefill(e.task)
	if err != nil {
		return fmt.Errorf("harness: patch mode: %w", err)
	}
	var (
		ex      []Excerpt
		user    string
		ids     []int32
		prefIDs = e.tok.EncodeOrdinary(prefill)
	)
	for shrink := 0; ; shrink++ {
		ex = code.cut(e.task, shrink)
		user = patchPrompt(e.task, ex)
		msgs := []tokenizer.Message{{Role: "system", Content: PatchSystemPrompt}, {Role: "user", Content: user}}
		if ids, err = e.encodePrompt(msgs, false); err != nil {
			return err
		}
		if len(ids)+len(prefIDs)+e.lim.MaxTurnTokens <= e.lim.MaxContext || code.narrowest(e.task, shrink) {
			break
		}
	}
	e.res.Turns = append(e.res.Turns,
		&records.Turn{Role: records.Role_ROLE_SYSTEM, Content: PatchSystemPrompt},
		&records.Turn{Role: records.Role_ROLE_USER, Content: user})
	if len(ids)+len(prefIDs) >= e.lim.MaxContext {
		return e.end(EndContextFull, fmt.Sprintf("the prompt is %d tokens, the limit is %d", len(ids)+len(prefIDs), e.lim.MaxContext))
	}
	e.appendEnv(ids)
	// At HintSearch the answer's first block is given up to its divider:
	// environment tokens the policy continues from.
	e.appendEnv(prefIDs)
	e.stopSeqs = e.answerStops()
	t, end, detail, err := e.generate()
	if err != nil {
		return err
	}
	if end != "" {
		return e.end(end, detail)
	}
	if strings.TrimSpace(t.text) == "" {
		if t.finish == policy.FinishContext {
			return e.end(EndContextFull, "the context filled up before the model wrote anything")
		}
		return e.end(EndNoOutput, fmt.Sprintf("the model emitted %d tokens and no text", len(t.ids)))
	}
	if prefill != "" {
		t.text = prefill + t.text
		e.res.Turns[len(e.res.Turns)-1].Content = t.text
	}
	def := ""
	if len(ex) == 1 {
		def = ex[0].Path
	}
	edits, err := ParseEdits(t.text, def)
	if err != nil {
		return e.end(EndEditFailed, err.Error())
	}
	if len(edits) == 0 {
		detail := "the answer has no " + searchMark + " block"
		if t.finish != policy.FinishStop {
			detail += fmt.Sprintf(" (it was cut at %d tokens)", len(t.ids))
		}
		return e.end(EndNoEdits, detail)
	}
	ts = time.Now()
	files, err := ApplyEdits(e.wctx, e.ws, edits)
	secs := time.Since(ts).Seconds()
	e.res.SandboxSeconds += secs
	if err != nil {
		var ee *EditError
		if errors.As(err, &ee) {
			e.res.Turns = append(e.res.Turns, &records.Turn{Role: records.Role_ROLE_TOOL, Content: "Error: " + err.Error(), Seconds: secs})
			return e.end(EndEditFailed, err.Error())
		}
		if end, detail, ok, cerr := e.interrupted(err); ok {
			if cerr != nil {
				return cerr
			}
			return e.end(end, detail)
		}
		return e.end(EndSandboxFailure, err.Error())
	}
	e.wrote = true
	sort.Strings(files)
	obs := fmt.Sprintf("Applied %d edits to %s.", len(edits), strings.Join(files, ", "))
	e.res.Turns = append(e.res.Turns, &records.Turn{Role: records.Role_ROLE_TOOL, Content: obs, Seconds: secs})
	return e.end(EndPatchApplied, "")
}

// answerStops are the stop sequences of a patch-mode answer. Where the
// statement names the lines of the bug (HintLines and up) and the fix is
// one hunk, one search/replace block is the whole answer, and the turn
// ends with the block's closing marker: what a model writes after it
// (small models ramble on to the token limit) is time spent sampling and,
// in training, tokens the reward says nothing about. A fix of several
// hunks keeps its whole turn. The sequence is the marker as the tokenizer
// encodes it alone, which is how it is encoded in an answer, after a
// newline (a token of its own); a model that splits it otherwise is just
// not cut short.
func (e *episode) answerStops() [][]int32 {
	if int(e.task.GetDifficulty().GetHintLevel()) < HintLines {
		return nil
	}
	if hunks, err := ParseHunks(e.task.GetGoldPatch()); err != nil || len(hunks) != 1 {
		return nil
	}
	return [][]int32{e.tok.EncodeOrdinary(replaceMark)}
}
