package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEvalAndTrajCommands registers a small local Python project,
// synthesizes a task, evaluates SmolLM2-135M-Instruct (FROGNANO_TEST_GGUF)
// on it in patch mode through the CLI's embedded node, and reads the
// stored trajectories back with traj ls and traj show. It needs containerd,
// the package registries and the model file.
func TestEvalAndTrajCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an environment image; skipped with -short")
	}
	if _, err := os.Stat("/run/containerd/containerd.sock"); err != nil {
		t.Skip("containerd is not running (scripts/setup-containerd.sh starts it)")
	}
	gguf := os.Getenv("FROGNANO_TEST_GGUF")
	if gguf == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: set it to SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	proj := filepath.Join(t.TempDir(), "mathy")
	for name, body := range map[string]string{
		"setup.py":          "from setuptools import setup\nsetup(name='mathy', version='0.1', packages=['mathy'])\n",
		"mathy/__init__.py": "def double(x):\n    return x * 2\n\n\ndef half(x):\n    return x / 2\n",
		"tests/test_mathy.py": "from mathy import double, half\n\n\ndef test_double():\n    assert double(3) == 6\n\n\n" +
			"def test_half():\n    assert half(8) == 4\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(proj, name)), 0o755)
		if err := os.WriteFile(filepath.Join(proj, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := t.TempDir()
	cli := func(args ...string) (string, string, error) {
		t.Helper()
		return runCLI(t, "", append(args, "--data-dir", data, "--log-level", "warn")...)
	}
	must := func(args ...string) (string, string) {
		t.Helper()
		out, errOut, err := cli(args...)
		if err != nil {
			t.Fatalf("frognano %s: %v\n%s\n%s", strings.Join(args, " "), err, out, errOut)
		}
		return out, errOut
	}
	must("env", "add", proj, "--name", "cli-mathy", "--min-tests", "1")
	defer cli("env", "rm", "cli-mathy")
	must("synth", "--env", "cli-mathy", "--count", "1", "--seed", "1", "--hint-level", "2")

	report := filepath.Join(t.TempDir(), "report.json")
	out, errOut := must("eval", "--model", gguf, "--env", "cli-mathy", "--mode", "patch", "-k", "2", "--max-turn-tokens", "48",
		"--run", "cli-eval", "--seed", "9", "--json", report)
	for _, s := range []string{"MODE", "PASS@1 [95% CI]", "PASS@2 [95% CI]", "patch  all", "2 episodes in", "episodes/minute", "frognano traj ls --run cli-eval"} {
		if !strings.Contains(out, s) {
			t.Fatalf("eval output lacks %q:\n%s\n%s", s, out, errOut)
		}
	}
	if !strings.Contains(errOut, "evaluating "+gguf+" on 1 tasks × 2 episodes (patch mode, run cli-eval, seed 9)") {
		t.Fatalf("eval progress:\n%s", errOut)
	}
	var rep struct {
		Episodes int              `json:"episodes"`
		K        int              `json:"k"`
		Endings  map[string]int   `json:"endings"`
		Buckets  []map[string]any `json:"buckets"`
		Tasks    []struct {
			Samples int     `json:"samples"`
			PassAt1 float64 `json:"pass_at_1"`
		} `json:"tasks"`
		GenerationSeconds float64 `json:"generation_seconds"`
		SandboxSeconds    float64 `json:"sandbox_seconds"`
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Episodes != 2 || rep.K != 2 || len(rep.Tasks) != 1 || rep.Tasks[0].Samples+rep.Endings["sandbox_failure"] != 2 || len(rep.Buckets) != 2 ||
		rep.GenerationSeconds <= 0 || rep.SandboxSeconds <= 0 {
		t.Fatalf("report %s", b)
	}

	// The evaluation is the node's: recorded with its report.
	out, _ = must("evals", "ls")
	if !strings.Contains(out, "cli-eval") || !strings.Contains(out, "done") || !strings.Contains(out, "2/2") {
		t.Fatalf("evals ls:\n%s", out)
	}
	out, _ = must("evals", "show", "cli-eval")
	for _, s := range []string{"evaluation cli-eval: done, 2/2 episodes", "PASS@1 [95% CI]", "2 episodes in"} {
		if !strings.Contains(out, s) {
			t.Fatalf("evals show lacks %q:\n%s", s, out)
		}
	}
	out, _ = must("evals", "logs", "cli-eval")
	if !strings.Contains(out, "evaluating "+gguf) || !strings.Contains(out, "evaluation cli-eval done") {
		t.Fatalf("evals logs:\n%s", out)
	}
	if _, _, err := cli("eval", "--model", gguf, "--env", "cli-mathy", "-k", "1", "--run", "cli-eval"); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("an evaluation id used twice: %v", err)
	}

	out, _ = must("traj", "ls", "--run", "cli-eval")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("traj ls:\n%s", out)
	}
	id := strings.Fields(lines[1])[0]
	out, _ = must("traj", "show", id)
	for _, s := range []string{"trajectory " + id, "run cli-eval", "ending ", "── system ──", "search/replace blocks", "── assistant, turn 1", "── grading ──"} {
		if !strings.Contains(out, s) {
			t.Fatalf("traj show lacks %q:\n%s", s, out)
		}
	}
	out, _ = must("traj", "show", id, "--json")
	if !strings.Contains(out, `"policyMask"`) || !strings.Contains(out, `"logprobs"`) {
		t.Fatalf("traj show --json:\n%s", out)
	}

	// Bad input.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--model", gguf, "-k", "2"}, "give one of --env ENV, --tasks FILE and --held-out"},
		{[]string{"eval", "--model", gguf, "--env", "cli-mathy", "--held-out"}, "give one of --env ENV, --tasks FILE and --held-out"},
		{[]string{"eval", "--model", gguf, "--env", "cli-mathy", "-k", "0"}, "-k must be at least 1"},
		{[]string{"eval", "--model", gguf, "--env", "cli-mathy", "--mode", "chat"}, `mode "chat"`},
		{[]string{"eval", "--model", gguf, "--env", "cli-mathy", "--hint-level", "0"}, "none of the 1 tasks is at hint level 0"},
		{[]string{"eval", "--model", gguf, "--env", "no-such-env"}, "--env no-such-env"},
		{[]string{"eval", "--model", "http://127.0.0.1:1", "--env", "cli-mathy"}, "needs --served-model"},
		{[]string{"traj", "ls"}, "give --run RUN or --task TASK"},
		{[]string{"traj", "show", "no-such-trajectory"}, "not found"},
	} {
		if _, _, err := cli(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("frognano %s: %v, want an error containing %q", strings.Join(c.args, " "), err, c.want)
		}
	}
	// An instance file whose instances have no registered environment:
	// each is skipped with the reason, and nothing is left to run.
	file := filepath.Join(t.TempDir(), "swe.jsonl")
	os.WriteFile(file, []byte(`{"instance_id": "x__y-1", "problem_statement": "it breaks", "FAIL_TO_PASS": "[\"tests/test_a.py::test_a\"]", "PASS_TO_PASS": "[]", "image_name": "swebench/sweb.eval.x86_64.x__y-1:latest"}`+"\n"), 0o644)
	_, errOut, err = cli("eval", "--model", gguf, "--tasks", file, "-k", "1")
	if err == nil || !strings.Contains(err.Error(), "no task to evaluate") || !strings.Contains(errOut, "skipped x__y-1: no registered environment") {
		t.Fatalf("eval of unregistered instances: %v\n%s", err, errOut)
	}
	os.WriteFile(file, []byte("{not json\n"), 0o644)
	if _, _, err := cli("eval", "--model", gguf, "--tasks", file); err == nil || !strings.Contains(err.Error(), "swe.jsonl:1") {
		t.Fatalf("eval of a malformed file: %v", err)
	}
}
