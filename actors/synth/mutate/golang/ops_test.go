package golang

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
// must give exactly want (written without the package clause).
type opCase struct {
	name string
	op   string
	src  string
	site int
	seed uint64
	want string
}

const pkgClause = "package demo\n\n"

var opCases = []opCase{
	{
		name: "flip less-than", op: mutate.FlipComparison, seed: 1,
		src:  "func Less(a, b int) bool { return a < b }\n",
		want: "func Less(a, b int) bool { return a > b }\n",
	},
	{
		name: "flip not-equal", op: mutate.FlipComparison, seed: 1,
		src:  "func Has(m map[string]int, k string) bool {\n\treturn m[k] != 0 // zero means absent\n}\n",
		want: "func Has(m map[string]int, k string) bool {\n\treturn m[k] == 0 // zero means absent\n}\n",
	},
	{
		name: "swap plus", op: mutate.SwapArithmetic, seed: 1,
		src:  "func Add(a, b int) int { return a + b }\n",
		want: "func Add(a, b int) int { return a - b }\n",
	},
	{
		name: "integer division may become modulo", op: mutate.SwapArithmetic, seed: 3,
		src:  "func Half(n int) int { return n / 2 }\n",
		want: "func Half(n int) int { return n % 2 }\n",
	},
	{
		name: "increment becomes decrement", op: mutate.SwapArithmetic, seed: 1,
		src:  "func Count(xs []int) (n int) {\n\tfor range xs {\n\t\tn++\n\t}\n\treturn n\n}\n",
		want: "func Count(xs []int) (n int) {\n\tfor range xs {\n\t\tn--\n\t}\n\treturn n\n}\n",
	},
	{
		name: "swap and", op: mutate.SwapBoolean, seed: 1,
		src:  "func In(x, lo, hi int) bool { return lo <= x && x < hi }\n",
		want: "func In(x, lo, hi int) bool { return lo <= x || x < hi }\n",
	},
	{
		name: "index moves", op: mutate.OffByOne, seed: 1,
		src:  "func At(xs []int, i int) int { return xs[i] }\n",
		want: "func At(xs []int, i int) int { return xs[i+1] }\n",
	},
	{
		name: "slice bound folds", op: mutate.OffByOne, seed: 1,
		src:  "func Init(s string) string { return s[:len(s)-1] }\n",
		want: "func Init(s string) string { return s[:len(s)] }\n",
	},
	{
		name: "comparison boundary", op: mutate.OffByOne, seed: 1,
		src:  "func Small(n int) bool { return n < 10 }\n",
		want: "func Small(n int) bool { return n <= 10 }\n",
	},
	{
		name: "negate if", op: mutate.NegateCond, seed: 1,
		src:  "func Abs(x int) int {\n\tif x < 0 {\n\t\treturn -x\n\t}\n\treturn x\n}\n",
		want: "func Abs(x int) int {\n\tif !(x < 0) {\n\t\treturn -x\n\t}\n\treturn x\n}\n",
	},
	{
		name: "negate drops not", op: mutate.NegateCond, seed: 1,
		src:  "func F(ok bool) int {\n\tif !ok {\n\t\treturn 1\n\t}\n\treturn 0\n}\n",
		want: "func F(ok bool) int {\n\tif ok {\n\t\treturn 1\n\t}\n\treturn 0\n}\n",
	},
	{
		name: "remove statement and its line", op: mutate.RemoveStmt, site: 1, seed: 1,
		src:  "func Sum(xs []int) (total, n int) {\n\tfor _, x := range xs {\n\t\ttotal += x\n\t\tn++ // count\n\t}\n\treturn total, n\n}\n",
		want: "func Sum(xs []int) (total, n int) {\n\tfor _, x := range xs {\n\t\ttotal += x\n\t\t// count\n\t}\n\treturn total, n\n}\n",
	},
	{
		name: "remove else", op: mutate.RemoveBranch, seed: 1,
		src:  "func Sign(x int) (s int) {\n\tif x > 0 {\n\t\ts = 1\n\t} else {\n\t\ts = -1\n\t}\n\treturn s\n}\n",
		want: "func Sign(x int) (s int) {\n\tif x > 0 {\n\t\ts = 1\n\t}\n\treturn s\n}\n",
	},
	{
		name: "remove else-if link", op: mutate.RemoveBranch, seed: 1,
		src:  "func Sign(x int) int {\n\tif x > 0 {\n\t\treturn 1\n\t} else if x < 0 {\n\t\treturn -1\n\t} else {\n\t\treturn 0\n\t}\n}\n",
		want: "func Sign(x int) int {\n\tif x > 0 {\n\t\treturn 1\n\t} else {\n\t\treturn 0\n\t}\n}\n",
	},
	{
		name: "remove a switch case", op: mutate.RemoveBranch, site: 1, seed: 1,
		src:  "func Name(k int) string {\n\tswitch k {\n\tcase 0:\n\t\treturn \"zero\"\n\tcase 1:\n\t\treturn \"one\"\n\t}\n\treturn \"many\"\n}\n",
		want: "func Name(k int) string {\n\tswitch k {\n\tcase 0:\n\t\treturn \"zero\"\n\t}\n\treturn \"many\"\n}\n",
	},
	{
		name: "result to zero value", op: mutate.RemoveReturn, seed: 1,
		src:  "type P struct{ X int }\n\nfunc Make(x int) (P, error) { return P{X: x}, nil }\n",
		want: "type P struct{ X int }\n\nfunc Make(x int) (P, error) { return P{}, nil }\n",
	},
	{
		name: "pointer result to nil", op: mutate.RemoveReturn, seed: 1,
		src:  "type P struct{ X int }\n\nfunc New(x int) *P { return &P{X: x} }\n",
		want: "type P struct{ X int }\n\nfunc New(x int) *P { return nil }\n",
	},
	{
		name: "swap copy arguments", op: mutate.SwapArgs, seed: 1,
		src:  "func Clone(src []byte) []byte {\n\tdst := make([]byte, len(src))\n\tcopy(dst, src)\n\treturn dst\n}\n",
		want: "func Clone(src []byte) []byte {\n\tdst := make([]byte, len(src))\n\tcopy(src, dst)\n\treturn dst\n}\n",
	},
	{
		name: "integer constant", op: mutate.ChangeConst, seed: 1,
		src:  "const Limit = 10\n",
		want: "const Limit = 11\n",
	},
	{
		name: "string drops an escape whole", op: mutate.ChangeConst, seed: 1,
		src:  "var Sep = \"a\\n\"\n",
		want: "var Sep = \"a\"\n",
	},
	{
		name: "true becomes false", op: mutate.ChangeConst, seed: 1,
		src:  "var Debug = true\n",
		want: "var Debug = false\n",
	},
	{
		name: "another local of the same type", op: mutate.SwapVariable, site: 2, seed: 1,
		src:  "func F(a, b int, s string) int {\n\tc := a * 2\n\treturn c + b + len(s)\n}\n",
		want: "func F(a, b int, s string) int {\n\tc := a * 2\n\treturn c + a + len(s)\n}\n",
	},
	{
		name: "remove err guard and discard err", op: mutate.RemoveGuard, seed: 1,
		src:  "import \"strconv\"\n\nfunc Parse(s string) (int, error) {\n\tn, err := strconv.Atoi(s)\n\tif err != nil {\n\t\treturn 0, err\n\t}\n\treturn n * 2, nil\n}\n",
		want: "import \"strconv\"\n\nfunc Parse(s string) (int, error) {\n\tn, _ := strconv.Atoi(s)\n\treturn n * 2, nil\n}\n",
	},
	{
		name: "remove guard with init keeps the call", op: mutate.RemoveGuard, seed: 1,
		src:  "func check() error { return nil }\n\nfunc Run() error {\n\tif err := check(); err != nil {\n\t\treturn err\n\t}\n\treturn nil\n}\n",
		want: "func check() error { return nil }\n\nfunc Run() error {\n\tcheck()\n\treturn nil\n}\n",
	},
	{
		name: "remove panic guard", op: mutate.RemoveGuard, seed: 1,
		src:  "func Sqrt(n int) int {\n\tif n < 0 {\n\t\tpanic(\"negative\")\n\t}\n\treturn n\n}\n",
		want: "func Sqrt(n int) int {\n\treturn n\n}\n",
	},
	{
		name: "break becomes continue", op: mutate.BreakLoopExit, seed: 4,
		src:  "func First(xs []int) (i int) {\n\tfor i = range xs {\n\t\tif xs[i] > 0 {\n\t\t\tbreak\n\t\t}\n\t}\n\treturn i\n}\n",
		want: "func First(xs []int) (i int) {\n\tfor i = range xs {\n\t\tif xs[i] > 0 {\n\t\t\tcontinue\n\t\t}\n\t}\n\treturn i\n}\n",
	},
	{
		name: "remove break", op: mutate.BreakLoopExit, seed: 1,
		src:  "func First(xs []int) (i int) {\n\tfor i = range xs {\n\t\tif xs[i] > 0 {\n\t\t\tbreak\n\t\t}\n\t}\n\treturn i\n}\n",
		want: "func First(xs []int) (i int) {\n\tfor i = range xs {\n\t\tif xs[i] > 0 {\n\t\t}\n\t}\n\treturn i\n}\n",
	},
	{
		name: "for condition boundary", op: mutate.BreakLoopExit, seed: 1,
		src:  "func Sum(xs []int, n int) (s int) {\n\tfor i := 0; i < n; i++ {\n\t\ts += xs[i]\n\t}\n\treturn s\n}\n",
		want: "func Sum(xs []int, n int) (s int) {\n\tfor i := 0; i <= n; i++ {\n\t\ts += xs[i]\n\t}\n\treturn s\n}\n",
	},
	{
		name: "range over int bound", op: mutate.BreakLoopExit, seed: 1,
		src:  "func Sum(n int) (s int) {\n\tfor i := range n {\n\t\ts += i\n\t}\n\treturn s\n}\n",
		want: "func Sum(n int) (s int) {\n\tfor i := range n - 1 {\n\t\ts += i\n\t}\n\treturn s\n}\n",
	},
}

