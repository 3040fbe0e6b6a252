package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/frognano/frognano/actors/policy"
)

// Sandbox is what the tools need from a sandbox; its methods mirror
// actors/sandbox.Sandbox's so the adapter is a few lines. Exec returns an
// error only when the sandbox is broken. For the file operations an
// *fs.PathError is the operation failing (shown to the model); any other
// error means the sandbox is broken and ends the episode.
type Sandbox interface {
	Exec(ctx context.Context, argv []string, timeout time.Duration, limit int64) (ExecResult, error)
	ReadFile(ctx context.Context, path string) ([]byte, error)
	WriteFile(ctx context.Context, path string, content []byte) error
	ListFiles(ctx context.Context, dir, glob string) ([]string, error)
}

// ExecResult is what a command did (the fields of sandbox.ExecResult the
// harness reads).
type ExecResult struct {
	ExitCode  int
	Stdout    []byte
	Stderr    []byte
	Truncated bool // output went past the limit
	TimedOut  bool
}

// Param types in tool schemas.
const (
	TypeString  = "string"
	TypeInteger = "integer"
)

// Param is one argument of a tool.
type Param struct {
	Name        string
	Type        string
	Description string
	Required    bool
	Min         int64 // integers only
}

// Tool is one of FrogNano's tools as offered to the model.
type Tool struct {
	Name        string
	Description string
	Params      []Param
}

func (t Tool) param(name string) (Param, bool) {
	for _, p := range t.Params {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// Schema is the tool as a JSON function schema, keys in the order Qwen2.5's
// own examples use, for ChatOptions.Tools.
func (t Tool) Schema() json.RawMessage {
	var props bytes.Buffer
	props.WriteByte('{')
	required := []string{}
	for i, p := range t.Params {
		if i > 0 {
			props.WriteByte(',')
		}
		k, _ := json.Marshal(p.Name)
		v, _ := json.Marshal(struct {
			Type        string `json:"type"`
			Description string `json:"description"`
		}{p.Type, p.Description})
		props.Write(k)
		props.WriteByte(':')
		props.Write(v)
		if p.Required {
			required = append(required, p.Name)
		}
	}
	props.WriteByte('}')
	type params struct {
		Type       string          `json:"type"`
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	type function struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Parameters  params `json:"parameters"`
	}
	b, _ := json.Marshal(struct {
		Type     string   `json:"type"`
		Function function `json:"function"`
	}{"function", function{t.Name, t.Description, params{"object", props.Bytes(), required}}})
	return b
}

// tools are FrogNano's tools, in the order the system prompt lists them.
var tools = []Tool{
	{Name: "Read", Description: "Read a text file. Lines are numbered from 1.", Params: []Param{
		{Name: "path", Type: TypeString, Description: "File path, relative to the repository root or absolute.", Required: true},
		{Name: "offset", Type: TypeInteger, Description: "First line to read (default 1).", Min: 1},
		{Name: "limit", Type: TypeInteger, Description: "Number of lines to read (default 2000).", Min: 1},
	}},
	{Name: "Write", Description: "Create or overwrite a file with the given content.", Params: []Param{
		{Name: "path", Type: TypeString, Description: "File path.", Required: true},
		{Name: "content", Type: TypeString, Description: "The whole new content.", Required: true},
	}},
	{Name: "Edit", Description: "Replace old_string with new_string in a file. old_string must occur exactly once.", Params: []Param{
		{Name: "path", Type: TypeString, Description: "File path.", Required: true},
		{Name: "old_string", Type: TypeString, Description: "Exact text to replace.", Required: true},
		{Name: "new_string", Type: TypeString, Description: "Replacement text.", Required: true},
	}},
	{Name: "Glob", Description: "List files matching a glob; * matches within a path segment, ** across segments.", Params: []Param{
		{Name: "pattern", Type: TypeString, Description: `Glob such as "**/*.py" or "src/*.go".`, Required: true},
	}},
	{Name: "Bash", Description: "Run a shell command in the repository root.", Params: []Param{
		{Name: "command", Type: TypeString, Description: "The command.", Required: true},
		{Name: "timeout", Type: TypeInteger, Description: "Timeout in seconds.", Min: 1},
	}},
	{Name: "Submit", Description: "Finish: submit the repository as it is now."},
}

// Schemas are the tools' JSON schemas for the system prompt.
func Schemas() []json.RawMessage {
	out := make([]json.RawMessage, len(tools))
	for i, t := range tools {
		out[i] = t.Schema()
	}
	return out
}

func lookupTool(name string) (Tool, bool) {
	for _, t := range tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

func toolNames() []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Name
	}
	return names
}

// Options bound what one tool call may do; zero values take the defaults.
type Options struct {
	OutputLimit    int           // bytes of observation (default 16 KiB)
	DefaultTimeout time.Duration // for Bash without a timeout (default 60s)
	MaxTimeout     time.Duration // cap on Bash's timeout (default 10m)
}

func (o Options) withDefaults() Options {
	if o.OutputLimit <= 0 {
		o.OutputLimit = 16 << 10
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = 60 * time.Second
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = 10 * time.Minute
	}
	return o
}

// Result is what a tool call produced.
type Result struct {
	Observation string
	Submitted   bool // Submit was called: the episode ends
}

// ErrToolFailed marks a tool that ran but failed (file missing, Edit's
// old_string not unique...); its message is the observation.
var ErrToolFailed = errors.New("tool failed")

const defaultReadLines = 2000

// Run executes a call that ParseToolCalls accepted. A failing tool is an
// observation, not an error; Run returns an error only when the sandbox is
// broken (or ctx ended), which ends the episode.
func Run(ctx context.Context, sb Sandbox, call policy.ToolCall, opts Options) (Result, error) {
	opts = opts.withDefaults()
	obs, err := run(ctx, sb, call, opts)
	if errors.Is(err, ErrToolFailed) {
		return Result{Observation: truncate("Error: "+err.Error(), opts.OutputLimit)}, nil
	}
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", call.Name, err)
	}
	return Result{Observation: truncate(obs, opts.OutputLimit), Submitted: call.Name == "Submit"}, nil
}

