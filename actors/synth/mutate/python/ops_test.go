package python

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/synth/mutate"
	"github.com/frognano/frognano/actors/synth/mutate/mutatetest"
)

var show = flag.Bool("show", false, "print each case's mutant instead of comparing (to write new cases)")

func op(name string) mutate.Operator {
	for _, o := range Operators() {
		if o.Name() == name {
			return o
		}
	}
	panic("no operator " + name)
}

// opCase is one operator on one snippet: the site'th site, drawn with seed,
// must give exactly want.
type opCase struct {
	name string
	op   string
	src  string
	site int
	seed uint64
	want string
}

var opCases = []opCase{
	{
		name: "flip less-than", op: mutate.FlipComparison, seed: 1,
		src:  "def f(a, b):\n    return a < b\n",
		want: "def f(a, b):\n    return a > b\n",
	},
	{
		name: "flip is not", op: mutate.FlipComparison, seed: 1,
		src:  "def f(a):\n    return a is not None  # keep\n",
		want: "def f(a):\n    return a is None  # keep\n",
	},
	{
		name: "swap plus keeps comment", op: mutate.SwapArithmetic, seed: 1,
		src:  "def f(a, b):\n    return a + b  # sum\n",
		want: "def f(a, b):\n    return a - b  # sum\n",
	},
	{
		name: "swap augmented assignment", op: mutate.SwapArithmetic, seed: 1,
		src:  "def f(a):\n    a -= 2\n    return a\n",
		want: "def f(a):\n    a += 2\n    return a\n",
	},
	{
		name: "swap and", op: mutate.SwapBoolean, seed: 1,
		src:  "ok = ready and not failed\n",
		want: "ok = ready or not failed\n",
	},
	{
		name: "index plus one", op: mutate.OffByOne, seed: 3,
		src:  "def get(items, i):\n    return items[i]\n",
		want: "def get(items, i):\n    return items[i + 1]\n",
	},
	{
		name: "index folds a literal", op: mutate.OffByOne, seed: 3,
		src:  "def last(items, n):\n    return items[n - 1]\n",
		want: "def last(items, n):\n    return items[n]\n",
	},
	{
		name: "range outside a loop header", op: mutate.OffByOne, seed: 5,
		src:  "def idx(n):\n    return list(range(n))\n",
		want: "def idx(n):\n    return list(range(n + 1))\n",
	},
	{
		name: "comparison boundary", op: mutate.OffByOne, seed: 1,
		src:  "def small(n):\n    return n < 10\n",
		want: "def small(n):\n    return n <= 10\n",
	},
	{
		name: "negate compound if", op: mutate.NegateCond, seed: 1,
		src:  "def f(x, y):\n    if x > 0 and y:\n        return 1\n    return 0\n",
		want: "def f(x, y):\n    if not (x > 0 and y):\n        return 1\n    return 0\n",
	},
	{
		name: "negate drops not", op: mutate.NegateCond, seed: 1,
		src:  "def f(q):\n    while not q.empty():\n        q.get()\n",
		want: "def f(q):\n    while q.empty():\n        q.get()\n",
	},
	{
		name: "remove a statement and its line", op: mutate.RemoveStmt, seed: 1,
		src:  "def f(xs):\n    xs.sort()\n    # then\n    return xs\n",
		want: "def f(xs):\n    # then\n    return xs\n",
	},
	{
		name: "remove the only statement leaves pass", op: mutate.RemoveStmt, seed: 1,
		src:  "def f(xs):\n    for x in xs:\n        print(x)\n",
		want: "def f(xs):\n    for x in xs:\n        pass\n",
	},
	{
		name: "remove elif", op: mutate.RemoveBranch, site: 1, seed: 1,
		src:  "def sign(x):\n    if x > 0:\n        s = 1\n    elif x < 0:\n        s = -1\n    else:\n        s = 0\n    return s\n",
		want: "def sign(x):\n    if x > 0:\n        s = 1\n    else:\n        s = 0\n    return s\n",
	},
	{
		name: "remove if without else", op: mutate.RemoveBranch, seed: 1,
		src:  "def f(xs, x):\n    if x not in xs:\n        xs.append(x)\n    return xs\n",
		want: "def f(xs, x):\n    return xs\n",
	},
	{
		name: "return value dropped", op: mutate.RemoveReturn, seed: 1,
		src:  "def f(x):\n    return x + 1\n",
		want: "def f(x):\n    return\n",
	},
	{
		name: "early return becomes pass", op: mutate.RemoveReturn, seed: 1,
		src:  "def f(x):\n    if x:\n        return x\n    return 0\n",
		want: "def f(x):\n    if x:\n        pass\n    return 0\n",
	},
	{
		name: "swap arguments", op: mutate.SwapArgs, seed: 1,
		src:  "def f(a, b):\n    return divmod(a, b)\n",
		want: "def f(a, b):\n    return divmod(b, a)\n",
	},
	{
		name: "integer constant", op: mutate.ChangeConst, seed: 1,
		src:  "TIMEOUT = 30\n",
		want: "TIMEOUT = 31\n",
	},
	{
		name: "string constant keeps escapes whole", op: mutate.ChangeConst, seed: 1,
		src:  "SEP = 'a\\n'\n",
		want: "SEP = 'a'\n",
	},
	{
		name: "true becomes false", op: mutate.ChangeConst, seed: 1,
		src:  "DEBUG = True\n",
		want: "DEBUG = False\n",
	},
	{
		name: "other local", op: mutate.SwapVariable, site: 1, seed: 3,
		src:  "def f(a, b):\n    c = a * 2\n    return c + b\n",
		want: "def f(a, b):\n    c = a * 2\n    return a + b\n",
	},
	{
		name: "remove raise guard", op: mutate.RemoveGuard, seed: 1,
		src:  "def f(x):\n    if x is None:\n        raise ValueError('x')\n    return x\n",
		want: "def f(x):\n    return x\n",
	},
	{
		name: "remove assert", op: mutate.RemoveGuard, seed: 1,
		src:  "def f(x):\n    assert x > 0\n    return x\n",
		want: "def f(x):\n    return x\n",
	},
	{
		name: "unwrap try keeps else and finally", op: mutate.UnwrapTry, seed: 1,
		src: "def f(p):\n    try:\n        v = int(p)  # parse\n        if v:\n            v += 1\n    except ValueError:\n        v = 0\n" +
			"    else:\n        v *= 2\n    finally:\n        log(p)\n    return v\n",
		want: "def f(p):\n    v = int(p)  # parse\n    if v:\n        v += 1\n    v *= 2\n    log(p)\n    return v\n",
	},
	{
		name: "break becomes continue", op: mutate.BreakLoopExit, seed: 1,
		src:  "def first(xs):\n    for x in xs:\n        if x:\n            break\n    return x\n",
		want: "def first(xs):\n    for x in xs:\n        if x:\n            continue\n    return x\n",
	},
	{
		name: "remove break", op: mutate.BreakLoopExit, seed: 2,
		src:  "def first(xs):\n    for x in xs:\n        if x:\n            break\n    return x\n",
		want: "def first(xs):\n    for x in xs:\n        if x:\n            pass\n    return x\n",
	},
	{
		name: "while bound", op: mutate.BreakLoopExit, seed: 1,
		src:  "def f(n):\n    i = 0\n    while i < n:\n        i += 1\n    return i\n",
		want: "def f(n):\n    i = 0\n    while i <= n:\n        i += 1\n    return i\n",
	},
	{
		name: "default argument", op: mutate.ChangeDefault, seed: 1,
		src:  "def retry(f, times=3):\n    return f(times)\n",
		want: "def retry(f, times=2):\n    return f(times)\n",
	},
	{
		name: "typed default to None", op: mutate.ChangeDefault, seed: 4,
		src:  "def f(x, strict: bool = False):\n    return x\n",
		want: "def f(x, strict: bool = None):\n    return x\n",
	},
}

