package environment

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/namespaces"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
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

func checkRegistered(t *testing.T, b *Builder, rt *sandbox.Runtime, env *messages.Environment) {
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
		if r.Status == messages.TestStatus_TEST_STATUS_PASS {
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
		if r.Status == messages.TestStatus_TEST_STATUS_PASS && strings.HasPrefix(r.Name, "github.com/gorilla/context/Test") {
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
	status := map[string]messages.TestStatus{}
	for _, r := range env.Baseline.Results {
		status[r.Name] = r.Status
	}
	if status["tests/test_calc.py::test_add"] != messages.TestStatus_TEST_STATUS_PASS || status["tests/test_calc.py::test_wrong"] != messages.TestStatus_TEST_STATUS_FAIL {
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