func TestOperators(t *testing.T) {
	for _, tc := range opCases {
		t.Run(tc.name, func(t *testing.T) {
			src := pkgClause + tc.src
			if err := compileErr(map[string][]byte{"demo.go": []byte(src)}); err != nil {
				t.Fatalf("snippet does not compile: %v", err)
			}
			f, err := mutate.NewFile("demo/demo.go", []byte(src), "")
			if err != nil {
				t.Fatal(err)
			}
			o := op(tc.op)
			sites := o.Sites(f)
			if tc.site >= len(sites) {
				t.Fatalf("%d sites, want site %d", len(sites), tc.site)
			}
			s := sites[tc.site]
			e, err := o.Apply(f, s, mutate.Rand(tc.seed, f.Path, s, 0))
			if err != nil {
				t.Fatal(err)
			}
			got := string(mutate.ApplyReplacements(f.Src, e.Replacements))
			if *show {
				fmt.Printf("%s:\n%q\n", tc.name, strings.TrimPrefix(got, pkgClause))
				return
			}
			if got != pkgClause+tc.want {
				t.Fatalf("mutant:\n%s\nwant:\n%s", got, pkgClause+tc.want)
			}
			if err := compileErr(map[string][]byte{"demo.go": []byte(got)}); err != nil {
				t.Fatalf("mutant does not compile: %v", err)
			}
			// Every candidate of this operator round-trips through git, and
			// every checked one compiles.
			cands, st := mutate.New(mutate.Config{Operators: []string{tc.op}, Draws: 4}).Mutate(f, nil, tc.seed)
			if len(cands) == 0 {
				t.Fatalf("no candidates: %v", st)
			}
			for _, c := range cands {
				mutatetest.RoundTrip(t, c)
				m := mutate.ApplyReplacements(f.Src, c.Mutations[0].Edit.Replacements)
				if err := compileErr(map[string][]byte{"demo.go": m}); err != nil && c.Checked {
					t.Fatalf("checked candidate does not compile: %v\n%s", err, c.Patch)
				}
			}
		})
	}
}

