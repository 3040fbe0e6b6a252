package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels/model/modeltest"
)

// runCLI runs the frognano command line in this process.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := root()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// TestGenerateAndChat drives generate and chat on a tiny random model: the
// text is gibberish, but it must stream, stop at --max-tokens, be the same
// for the same seed, and the chat must reuse its cache across turns.
func TestGenerateAndChat(t *testing.T) {
	t.Setenv("FROGNANO_MODELS", t.TempDir())
	path := modeltest.Llama.WriteRandomGGUF(t, 1)

	out1, errOut, err := runCLI(t, "", "generate", "--model", path, "--max-tokens", "7", "--seed", "3", "--temperature", "1", "--stats", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "7 generated, stopped on max tokens") {
		t.Errorf("stats: %q", errOut)
	}
	out2, _, err := runCLI(t, "", "generate", "--model", path, "--max-tokens", "7", "--seed", "3", "--temperature", "1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if out1 != out2 || strings.TrimSpace(out1) == "" {
		t.Errorf("same seed, different or empty answers: %q vs %q", out1, out2)
	}

	out, errOut, err := runCLI(t, "first turn\n\nsecond turn\n/exit\n", "chat", "--model", path, "--max-tokens", "4", "--stats")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "> "); n != 4 { // two turns, the empty line, /exit
		t.Errorf("%d prompts in %q, want 4", n, out)
	}
	if !strings.Contains(errOut, "cached") || strings.Count(errOut, "4 generated") != 2 {
		t.Errorf("stats: %q", errOut)
	}
	// The second turn's prompt starts with the first turn, answer included.
	if !strings.Contains(errOut, "(0 cached)") || strings.Count(errOut, "(0 cached)") != 1 {
		t.Errorf("the second turn did not reuse the cache: %q", errOut)
	}
}

func TestModelCommandErrors(t *testing.T) {
	t.Setenv("FROGNANO_MODELS", t.TempDir())
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"generate", "hi"}, "frognano model pull smollm2-135m"},
		{[]string{"generate", "--model", "nope", "hi"}, "can pull: smollm2-135m"},
		{[]string{"generate", "--max-tokens", "0", "hi"}, "--max-tokens must be positive"},
		{[]string{"generate", "--top-p", "2", "hi"}, "--top-p"},
		{[]string{"model", "pull", "gpt-5"}, "cannot pull \"gpt-5\""},
	}
	for _, tt := range tests {
		_, _, err := runCLI(t, "", tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%v: err = %v, want %q", tt.args, err, tt.msg)
		}
	}
	out, _, err := runCLI(t, "", "model", "ls")
	if err != nil || !strings.Contains(out, "no models in") {
		t.Errorf("model ls on an empty store: %q, %v", out, err)
	}
}

func TestNodeURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7070":         "http://127.0.0.1:7070",
		" http://h:1/ ":          "http://h:1",
		"https://node.example:9": "https://node.example:9",
	} {
		if got, err := nodeURL(in); err != nil || got != want {
			t.Errorf("nodeURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ftp://h:1", "http://h:1/v1/node", "http://", "http://h:1/?x=1"} {
		if got, err := nodeURL(bad); err == nil {
			t.Errorf("nodeURL(%q) = %q, want an error", bad, got)
		}
	}
}
