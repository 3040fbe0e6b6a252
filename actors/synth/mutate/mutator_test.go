package mutate_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
	_ "github.com/frognano/frognano/actors/synth/mutate/golang"
	"github.com/frognano/frognano/actors/synth/mutate/mutatetest"
	_ "github.com/frognano/frognano/actors/synth/mutate/python"
)

const pySrc = `import os


def scale(xs, k=2):
    """Multiply every element."""
    out = []
    for i in range(len(xs)):
        if xs[i] is None:
            continue
        out.append(xs[i] * k)
    return out


def pick(a, b):
    if a < b and b > 0:
        return a
    return b
`

const goSrc = `package demo

func Scale(xs []int, k int) []int {
	out := make([]int, 0, len(xs))
	for i := 0; i < len(xs); i++ {
		if xs[i] < 0 {
			continue
		}
		out = append(out, xs[i]*k)
	}
	return out
}
`

func newFile(t *testing.T, path, src string) *mutate.File {
	t.Helper()
	f, err := mutate.NewFile(path, []byte(src), "")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRegistry(t *testing.T) {
	if got := mutate.Languages(); !slices.Equal(got, []mutate.Language{mutate.Go, mutate.Python}) {
		t.Fatalf("languages %v", got)
	}
	for path, want := range map[string]mutate.Language{"a/b.py": mutate.Python, "x.go": mutate.Go, "t.pyi": mutate.Python} {
		if got, ok := mutate.Detect(path); !ok || got != want {
			t.Errorf("Detect(%s) = %v, %v", path, got, ok)
		}
	}
	if _, err := mutate.NewFile("README.md", nil, ""); err == nil {
		t.Error("NewFile accepted a file of no known language")
	}
	for _, lang := range mutate.Languages() {
		fe, _ := mutate.Lookup(lang)
		names := map[string]bool{}
		for _, op := range fe.Operators() {
			if op.Language() != lang || names[op.Name()] || !slices.Contains(mutate.OperatorNames, op.Name()) {
				t.Errorf("%s: bad or duplicate operator %s", lang, op.Name())
			}
			names[op.Name()] = true
		}
		for _, n := range mutate.OperatorNames {
			if !names[n] && fe.NotApplicable()[n] == "" {
				t.Errorf("%s: operator %s neither offered nor declared not applicable", lang, n)
			}
		}
	}
}

func TestMutateBothLanguages(t *testing.T) {
	for _, f := range []*mutate.File{newFile(t, "pkg/scale.py", pySrc), newFile(t, "demo/scale.go", goSrc)} {
		cands, st := mutate.New(mutate.Config{}).Mutate(f, nil, 1)
		if len(cands) < 15 || st.Candidates != len(cands) || st.Sites < len(cands) {
			t.Fatalf("%s: %d candidates, %v", f.Path, len(cands), st)
		}
		keys := map[string]bool{}
		for _, c := range cands {
			if keys[c.Key] {
				t.Fatalf("duplicate key %s", c.Key)
			}
			keys[c.Key] = true
			if c.Key != mutate.PatchKey(c.Patch) || c.Language != f.Lang {
				t.Fatal("key or language wrong")
			}
			if !strings.HasPrefix(c.Patch, "diff --git a/"+f.Path+" b/"+f.Path+"\n") {
				t.Fatalf("patch header:\n%s", c.Patch)
			}
			mu := c.Mutations[0]
			if mu.Site.Func.Name == "" || mu.Site.Func.StartLine > mu.Site.Line || mu.Site.Func.EndLine < mu.Site.EndLine {
				t.Fatalf("site outside its function: %+v", mu.Site)
			}
			ft := c.Features
			if len(ft.Operators) != 1 || ft.Operators[0] != mu.Operator || !slices.Equal(ft.Files, []string{f.Path}) ||
				ft.Edits != len(mu.Edit.Replacements) || ft.LinesTouched < 1 || ft.Functions[0] != mu.Site.Func.Name {
				t.Fatalf("features %+v for %+v", ft, mu)
			}
		}
		for _, c := range cands[:5] {
			mutatetest.RoundTrip(t, c)
		}
	}
}

func TestMutateDeterministic(t *testing.T) {
	f := newFile(t, "pkg/scale.py", pySrc)
	m := mutate.New(mutate.Config{Draws: 2})
	a, sa := m.Mutate(f, nil, 42)
	b, sb := m.Mutate(newFile(t, "pkg/scale.py", pySrc), nil, 42)
	if !reflect.DeepEqual(sa, sb) || len(a) != len(b) {
		t.Fatalf("stats differ: %v vs %v", sa, sb)
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].Patch != b[i].Patch || a[i].Gold != b[i].Gold {
			t.Fatalf("candidate %d differs", i)
		}
	}
	c, _ := m.Mutate(f, nil, 43)
	if reflect.DeepEqual(keys(a), keys(c)) {
		t.Error("another seed drew exactly the same variants")
	}
}

