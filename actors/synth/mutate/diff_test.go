package mutate_test

import (
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
	"github.com/frognano/frognano/actors/synth/mutate/mutatetest"
)

const tenLines = "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\n"

// rep builds a replacement of old (which must occur once in src at or after
// from) by new.
func rep(src, old, new string, from int) mutate.Replacement {
	for i := from; i+len(old) <= len(src); i++ {
		if src[i:i+len(old)] == old {
			return mutate.Replacement{Start: i, End: i + len(old), Old: old, New: new}
		}
	}
	panic("no " + old)
}

func TestUnifiedDiff(t *testing.T) {
	tests := []struct {
		name string
		src  string
		rs   []mutate.Replacement
		want string
	}{
		{
			name: "one line in the middle",
			src:  tenLines,
			rs:   []mutate.Replacement{rep(tenLines, "l5", "L5", 0)},
			want: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" +
				"@@ -2,7 +2,7 @@\n l2\n l3\n l4\n-l5\n+L5\n l6\n l7\n l8\n",
		},
		{
			name: "first line",
			src:  tenLines,
			rs:   []mutate.Replacement{rep(tenLines, "l1\n", "L1\n", 0)},
			want: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" +
				"@@ -1,4 +1,4 @@\n-l1\n+L1\n l2\n l3\n l4\n",
		},
		{
			name: "delete two whole lines",
			src:  tenLines,
			rs:   []mutate.Replacement{rep(tenLines, "l5\nl6\n", "", 0)},
			want: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" +
				"@@ -2,8 +2,6 @@\n l2\n l3\n l4\n-l5\n-l6\n l7\n l8\n l9\n",
		},
		{
			name: "two far edits make two hunks",
			src:  tenLines + tenLines,
			rs:   []mutate.Replacement{rep(tenLines+tenLines, "l2\n", "X\n", 0), rep(tenLines+tenLines, "l9\n", "Y\n", len(tenLines))},
			want: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" +
				"@@ -1,5 +1,5 @@\n l1\n-l2\n+X\n l3\n l4\n l5\n" +
				"@@ -16,5 +16,5 @@\n l6\n l7\n l8\n-l9\n+Y\n l10\n",
		},
		{
			name: "two near edits share a hunk",
			src:  tenLines,
			rs:   []mutate.Replacement{rep(tenLines, "l3", "A", 0), rep(tenLines, "l6", "B", 0)},
			want: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" +
				"@@ -1,9 +1,9 @@\n l1\n l2\n-l3\n+A\n l4\n l5\n-l6\n+B\n l7\n l8\n l9\n",
		},
		{
			name: "last line without newline",
			src:  "a\nb\nc",
			rs:   []mutate.Replacement{rep("a\nb\nc", "c", "C", 0)},
			want: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" +
				"@@ -1,3 +1,3 @@\n a\n b\n-c\n\\ No newline at end of file\n+C\n\\ No newline at end of file\n",
		},
		{
			name: "context line without newline",
			src:  "a\nb\nc",
			rs:   []mutate.Replacement{rep("a\nb\nc", "b", "B", 0)},
			want: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" +
				"@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\\ No newline at end of file\n",
		},
		{
			name: "edit that joins lines",
			src:  "ab\ncd\nef\n",
			rs:   []mutate.Replacement{rep("ab\ncd\nef\n", "b\nc", "", 0)},
			want: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" +
				"@@ -1,3 +1,2 @@\n-ab\n-cd\n+ad\n ef\n",
		},
		{
			name: "insertion into an empty file",
			src:  "",
			rs:   []mutate.Replacement{{Start: 0, End: 0, New: "x = 1\n"}},
			want: "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n" +
				"@@ -0,0 +1,1 @@\n+x = 1\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mutate.UnifiedDiff("x.py", []byte(tt.src), tt.rs)
			if got != tt.want {
				t.Fatalf("diff:\n%s\nwant:\n%s", got, tt.want)
			}
			mutated := mutate.ApplyReplacements([]byte(tt.src), tt.rs)
			applied := mutatetest.GitApply(t, map[string][]byte{"x.py": []byte(tt.src)}, got)
			if string(applied["x.py"]) != string(mutated) {
				t.Fatalf("git apply gave %q, want %q", applied["x.py"], mutated)
			}
			back := mutate.UnifiedDiff("x.py", mutated, mutate.Invert(tt.rs))
			restored := mutatetest.GitApply(t, map[string][]byte{"x.py": mutated}, back)
			if string(restored["x.py"]) != tt.src {
				t.Fatalf("reverse diff gave %q, want %q", restored["x.py"], tt.src)
			}
		})
	}
}

