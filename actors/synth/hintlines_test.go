package synth

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

func TestBugLines(t *testing.T) {
	patch := "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n" +
		"@@ -4,3 +4,3 @@\n def f(x):\n-    if x < 0:\n+    if x <= 0:\n         return 0\n" +
		"@@ -20,4 +20,3 @@\n def g(y):\n     y += 1\n-    y *= 2\n     return y\n" +
		"diff --git a/n.py b/n.py\n--- a/n.py\n+++ b/n.py\n@@ -1,2 +1,4 @@\n import os\n+A = 1\n+B = 2\n x = 0\n"
	got := fmt.Sprint(bugLines(patch))
	want := "map[m.py:[[5 5] [22 22]] n.py:[[2 3]]]"
	if got != want {
		t.Fatalf("bugLines = %s, want %s", got, want)
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
		in.Locations[0].Lines = bugLines(statementIn.BugPatch)["calc/__init__.py"][0]
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
