// Package mutatetest holds the checks every operator test shares: that a
// candidate's patch applies with git and reproduces the mutant, and that
// its gold patch restores the original byte for byte.
package mutatetest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// GitApply writes files (path → content) into a fresh directory, applies
// patch there with `git apply` and returns the resulting contents of the
// same paths. It skips the test when git is missing.
func GitApply(t testing.TB, files map[string][]byte, patch string) map[string][]byte {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	for p, b := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(git, "apply", "--verbose", "-")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewBufferString(patch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply: %v\n%s\npatch:\n%s", err, out, patch)
	}
	got := map[string][]byte{}
	for p := range files {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		got[p] = b
	}
	return got
}

// RoundTrip checks candidate c end to end with git: Patch turns the
// originals into the mutants the mutations describe, and Gold turns those
// back into the originals.
func RoundTrip(t testing.TB, c mutate.Candidate) {
	t.Helper()
	orig := map[string][]byte{}
	byFile := map[*mutate.File][]mutate.Replacement{}
	for _, mu := range c.Mutations {
		orig[mu.File.Path] = mu.File.Src
		byFile[mu.File] = append(byFile[mu.File], mu.Edit.Replacements...)
	}
	want := map[string][]byte{}
	for f, rs := range byFile {
		sorted := append([]mutate.Replacement(nil), rs...)
		for i := 1; i < len(sorted); i++ {
			for j := i; j > 0 && sorted[j].Start < sorted[j-1].Start; j-- {
				sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
			}
		}
		want[f.Path] = mutate.ApplyReplacements(f.Src, sorted)
	}
	mutated := GitApply(t, orig, c.Patch)
	for p, b := range want {
		if !bytes.Equal(mutated[p], b) {
			t.Fatalf("%s: patch does not reproduce the mutant\npatch:\n%s\ngot:\n%s\nwant:\n%s", p, c.Patch, mutated[p], b)
		}
	}
	restored := GitApply(t, mutated, c.Gold)
	for p, b := range orig {
		if !bytes.Equal(restored[p], b) {
			t.Fatalf("%s: gold patch does not restore the original\ngold:\n%s\ngot:\n%s", p, c.Gold, restored[p])
		}
	}
}