func TestUnifiedDiffUnchanged(t *testing.T) {
	if d := mutate.UnifiedDiff("x.py", []byte("a\n"), []mutate.Replacement{{Start: 0, End: 1, Old: "a", New: "a"}}); d != "" {
		t.Fatalf("no-op edit gave a diff:\n%s", d)
	}
}

func TestPatchKey(t *testing.T) {
	base := "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -2,3 +2,3 @@\n a\n-i < n\n+i <= n\n b\n"
	tests := []struct {
		name  string
		patch string
		same  bool
	}{
		{"hunk moved", "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -40,3 +41,3 @@\n a\n-i < n\n+i <= n\n b\n", true},
		{"spacing differs", "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -2,3 +2,3 @@\n a\n-i < n\n+i<=n\n b\n", true},
		{"other change", "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -2,3 +2,3 @@\n a\n-i < n\n+i > n\n b\n", false},
		{"other file", "diff --git a/y.py b/y.py\n--- a/y.py\n+++ b/y.py\n@@ -2,3 +2,3 @@\n a\n-i < n\n+i <= n\n b\n", false},
		{"other context", "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -2,3 +2,3 @@\n c\n-i < n\n+i <= n\n b\n", false},
	}
	k := mutate.PatchKey(base)
	for _, tt := range tests {
		if got := mutate.PatchKey(tt.patch) == k; got != tt.same {
			t.Errorf("%s: same key = %v, want %v", tt.name, got, tt.same)
		}
	}
	two := base + "diff --git a/y.py b/y.py\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-p\n+q\n"
	swapped := "diff --git a/y.py b/y.py\n--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-p\n+q\n" + base
	if mutate.PatchKey(two) != mutate.PatchKey(swapped) {
		t.Error("file order changes the key")
	}
}

func TestDeleteLines(t *testing.T) {
	src := "def f():\n    a()\n    b()  # why\n    c(); d()\n"
	f := &mutate.File{Path: "x.py", Src: []byte(src), Lang: mutate.Python}
	tests := []struct {
		stmt      string
		wantAlone bool
		want      string
	}{
		{"a()", true, "def f():\n    b()  # why\n    c(); d()\n"},
		{"b()", true, "def f():\n    a()\n    # why\n    c(); d()\n"},
		{"c()", false, "def f():\n    a()\n    b()  # why\n    ; d()\n"},
	}
	for _, tt := range tests {
		r0 := rep(src, tt.stmt, "", 0)
		r, alone := f.DeleteLines(r0.Start, r0.End, "#")
		if alone != tt.wantAlone {
			t.Errorf("%s: alone = %v", tt.stmt, alone)
		}
		if got := string(mutate.ApplyReplacements(f.Src, []mutate.Replacement{r})); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.stmt, got, tt.want)
		}
	}
}

func TestLines(t *testing.T) {
	f := &mutate.File{Src: []byte("ab\ncd\n\nef")}
	for off, want := range map[int]int{0: 1, 2: 1, 3: 2, 6: 3, 7: 4, 9: 4} {
		if got := f.Line(off); got != want {
			t.Errorf("Line(%d) = %d, want %d", off, got, want)
		}
	}
	if f.LineCount() != 4 || f.LineStart(4) != 3 || f.LineEnd(4) != 5 || f.Indent(7) != "" {
		t.Errorf("LineCount %d LineStart %d LineEnd %d", f.LineCount(), f.LineStart(4), f.LineEnd(4))
	}
}