func run(ctx context.Context, sb Sandbox, call policy.ToolCall, opts Options) (string, error) {
	if cerr := validate(call); cerr != nil {
		cerr.Tool = call.Name
		return "", fmt.Errorf("%w: %w", ErrToolFailed, cerr)
	}
	var a struct {
		Path      string `json:"path"`
		Offset    int    `json:"offset"`
		Limit     int    `json:"limit"`
		Content   string `json:"content"`
		OldString string `json:"old_string"`
		NewString string `json:"new_string"`
		Pattern   string `json:"pattern"`
		Command   string `json:"command"`
		Timeout   int64  `json:"timeout"`
	}
	if err := json.Unmarshal(call.Arguments, &a); err != nil {
		return "", fmt.Errorf("%w: %w", ErrToolFailed, err)
	}
	if a.Path == "" && (call.Name == "Read" || call.Name == "Write" || call.Name == "Edit") {
		return "", fmt.Errorf("%w: empty path", ErrToolFailed)
	}
	if strings.ContainsRune(a.Path, 0) {
		return "", fmt.Errorf("%w: path contains a NUL byte", ErrToolFailed)
	}
	switch call.Name {
	case "Read":
		b, err := sb.ReadFile(ctx, a.Path)
		if err != nil {
			return "", fileErr(err)
		}
		return numberLines(string(b), max(a.Offset, 1), cmp(a.Limit, defaultReadLines)), nil
	case "Write":
		if err := sb.WriteFile(ctx, a.Path, []byte(a.Content)); err != nil {
			return "", fileErr(err)
		}
		return fmt.Sprintf("Wrote %d bytes to %s.", len(a.Content), a.Path), nil
	case "Edit":
		return edit(ctx, sb, a.Path, a.OldString, a.NewString)
	case "Glob":
		if _, err := path.Match(strings.ReplaceAll(a.Pattern, "**", "*"), "x"); err != nil || a.Pattern == "" {
			return "", fmt.Errorf("%w: bad pattern %q", ErrToolFailed, a.Pattern)
		}
		files, err := sb.ListFiles(ctx, ".", a.Pattern)
		if err != nil {
			return "", fileErr(err)
		}
		if len(files) == 0 {
			return "No files match.", nil
		}
		return strings.Join(files, "\n"), nil
	case "Bash":
		timeout := opts.DefaultTimeout
		if a.Timeout > 0 {
			timeout = min(time.Duration(a.Timeout)*time.Second, opts.MaxTimeout)
		}
		res, err := sb.Exec(ctx, []string{"/bin/sh", "-c", a.Command}, timeout, int64(opts.OutputLimit))
		if err != nil {
			return "", err
		}
		return formatExec(res, timeout), nil
	case "Submit":
		return "Submitted.", nil
	}
	return "", fmt.Errorf("%w: no implementation for %q", ErrToolFailed, call.Name)
}