func TestSiteFunc(t *testing.T) {
	src := pkgClause + "type T[K any] struct{ n int }\n\nfunc (t *T[K]) Inc() int {\n\tf := func() int { return t.n + 1 }\n\treturn f()\n}\n\nfunc (t T[K]) Dec() int { return t.n - 1 }\n\nvar Z = 1 + 2\n"
	f, _ := mutate.NewFile("demo.go", []byte(src), "")
	sites := op(mutate.SwapArithmetic).Sites(f)
	want := []mutate.Func{{Name: "(*T).Inc", StartLine: 5, EndLine: 8}, {Name: "T.Dec", StartLine: 10, EndLine: 10}, {}}
	if len(sites) != len(want) {
		t.Fatalf("%d sites", len(sites))
	}
	for i, s := range sites {
		if s.Func != want[i] {
			t.Errorf("site %d func %+v, want %+v", i, s.Func, want[i])
		}
	}
}

// TestNoSites lists code each operator must leave alone.
func TestNoSites(t *testing.T) {
	tests := []struct {
		op, src string
	}{
		{mutate.SwapArithmetic, "func F(a, b string) string { return a + b }\n"},
		{mutate.OffByOne, "func F(m map[string]int, k string) int { return m[k] }\n"},
		{mutate.OffByOne, "func F(n int) {\n\tfor i := 0; i < n; i++ {\n\t}\n}\n"},
		{mutate.SwapArgs, "func F(s string, n int) string { return g(s, n) }\n\nfunc g(string, int) string { return \"\" }\n"},
		{mutate.SwapArgs, "func F(a, b int) int { return max(a, b) }\n"},
		{mutate.SwapVariable, "func F(a int, s string) int { return a + len(s) }\n"},
		{mutate.ChangeConst, "import \"fmt\"\n\ntype T struct {\n\tA [4]byte `json:\"a\"`\n}\n\nvar _ = fmt.Sprint\n"},
		{mutate.BreakLoopExit, "func F(c chan int) {\n\tfor {\n\t\tif <-c == 0 {\n\t\t\tbreak\n\t\t}\n\t}\n}\n"},
		{mutate.BreakLoopExit, "func F(xs []int) {\n\tfor _, x := range xs {\n\t\tswitch x {\n\t\tcase 1:\n\t\t\tbreak\n\t\t}\n\t}\n}\n"},
		{mutate.RemoveStmt, "func F() {\n\tx := 1\n\tdefer println(x)\n}\n"},
		{mutate.RemoveStmt, "import \"sync\"\n\nfunc F(mu *sync.Mutex, c chan int) {\n\tmu.Lock()\n\tc <- 1\n\tclose(c)\n\tmu.Unlock()\n}\n"},
		{mutate.RemoveReturn, "func F() (int, error) { return 0, nil }\n"},
	}
	for _, tt := range tests {
		f, _ := mutate.NewFile("demo.go", []byte(pkgClause+tt.src), "")
		if sites := op(tt.op).Sites(f); len(sites) != 0 {
			var got []string
			for _, s := range sites {
				got = append(got, f.Text(s.Start, s.End))
			}
			t.Errorf("%s on %q: sites %q, want none", tt.op, tt.src, got)
		}
	}
}

