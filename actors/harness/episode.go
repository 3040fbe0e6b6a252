package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Mode is how an episode asks the model for a fix. It is part of a task's
// difficulty: patch mode shows the code and wants one answer, agent mode
// lets the model explore with tools over many turns.
type Mode string

const (
	// ModeAgent is the multi-turn tool loop (Read, Write, Edit, Glob, Bash,
	// Submit).
	ModeAgent Mode = "agent"
	// ModePatch is one turn: the prompt carries the statement and the code,
	// the answer is search/replace edits (see ParseEdits).
	ModePatch Mode = "patch"
)

// ParseMode reads a mode name.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeAgent, ModePatch:
		return Mode(s), nil
	}
	return "", fmt.Errorf("mode %q: want %q or %q", s, ModeAgent, ModePatch)
}

// Ending names why an episode stopped. Every episode has exactly one.
type Ending string

const (
	EndSubmitted      Ending = "submitted"       // agent mode: the model called Submit
	EndMaxTurns       Ending = "max_turns"       // Limits.MaxTurns assistant turns without Submit
	EndContextFull    Ending = "context_full"    // the next turn or observation would not fit Limits.MaxContext
	EndWallTime       Ending = "wall_time"       // Limits.WallTime ran out
	EndNoOutput       Ending = "no_output"       // a turn with no text at all (only a stop token)
	EndPatchApplied   Ending = "patch_applied"   // patch mode: every edit applied
	EndNoEdits        Ending = "no_edits"        // patch mode: the answer holds no edit block
	EndEditFailed     Ending = "edit_failed"     // patch mode: a block was malformed or did not apply; nothing was written
	EndSandboxFailure Ending = "sandbox_failure" // the sandbox broke (its container died): an infrastructure failure
	EndPolicyError    Ending = "policy_error"    // the policy failed (a sampler or server error): an infrastructure failure
)

// Infrastructure reports whether the ending says nothing about the model:
// such episodes are retried and left out of reward statistics.
func (e Ending) Infrastructure() bool { return e == EndSandboxFailure || e == EndPolicyError }

// Limits bound an episode. Zero fields take the defaults.
type Limits struct {
	// MaxTurns is the most assistant turns (default 30; patch mode always
	// has one).
	MaxTurns int
	// MaxTurnTokens is the most tokens one turn may generate (default 1024).
	// A turn cut there is parsed as it is: a tool call left open becomes an
	// error observation.
	MaxTurnTokens int
	// MaxContext is the most tokens of the whole conversation: prompt,
	// every turn and every observation (default 8192).
	MaxContext int
	// WallTime bounds the episode's loop, generation and tools, grading
	// excluded (default 10 minutes).
	WallTime time.Duration
}

// DefaultLimits are sized for SmolLM2's 8k context on a small CPU node.
var DefaultLimits = Limits{MaxTurns: 30, MaxTurnTokens: 1024, MaxContext: 8192, WallTime: 10 * time.Minute}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxTurns <= 0 {
		l.MaxTurns = d.MaxTurns
	}
	if l.MaxTurnTokens <= 0 {
		l.MaxTurnTokens = d.MaxTurnTokens
	}
	if l.MaxContext <= 0 {
		l.MaxContext = d.MaxContext
	}
	if l.WallTime <= 0 {
		l.WallTime = d.WallTime
	}
	return l
}

// Grade is what the grader made of the repository an episode left.
type Grade struct {
	Report   *records.TestReport
	Resolved bool
	Reward   float64
	Reason   string // why not resolved ("" when resolved)
}

// Workspace is one episode's sandbox: the tools' Sandbox, and a grader
// that restores the protected test files, runs the task's FAIL_TO_PASS and
// PASS_TO_PASS tests and turns the report into a reward. An error from
// Grade means the sandbox broke.
type Workspace interface {
	Sandbox
	Grade(ctx context.Context) (Grade, error)
}

