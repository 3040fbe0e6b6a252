package harness

import (
	"context"
	"errors"
	"strings"
	"testing"

	records "github.com/frognano/frognano/persistence/records/v1"
)

func TestSearchHint(t *testing.T) {
	cases := []struct {
		name, patch  string
		search, repl string
		err          bool
	}{
		{"short line takes a line of context each side",
			"--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n def f(x):\n-    return x-1\n+    return x+1\n \n",
			"def f(x):\n    return x-1\n\n", "def f(x):\n    return x+1\n\n", false},
		{"long enough lines stand alone",
			"--- a/m.py\n+++ b/m.py\n@@ -4,3 +4,3 @@\n def f(items, threshold):\n-    return [i for i in items if i <= threshold]\n+    return [i for i in items if i < threshold]\n     # end\n",
			"    return [i for i in items if i <= threshold]\n", "    return [i for i in items if i < threshold]\n", false},
		{"a fix that only inserts searches its context",
			"--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,3 @@\n def f(x):\n+    x = abs(x)\n     return x\n",
			"def f(x):\n    return x\n", "def f(x):\n    x = abs(x)\n    return x\n", false},
		{"only the first hunk of the first file",
			"diff --git a/a.go b/a.go\n--- a/a.go\n+++ b/a.go\n@@ -10,1 +10,1 @@\n-\tif n > len(buf) + headerSize {\n+\tif n >= len(buf) + headerSize {\n@@ -20 +20 @@\n-x\n+y\n--- a/b.go\n+++ b/b.go\n@@ -1 +1 @@\n-p\n+q\n",
			"\tif n > len(buf) + headerSize {\n", "\tif n >= len(buf) + headerSize {\n", false},
		{"a removed line that looks like a header is a line",
			"--- a/m.sql\n+++ b/m.sql\n@@ -1,2 +1,2 @@\n--- the comment of the long statement here\n+-- the comment of the long statement here!\n select 1\n",
			"-- the comment of the long statement here\n", "-- the comment of the long statement here!\n", false},
		{"insertion with no context", "--- a/m.py\n+++ b/m.py\n@@ -0,0 +1 @@\n+x = 1\n", "", "", true},
		{"header longer than the hunk", "--- a/m.py\n+++ b/m.py\n@@ -1,5 +1,5 @@\n-a\n+b\n", "", "", true},
		{"no hunk", "--- a/m.py\n+++ b/m.py\n", "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, err := SearchHint(c.patch)
			if c.err {
				if !errors.Is(err, ErrNoSearchHint) {
					t.Fatalf("got %+v, %v; want ErrNoSearchHint", e, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Search != c.search || e.Replace != c.repl {
				t.Fatalf("search %q replace %q\nwant   %q         %q", e.Search, e.Replace, c.search, c.repl)
			}
		})
	}
}

// At HintSearch the answer starts with the first block's SEARCH side as
// environment tokens; the policy writes only the replacement, and a wrong
// one is graded like any wrong fix.
func TestPatchSearchHint(t *testing.T) {
	task := memTask(HintSearch)
	for _, c := range []struct {
		turn   string
		reward float64
		ending Ending
	}{
		{"def add(a, b):\n    return a + b\n>>>>>>> REPLACE\n", 1, EndPatchApplied},
		{"def add(a, b):\n    return a * b\n>>>>>>> REPLACE\n", 0, EndPatchApplied},
		{"def add(a, b):\n    return a + b\n", 0, EndEditFailed},
		{"", 0, EndNoOutput}, // nothing written: not an edit that failed
		// What follows the block's end is never sampled: the turn ends there.
		{"def add(a, b):\n    return a + b\n>>>>>>> REPLACE\nThe bug was the minus sign.\ncalc.py\n<<<<<<< SEARCH\n", 1, EndPatchApplied},
	} {
		r, _ := runner(t, c.turn)
		ws := newMemWorkspace()
		res, err := r.Run(context.Background(), task, ws, ModePatch, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Ending != c.ending || res.Reward != c.reward {
			t.Fatalf("%q: ending %s (%s), reward %v", c.turn, res.Ending, res.Detail, res.Reward)
		}
		checkAligned(t, res)
		if c.turn == "" {
			continue
		}
		answer := res.Turns[2].Content
		written := c.turn
		if i := strings.Index(written, ">>>>>>> REPLACE"); i >= 0 {
			written = written[:i+len(">>>>>>> REPLACE")]
		}
		want := "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return a - b\n=======\n" + written
		if res.Turns[2].Role != records.Role_ROLE_ASSISTANT || answer != want {
			t.Fatalf("assistant turn %q, want %q", answer, want)
		}
		// The given part is the environment's, the rest the policy's.
		envEndsWith(t, r, res, "<|im_start|>assistant\ncalc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return a - b\n=======\n")
	}
}

// A task stored at HintSearch whose gold patch gives no SEARCH side is a
// bad record, not an episode.
func TestPatchSearchHintBadTask(t *testing.T) {
	task := memTask(HintSearch)
	task.GoldPatch = "--- a/calc.py\n+++ b/calc.py\n"
	r, _ := runner(t, "x")
	if _, err := r.Run(context.Background(), task, newMemWorkspace(), ModePatch, 1); !errors.Is(err, ErrBadTask) {
		t.Fatalf("got %v, want ErrBadTask", err)
	}
}

func TestReplaceHint(t *testing.T) {
	for _, c := range []struct {
		name, search, repl, want string
		err                      bool
	}{
		{"the word that changes and what follows are the policy's", "x = newday.day\n", "x = other.day\n", "x =", false},
		{"an operator glued to its operand starts from the line", "    if n<len(buf):\n", "    if n<=len(buf):\n", "    if", false},
		{"a line's first word: the whole line", "def f(x):\n    return x-1\n\n", "def f(x):\n    retval x-1\n\n", "def f(x):\n", false},
		{"indentation that changes: the whole line", "a\n  b\n", "a\n    b\n", "a\n", false},
		{"the first line differs: nothing given", "foo(x)\n", "bar(x)\n", "", false},
		{"an inserted line: up to it", "def f(x):\n    return x\n", "def f(x):\n    x = abs(x)\n    return x\n", "def f(x):\n", false},
		{"a deleted middle line leaves the next to write", "a\n    x()\n    y()\n", "a\n    y()\n", "a\n", false},
		{"a deleted last line leaves nothing", "    a()\n    x()\n", "    a()\n", "", true},
		{"equal sides", "a\n", "a\n", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReplaceHint(Edit{Path: "m.py", Search: c.search, Replace: c.repl})
			if c.err {
				if !errors.Is(err, ErrNoReplaceHint) {
					t.Fatalf("got %q, %v; want ErrNoReplaceHint", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
			if !strings.HasPrefix(c.repl, got) || strings.TrimSpace(c.repl[len(got):]) == "" {
				t.Fatalf("%q is not a proper start of %q", got, c.repl)
			}
		})
	}
}

// At HintReplace the answer also starts the replacement, up to the word
// that changes; the policy writes the rest, and copying the bug is graded
// like any wrong fix.
func TestPatchReplaceHint(t *testing.T) {
	task := memTask(HintReplace)
	given := "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return a - b\n=======\ndef add(a, b):\n    return a"
	for _, c := range []struct {
		turn   string
		reward float64
	}{
		{" + b\n>>>>>>> REPLACE\n", 1},
		{" - b\n>>>>>>> REPLACE\n", 0},
	} {
		r, _ := runner(t, c.turn)
		res, err := r.Run(context.Background(), task, newMemWorkspace(), ModePatch, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Ending != EndPatchApplied || res.Reward != c.reward {
			t.Fatalf("%q: ending %s (%s), reward %v", c.turn, res.Ending, res.Detail, res.Reward)
		}
		checkAligned(t, res)
		if want := given + strings.TrimSuffix(c.turn, "\n"); res.Turns[2].Content != want && res.Turns[2].Content != want+"\n" {
			t.Fatalf("assistant turn %q, want %q", res.Turns[2].Content, want)
		}
		envEndsWith(t, r, res, "<|im_start|>assistant\n"+given)
	}
	// A gold fix whose replacement start leaves nothing to write is a bad
	// record, not an episode.
	bad := memTask(HintReplace)
	bad.GoldPatch = "--- a/calc.py\n+++ b/calc.py\n@@ -1,3 +1,2 @@\n def add(a, b):\n     return a - b\n-    pass\n"
	r, _ := runner(t, "x")
	if _, err := r.Run(context.Background(), bad, newMemWorkspace(), ModePatch, 1); !errors.Is(err, ErrBadTask) {
		t.Fatalf("got %v, want ErrBadTask", err)
	}
}

// envEndsWith checks that the environment's tokens, those before the
// policy's first, decode to text ending with want.
func envEndsWith(t *testing.T, r *Runner, res *EpisodeResult, want string) {
	t.Helper()
	first := 0
	for first < len(res.PolicyMask) && !res.PolicyMask[first] {
		first++
	}
	env, err := r.Tokenizer.Decode(res.TokenIDs[:first])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(env, want) {
		t.Fatalf("the environment's tokens end %q", env[max(0, len(env)-120):])
	}
}
