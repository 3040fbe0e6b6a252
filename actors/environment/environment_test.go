package environment

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/namespaces"

	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

func TestParseSource(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		arg     string
		want    Source
		wantErr bool
	}{
		{"six==1.16.0", Source{PyPI, "six==1.16.0"}, false},
		{"pypi:attrs==23.2.0", Source{PyPI, "attrs==23.2.0"}, false},
		{"github.com/google/uuid@v1.6.0", Source{GoMod, "github.com/google/uuid@v1.6.0"}, false},
		{"go:golang.org/x/text@v0.14.0", Source{GoMod, "golang.org/x/text@v0.14.0"}, false},
		{dir, Source{Local, dir}, false},
		{"image:registry.example/swebench/sweb.eval.x86_64.astropy:latest", Source{Image, "registry.example/swebench/sweb.eval.x86_64.astropy:latest"}, false},
		{"six", Source{}, true},
		{"pypi:six", Source{}, true},
		{"/no/such/dir", Source{}, true},
		{"image:", Source{}, true},
	}
	for _, tt := range tests {
		got, err := ParseSource(tt.arg)
		if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
			t.Errorf("ParseSource(%q) = %v, %v; want %v (error %v)", tt.arg, got, err, tt.want, tt.wantErr)
		}
	}
	// A huge argument is refused without being echoed back whole.
	for _, huge := range []string{strings.Repeat("x", 100000), strings.Repeat("x", 100000) + "==1.0", "pypi:" + strings.Repeat("y", 100000)} {
		_, err := ParseSource(huge)
		if err == nil || len(err.Error()) > 300 {
			t.Errorf("a %d-byte source: error %.200v, want a short refusal", len(huge), err)
		}
	}
}

func TestDefaultName(t *testing.T) {
	tests := map[Source]string{
		{PyPI, "Flask==3.0.0"}:                      "flask-3.0.0",
		{GoMod, "github.com/google/uuid@v1.6.0"}:    "uuid-v1.6.0",
		{GoMod, "github.com/o/name/v2@v2.3.0"}:      "name-v2.3.0",
		{GoMod, "example.com/tools/v12@v12.0.1"}:    "tools-v12.0.1",
		{GoMod, "example.com/x/v2@v0.1.0"}:          "v2-v0.1.0", // not a major-version suffix at v0
		{GoMod, "gopkg.in/yaml.v2@v2.4.0"}:          "yaml-v2.4.0",
		{GoMod, "gopkg.in/o/pkg.v3@v3.0.1"}:         "pkg-v3.0.1",
		{Local, "/home/me/My Project"}:              "my-project",
		{Image, "registry.example/swe/astropy:1.2"}: "astropy-1.2",
	}
	for src, want := range tests {
		if got := DefaultName(src); got != want || ValidName(got) != nil {
			t.Errorf("DefaultName(%v) = %q (valid: %v), want %q", src, got, ValidName(got), want)
		}
	}
}

// The tests below build real environments in containerd; they need
// containerd running (scripts/setup-containerd.sh) and the package registries.

func newBuilder(t *testing.T) (*Builder, *sandbox.Runtime) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds containerd images; skipped with -short")
	}
	ctx := context.Background()
	rt, err := sandbox.New(ctx, sandbox.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if errors.Is(err, sandbox.ErrContainerdNotRunning) {
		t.Skipf("containerd is not running: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return &Builder{Runtime: rt, Store: persistence.NewMemory().Environments()}, rt
}

// imagesNamed lists the refs in frognano's namespace that contain name.
func imagesNamed(t *testing.T, rt *sandbox.Runtime, name string) []string {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), rt.Namespace())
	all, err := rt.Client().ImageService().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, img := range all {
		if strings.Contains(img.Name, "/"+name+":") {
			out = append(out, img.Name)
		}
	}
	return out
}

