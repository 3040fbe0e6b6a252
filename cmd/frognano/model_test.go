package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels/model/modeltest"
	"github.com/frognano/frognano/kernels/modelstore"
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
		{[]string{"generate", "--model", "nope", "hi"}, "can pull: qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m"},
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
	if err != nil || !strings.Contains(out, "no models in") || !strings.Contains(out, "qwen2.5-coder-0.5b") {
		t.Errorf("model ls on an empty store: %q, %v", out, err)
	}
	if _, _, err := runCLI(t, "", "model", "show", "qwen2.5-coder-1.5b"); err == nil || !strings.Contains(err.Error(), "frognano model pull qwen2.5-coder-1.5b") {
		t.Errorf("model show of a model not pulled: %v", err)
	}
	// A model without a chat template is refused before anything is rendered.
	noTemplate, _ := modeltest.Llama.WriteGGUF(t, modeltest.Llama.RandomWeights(1), modeltest.GGUFOptions{NoChatTemplate: true})
	if _, _, err := runCLI(t, "", "generate", "--model", noTemplate, "hi"); err == nil || !strings.Contains(err.Error(), "no usable chat template: the model has none") {
		t.Errorf("generate with a model without a chat template: %v", err)
	}
}

// TestModelShow lists and shows a store entry: its manifest, provenance
// and what the GGUF holds.
func TestModelShow(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FROGNANO_MODELS", dir)
	src := modeltest.Llama.WriteRandomGGUF(t, 1)
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "tiny"), 0o755)
	os.WriteFile(filepath.Join(dir, "tiny", "tiny.gguf"), raw, 0o644)
	m := modelstore.Manifest{Name: "tiny", File: "tiny.gguf", Size: int64(len(raw)), SHA256: strings.Repeat("ab", 32),
		Source: "pypi:tiny-part1…2==1.0 (2 parts, concatenated)", Parts: []string{"pypi:tiny-part1==1.0#a sha256:x", "pypi:tiny-part2==1.0#b sha256:y"},
		Provenance: &modelstore.Provenance{Upstream: "Tiny by nobody", License: "MIT (upstream)", Publisher: "unknown (a test)"}}
	b, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(dir, "tiny", modelstore.ManifestName), b, 0o644)

	out, _, err := runCLI(t, "", "model", "show", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"licence        MIT (upstream)", "publisher      unknown (a test)", "part 2         pypi:tiny-part2==1.0#b",
		"architecture   llama: 2 layers", "chat template  ChatML", "tensors"} {
		if !strings.Contains(out, want) {
			t.Errorf("model show lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runCLI(t, "", "model", "ls")
	if err != nil || !strings.Contains(out, "MIT (upstream)") || !strings.Contains(out, "unknown") || !strings.Contains(out, "LICENCE") {
		t.Errorf("model ls: %q, %v", out, err)
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