// Runner runs episodes of one policy. It is safe for concurrent use: each
// Run is independent, and the Policy batches concurrent turns (a Sampler
// Engine does).
type Runner struct {
	Policy    policy.Policy
	Tokenizer *tokenizer.Tokenizer
	Limits    Limits
	Tools     Options       // limits of one tool call; OutputLimit defaults to 8 KiB here
	Sampling  sample.Params // zero: greedy
	// Stop ends a turn; default <|im_end|> and the tokenizer's EOS.
	Stop []int32
	// MinPolicyVersion is passed on to the policy (see GenerateRequest).
	MinPolicyVersion int64
}

// EpisodeResult is one finished episode: the conversation as turns and as the
// exact token ids the policy saw, with the policy/environment mask and the
// sampler's log-probabilities aligned to the ids.
type EpisodeResult struct {
	Mode   Mode
	Ending Ending
	Detail string // what went wrong, for the named endings that have a cause

	Turns      []*records.Turn
	TokenIDs   []int32
	PolicyMask []bool    // true: sampled by the policy
	LogProbs   []float32 // the sampler's log-prob for policy tokens, 0 elsewhere

	// PolicyVersion is the first turn's, the oldest of the episode: a later
	// turn asks for at least its predecessor's version; each assistant Turn
	// records the versions that sampled it (Turn.policy_version, and
	// Turn.last_policy_version when the Sampler swapped weights while it was
	// in flight).
	PolicyVersion int64
	Seed          uint64
	// Grade is nil when the episode was not graded: an infrastructure
	// ending, or nothing in the repository could have changed (no tool that
	// writes ran, no edit was applied), when the reward is 0 by construction.
	Grade  *Grade
	Reward float64

	GenerationSeconds float64 // waiting for the policy
	SandboxSeconds    float64 // tools and grading
	GradeSeconds      float64
	WallSeconds       float64
	GeneratedTokens   int
}

// PolicyTokens is the number of ids the policy sampled.
func (r *EpisodeResult) PolicyTokens() int {
	n := 0
	for _, p := range r.PolicyMask {
		if p {
			n++
		}
	}
	return n
}

// Trajectory is the result as the persistent record.
func (r *EpisodeResult) Trajectory(id, runID, taskID string) *records.Trajectory {
	t := &records.Trajectory{
		Id:                id,
		TaskId:            taskID,
		RunId:             runID,
		PolicyVersion:     r.PolicyVersion,
		Seed:              r.Seed,
		Turns:             r.Turns,
		TokenIds:          r.TokenIDs,
		PolicyMask:        r.PolicyMask,
		Logprobs:          r.LogProbs,
		Termination:       string(r.Ending),
		Reward:            r.Reward,
		GenerationSeconds: r.GenerationSeconds,
		SandboxSeconds:    r.SandboxSeconds,
		CreatedUnixNano:   time.Now().UnixNano(),
	}
	if r.Grade != nil {
		t.Report = r.Grade.Report
	}
	return t
}

// ResultOf is a stored trajectory as the result of an episode played in
// mode: what Trajectory keeps (the ending, reward, tokens, turns, test
// report and times; not Detail or GradeSeconds). A trajectory with a test
// report was graded: its Grade is resolved when the reward is 1.
func ResultOf(t *records.Trajectory, mode Mode) *EpisodeResult {
	r := &EpisodeResult{Mode: mode, Ending: Ending(t.GetTermination()), Turns: t.GetTurns(), TokenIDs: t.GetTokenIds(),
		PolicyMask: t.GetPolicyMask(), LogProbs: t.GetLogprobs(), PolicyVersion: t.GetPolicyVersion(), Seed: t.GetSeed(),
		Reward: t.GetReward(), GenerationSeconds: t.GetGenerationSeconds(), SandboxSeconds: t.GetSandboxSeconds()}
	if t.GetReport() != nil {
		r.Grade = &Grade{Report: t.GetReport(), Resolved: t.GetReward() >= 1, Reward: t.GetReward()}
	}
	r.WallSeconds = r.GenerationSeconds + r.SandboxSeconds
	r.GeneratedTokens = r.PolicyTokens()
	return r
}