func TestOperators(t *testing.T) {
	for _, tc := range opCases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := mutate.NewFile("pkg/mod.py", []byte(tc.src), mutate.Python)
			if err != nil {
				t.Fatal(err)
			}
			o := op(tc.op)
			sites := o.Sites(f)
			if tc.site >= len(sites) {
				t.Fatalf("%d sites, want site %d", len(sites), tc.site)
			}
			s := sites[tc.site]
			if s.Operator != tc.op || s.Line < 1 || s.EndLine < s.Line {
				t.Fatalf("bad site %+v", s)
			}
			e, err := o.Apply(f, s, mutate.Rand(tc.seed, f.Path, s, 0))
			if err != nil {
				t.Fatal(err)
			}
			got := string(mutate.ApplyReplacements(f.Src, e.Replacements))
			if *show {
				fmt.Printf("%s:\n%q\n", tc.name, got)
				return
			}
			if got != tc.want {
				t.Fatalf("mutant:\n%s\nwant:\n%s", got, tc.want)
			}
			if _, err := (Frontend{}).Check(f, []byte(got)); err != nil {
				t.Fatalf("mutant does not parse: %v", err)
			}
			// Every candidate of this operator on the snippet round-trips
			// through git.
			cands, st := mutate.New(mutate.Config{Operators: []string{tc.op}, Draws: 4}).Mutate(f, nil, tc.seed)
			if len(cands) == 0 {
				t.Fatalf("no candidates: %v", st)
			}
			for _, c := range cands {
				mutatetest.RoundTrip(t, c)
				if !c.Checked || c.Features.Operators[0] != tc.op || c.Features.LinesTouched < 1 {
					t.Fatalf("features %+v checked %v", c.Features, c.Checked)
				}
			}
		})
	}
}

