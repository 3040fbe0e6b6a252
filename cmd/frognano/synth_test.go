package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSynthAndTasksCommands registers a small local Python project, then
// synthesizes tasks from it through the CLI's embedded node and lists,
// shows and exports them. It needs containerd and the package registries
// (the environment installs pytest and coverage.py).
func TestSynthAndTasksCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an environment image; skipped with -short")
	}
	if _, err := os.Stat("/run/containerd/containerd.sock"); err != nil {
		t.Skip("containerd is not running (scripts/setup-containerd.sh starts it)")
	}
	proj := filepath.Join(t.TempDir(), "calc")
	for name, body := range map[string]string{
		"setup.py": "from setuptools import setup\nsetup(name='calc', version='0.1', packages=['calc'])\n",
		"calc/__init__.py": `def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(xs):
    if not xs:
        raise ValueError("mean of nothing")
    return sum(xs) / len(xs)


def span(xs):
    return max(xs) - min(xs)
`,
		"tests/test_calc.py": `import pytest
from calc import clamp, mean, span


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_clamp_high():
    assert clamp(13, 0, 10) == 10


def test_clamp_inside():
    assert clamp(4, 0, 10) == 4


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_span():
    assert span([4, 1, 9]) == 8
`,
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(proj, name)), 0o755)
		if err := os.WriteFile(filepath.Join(proj, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := t.TempDir()
	cli := func(args ...string) (string, string) {
		t.Helper()
		out, errOut, err := runCLI(t, "", append(args, "--data-dir", data, "--log-level", "warn")...)
		if err != nil {
			t.Fatalf("frognano %s: %v\n%s\n%s", strings.Join(args, " "), err, out, errOut)
		}
		return out, errOut
	}
	cli("env", "add", proj, "--name", "cli-calc")
	defer runCLI(t, "", "env", "rm", "cli-calc", "--data-dir", data, "--log-level", "warn")

	out, errOut := cli("synth", "--env", "cli-calc", "--count", "2", "--seed", "3", "--hint-level", "2")
	if !strings.Contains(out, "synthesized 2 of 2 tasks of cli-calc") || !strings.Contains(out, "coverage map measured") || !strings.Contains(errOut, "==> validating") {
		t.Fatalf("synth:\n%s\n%s", out, errOut)
	}
	var ids []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "cli-calc.") {
			ids = append(ids, l)
		}
	}
	if len(ids) != 2 {
		t.Fatalf("task ids in %q", out)
	}

	out, _ = cli("tasks", "ls", "--env", "cli-calc")
	if !strings.Contains(out, "OPERATORS") || !strings.Contains(out, ids[0]) || !strings.Contains(out, ids[1]) {
		t.Errorf("tasks ls:\n%s", out)
	}
	out, _ = cli("tasks", "show", ids[0])
	if !strings.Contains(out, `"bugPatch"`) || !strings.Contains(out, `"failToPass"`) || !strings.Contains(out, "This is the current code of") {
		t.Errorf("tasks show:\n%s", out)
	}
	if _, _, err := runCLI(t, "", "tasks", "show", "no-such-task", "--data-dir", data, "--log-level", "warn"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("tasks show of a missing task: %v", err)
	}

	out, _ = cli("tasks", "export", "--env", "cli-calc")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("export: %d lines:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("export line %q: %v", l, err)
		}
		for _, k := range []string{"instance_id", "repo", "base_commit", "patch", "bug_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "problem_statement", "image_name", "difficulty"} {
			if v, ok := rec[k]; !ok || v == "" || v == nil {
				t.Errorf("export: %s missing or empty in %s", k, l)
			}
		}
	}

	// A second run with the same seed skips the stored bugs.
	out, _ = cli("synth", "--env", "cli-calc", "--count", "1", "--seed", "3", "--operators", "flip_comparison,swap_arithmetic")
	if !strings.Contains(out, "tasks of cli-calc") || strings.Contains(out, "coverage map measured") {
		t.Errorf("second synth:\n%s", out)
	}
	if _, _, err := runCLI(t, "", "synth", "--env", "cli-calc", "--operators", "no_such_op", "--data-dir", data, "--log-level", "warn"); err == nil || !strings.Contains(err.Error(), "unknown operator") {
		t.Errorf("synth with an unknown operator: %v", err)
	}
	out, _ = cli("synth", "bench", "--env", "cli-calc", "--candidates", "4", "--seed", "5")
	if !strings.Contains(out, "coverage-guided") || !strings.Contains(out, "full-suite") || !strings.Contains(out, "tasks/CPU-min") {
		t.Errorf("synth bench:\n%s", out)
	}
}