func keys(cs []mutate.Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Key)
	}
	return out
}

func TestMutateBadInput(t *testing.T) {
	m := mutate.New(mutate.Config{})
	tests := []struct {
		name   string
		file   *mutate.File
		lines  mutate.LineSet
		reason string
	}{
		{"python syntax error", newFile(t, "bad.py", "def f(:\n    return 1\n"), nil, mutate.ReasonParseError},
		{"go syntax error", newFile(t, "bad.go", "package x\nfunc f( {\n"), nil, mutate.ReasonParseError},
		{"binary garbage", newFile(t, "bin.py", "\x00\xff\xfe(((("), nil, mutate.ReasonParseError},
		{"unknown language", &mutate.File{Path: "a.rb", Src: []byte("puts 1"), Lang: "ruby"}, nil, mutate.ReasonUnknownLanguage},
		{"empty file", newFile(t, "empty.py", ""), nil, mutate.ReasonNoSite},
		{"filter excludes everything", newFile(t, "pkg/scale.py", pySrc), mutate.LineSet{}, mutate.ReasonLineFilter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cands, st := m.Mutate(tt.file, tt.lines, 1)
			if len(cands) != 0 || st.Skipped[tt.reason] == 0 {
				t.Fatalf("%d candidates, %v; want reason %s", len(cands), st, tt.reason)
			}
		})
	}
	// Every site of the filtered file was counted under line_filter.
	f := newFile(t, "pkg/scale.py", pySrc)
	_, st := m.Mutate(f, mutate.LineSet{}, 1)
	if st.Skipped[mutate.ReasonLineFilter] != st.Sites {
		t.Errorf("line_filter %d of %d sites", st.Skipped[mutate.ReasonLineFilter], st.Sites)
	}
}

func TestMutateLineFilter(t *testing.T) {
	f := newFile(t, "pkg/scale.py", pySrc)
	line := 15 // "if a < b and b > 0:"
	cands, st := mutate.New(mutate.Config{}).Mutate(f, mutate.LineSet{line: true}, 1)
	if len(cands) == 0 {
		t.Fatalf("no candidates on line %d: %v", line, st)
	}
	for _, c := range cands {
		s := c.Mutations[0].Site
		if s.Line > line || s.EndLine < line {
			t.Fatalf("site %d-%d outside the filter", s.Line, s.EndLine)
		}
	}
}

func TestMutateOperatorsAndCap(t *testing.T) {
	f := newFile(t, "demo/scale.go", goSrc)
	cands, _ := mutate.New(mutate.Config{Operators: []string{mutate.FlipComparison, mutate.ChangeDefault}}).Mutate(f, nil, 1)
	if len(cands) == 0 {
		t.Fatal("no candidates")
	}
	for _, c := range cands {
		if c.Features.Operators[0] != mutate.FlipComparison {
			t.Fatalf("operator %s not enabled", c.Features.Operators[0])
		}
	}
	capped, st := mutate.New(mutate.Config{MaxPerFile: 5}).Mutate(f, nil, 1)
	if len(capped) != 5 || st.Candidates != 5 {
		t.Fatalf("cap 5 gave %d", len(capped))
	}
	ops := map[string]bool{}
	for _, c := range capped {
		ops[c.Features.Operators[0]] = true
	}
	if len(ops) < 2 {
		t.Errorf("capped sample is not spread over operators: %v", ops)
	}
}

