package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/tokenizer"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// ScriptedPolicy is a deterministic Policy that plays back fixed assistant
// turns through the real tokenizer. It has two uses. In tests and
// benchmarks it checks the harness, the sandbox and the grader end to end
// without a model (and other packages' tests drive rollouts with it). In
// training it is the demonstration policy of the warm start
// (actors/trainer/warmstart.go): playing a task's own gold fix
// (SolveScript) through the real rollout path gives an episode whose token
// ids and policy mask are exactly what the policy would have written,
// graded by the real grader. It is not a model and never stands in for
// one: its episodes are demonstrations, not the policy's samples.
//
// Which turn to play is read from the prompt — the number of assistant
// turns it already holds — so one ScriptedPolicy serves any number of
// concurrent episodes. Each turn is encoded and ended with the request's
// first stop id; it honours MaxTokens (a longer turn is cut and finishes
// with FinishLength). Past the end of the script it emits only the stop id,
// which the harness ends as no_output. Every log-prob is 0.
type ScriptedPolicy struct {
	Tokenizer *tokenizer.Tokenizer
	Turns     []string
	Version   int64
	// Delay is slept (respecting ctx) before every turn.
	Delay time.Duration
	// NoStop leaves the stop id out: every turn then ends as if cut.
	NoStop bool
	// Err, when set, is returned instead of a turn (a broken sampler).
	Err error
}

var _ policy.Policy = (*ScriptedPolicy)(nil)

// Generate plays the next turn of the script.
func (p *ScriptedPolicy) Generate(ctx context.Context, req policy.GenerateRequest) (policy.GenerateResult, error) {
	if p.Delay > 0 {
		t := time.NewTimer(p.Delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return policy.GenerateResult{}, ctx.Err()
		case <-t.C:
		}
	}
	if err := ctx.Err(); err != nil {
		return policy.GenerateResult{}, err
	}
	if p.Err != nil {
		return policy.GenerateResult{}, p.Err
	}
	if req.MaxTokens <= 0 {
		return policy.GenerateResult{}, fmt.Errorf("scripted policy: MaxTokens %d", req.MaxTokens)
	}
	prompt, err := p.Tokenizer.Decode(req.PromptIDs)
	if err != nil {
		return policy.GenerateResult{}, err
	}
	n := strings.Count(prompt, "<|im_start|>assistant") - 1
	var ids []int32
	if n >= 0 && n < len(p.Turns) {
		ids = p.Tokenizer.EncodeOrdinary(p.Turns[n])
	}
	finish := policy.FinishStop
	if p.NoStop && len(ids) > 0 {
		finish = policy.FinishLength
	} else if len(req.Stop) > 0 {
		ids = append(ids, req.Stop[0])
	}
	// A stop sequence ends the turn where the policy's would end (the
	// demonstration's answer stops where a sampled one is cut).
	if end := policy.StopSeqEnd(ids, req.StopSeqs); end > 0 && end <= req.MaxTokens {
		ids, finish = ids[:end], policy.FinishStopSeq
	}
	if len(ids) > req.MaxTokens {
		ids, finish = ids[:req.MaxTokens], policy.FinishLength
	}
	return policy.GenerateResult{TokenIDs: ids, LogProbs: make([]float32, len(ids)), Finish: finish, PolicyVersion: p.Version}, nil
}

// Hunk is one hunk of a unified diff as text before and after.
type Hunk struct {
	Path          string
	Before, After string
}

