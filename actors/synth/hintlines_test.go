package synth

import (
	"context"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// A bug's lines are where its mutation wrote in the buggy file: two bugs
// in one function each name their own line, and a bug after a deletion
// that removed a line is shifted by it.
func TestMutationLines(t *testing.T) {
	src := "def f(x):\n    if x < 0:\n        return 0\n    y = x + 1\n    return y\n\n\ndef g(z):\n    return z * 2\n"
	f, err := mutate.NewFile("m.py", []byte(src), mutate.Python)
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) int { return strings.Index(src, s) }
	flip := mutate.Replacement{Start: at("<"), End: at("<") + 1, Old: "<", New: ">="}
	del := mutate.Replacement{Start: at("    y = x + 1\n"), End: at("    y = x + 1\n") + len("    y = x + 1\n"), Old: "    y = x + 1\n", New: ""}
	twice := mutate.Replacement{Start: at("* 2"), End: at("* 2") + 3, Old: "* 2", New: "* 3"}
	all := []mutate.Replacement{flip, del, twice}
	mu := func(r mutate.Replacement) mutate.Mutation {
		return mutate.Mutation{File: f, Edit: mutate.Edit{Replacements: []mutate.Replacement{r}}}
	}
	for _, c := range []struct {
		r    mutate.Replacement
		want [2]int
	}{{flip, [2]int{2, 2}}, {del, [2]int{4, 4}}, {twice, [2]int{8, 8}}} {
		if got := mutationLines(mu(c.r), all); got != c.want {
			t.Errorf("%q → %q: lines %v, want %v", c.r.Old, c.r.New, got, c.want)
		}
	}
}

// Level 3 names the bug's lines; level 4 says the same (the harness gives
// the SEARCH side); neither says what the fix is.
func TestTemplateWriterLines(t *testing.T) {
	buggy := map[string][]byte{"calc/__init__.py": []byte(statementIn.Locations[0].Source)}
	for _, level := range []int{HintLines, HintSearch} {
		in := statementIn
		in.HintLevel = level
		in.Locations = []Location{statementIn.Locations[0]}
		in.Locations[0].Lines = [2]int{5, 5}
		got, err := TemplateWriter{}.WriteStatement(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, "The defect is at line 5 of `calc/__init__.py` (in `calc.clamp`).") || !strings.Contains(got, "def clamp(x, lo, hi):") {
			t.Errorf("level %d: statement:\n%s", level, got)
		}
		if Leaks(got, statementGold, buggy) {
			t.Errorf("level %d: statement leaks the fix:\n%s", level, got)
		}
	}
	in := statementIn
	in.HintLevel = HintSource
	in.Locations = []Location{statementIn.Locations[0]}
	in.Locations[0].Lines = [2]int{5, 5}
	if got, _ := (TemplateWriter{}).WriteStatement(context.Background(), in); strings.Contains(got, "The defect is at") {
		t.Errorf("level 2 names the lines:\n%s", got)
	}
}

func TestSearchHintUnique(t *testing.T) {
	src := "def clamp(x, lo, hi):\n    if x > lo:\n        return lo\n    return min(x, hi)\n"
	if !searchHintUnique(statementGold, map[string][]byte{"calc/__init__.py": []byte(src)}) {
		t.Error("a SEARCH side found once was refused")
	}
	if searchHintUnique(statementGold, map[string][]byte{"calc/__init__.py": []byte(src + "\n\n" + src)}) {
		t.Error("a SEARCH side found twice was accepted")
	}
	if searchHintUnique(statementGold, map[string][]byte{"other.py": []byte(src)}) {
		t.Error("a SEARCH side of a file not in the bug was accepted")
	}
}

// answerHintOK: below HintSearch every fix can be given; at HintSearch its
// SEARCH side must be unique; at HintReplace the start of its replacement
// must also leave something to write.
func TestAnswerHintOK(t *testing.T) {
	src := "def clamp(x, lo, hi):\n    if x > lo:\n        return lo\n    return min(x, hi)\n"
	buggy := map[string][]byte{"calc/__init__.py": []byte(src)}
	twice := map[string][]byte{"calc/__init__.py": []byte(src + "\n\n" + src)}
	for level := HintTests; level <= MaxHintLevel; level++ {
		if !answerHintOK(level, statementGold, buggy) {
			t.Errorf("level %d refused a fix with a unique SEARCH side and a word to write", level)
		}
		if got, want := answerHintOK(level, statementGold, twice), level < HintSearch; got != want {
			t.Errorf("level %d with a SEARCH side found twice: %v, want %v", level, got, want)
		}
	}
	// A fix that only deletes the hunk's last line: nothing is left to
	// write once the replacement's start is given.
	del := "--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -2,2 +2,1 @@\n     if x > lo:\n-        return lo\n"
	if !answerHintOK(HintSearch, del, buggy) || answerHintOK(HintReplace, del, buggy) {
		t.Errorf("a deleting fix: level 4 %v (want true), level 5 %v (want false)", answerHintOK(HintSearch, del, buggy), answerHintOK(HintReplace, del, buggy))
	}
	// A fix whose first changed word starts the SEARCH side: level 5 would
	// give nothing more than level 4.
	first := "--- a/m.py\n+++ b/m.py\n@@ -1,1 +1,1 @@\n-    return lo_value_from_the_configuration\n+    yield lo_value_from_the_configuration\n"
	m := map[string][]byte{"m.py": []byte("def f():\n    return lo_value_from_the_configuration\n")}
	if !answerHintOK(HintSearch, first, m) || answerHintOK(HintReplace, first, m) {
		t.Errorf("a fix that changes the first word: level 4 %v (want true), level 5 %v (want false)", answerHintOK(HintSearch, first, m), answerHintOK(HintReplace, first, m))
	}
}
