package golang

import (
	"sort"
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
	"github.com/frognano/frognano/actors/synth/mutate/mutatetest"
)

// stdFiles are real GOROOT files for the smoke test, by package.
var stdFiles = map[string][]string{
	"strings":        {"strings.go", "replace.go"},
	"sort":           {"sort.go", "search.go"},
	"bufio":          {"scan.go"},
	"path":           {"match.go"},
	"container/list": {"list.go"},
}

// TestStdlib mutates files of Go's standard library with every operator:
// each gives many candidates, every candidate parses, a sample round-trips
// through git, and every checked candidate in the sample compiles as part
// of its whole package (type-checked from source like the compiler does).
func TestStdlib(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks standard packages from source")
	}
	m := mutate.New(mutate.Config{})
	ops := map[string]int{}
	checked, checkedOK, unchecked, uncheckedOK := 0, 0, 0, 0
	pkgs := make([]string, 0, len(stdFiles))
	for p := range stdFiles {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		files := stdPackage(t, pkg)
		for _, name := range stdFiles[pkg] {
			src, ok := files[name]
			if !ok {
				t.Fatalf("%s/%s missing", pkg, name)
			}
			f, err := mutate.NewFile(pkg+"/"+name, src, "")
			if err != nil {
				t.Fatal(err)
			}
			cands, st := m.Mutate(f, nil, 11)
			t.Logf("%s: %d lines, %v", f.Path, f.LineCount(), st)
			if min := f.LineCount() / 10; len(cands) < min {
				t.Errorf("%s: %d candidates, want at least %d", f.Path, len(cands), min)
			}
			for i, c := range cands {
				ops[c.Features.Operators[0]]++
				if i%7 != 0 {
					continue
				}
				if i%35 == 0 {
					mutatetest.RoundTrip(t, c)
				}
				mutant := map[string][]byte{}
				for n, b := range files {
					mutant[n] = b
				}
				mutant[name] = mutate.ApplyReplacements(src, c.Mutations[0].Edit.Replacements)
				err := compileErr(mutant)
				if c.Checked {
					checked++
					if err != nil {
						t.Errorf("%s: checked candidate does not compile: %v\n%s", f.Path, err, c.Patch)
						continue
					}
					checkedOK++
				} else {
					unchecked++
					if err == nil {
						uncheckedOK++
					}
				}
			}
		}
	}
	t.Logf("candidates by operator: %v", ops)
	t.Logf("compiled: %d/%d checked, %d/%d unchecked", checkedOK, checked, uncheckedOK, unchecked)
	for _, name := range mutate.OperatorNames {
		if Frontend.NotApplicable(Frontend{})[name] == "" && ops[name] == 0 {
			t.Errorf("operator %s produced no candidate on the standard library", name)
		}
	}
	if checked < 50 {
		t.Errorf("only %d checked candidates sampled", checked)
	}
}

// TestSkeletonAgrees: checking a mutant in the skeleton gives the same
// verdict as checking the whole file, on every third variant of every site
// of a big real file.
func TestSkeletonAgrees(t *testing.T) {
	files := stdPackage(t, "strings")
	f, _ := mutate.NewFile("strings/strings.go", files["strings.go"], "")
	n := 0
	for _, o := range Operators() {
		for _, s := range o.Sites(f) {
			for _, e := range s.Variants {
				if n++; n%3 != 0 {
					continue
				}
				m := mutate.ApplyReplacements(f.Src, e.Replacements)
				c1, err1 := check(f, m, true)
				c2, err2 := check(f, m, false)
				if c1 != c2 || (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
					t.Errorf("%s %q line %d: skeleton (%v, %v), whole file (%v, %v)", o.Name(), e.Summary, s.Line, c1, err1, c2, err2)
				}
			}
		}
	}
	t.Logf("compared %d mutants", n/3)
}
