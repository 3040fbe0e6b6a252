package python

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/synth/mutate"
	"github.com/frognano/frognano/actors/synth/mutate/mutatetest"
)

// realFiles returns the committed real-world files and, when python3 is
// installed, a few modules of its standard library.
func realFiles(t testing.TB) []*mutate.File {
	t.Helper()
	paths, _ := filepath.Glob("testdata/*.py")
	if py, err := exec.LookPath("python3"); err == nil {
		out, err := exec.Command(py, "-c", "import os, json; print(os.path.dirname(os.path.dirname(json.__file__)))").Output()
		if err == nil {
			lib := strings.TrimSpace(string(out))
			for _, p := range []string{"json/decoder.py", "textwrap.py", "heapq.py", "shlex.py", "fractions.py"} {
				if _, err := os.Stat(filepath.Join(lib, p)); err == nil {
					paths = append(paths, filepath.Join(lib, p))
				}
			}
		}
	}
	var files []*mutate.File
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := mutate.NewFile(filepath.ToSlash(filepath.Join("src", filepath.Base(p))), src, "")
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// TestRealWorld mutates real modules with every operator: each yields many
// candidates, every candidate re-parses (a sample also compiles under
// CPython when python3 is here) and a sample round-trips through git.
func TestRealWorld(t *testing.T) {
	files := realFiles(t)
	if len(files) < 2 {
		t.Fatalf("only %d real files", len(files))
	}
	m := mutate.New(mutate.Config{})
	ops := map[string]int{}
	var mutants []string
	for _, f := range files {
		start := time.Now()
		cands, st := m.Mutate(f, nil, 7)
		t.Logf("%s: %d lines, %v in %v", f.Path, f.LineCount(), st, time.Since(start).Round(time.Millisecond))
		if st.Skipped[mutate.ReasonParseError] > 0 {
			t.Fatalf("%s does not parse", f.Path)
		}
		if min := f.LineCount() / 10; len(cands) < min {
			t.Errorf("%s: %d candidates, want at least %d", f.Path, len(cands), min)
		}
		for i, c := range cands {
			ops[c.Features.Operators[0]]++
			mutated := mutate.ApplyReplacements(f.Src, c.Mutations[0].Edit.Replacements)
			if _, err := (Frontend{}).Check(f, mutated); err != nil {
				t.Fatalf("%s: candidate does not re-parse: %v\n%s", f.Path, err, c.Patch)
			}
			if i%10 == 0 { // a full parse agrees with the incremental one
				if err := check(mutated, nil, nil); err != nil {
					t.Fatalf("%s: candidate does not re-parse from scratch: %v\n%s", f.Path, err, c.Patch)
				}
			}
			if i%3 == 0 { // CPython's compile is the slow part; a third will do
				mutants = append(mutants, string(mutated))
			}
			if i%80 == 0 {
				mutatetest.RoundTrip(t, c)
			}
		}
	}
	t.Logf("candidates by operator: %v", ops)
	start := time.Now()
	defer func() { t.Logf("CPython check took %v", time.Since(start).Round(time.Millisecond)) }()
	for _, name := range mutate.OperatorNames {
		if ops[name] == 0 {
			t.Errorf("operator %s produced no candidate on real code", name)
		}
	}
	compileAll(t, mutants)
}

// compileAll compiles every source with CPython's compile(), in one
// python3 process; tree-sitter is more lenient than CPython in places, so
// this is the check that the mutants are real Python.
func compileAll(t *testing.T, sources []string) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Log("python3 not installed; skipping the CPython compile check")
		return
	}
	in, _ := json.Marshal(sources)
	script := `
import json, sys
from multiprocessing import Pool

def check(item):
    i, s = item
    try:
        compile(s, "mutant%d.py" % i, "exec")
    except SyntaxError as e:
        return "mutant %d: %s" % (i, e)
    return None

if __name__ == "__main__":
    with Pool(2) as p:
        errs = [e for e in p.map(check, enumerate(json.load(sys.stdin)), chunksize=64) if e]
    for e in errs:
        print(e)
    print("compiled", len(errs))
`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "compile_all.py"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, filepath.Join(dir, "compile_all.py"))
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "compiled 0") {
		t.Fatalf("CPython rejects mutants:\n%s", out)
	}
	t.Logf("CPython compiled all %d sampled mutants", len(sources))
}

// TestMultiBug combines single bugs from two real files into harder
// candidates whose patches apply and revert with git.
func TestMultiBug(t *testing.T) {
	files := realFiles(t)[:2]
	m := mutate.New(mutate.Config{MaxPerFile: 60})
	var pool []mutate.Candidate
	for _, f := range files {
		c, _ := m.Mutate(f, nil, 3)
		pool = append(pool, c...)
	}
	multi, st := m.Combine(pool, 2, 12, 99)
	if len(multi) < 10 {
		t.Fatalf("%d multi-bug candidates: %v", len(multi), st)
	}
	twoFiles := 0
	for _, c := range multi {
		if len(c.Mutations) != 2 || len(c.Features.Operators) != 2 || c.Features.Edits < 2 {
			t.Fatalf("bad multi-bug candidate %+v", c.Features)
		}
		if len(c.Features.Files) == 2 {
			twoFiles++
		}
		mutatetest.RoundTrip(t, c)
	}
	if twoFiles == 0 {
		t.Error("no multi-bug candidate spans two files")
	}
	again, _ := m.Combine(pool, 2, 12, 99)
	for i := range multi {
		if again[i].Key != multi[i].Key {
			t.Fatal("Combine is not deterministic")
		}
	}
}