// episode is the state of one Run.
type episode struct {
	r     *Runner
	tok   *tokenizer.Tokenizer
	lim   Limits
	ws    Workspace
	task  *records.Task
	res   *EpisodeResult
	ctx   context.Context // the caller's
	wctx  context.Context // ends at the wall-time limit too
	imEnd int32           // -1 when the tokenizer has none
	// stopSeqs end a turn early (patch mode at a hint level that locates
	// the bug: the end of the first search/replace block).
	stopSeqs [][]int32
	turnNo   int
	// wrote is set once anything could have changed the repository.
	wrote bool
}

// Run plays one episode of task in ws, in the given mode, then grades the
// repository (see EpisodeResult.Grade). An error means ctx ended or the runner is
// misconfigured; everything else, a broken sandbox and a failing policy
// included, is an ending.
func (r *Runner) Run(ctx context.Context, task *records.Task, ws Workspace, mode Mode, seed uint64) (*EpisodeResult, error) {
	if r.Policy == nil || r.Tokenizer == nil {
		return nil, errors.New("harness: Runner needs a Policy and a Tokenizer")
	}
	if task == nil || strings.TrimSpace(task.GetProblemStatement()) == "" {
		return nil, errors.New("harness: the task has no problem statement")
	}
	if _, err := ParseMode(string(mode)); err != nil {
		return nil, err
	}
	start := time.Now()
	e := &episode{r: r, tok: r.Tokenizer, lim: r.Limits.withDefaults(), ws: ws, task: task,
		res: &EpisodeResult{Mode: mode, Seed: seed, PolicyVersion: -1}, imEnd: -1}
	if id, ok := r.Tokenizer.TokenID("<|im_end|>"); ok {
		e.imEnd = id
	}
	wctx, cancel := context.WithTimeout(ctx, e.lim.WallTime)
	defer cancel()
	e.ctx, e.wctx = ctx, wctx
	var err error
	if mode == ModePatch {
		err = e.patch()
	} else {
		err = e.agent()
	}
	if err != nil {
		return nil, err
	}
	if e.res.PolicyVersion < 0 {
		e.res.PolicyVersion = 0
	}
	if !e.res.Ending.Infrastructure() && e.wrote {
		gs := time.Now()
		g, err := ws.Grade(ctx)
		e.res.GradeSeconds = time.Since(gs).Seconds()
		e.res.SandboxSeconds += e.res.GradeSeconds
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			e.res.Ending, e.res.Detail = EndSandboxFailure, "grading: "+err.Error()
		default:
			e.res.Grade, e.res.Reward = &g, g.Reward
		}
	}
	e.res.WallSeconds = time.Since(start).Seconds()
	for _, t := range e.res.Turns {
		ValidUTF8(t)
	}
	if e.res.Grade != nil {
		ValidUTF8(e.res.Grade.Report)
	}
	e.res.Detail = ValidString(e.res.Detail)
	return e.res, nil
}

// end records the ending and returns nil, for `return e.end(...)`.
func (e *episode) end(why Ending, detail string) error {
	e.res.Ending, e.res.Detail = why, detail
	return nil
}

// stopIDs are the ids that end a turn.
func (e *episode) stopIDs() []int32 {
	if len(e.r.Stop) > 0 {
		return e.r.Stop
	}
	var s []int32
	if e.imEnd >= 0 {
		s = append(s, e.imEnd)
	}
	if eos := e.tok.EOS(); eos >= 0 && eos != e.imEnd {
		s = append(s, eos)
	}
	return s
}

// appendEnv adds environment tokens (prompt, observations, template).
func (e *episode) appendEnv(ids []int32) {
	e.res.TokenIDs = append(e.res.TokenIDs, ids...)
	for range ids {
		e.res.PolicyMask = append(e.res.PolicyMask, false)
		e.res.LogProbs = append(e.res.LogProbs, 0)
	}
}

