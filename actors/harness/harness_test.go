package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/policy"
	records "github.com/frognano/frognano/persistence/records/v1"
)

func TestParseToolCalls(t *testing.T) {
	call := func(name, args string) string {
		return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>"
	}
	cases := []struct {
		name  string
		text  string
		want  []string // "Name args"
		isErr error
	}{
		{"no call", "just thinking", nil, nil},
		{"one call", "Let me look.\n" + call("Read", `{"path": "a.go"}`), []string{`Read {"path": "a.go"}`}, nil},
		{"two calls", call("Read", `{"path": "a"}`) + "\n" + call("Bash", `{"command": "ls", "timeout": 5}`),
			[]string{`Read {"path": "a"}`, `Bash {"command": "ls", "timeout": 5}`}, nil},
		{"trailing text", call("Submit", `{}`) + "\nDone, I think.", []string{`Submit {}`}, nil},
		{"no arguments", "<tool_call>\n{\"name\": \"Submit\"}\n</tool_call>", []string{`Submit {}`}, nil},
		{"braces and tags in strings", call("Write", `{"path": "x", "content": "}{ \"</tool_call>\" {"}`),
			[]string{`Write {"path": "x", "content": "}{ \"</tool_call>\" {"}`}, nil},
		{"unclosed tag", "<tool_call>\n{\"name\": \"Submit\", \"arguments\": {}}\n", nil, policy.ErrUnclosedTag},
		{"truncated json", "<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"pa", nil, policy.ErrUnclosedTag},
		{"malformed json", "<tool_call>\n{\"name\": Read}\n</tool_call>", nil, policy.ErrMalformedCall},
		{"text inside tag", "<tool_call>\n{\"name\": \"Submit\"} oops\n</tool_call>", nil, policy.ErrMalformedCall},
		{"extra top-level key", "<tool_call>\n{\"name\": \"Submit\", \"id\": 1}\n</tool_call>", nil, policy.ErrMalformedCall},
		{"no name", "<tool_call>\n{\"arguments\": {}}\n</tool_call>", nil, policy.ErrMalformedCall},
		{"arguments not object", call("Read", `["a"]`), nil, policy.ErrMalformedCall},
		{"unknown tool", call("rm", `{}`), nil, ErrUnknownTool},
		{"missing argument", call("Edit", `{"path": "a", "old_string": "x"}`), nil, ErrMissingArgument},
		{"extra argument", call("Glob", `{"pattern": "*", "dir": "."}`), nil, ErrUnexpectedArgument},
		{"string for integer", call("Read", `{"path": "a", "offset": "3"}`), nil, ErrArgumentType},
		{"float for integer", call("Read", `{"path": "a", "limit": 2.5}`), nil, ErrArgumentType},
		{"number for string", call("Bash", `{"command": 1}`), nil, ErrArgumentType},
		{"integer below minimum", call("Read", `{"path": "a", "offset": 0}`), nil, ErrArgumentRange},
		{"second call bad", call("Submit", `{}`) + call("Nope", `{}`), nil, ErrUnknownTool},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls, err := ParseToolCalls(c.text)
			if c.isErr != nil {
				var ce *policy.CallError
				if !errors.Is(err, c.isErr) || !errors.As(err, &ce) || calls != nil {
					t.Fatalf("got %v, %v; want %v", calls, err, c.isErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range calls {
				got = append(got, c.Name+" "+string(c.Arguments))
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestSchemas(t *testing.T) {
	s := Schemas()
	if len(s) != len(tools) {
		t.Fatalf("%d schemas", len(s))
	}
	want := `{"type":"function","function":{"name":"Read","description":"Read a text file. Lines are numbered from 1.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"File path, relative to the repository root or absolute."},"offset":{"type":"integer","description":"First line to read (default 1)."},"limit":{"type":"integer","description":"Number of lines to read (default 2000)."}},"required":["path"]}}}`
	if string(s[0]) != want {
		t.Fatalf("got %s", s[0])
	}
	for _, raw := range s {
		if !json.Valid(raw) {
			t.Fatalf("invalid %s", raw)
		}
	}
	if !strings.Contains(string(s[len(s)-1]), `"properties":{},"required":[]`) {
		t.Fatalf("Submit: %s", s[len(s)-1])
	}
}

// memSandbox is a test double: files in a map, and an Exec that knows only
// the commands these tests run. Real containers are tested in
// actors/sandbox.
type memSandbox struct {
	files  map[string]string
	broken bool
	last   struct {
		argv    []string
		timeout time.Duration
		limit   int64
	}
}

var errBroken = errors.New("sandbox is dead")

func (m *memSandbox) Exec(_ context.Context, argv []string, timeout time.Duration, limit int64) (ExecResult, error) {
	if m.broken {
		return ExecResult{}, errBroken
	}
	m.last.argv, m.last.timeout, m.last.limit = argv, timeout, limit
	switch cmd := argv[len(argv)-1]; {
	case strings.HasPrefix(cmd, "echo "):
		return ExecResult{Stdout: []byte(strings.TrimPrefix(cmd, "echo ") + "\n")}, nil
	case cmd == "fail":
		return ExecResult{ExitCode: 2, Stderr: []byte("boom")}, nil
	case cmd == "sleep":
		return ExecResult{ExitCode: -1, TimedOut: true}, nil
	case cmd == "yes":
		return ExecResult{Stdout: []byte(strings.Repeat("y\n", int(limit)/2)), Truncated: true}, nil
	}
	return ExecResult{ExitCode: 127, Stderr: []byte("not found")}, nil
}

func (m *memSandbox) ReadFile(_ context.Context, p string) ([]byte, error) {
	if m.broken {
		return nil, errBroken
	}
	s, ok := m.files[p]
	if !ok {
		return nil, &fs.PathError{Op: "read", Path: p, Err: fs.ErrNotExist}
	}
	return []byte(s), nil
}

func (m *memSandbox) WriteFile(_ context.Context, p string, b []byte) error {
	if m.broken {
		return errBroken
	}
	if strings.HasPrefix(p, "ro/") {
		return &fs.PathError{Op: "write", Path: p, Err: fs.ErrPermission}
	}
	m.files[p] = string(b)
	return nil
}

// ListFiles matches base names only, enough for these tests.
func (m *memSandbox) ListFiles(_ context.Context, _, glob string) ([]string, error) {
	if m.broken {
		return nil, errBroken
	}
	var out []string
	for p := range m.files {
		if ok, _ := path.Match(glob, path.Base(p)); ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out, nil
}

func TestRun(t *testing.T) {
	cases := []struct {
		name, tool, args string
		want             string // observation, or its prefix when ending in "..."
		submitted        bool
		file, content    string // a file to check afterwards
	}{
		{name: "read", tool: "Read", args: `{"path": "a.txt"}`, want: "     1\tone\n     2\ttwo\n     3\tthree\n"},
		{name: "read window", tool: "Read", args: `{"path": "a.txt", "offset": 2, "limit": 1}`, want: "     2\ttwo\n(1 more lines; read on with offset 3)\n"},
		{name: "read past end", tool: "Read", args: `{"path": "a.txt", "offset": 9}`, want: "(offset 9 is past the end: the file has 3 lines)"},
		{name: "read empty", tool: "Read", args: `{"path": "empty"}`, want: "(empty file)"},
		{name: "read missing", tool: "Read", args: `{"path": "nope"}`, want: "Error: tool failed: read nope: file does not exist"},
		{name: "read empty path", tool: "Read", args: `{"path": ""}`, want: "Error: tool failed: empty path"},
		{name: "read NUL path", tool: "Read", args: `{"path": "a\u0000"}`, want: "Error: tool failed: path contains a NUL byte"},
		{name: "write", tool: "Write", args: `{"path": "new.go", "content": "package x\n"}`, want: "Wrote 10 bytes to new.go.", file: "new.go", content: "package x\n"},
		{name: "write fails", tool: "Write", args: `{"path": "ro/x", "content": ""}`, want: "Error: tool failed: write ro/x: permission denied"},
		{name: "edit", tool: "Edit", args: `{"path": "a.txt", "old_string": "two", "new_string": "2"}`, want: "Edited a.txt.", file: "a.txt", content: "one\n2\nthree\n"},
		{name: "edit absent", tool: "Edit", args: `{"path": "a.txt", "old_string": "four", "new_string": "4"}`, want: "Error: tool failed: old_string not found in a.txt", file: "a.txt", content: "one\ntwo\nthree\n"},
		{name: "edit ambiguous", tool: "Edit", args: `{"path": "a.txt", "old_string": "o", "new_string": "0"}`, want: "Error: tool failed: old_string occurs 2 times in a.txt; include more context to make it unique", file: "a.txt", content: "one\ntwo\nthree\n"},
		{name: "edit empty old", tool: "Edit", args: `{"path": "a.txt", "old_string": "", "new_string": "x"}`, want: "Error: tool failed: old_string is empty"},
		{name: "edit missing file", tool: "Edit", args: `{"path": "nope", "old_string": "a", "new_string": "b"}`, want: "Error: tool failed: read nope: file does not exist"},
		{name: "edit write fails", tool: "Edit", args: `{"path": "ro/f", "old_string": "a", "new_string": "b"}`, want: "Error: tool failed: write ro/f: permission denied"},
		{name: "glob", tool: "Glob", args: `{"pattern": "*.txt"}`, want: "a.txt\nsub/b.txt"},
		{name: "glob none", tool: "Glob", args: `{"pattern": "*.rs"}`, want: "No files match."},
		{name: "glob bad", tool: "Glob", args: `{"pattern": "[a"}`, want: `Error: tool failed: bad pattern "[a"`},
		{name: "bash", tool: "Bash", args: `{"command": "echo hi"}`, want: "hi\n[exit code 0]"},
		{name: "bash fails", tool: "Bash", args: `{"command": "fail"}`, want: "boom\n[exit code 2]"},
		{name: "bash timeout", tool: "Bash", args: `{"command": "sleep", "timeout": 3}`, want: "[timed out after 3s]\n[exit code -1]"},
		{name: "bash truncated", tool: "Bash", args: `{"command": "yes"}`, want: "y\n..."},
		{name: "submit", tool: "Submit", args: `{}`, want: "Submitted.", submitted: true},
		{name: "invalid call", tool: "Read", args: `{"path": 3}`, want: "Error: tool failed: tool call 0 (Read): wrong argument type: path must be a string"},
		{name: "unknown tool", tool: "Nope", args: `{}`, want: "Error: tool failed: tool call 0 (Nope): unknown tool..."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb := &memSandbox{files: map[string]string{"a.txt": "one\ntwo\nthree\n", "sub/b.txt": "b", "empty": "", "ro/f": "a"}}
			res, err := Run(context.Background(), sb, policy.ToolCall{Name: c.tool, Arguments: json.RawMessage(c.args)}, Options{OutputLimit: 200})
			if err != nil {
				t.Fatal(err)
			}
			if p, ok := strings.CutSuffix(c.want, "..."); ok {
				if !strings.HasPrefix(res.Observation, p) {
					t.Fatalf("got %q, want prefix %q", res.Observation, p)
				}
			} else if res.Observation != c.want {
				t.Fatalf("got %q, want %q", res.Observation, c.want)
			}
			if res.Submitted != c.submitted {
				t.Fatalf("submitted %v", res.Submitted)
			}
			if c.file != "" && sb.files[c.file] != c.content {
				t.Fatalf("%s = %q, want %q", c.file, sb.files[c.file], c.content)
			}
			if len(res.Observation) > 200+40 {
				t.Fatalf("observation of %d bytes past the limit", len(res.Observation))
			}
		})
	}
}

func TestRunBashLimits(t *testing.T) {
	sb := &memSandbox{files: map[string]string{}}
	opts := Options{OutputLimit: 1000, DefaultTimeout: 7 * time.Second, MaxTimeout: 20 * time.Second}
	for _, c := range []struct {
		args string
		want time.Duration
	}{{`{"command": "echo x"}`, 7 * time.Second}, {`{"command": "echo x", "timeout": 5}`, 5 * time.Second}, {`{"command": "echo x", "timeout": 999}`, 20 * time.Second}} {
		if _, err := Run(context.Background(), sb, policy.ToolCall{Name: "Bash", Arguments: json.RawMessage(c.args)}, opts); err != nil {
			t.Fatal(err)
		}
		if sb.last.timeout != c.want || sb.last.limit != 1000 || fmt.Sprint(sb.last.argv) != "[/bin/sh -c echo x]" {
			t.Fatalf("%s: ran %v with %v, %d", c.args, sb.last.argv, sb.last.timeout, sb.last.limit)
		}
	}
}

func TestRunBrokenSandbox(t *testing.T) {
	for _, c := range []struct{ tool, args string }{
		{"Read", `{"path": "a"}`}, {"Write", `{"path": "a", "content": ""}`},
		{"Edit", `{"path": "a", "old_string": "x", "new_string": "y"}`},
		{"Glob", `{"pattern": "*"}`}, {"Bash", `{"command": "echo"}`},
	} {
		_, err := Run(context.Background(), &memSandbox{broken: true}, policy.ToolCall{Name: c.tool, Arguments: json.RawMessage(c.args)}, Options{})
		if !errors.Is(err, errBroken) {
			t.Errorf("%s: got %v, want the sandbox's error", c.tool, err)
		}
	}
}

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		s     string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"0123456789", 4, "01\n[... 6 bytes truncated ...]\n89"},
		{"ééééé", 4, "é\n[... 6 bytes truncated ...]\né"}, // cut on rune boundaries
	} {
		if got := truncate(c.s, c.limit); got != c.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", c.s, c.limit, got, c.want)
		}
	}
}

func TestGradingTestsRunASynthesizedTaskInSuiteOrder(t *testing.T) {
	synth := &records.Task{BugPatch: "diff", FailToPass: []string{"t.py::b"}, PassToPass: []string{"t.py::a"}}
	if got := GradingTests(synth); got != nil {
		t.Errorf("synthesized task: %v, want nil (the whole suite in its order)", got)
	}
	swe := &records.Task{FailToPass: []string{"t.py::b"}, PassToPass: []string{"t.py::a"}}
	if got := GradingTests(swe); !slices.Equal(got, []string{"t.py::b", "t.py::a"}) {
		t.Errorf("SWE-bench instance: %v, want its two lists", got)
	}
}