func checkRegistered(t *testing.T, b *Builder, rt *sandbox.Runtime, env *records.Environment) {
	t.Helper()
	ctx := context.Background()
	if got, err := b.Store.Get(ctx, env.Name); err != nil || got.Image != env.Image {
		t.Fatalf("not in the store: %v %v", got, err)
	}
	if len(env.TestFiles) == 0 || env.BaseCommit == "" {
		t.Errorf("test files %v, base commit %q", env.TestFiles, env.BaseCommit)
	}
	// The episode sandbox sees the repository with one commit and its tests pass.
	sb, err := rt.Create(ctx, env.Image, sandbox.Options{RepoDir: env.RepoDir})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if err := sb.VerifyGitHistory(ctx, env.RepoDir); err != nil {
		t.Errorf("git history: %v", err)
	}
	if _, err := sb.ReadFile(ctx, env.RepoDir+"/"+env.TestFiles[0]); err != nil {
		t.Errorf("test file %s not in the image: %v", env.TestFiles[0], err)
	}
}

func TestAddPyPISdist(t *testing.T) {
	b, rt := newBuilder(t)
	env, err := b.Add(context.Background(), Source{PyPI, "six==1.16.0"}, AddOptions{Name: "test-six"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove(context.Background(), env.Name)
	if env.Language != "python" || env.TestFramework != "pytest" {
		t.Errorf("language %s framework %s", env.Language, env.TestFramework)
	}
	passed := 0
	for _, r := range env.Baseline.Results {
		if r.Status == records.TestStatus_TEST_STATUS_PASS {
			passed++
		}
		if !strings.HasPrefix(r.Name, "test_six.py::") {
			t.Errorf("test id %q is not a pytest node id of test_six.py", r.Name)
		}
	}
	if passed < 100 {
		t.Errorf("only %d of six's tests passed at baseline", passed)
	}
	checkRegistered(t, b, rt, env)
	if err := b.Remove(context.Background(), env.Name); err != nil {
		t.Fatal(err)
	}
	if left := imagesNamed(t, rt, env.Name); len(left) != 0 {
		t.Errorf("images left after rm: %v", left)
	}
}

func TestAddGoModule(t *testing.T) {
	b, rt := newBuilder(t)
	env, err := b.Add(context.Background(), Source{GoMod, "github.com/google/uuid@v1.6.0"}, AddOptions{Name: "test-uuid"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove(context.Background(), env.Name)
	if env.Language != "go" || env.TestFramework != "gotest" || len(env.Baseline.Results) < 50 {
		t.Fatalf("env %s/%s with %d results", env.Language, env.TestFramework, len(env.Baseline.Results))
	}
	if !strings.HasPrefix(env.Baseline.Results[0].Name, "github.com/google/uuid/Test") {
		t.Errorf("go test id %q", env.Baseline.Results[0].Name)
	}
	checkRegistered(t, b, rt, env)
}

// A module published before modules has no go.mod; the proxy's synthesized
// one becomes the repository's, as the go tool uses it.
func TestAddGoModuleWithoutGoMod(t *testing.T) {
	b, rt := newBuilder(t)
	env, err := b.Add(context.Background(), Source{GoMod, "github.com/gorilla/context@v1.1.1"}, AddOptions{Name: "test-nogomod"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove(context.Background(), env.Name)
	if env.Language != "go" {
		t.Fatalf("language %q", env.Language)
	}
	pass := 0
	for _, r := range env.Baseline.Results {
		if r.Status == records.TestStatus_TEST_STATUS_PASS && strings.HasPrefix(r.Name, "github.com/gorilla/context/Test") {
			pass++
		}
	}
	if pass == 0 {
		t.Errorf("no gorilla/context test passed at baseline: %v", env.Baseline.Results)
	}
	checkRegistered(t, b, rt, env)
	sb, err := rt.Create(context.Background(), env.Image, sandbox.Options{RepoDir: env.RepoDir})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	mod, err := sb.ReadFile(context.Background(), env.RepoDir+"/go.mod")
	if err != nil || !strings.HasPrefix(string(mod), "module github.com/gorilla/context\n") {
		t.Errorf("go.mod in the image: %q, %v", mod, err)
	}
}

// A major-version module is named after the module, not its /vN suffix.
func TestAddMajorVersionModuleName(t *testing.T) {
	b, _ := newBuilder(t)
	env, err := b.Add(context.Background(), Source{GoMod, "github.com/blang/semver/v4@v4.0.0"}, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove(context.Background(), env.Name)
	if env.Name != "semver-v4.0.0" {
		t.Errorf("registered as %q, want semver-v4.0.0", env.Name)
	}
	if len(env.Baseline.Results) == 0 || !strings.HasPrefix(env.Baseline.Results[0].Name, "github.com/blang/semver/v4/Test") {
		t.Errorf("baseline %v", env.Baseline.Results)
	}
}

// writeProject makes a small Python project with the given test file body.
func writeProject(t *testing.T, pyproject, tests string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "proj")
	files := map[string]string{
		"pyproject.toml":   pyproject,
		"calc/__init__.py": "def add(a, b):\n    return a + b\n",
	}
	if tests != "" {
		files["tests/test_calc.py"] = tests
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const pyproject = `[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
[project]
name = "calc"
version = "0.1"
`

func TestAddLocalDirectoryRecordsPassAndFail(t *testing.T) {
	b, rt := newBuilder(t)
	dir := writeProject(t, pyproject, "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n\ndef test_wrong():\n    assert add(2, 2) == 5\n")
	env, err := b.Add(context.Background(), Source{Local, dir}, AddOptions{Name: "test-calc"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove(context.Background(), env.Name)
	status := map[string]records.TestStatus{}
	for _, r := range env.Baseline.Results {
		status[r.Name] = r.Status
	}
	if status["tests/test_calc.py::test_add"] != records.TestStatus_TEST_STATUS_PASS || status["tests/test_calc.py::test_wrong"] != records.TestStatus_TEST_STATUS_FAIL {
		t.Fatalf("baseline %v", status)
	}
	checkRegistered(t, b, rt, env)
}

func TestBadSourcesAreRejectedAndLeaveNothing(t *testing.T) {
	b, rt := newBuilder(t)
	tests := []struct {
		name    string
		src     func(t *testing.T) Source
		opts    AddOptions
		wantErr error
	}{
		{"no tests", func(t *testing.T) Source { return Source{Local, writeProject(t, pyproject, "")} }, AddOptions{}, ErrNoTests},
		{"dependency install fails", func(t *testing.T) Source {
			return Source{Local, writeProject(t, pyproject+"dependencies = [\"frognano-no-such-package-x9==1.0\"]\n", "def test_ok():\n    pass\n")}
		}, AddOptions{}, ErrInstall},
		{"suite hangs", func(t *testing.T) Source {
			return Source{Local, writeProject(t, pyproject, "import time\n\ndef test_forever():\n    time.sleep(3600)\n")}
		}, AddOptions{SuiteTimeout: 15 * time.Second}, ErrSuite},
		{"nothing passes", func(t *testing.T) Source {
			return Source{Local, writeProject(t, pyproject, "def test_no():\n    assert False\n")}
		}, AddOptions{}, ErrNoPassingRun},
		{"no such image", func(t *testing.T) Source { return Source{Image, "frognano.local/no/such:image"} }, AddOptions{}, ErrNoSuchImage},
		{"no language", func(t *testing.T) Source { return Source{Local, t.TempDir()} }, AddOptions{}, ErrNoLanguage},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "test-bad-" + string(rune('a'+i))
			tt.opts.Name = name
			_, err := b.Add(context.Background(), tt.src(t), tt.opts)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if _, err := b.Store.Get(context.Background(), name); !errors.Is(err, persistence.ErrNotFound) {
				t.Errorf("rejected environment registered: %v", err)
			}
			if left := imagesNamed(t, rt, name); len(left) != 0 {
				t.Errorf("images left behind: %v", left)
			}
		})
	}
}

func TestContainerdNotRunning(t *testing.T) {
	_, err := sandbox.New(context.Background(), sandbox.Config{Address: filepath.Join(t.TempDir(), "containerd.sock")})
	if !errors.Is(err, sandbox.ErrContainerdNotRunning) || !strings.Contains(err.Error(), "start it") {
		t.Fatalf("got %v", err)
	}
}

// writeTree writes files under a new directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "proj")
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestAddInheritedTestIDs registers testdata/mixin, a package whose
// unittest classes get their test methods from a mixin in
// tests/__init__.py, as many real packages' suites do. The baseline must
// name them by pytest's node ids, and a run of those ids must find every
// one. (JUnit XML names such a test by the mixin's file; the ids rebuilt
// from it, tests/test_calc/CalcTest.py::test_add, named no test at all.)
func TestAddInheritedTestIDs(t *testing.T) {
	b, rt := newBuilder(t)
	ctx := context.Background()
	dir, err := filepath.Abs(filepath.Join("testdata", "mixin"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := b.Add(ctx, Source{Local, dir}, AddOptions{Name: "test-mixin"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Remove(context.Background(), env.Name)
	var ids []string
	for _, r := range env.Baseline.Results {
		if r.Status != records.TestStatus_TEST_STATUS_PASS {
			t.Errorf("%s: %v %s", r.Name, r.Status, r.Message)
		}
		ids = append(ids, r.Name)
	}
	for _, want := range []string{
		"tests/test_calc.py::CalcTest::test_add",
		"tests/test_calc.py::CalcTest::test_mean_empty",
		"tests/test_calc.py::CalcSubclassTest::test_clamp_high",
		"tests/test_calc.py::CalcSubclassTest::test_own",
	} {
		if !slices.Contains(ids, want) {
			t.Errorf("baseline lacks %s: %v", want, ids)
		}
	}
	if len(ids) != 15 {
		t.Errorf("%d results, want 15: %v", len(ids), ids)
	}

	// Named runs, as synthesis and grading make them, find every test.
	sb, err := rt.Create(ctx, env.Image, sandbox.Options{RepoDir: env.RepoDir})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	rep, err := sb.RunTests(ctx, Spec(env), ids)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Valid || rep.ExitCode != 0 || len(rep.Results) != len(ids) || rep.Counts()[testreport.StatusPass] != len(ids) {
		t.Fatalf("named run: valid %v (%s), exit %d, %d results %v", rep.Valid, rep.Problem, rep.ExitCode, len(rep.Results), rep.Counts())
	}
}

// TestAddCollectionErrors registers a suite one of whose two test files
// fails to import, as an sdist that leaves out a module its tests need:
// refused by default, saying so; registered with AllowCollectionErrors;
// and --min-tests refuses a suite with too few passing tests.
func TestAddCollectionErrors(t *testing.T) {
	b, rt := newBuilder(t)
	ctx := context.Background()
	files := map[string]string{
		"pyproject.toml":   pyproject,
		"calc/__init__.py": "def add(a, b):\n    return a + b\n",
		"tests/test_add.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n" +
			"def test_zero():\n    assert add(0, 0) == 0\n\n\ndef test_negative():\n    assert add(-2, -3) == -5\n",
		// calc/_data.py is left out of the "sdist".
		"tests/test_data.py": "from calc._data import TABLE\n\n\ndef test_table():\n    assert TABLE\n",
	}
	dir := writeTree(t, files)
	tests := []struct {
		name    string
		opts    AddOptions
		wantErr error
		msg     []string
	}{
		{"refused by default", AddOptions{}, ErrCollection, []string{
			"1 of 2 test files failed to collect", "tests/test_data.py", "ModuleNotFoundError: No module named 'calc._data'", "3 tests pass", "--allow-collection-errors"}},
		{"too few tests, collection errors allowed", AddOptions{MinTests: 5, AllowCollectionErrors: true}, ErrTooFewTests, []string{
			"3 tests pass, fewer than --min-tests 5", "1 of 2 test files failed to collect"}},
		{"allowed", AddOptions{MinTests: 3, AllowCollectionErrors: true}, nil, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Name = "test-collect-" + string(rune('a'+i))
			env, err := b.Add(ctx, Source{Local, dir}, tt.opts)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				defer b.Remove(context.Background(), env.Name)
				col := CollectionErrors(env)
				if col.Failed != 1 || col.Files != 2 || col.FirstID != "tests/test_data.py" || !strings.Contains(col.FirstError, "calc._data") {
					t.Fatalf("collection errors of the registered environment: %+v", col)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			for _, m := range tt.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not say %q", err, m)
				}
			}
			if left := imagesNamed(t, rt, tt.opts.Name); len(left) != 0 {
				t.Errorf("images left behind: %v", left)
			}
		})
	}
}