// encodePrompt renders msgs with a generation prompt and encodes them, with
// BOS first when the model wants one. Message contents are encoded as
// ordinary text (see encodeWith).
func (e *episode) encodePrompt(msgs []tokenizer.Message, tools bool) ([]int32, error) {
	var schemas []json.RawMessage
	if tools {
		schemas = Schemas()
	}
	// The model's own format (a Qwen2.5 template's tools section has its
	// own example call); a template frognano cannot read renders ChatML's
	// defaults.
	f, err := tokenizer.ParseChatTemplate(e.tok.ChatTemplate())
	if err != nil {
		f = tokenizer.ChatFormat{ToolCallExample: tokenizer.DefaultToolCallExample}
	}
	opts := f.Options(schemas, true)
	contents := make([]string, len(msgs))
	held := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		contents[i], held[i] = m.Content, m
		held[i].Content = placeholder
	}
	text, err := tokenizer.RenderChat(held, opts)
	if err != nil {
		return nil, err
	}
	ids := e.encodeWith(text, contents...)
	if e.tok.AddBOS() && e.tok.BOS() >= 0 && (len(ids) == 0 || ids[0] != e.tok.BOS()) {
		ids = append([]int32{e.tok.BOS()}, ids...)
	}
	return ids, nil
}

// placeholder marks where encodeWith puts a content string in a template.
const placeholder = "\x00"

// chatMarkers are the template's special tokens.
var chatMarkers = []string{"<|im_start|>", "<|im_end|>"}

// encodeWith encodes a ChatML template whose placeholders stand for
// contents, in order. Only the template's own <|im_start|> and <|im_end|>
// become special tokens; the contents are always ordinary text, so a file
// or a test's output that contains "<|im_end|>" cannot end a turn. When no
// content contains a marker the ids equal Encode of the whole text, as the
// model saw in training.
func (e *episode) encodeWith(template string, contents ...string) []int32 {
	var ids []int32
	run := ""
	flush := func() {
		if run != "" {
			ids = append(ids, e.tok.EncodeOrdinary(run)...)
			run = ""
		}
	}
	next := 0
	for template != "" {
		at, marker := -1, ""
		for _, m := range chatMarkers {
			if i := strings.Index(template, m); i >= 0 && (at < 0 || i < at) {
				at, marker = i, m
			}
		}
		if p := strings.Index(template, placeholder); p >= 0 && (at < 0 || p < at) {
			run += template[:p]
			if next < len(contents) {
				run += strings.ReplaceAll(contents[next], placeholder, "")
				next++
			}
			template = template[p+len(placeholder):]
			continue
		}
		if at < 0 {
			run += template
			break
		}
		run += template[:at]
		flush()
		if id, ok := e.tok.TokenID(marker); ok {
			ids = append(ids, id)
		} else {
			ids = append(ids, e.tok.EncodeOrdinary(marker)...)
		}
		template = template[at+len(marker):]
	}
	flush()
	return ids
}

// turn is one generated turn.
type turn struct {
	ids    []int32 // sampled, the stop id included when there was one
	text   string  // decoded, without the stop id
	finish policy.FinishReason
	closed bool // ended on <|im_end|>
}