func cmp(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// fileErr turns a failed file operation into an observation and anything
// else into a broken sandbox.
func fileErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%w: %w", ErrToolFailed, err)
	}
	return err
}

func edit(ctx context.Context, sb Sandbox, p, old, repl string) (string, error) {
	if old == "" {
		return "", fmt.Errorf("%w: old_string is empty", ErrToolFailed)
	}
	b, err := sb.ReadFile(ctx, p)
	if err != nil {
		return "", fileErr(err)
	}
	switch n := strings.Count(string(b), old); n {
	case 0:
		return "", fmt.Errorf("%w: old_string not found in %s", ErrToolFailed, p)
	case 1:
	default:
		return "", fmt.Errorf("%w: old_string occurs %d times in %s; include more context to make it unique", ErrToolFailed, n, p)
	}
	if err := sb.WriteFile(ctx, p, []byte(strings.Replace(string(b), old, repl, 1))); err != nil {
		return "", fileErr(err)
	}
	return "Edited " + p + ".", nil
}

// numberLines renders lines [offset, offset+limit) as cat -n does.
func numberLines(s string, offset, limit int) string {
	if s == "" {
		return "(empty file)"
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if offset > len(lines) {
		return fmt.Sprintf("(offset %d is past the end: the file has %d lines)", offset, len(lines))
	}
	end := min(offset-1+limit, len(lines))
	var b strings.Builder
	for i := offset - 1; i < end; i++ {
		fmt.Fprintf(&b, "%6d\t%s", i+1, strings.TrimSuffix(lines[i], "\n")+"\n")
	}
	if end < len(lines) {
		fmt.Fprintf(&b, "(%d more lines; read on with offset %d)\n", len(lines)-end, end+1)
	}
	return b.String()
}

func formatExec(res ExecResult, timeout time.Duration) string {
	var b strings.Builder
	b.Write(res.Stdout)
	if len(res.Stderr) > 0 {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.Write(res.Stderr)
	}
	if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	if res.Truncated {
		b.WriteString("[output truncated]\n")
	}
	if res.TimedOut {
		b.WriteString("[timed out after " + timeout.String() + "]\n")
	}
	b.WriteString("[exit code " + strconv.Itoa(res.ExitCode) + "]")
	return b.String()
}

// truncate keeps the head and the tail of s within limit bytes (on rune
// boundaries), with a marker saying how much was cut: the end of a test
// run's output matters as much as its start.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	head, tail := limit/2, limit-limit/2
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	t := len(s) - tail
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	return s[:head] + fmt.Sprintf("\n[... %d bytes truncated ...]\n", t-head) + s[t:]
}