// ParseHunks reads the hunks of a git-style unified diff.
func ParseHunks(patch string) ([]Hunk, error) {
	var (
		out  []Hunk
		file string
		cur  *Hunk
	)
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	for line := range strings.Lines(patch) {
		body := strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(body, "diff --git "), strings.HasPrefix(body, "--- "), strings.HasPrefix(body, "index "):
			flush()
		case strings.HasPrefix(body, "+++ "):
			flush()
			file = strings.TrimPrefix(strings.TrimPrefix(body, "+++ "), "b/")
		case strings.HasPrefix(body, "@@"):
			flush()
			if file == "" {
				return nil, errors.New("hunk before a +++ line")
			}
			cur = &Hunk{Path: file}
		case cur == nil:
		case strings.HasPrefix(body, `\ No newline`):
		case strings.HasPrefix(body, " ") || body == "":
			text := strings.TrimPrefix(line, " ")
			if body == "" {
				text = "\n"
			}
			cur.Before += text
			cur.After += text
		case strings.HasPrefix(body, "-"):
			cur.Before += line[1:]
		case strings.HasPrefix(body, "+"):
			cur.After += line[1:]
		}
	}
	flush()
	if len(out) == 0 {
		return nil, errors.New("the patch has no hunks")
	}
	return out, nil
}

// ToolCallText renders a tool call as a model writes it.
func ToolCallText(name string, args any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(args)
	return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + strings.TrimSpace(b.String()) + "}\n</tool_call>"
}

// EditBlock renders one search/replace block as patch mode wants it.
func EditBlock(e Edit) string {
	return e.Path + "\n" + searchMark + "\n" + ensureNewline(e.Search) + dividerMark + "\n" + ensureNewline(e.Replace) + replaceMark + "\n"
}

// SolveScript is the script that solves task from its gold patch: in
// agent mode it looks around (Glob, Read), makes each hunk of the gold
// patch an Edit, runs the first failing test with Bash and submits; in
// patch mode it answers with one search/replace block per hunk. For tests.
func SolveScript(task *records.Task, mode Mode) ([]string, error) {
	hunks, err := ParseHunks(task.GetGoldPatch())
	if err != nil {
		return nil, fmt.Errorf("gold patch of %s: %w", task.GetId(), err)
	}
	if mode == ModePatch {
		var b strings.Builder
		if task.GetDifficulty().GetHintLevel() >= HintSearch {
			// The answer starts inside the first block, after its SEARCH
			// side (see answerPrefill): write its replacement, then the
			// other hunks' blocks.
			first, err := SearchHint(task.GetGoldPatch())
			if err != nil {
				return nil, fmt.Errorf("task %s: %w", task.GetId(), err)
			}
			rest := first.Replace
			if task.GetDifficulty().GetHintLevel() >= HintReplace {
				start, err := ReplaceHint(first)
				if err != nil {
					return nil, fmt.Errorf("task %s: %w", task.GetId(), err)
				}
				rest = strings.TrimPrefix(rest, start)
			}
			b.WriteString(ensureNewline(rest) + replaceMark + "\n")
			for _, h := range hunks[1:] {
				b.WriteString("```\n" + EditBlock(Edit{Path: h.Path, Search: h.Before, Replace: h.After}) + "```\n")
			}
			return []string{b.String()}, nil
		}
		b.WriteString("The fix:\n\n")
		for _, h := range hunks {
			b.WriteString("```\n" + EditBlock(Edit{Path: h.Path, Search: h.Before, Replace: h.After}) + "```\n")
		}
		return []string{b.String()}, nil
	}
	glob := "**/*.py"
	if task.GetLanguage() == "go" {
		glob = "**/*.go"
	}
	turns := []string{
		"Let me look at the repository.\n" + ToolCallText("Glob", map[string]string{"pattern": glob}),
		ToolCallText("Read", map[string]any{"path": hunks[0].Path, "limit": 50}),
	}
	var edits strings.Builder
	edits.WriteString("I found the bug.")
	for _, h := range hunks {
		edits.WriteString("\n" + ToolCallText("Edit", map[string]string{"path": h.Path, "old_string": h.Before, "new_string": h.After}))
	}
	turns = append(turns, edits.String())
	if f2p := task.GetFailToPass(); len(f2p) > 0 && task.GetLanguage() != "go" {
		turns = append(turns, ToolCallText("Bash", map[string]any{"command": "git status --short", "timeout": 60}))
	}
	turns = append(turns, ToolCallText("Submit", map[string]any{}))
	return turns, nil
}