func TestCombine(t *testing.T) {
	m := mutate.New(mutate.Config{})
	py, _ := m.Mutate(newFile(t, "pkg/scale.py", pySrc), nil, 1)
	gosrc, _ := m.Mutate(newFile(t, "demo/scale.go", goSrc), nil, 1)
	multi, st := m.Combine(py, 3, 5, 7)
	if len(multi) != 5 {
		t.Fatalf("%d multi-bug candidates: %v", len(multi), st)
	}
	for _, c := range multi {
		if len(c.Mutations) != 3 || c.Features.Edits < 3 {
			t.Fatalf("features %+v", c.Features)
		}
		for i, a := range c.Mutations {
			for _, b := range c.Mutations[i+1:] {
				al := a.File.Line(a.Edit.Replacements[0].Start)
				bl := b.File.Line(b.Edit.Replacements[0].Start)
				if al == bl {
					t.Fatalf("two bugs on line %d", al)
				}
			}
		}
		mutatetest.RoundTrip(t, c)
	}
	if _, st := m.Combine(py[:1], 2, 5, 7); st.Skipped[mutate.ReasonTooFew] != 1 {
		t.Errorf("one candidate combined: %v", st)
	}
	mixed, st := m.Combine(append(py[:3:3], gosrc[:3]...), 2, 3, 1)
	for _, c := range mixed {
		if c.Mutations[0].File.Lang != c.Mutations[1].File.Lang {
			t.Fatal("combined two languages")
		}
	}
	if st.Skipped[mutate.ReasonMixedLanguage] == 0 {
		t.Errorf("no mixed-language pick was refused: %v", st)
	}
}

func TestStatsAdd(t *testing.T) {
	var s mutate.Stats
	s.Add(mutate.Stats{Files: 1, Sites: 3, Tried: 2, Candidates: 1, Skipped: map[string]int{"a": 1}})
	s.Add(mutate.Stats{Files: 1, Skipped: map[string]int{"a": 2, "b": 1}})
	if s.Files != 2 || s.Sites != 3 || s.Skipped["a"] != 3 || s.Skipped["b"] != 1 {
		t.Fatalf("%+v", s)
	}
	if got := s.String(); got != "files=2 sites=3 tried=2 candidates=1 a=3 b=1" {
		t.Fatalf("String() = %q", got)
	}
}

// FuzzMutate feeds arbitrary bytes to both languages: nothing may panic,
// and every candidate must still pass its language's check.
func FuzzMutate(f *testing.F) {
	f.Add([]byte(pySrc), false)
	f.Add([]byte(goSrc), true)
	f.Add([]byte("try:\n    x = 1\nexcept E:\n    pass\n"), false)
	f.Add([]byte("package p\nfunc f() (int, error) { if err := g(); err != nil { return 0, err }; return 1, nil }\n"), true)
	m := mutate.New(mutate.Config{MaxPerFile: 50})
	f.Fuzz(func(t *testing.T, src []byte, isGo bool) {
		path := "f.py"
		if isGo {
			path = "f.go"
		}
		file, err := mutate.NewFile(path, src, "")
		if err != nil {
			t.Fatal(err)
		}
		cands, _ := m.Mutate(file, nil, 1)
		fe, _ := mutate.Lookup(file.Lang)
		for _, c := range cands {
			mutated := mutate.ApplyReplacements(file.Src, c.Mutations[0].Edit.Replacements)
			if _, err := fe.Check(file, mutated); err != nil {
				t.Fatalf("candidate fails its check: %v", err)
			}
		}
	})
}

// TestConcurrentMutate: one Mutator and one File shared by goroutines give
// every goroutine the same candidates (run with -race).
func TestConcurrentMutate(t *testing.T) {
	m := mutate.New(mutate.Config{})
	for _, f := range []*mutate.File{newFile(t, "pkg/scale.py", pySrc), newFile(t, "demo/scale.go", goSrc)} {
		want, _ := m.Mutate(newFile(t, f.Path, string(f.Src)), nil, 5)
		done := make(chan []mutate.Candidate)
		for range 4 {
			go func() {
				c, _ := m.Mutate(f, nil, 5)
				done <- c
			}()
		}
		for range 4 {
			if got := <-done; !reflect.DeepEqual(keys(got), keys(want)) {
				t.Fatalf("%s: concurrent run differs", f.Path)
			}
		}
	}
}
