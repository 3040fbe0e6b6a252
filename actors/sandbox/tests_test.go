package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/sandbox/testreport"
)

// The suites under testreport/testdata run for real inside sandboxes; their
// per-test verdicts must match what the same suites gave on the host (the
// golden files of package testreport).

// goldenVerdicts reads id → status from a testreport golden file.
func goldenVerdicts(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testreport", "testdata", "golden", name))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Results []struct{ ID, Status string }
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range g.Results {
		out[r.ID] = r.Status
	}
	return out
}

func verdicts(r *testreport.Report) map[string]string {
	out := map[string]string{}
	for _, res := range r.Results {
		out[res.ID] = res.Status.String()
	}
	return out
}

func sameVerdicts(t *testing.T, got, want map[string]string) {
	t.Helper()
	for id, st := range want {
		if got[id] != st {
			t.Errorf("%s: %q, want %q", id, got[id], st)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("unexpected result %s", id)
		}
	}
}

func TestRunPytest(t *testing.T) {
	abs, err := filepath.Abs(filepath.Join("testreport", "testdata", "pysuite"))
	if err != nil {
		t.Fatal(err)
	}
	ref := deriveRepoImage(t, "pysuite", abs)
	sb := createFrom(t, ref, Options{})
	ctx := context.Background()
	spec := TestSpec{Framework: testreport.Pytest}

	all, err := sb.RunTests(ctx, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !all.Valid || all.ExitCode != 1 {
		t.Fatalf("whole suite: valid %v (%s), exit %d", all.Valid, all.Problem, all.ExitCode)
	}
	sameVerdicts(t, verdicts(all), goldenVerdicts(t, "pytest9-mixed-outcomes.golden.json"))

	picked := []string{"tests/test_basic.py::test_weird_ids[c::d]", "tests/test_basic.py::TestGroup::TestNested::test_inner", "tests/sub/test_more.py::test_sub_pass"}
	some, err := sb.RunTests(ctx, spec, picked)
	if err != nil {
		t.Fatal(err)
	}
	if !some.Valid || some.ExitCode != 0 || len(some.Results) != 3 {
		t.Fatalf("picked tests: %+v", some)
	}
	for _, id := range picked {
		if r, ok := some.Lookup(id); !ok || r.Status != testreport.StatusPass {
			t.Errorf("%s: %+v", id, r)
		}
	}

	// A fail-fast run (the Synthesizer's screening) stops at the first
	// failure: valid, with fewer results than tests collected.
	fast := spec
	fast.Args = []string{"-x"}
	first, err := sb.RunTests(ctx, fast, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Valid || first.ExitCode != 1 || len(first.Results) == 0 || len(first.Results) >= len(all.Results) {
		t.Fatalf("fail-fast run: valid %v (%s), exit %d, %d results of the suite's %d", first.Valid, first.Problem, first.ExitCode, len(first.Results), len(all.Results))
	}

	unknown, err := sb.RunTests(ctx, spec, []string{"tests/test_basic.py::test_does_not_exist"})
	if err != nil {
		t.Fatal(err)
	}
	if unknown.Valid {
		t.Fatalf("a run of an unknown test is valid: %+v", unknown)
	}

	// The mixin's inherited tests are named by the inheriting module, as
	// pytest names them (JUnit XML named them by the mixin's module), and a
	// run by those ids finds them.
	inherited := []string{"tests/mixin/test_inherited.py::InheritedTest::test_inherited_pass", "tests/mixin/test_inherited.py::InheritedTest::test_inherited_fail"}
	mixin, err := sb.RunTests(ctx, spec, inherited)
	if err != nil {
		t.Fatal(err)
	}
	if st := verdicts(mixin); !mixin.Valid || mixin.ExitCode != 1 || len(st) != 2 || st[inherited[0]] != "pass" || st[inherited[1]] != "fail" {
		t.Fatalf("inherited tests: valid %v (%s), exit %d, %v", mixin.Valid, mixin.Problem, mixin.ExitCode, st)
	}

	// FROGNANO_CAPTURE_GOLDEN=1 refreshes the sandbox capture that package
	// testreport keeps as a golden input.
	if os.Getenv("FROGNANO_CAPTURE_GOLDEN") != "" {
		res, err := sb.Exec(ctx, ExecRequest{Argv: []string{"python3", "-c", testreport.PytestPlugin + `
import sys
sys.exit(int(_frognano_pytest.main(sys.argv[2:], plugins=[FrognanoReport(sys.argv[1])])))`, "/tmp/r.jsonl", "-p", "no:cacheprovider", "--rootdir=.", "-q"}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := sb.ReadFile(ctx, "/tmp/r.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pytest exit %d", res.ExitCode)
		if err := os.WriteFile(filepath.Join("testreport", "testdata", "pytest7-mixed.jsonl"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRunGoTests(t *testing.T) {
	abs, err := filepath.Abs(filepath.Join("testreport", "testdata", "gosuite"))
	if err != nil {
		t.Fatal(err)
	}
	ref := deriveRepoImage(t, "gosuite", abs)
	sb := createFrom(t, ref, Options{})
	ctx := context.Background()
	spec := TestSpec{Framework: testreport.GoTest, Args: []string{"./pass", "./fail", "./panics", "./broken", "./notests"}}

	mixed, err := sb.RunTests(ctx, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !mixed.Valid || mixed.ExitCode != 1 {
		t.Fatalf("mixed: valid %v (%s), exit %d", mixed.Valid, mixed.Problem, mixed.ExitCode)
	}
	want := goldenVerdicts(t, "go-test-mixed-outcomes.golden.json")
	// A binary that panicked never reached the grader's last test (the
	// canary, see goCanary): every result of its package is an error.
	for id := range want {
		if strings.HasPrefix(id, "example.com/gosuite/panics/") {
			want[id] = "error"
		}
	}
	sameVerdicts(t, verdicts(mixed), want)

	picked := []string{"example.com/gosuite/pass/TestOne", "example.com/gosuite/pass/TestSub/second", "example.com/gosuite/fail/TestPasses"}
	some, err := sb.RunTests(ctx, TestSpec{Framework: testreport.GoTest}, picked)
	if err != nil {
		t.Fatal(err)
	}
	if !some.Valid || some.ExitCode != 0 {
		t.Fatalf("picked: valid %v (%s), exit %d, %+v", some.Valid, some.Problem, some.ExitCode, some.Results)
	}
	for _, id := range picked {
		if r, ok := some.Lookup(id); !ok || r.Status != testreport.StatusPass {
			t.Errorf("%s: %+v", id, r)
		}
	}

	forged, err := sb.RunTests(ctx, TestSpec{Framework: testreport.GoTest, Args: []string{"./forge"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if forged.Valid {
		t.Fatalf("forged test2json framing accepted: %+v", forged)
	}
	if o := testreport.Grade(forged, []string{"example.com/gosuite/forge/TestFails"}, nil); o.Reward != 0 {
		t.Fatalf("forged run rewarded: %+v", o)
	}

	// Examples and fuzz seeds run after every test: a package with them,
	// and with an external test package, is still graded valid (the
	// canary is an example of the external package; as a test of the
	// internal one, every such run was invalid).
	ex, err := sb.RunTests(ctx, TestSpec{Framework: testreport.GoTest, Args: []string{"./examples"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !ex.Valid || ex.ExitCode != 0 {
		t.Fatalf("examples: valid %v (%s), exit %d, %+v", ex.Valid, ex.Problem, ex.ExitCode, ex.Results)
	}
	for _, id := range []string{"TestInternal", "TestExternal", "FuzzDouble", "ExampleDouble"} {
		if r, ok := ex.Lookup("example.com/gosuite/examples/" + id); !ok || r.Status != testreport.StatusPass {
			t.Errorf("examples/%s: %+v (%v)", id, r, ok)
		}
	}
	for _, r := range ex.Results {
		if strings.Contains(r.ID, "FrognanoZ") {
			t.Errorf("the canary leaked into the results: %s", r.ID)
		}
	}
}