// TestCheckRejects: mutants that would not compile are caught by Check,
// with the reason they count under.
func TestCheckRejects(t *testing.T) {
	orig := pkgClause + "import \"fmt\"\n\nfunc F(x int) int {\n\tfmt.Println(x)\n\ty := x + 1\n\treturn y\n}\n"
	f, _ := mutate.NewFile("demo.go", []byte(orig), "")
	tests := []struct {
		name, mutant, reason string
	}{
		{"unused variable", strings.Replace(orig, "return y", "return 0", 1), mutate.ReasonMutantType},
		{"unused import", strings.Replace(orig, "\tfmt.Println(x)\n", "", 1), mutate.ReasonMutantType},
		{"string minus", strings.Replace(orig, "x + 1", "\"a\" - \"b\"", 1), mutate.ReasonMutantType},
		{"syntax", strings.Replace(orig, "x + 1", "x +", 1), mutate.ReasonMutantParse},
	}
	for _, tt := range tests {
		_, err := Frontend{}.Check(f, []byte(tt.mutant))
		rej, ok := err.(*mutate.Rejection)
		if !ok || rej.Reason != tt.reason {
			t.Errorf("%s: got %v, want reason %s", tt.name, err, tt.reason)
		}
	}
	complete, err := Frontend{}.Check(f, []byte(strings.Replace(orig, "x + 1", "x - 1", 1)))
	if err != nil || !complete {
		t.Errorf("x - 1: complete %v err %v", complete, err)
	}
	complete, err = Frontend{}.Check(f, []byte(strings.Replace(orig, "fmt.Println(x)", "fmt.Println(x, x)", 1)))
	if err != nil || complete {
		t.Errorf("a call into an unloaded import must be accepted but not complete: %v %v", complete, err)
	}
}

func TestNotApplicable(t *testing.T) {
	have := map[string]bool{}
	for _, o := range Operators() {
		have[o.Name()] = true
		if o.Language() != mutate.Go {
			t.Errorf("%s: language %s", o.Name(), o.Language())
		}
	}
	na := Frontend{}.NotApplicable()
	for _, name := range mutate.OperatorNames {
		if have[name] == (na[name] != "") {
			t.Errorf("%s: offered %v, not-applicable reason %q", name, have[name], na[name])
		}
	}
}