func TestSiteFunc(t *testing.T) {
	src := "class A:\n    def m(self, x):\n        def inner(y):\n            return y + 1\n        return inner(x) - 1\n\nZ = 1 + 2\n"
	f, _ := mutate.NewFile("a.py", []byte(src), "")
	sites := op(mutate.SwapArithmetic).Sites(f)
	want := []mutate.Func{{Name: "A.m.inner", StartLine: 3, EndLine: 4}, {Name: "A.m", StartLine: 2, EndLine: 5}, {}}
	if len(sites) != len(want) {
		t.Fatalf("%d sites", len(sites))
	}
	for i, s := range sites {
		if s.Func != want[i] {
			t.Errorf("site %d func %+v, want %+v", i, s.Func, want[i])
		}
	}
	if sites[2].Line != 7 || sites[2].EndLine != 7 {
		t.Errorf("line span %d-%d", sites[2].Line, sites[2].EndLine)
	}
}

// TestNoSites lists code each operator must leave alone.
func TestNoSites(t *testing.T) {
	tests := []struct {
		op, src string
	}{
		{mutate.SwapArithmetic, "x = 'a' + name\ny = '%s' % name\n"},
		{mutate.OffByOne, "def f(d: Dict[str, int]):\n    return d['key']\n"},
		{mutate.OffByOne, "def f(n):\n    for i in range(n):\n        pass\n    while i < n:\n        i += 1\n"},
		{mutate.ChangeConst, "def f(x=1):\n    \"\"\"Doc.\"\"\"\n    return f'{x}'\n"},
		{mutate.RemoveReturn, "def f():\n    return None\n"},
		{mutate.RemoveReturn, "def f():\n    return\n"},
		{mutate.SwapArgs, "def f(a, b):\n    return max(a, b), g(a, key=b), g(a, a)\n"},
		{mutate.SwapVariable, "def f(self, a):\n    return self.x + a\n"},
		{mutate.SwapVariable, "def f(a):\n    return [c for c in a]\n"},
		{mutate.BreakLoopExit, "def f(q):\n    while True:\n        if q.get():\n            break\n"},
		{mutate.RemoveBranch, "if __name__ == '__main__':\n    main()\n"},
		{mutate.RemoveGuard, "def f(x):\n    if x:\n        raise E()\n    else:\n        pass\n"},
		{mutate.UnwrapTry, "def f():\n    try:\n        s = '''a\n        b'''\n    except E:\n        pass\n"},
		{mutate.ChangeDefault, "def f(x=None):\n    pass\n"},
		{mutate.RemoveStmt, "def f():\n    \"\"\"Doc.\"\"\"\n    ...\n"},
	}
	for _, tt := range tests {
		f, _ := mutate.NewFile("a.py", []byte(tt.src), "")
		if sites := op(tt.op).Sites(f); len(sites) != 0 {
			var got []string
			for _, s := range sites {
				got = append(got, f.Text(s.Start, s.End))
			}
			t.Errorf("%s on %q: sites %q, want none", tt.op, tt.src, got)
		}
	}
}

// TestEveryOperatorApplies runs every operator on one file that has a site
// for each and checks that every variant of every site parses.
func TestEveryOperatorApplies(t *testing.T) {
	var b strings.Builder
	for _, tc := range opCases {
		b.WriteString(tc.src)
		b.WriteString("\n\n")
	}
	f, _ := mutate.NewFile("all.py", []byte(b.String()), "")
	if err := (Frontend{}).Parse(f); err != nil {
		t.Fatal(err)
	}
	for _, o := range Operators() {
		sites := o.Sites(f)
		if len(sites) == 0 {
			t.Errorf("%s: no sites", o.Name())
		}
		for _, s := range sites {
			for _, e := range s.Variants {
				m := mutate.ApplyReplacements(f.Src, e.Replacements)
				if _, err := (Frontend{}).Check(f, m); err != nil {
					t.Errorf("%s %q at line %d: %v", o.Name(), e.Summary, s.Line, err)
				}
			}
		}
	}
}

func TestApplyRejectsForeignSite(t *testing.T) {
	f, _ := mutate.NewFile("a.py", []byte("x = 1 + 2\n"), "")
	s := op(mutate.SwapArithmetic).Sites(f)[0]
	if _, err := op(mutate.ChangeConst).Apply(f, s, mutate.Rand(1, "a.py", s, 0)); err == nil {
		t.Error("operator applied another operator's site")
	}
	g, _ := mutate.NewFile("a.py", []byte("x = 1 - 2\n"), "")
	if _, err := op(mutate.SwapArithmetic).Apply(g, s, mutate.Rand(1, "a.py", s, 0)); err == nil {
		t.Error("stale site applied to a changed file")
	}
}