// generate asks the policy for the next turn and appends it. A non-nil
// ending means the episode is over.
func (e *episode) generate() (*turn, Ending, string, error) {
	room := e.lim.MaxContext - len(e.res.TokenIDs)
	if room <= 0 {
		return nil, EndContextFull, fmt.Sprintf("the conversation holds %d tokens, the limit is %d", len(e.res.TokenIDs), e.lim.MaxContext), nil
	}
	req := policy.GenerateRequest{
		PromptIDs:        append([]int32(nil), e.res.TokenIDs...),
		MaxTokens:        min(e.lim.MaxTurnTokens, room),
		Sampling:         e.r.Sampling,
		Seed:             e.res.Seed ^ uint64(e.turnNo)*0x9e3779b97f4a7c15,
		Stop:             e.stopIDs(),
		StopSeqs:         e.stopSeqs,
		MinPolicyVersion: e.r.MinPolicyVersion,
	}
	if e.res.PolicyVersion > req.MinPolicyVersion {
		req.MinPolicyVersion = e.res.PolicyVersion
	}
	e.turnNo++
	gs := time.Now()
	out, err := e.r.Policy.Generate(e.wctx, req)
	secs := time.Since(gs).Seconds()
	e.res.GenerationSeconds += secs
	if err != nil {
		if end, detail, ok, cerr := e.interrupted(err); ok {
			return nil, end, detail, cerr
		}
		return nil, EndPolicyError, err.Error(), nil
	}
	if len(out.LogProbs) != len(out.TokenIDs) {
		return nil, EndPolicyError, fmt.Sprintf("the policy returned %d tokens and %d log-probs", len(out.TokenIDs), len(out.LogProbs)), nil
	}
	if len(out.TokenIDs) > req.MaxTokens {
		return nil, EndPolicyError, fmt.Sprintf("the policy returned %d tokens, %d were asked for", len(out.TokenIDs), req.MaxTokens), nil
	}
	if e.res.PolicyVersion < 0 {
		e.res.PolicyVersion = out.PolicyVersion
	}
	e.res.TokenIDs = append(e.res.TokenIDs, out.TokenIDs...)
	e.res.LogProbs = append(e.res.LogProbs, out.LogProbs...)
	for range out.TokenIDs {
		e.res.PolicyMask = append(e.res.PolicyMask, true)
	}
	e.res.GeneratedTokens += len(out.TokenIDs)
	t := &turn{ids: out.TokenIDs, finish: out.Finish}
	body := out.TokenIDs
	if n := len(body); n > 0 && out.Finish == policy.FinishStop {
		t.closed = body[n-1] == e.imEnd
		body = body[:n-1]
	}
	if out.Finish == policy.FinishStopSeq && !policy.EndsWithStopSeq(out.TokenIDs, req.StopSeqs) {
		return nil, EndPolicyError, fmt.Sprintf("the policy finished on a stop sequence its %d tokens do not end with", len(out.TokenIDs)), nil
	}
	text, err := e.tok.Decode(body)
	if err != nil {
		return nil, EndPolicyError, "decode: " + err.Error(), nil
	}
	t.text = text
	e.res.Turns = append(e.res.Turns, &records.Turn{Role: records.Role_ROLE_ASSISTANT, Content: text, Seconds: secs, PolicyVersion: out.PolicyVersion, LastPolicyVersion: lastVersion(out)})
	return t, "", "", nil
}

// interrupted classifies an error that came while the wall-time context
// was done: the caller's context ending is an error, the episode's own
// limit an ending.
func (e *episode) interrupted(err error) (Ending, string, bool, error) {
	if e.wctx.Err() == nil {
		return "", "", false, nil
	}
	if e.ctx.Err() != nil {
		return "", "", true, fmt.Errorf("episode interrupted: %w", errors.Join(e.ctx.Err(), err))
	}
	return EndWallTime, fmt.Sprintf("the episode ran past its %v limit", e.lim.WallTime), true, nil
}

// closeTurn is what follows a turn before the next observation: the
// turn's <|im_end|> when the policy did not write it, then the newline the
// template puts after every turn.
func (e *episode) closeTurn(t *turn) string {
	if t.closed {
		return "\n"
	}
	return "<|im_end|>\n"
}

// appendText encodes environment text (a template with placeholders for
// contents, see encodeWith) and appends it unless it would overflow the
// context; it reports whether it fit.
func (e *episode) appendText(template string, contents ...string) bool {
	ids := e.encodeWith(template, contents...)
	if len(e.res.TokenIDs)+len(ids) > e.lim.MaxContext {
		return false
	}
	e.appendEnv(ids)
	return true
}

// lastVersion is a turn's Turn.last_policy_version: the newest version
// that sampled it, when it is not the oldest (0 otherwise).
func lastVersion(out policy.GenerateResult) int64 {
	if first, last := out.Versions(); last != first {
		return last
	}
	return 0
}
