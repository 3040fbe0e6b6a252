package environment

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/actors/sandbox/testreport"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Errors that reject an environment, for errors.Is.
var (
	ErrExists       = errors.New("environment already exists")
	ErrNoTests      = errors.New("no tests found")
	ErrNoLanguage   = errors.New("cannot tell the repository's language")
	ErrInstall      = errors.New("dependency install failed")
	ErrSuite        = errors.New("test suite cannot run")
	ErrNoSuchImage  = errors.New("no such image")
	ErrNoPassingRun = errors.New("no test passes at baseline")
	ErrCollection   = errors.New("collection errors")
	ErrTooFewTests  = errors.New("too few tests pass at baseline")
)

// DefaultMinTests is `frognano env add`'s --min-tests: a suite with fewer
// passing tests makes tasks that all fail the same few tests.
const DefaultMinTests = 5

// Builder registers environments.
type Builder struct {
	Runtime *sandbox.Runtime
	Store   persistence.EnvironmentStore
	Log     *slog.Logger
	// Progress, when set, is told each stage as it starts.
	Progress func(stage string)
	// BuildLog receives the output of pip, go and install commands.
	BuildLog io.Writer
}

// AddOptions override what Add detects.
type AddOptions struct {
	Name         string
	Language     string   // "python" or "go"
	TestCommand  []string // e.g. /opt/conda/envs/testbed/bin/python, or go
	TestArgs     []string // runner options
	RepoDir      string   // for image sources (default /repo; SWE-bench images use /testbed)
	SuiteTimeout time.Duration
	// MinTests is the fewest tests that must pass at baseline; 0 asks for
	// one. The CLI's default is DefaultMinTests.
	MinTests int
	// AllowCollectionErrors registers a suite some of whose test files fail
	// to collect (an sdist that leaves out a module its tests import);
	// without it such a suite is refused, saying how many and the first
	// error.
	AllowCollectionErrors bool
}

func (b *Builder) stage(s string) {
	if b.Progress != nil {
		b.Progress(s)
	}
	b.log().Info("environment: " + s)
}

func (b *Builder) log() *slog.Logger {
	if b.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return b.Log
}

func (b *Builder) buildLog() io.Writer {
	if b.BuildLog == nil {
		return io.Discard
	}
	return b.BuildLog
}

// Add builds, checks and registers an environment. On any failure nothing
// is registered and every image and sandbox it made is removed.
func (b *Builder) Add(ctx context.Context, src Source, o AddOptions) (_ *records.Environment, retErr error) {
	start := time.Now()
	name := o.Name
	if name == "" {
		name = DefaultName(src)
	}
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if _, err := b.Store.Get(ctx, name); err == nil {
		return nil, fmt.Errorf("%w: %q (remove it first with `frognano env rm %s`)", ErrExists, name, name)
	} else if !errors.Is(err, persistence.ErrNotFound) {
		return nil, err
	}
	env := &records.Environment{Name: name, SourceKind: string(src.Kind), Source: src.Ref, RepoDir: "/repo"}

	var made []string // images to remove if we fail
	defer func() {
		if retErr != nil {
			for _, ref := range made {
				b.deleteImage(context.WithoutCancel(ctx), ref)
			}
		}
	}()

	if src.Kind == Image {
		return b.addImage(ctx, env, src, o, start)
	}

	host, err := os.MkdirTemp("", "frognano-env-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(host)
	repo := filepath.Join(host, "repo")
	b.stage("fetching " + src.String())
	if err := fetch(ctx, src, repo, b.buildLog()); err != nil {
		return nil, err
	}
	lang := o.Language
	if lang == "" {
		if lang, err = detectLanguage(repo); err != nil {
			return nil, err
		}
	}
	testFiles, err := findTestFiles(repo, lang)
	if err != nil {
		return nil, err
	}
	if len(testFiles) == 0 {
		return nil, fmt.Errorf("%w in %s: a %s repository needs test files (%s)", ErrNoTests, src, lang, testFilePattern(lang))
	}
	env.Language, env.TestFiles = lang, testFiles
	spec := defaultSpec(lang, o)
	var all []string
	if err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if rel, _ := filepath.Rel(repo, p); rel != "." {
			all = append(all, filepath.ToSlash(rel))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	env.Protected = ProtectedSet(spec.Framework, testFiles, all)

	b.stage("preparing the base image")
	base, err := b.Runtime.EnsureBaseImage(ctx)
	if err != nil {
		return nil, fmt.Errorf("base image: %w", err)
	}
	tag := imageTag(src, name)
	stageRef := "frognano.local/stage/" + name + ":" + tag
	if err := b.Runtime.DeriveImage(ctx, base, stageRef, map[string]string{"/repo": repo}, nil); err != nil {
		return nil, fmt.Errorf("copy the repository into an image: %w", err)
	}
	defer b.deleteImage(context.WithoutCancel(ctx), stageRef)

	b.stage("installing dependencies")
	build, err := b.Runtime.Create(ctx, stageRef, sandbox.Options{
		Storage: sandbox.StorageSnapshot, Network: sandbox.NetworkHost, WritableRootfs: true,
		MemoryBytes: 4 << 30, Pids: 4096, CPUs: 2, DiskBytes: 8 << 30,
	})
	if err != nil {
		return nil, fmt.Errorf("build sandbox: %w", err)
	}
	defer build.Destroy(context.WithoutCancel(ctx))
	if err := b.install(ctx, build, lang); err != nil {
		return nil, err
	}
	commit, err := build.SquashGitHistory(ctx, "/repo", "frognano base of "+src.String())
	if err != nil {
		return nil, fmt.Errorf("squash git history: %w", err)
	}
	env.BaseCommit = commit
	envRef := "frognano.local/env/" + name + ":" + tag
	made = append(made, envRef)
	if err := b.Runtime.Commit(ctx, build, envRef, "frognano environment "+name, func(c *ocispec.ImageConfig) {
		c.Env = append(c.Env, spec.Env...)
		c.WorkingDir = "/repo"
	}); err != nil {
		return nil, fmt.Errorf("commit the environment image: %w", err)
	}
	build.Destroy(ctx)
	env.Image = envRef

	if err := b.baseline(ctx, env, spec, o); err != nil {
		return nil, err
	}
	env.CreatedUnixNano = time.Now().UnixNano()
	env.SetupSeconds = time.Since(start).Seconds()
	if err := b.Store.Put(ctx, env); err != nil {
		return nil, err
	}
	return env, nil
}

// addImage registers an image already in containerd: nothing is installed;
// the repository, language and test command come from the image and flags.
func (b *Builder) addImage(ctx context.Context, env *records.Environment, src Source, o AddOptions, start time.Time) (*records.Environment, error) {
	b.stage("checking image " + src.Ref)
	if ok, err := b.Runtime.Images().Exists(ctx, src.Ref); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%w: %q is not in containerd namespace %s (import it first, e.g. `ctr -n %s images import`)", ErrNoSuchImage, src.Ref, b.Runtime.Namespace(), b.Runtime.Namespace())
	}
	env.Image = src.Ref
	if o.RepoDir != "" {
		env.RepoDir = o.RepoDir
	}
	sb, err := b.Runtime.Create(ctx, src.Ref, sandbox.Options{RepoDir: env.RepoDir})
	if err != nil {
		return nil, fmt.Errorf("sandbox from %s: %w", src.Ref, err)
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	files, err := sb.ListFiles(ctx, env.RepoDir, "")
	if err != nil {
		return nil, fmt.Errorf("list %s in %s: %w", env.RepoDir, src.Ref, err)
	}
	lang := o.Language
	if lang == "" {
		lang = languageOf(files)
		if lang == "" {
			return nil, fmt.Errorf("%w in %s:%s (pass --language)", ErrNoLanguage, src.Ref, env.RepoDir)
		}
	}
	for _, f := range files {
		if isTestFile(f, lang) {
			env.TestFiles = append(env.TestFiles, f)
		}
	}
	if len(env.TestFiles) == 0 {
		return nil, fmt.Errorf("%w in %s:%s", ErrNoTests, src.Ref, env.RepoDir)
	}
	env.Language = lang
	env.Protected = ProtectedSet(defaultSpec(lang, o).Framework, env.TestFiles, files)
	if err := sb.VerifyGitHistory(ctx, env.RepoDir); err != nil {
		b.log().Warn("image repository history is not a single base commit; graders restore protected files, but the fix may be readable from history", "image", src.Ref, "err", err)
	}
	sb.Destroy(ctx)
	if err := b.baseline(ctx, env, defaultSpec(lang, o), o); err != nil {
		return nil, err
	}
	env.CreatedUnixNano = time.Now().UnixNano()
	env.SetupSeconds = time.Since(start).Seconds()
	if err := b.Store.Put(ctx, env); err != nil {
		return nil, err
	}
	return env, nil
}

// install runs the language's dependency installation in the build sandbox.
func (b *Builder) install(ctx context.Context, sb *sandbox.Sandbox, lang string) error {
	var script string
	switch lang {
	case "python":
		// Debian's pytest comes in through --system-site-packages; the
		// package is installed editable, so the tests import /repo.
		script = `set -e
python3 -m venv --system-site-packages /venv
cd /repo
/venv/bin/pip install --disable-pip-version-check --no-input -q -e '.[test,tests,testing]'
for r in requirements-test.txt requirements_test.txt test-requirements.txt test_requirements.txt requirements-tests.txt requirements-dev.txt requirements/test.txt tests/requirements.txt; do
  if [ -f "$r" ]; then /venv/bin/pip install --disable-pip-version-check --no-input -q -r "$r" || echo "frognano: could not install $r" >&2; fi
done
/venv/bin/python -c 'import pytest' 2>/dev/null || /venv/bin/pip install --disable-pip-version-check --no-input -q pytest
# coverage.py maps tests to the lines they run, for the Synthesizer's targeting.
/venv/bin/pip install --disable-pip-version-check --no-input -q 'coverage>=7'
`
	case "go":
		// Download every dependency (tests included) while the network is
		// there, then warm the build cache; episodes run offline.
		script = `set -e
cd /repo
GOFLAGS=-mod=mod go list -deps -test ./... >/dev/null
go test -count=1 -run '^$' ./... >/dev/null 2>&1 || true
`
	default:
		return fmt.Errorf("%w: %q", ErrNoLanguage, lang)
	}
	env, err := trustHostCAs(ctx, sb)
	if err != nil {
		return err
	}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Timeout: 20 * time.Minute, OutputLimit: 1 << 20, Workdir: "/repo", Env: env})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInstall, err)
	}
	b.buildLog().Write(res.Stdout)
	b.buildLog().Write(res.Stderr)
	if res.TimedOut {
		return fmt.Errorf("%w: timed out after %v", ErrInstall, res.Duration.Round(time.Second))
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%w (exit %d): %s", ErrInstall, res.ExitCode, tail(res.Stderr, 1500))
	}
	return nil
}

// trustHostCAs gives the build step the host's certificate authorities, so
// that installs reach the package registries exactly as the host does (a
// host behind a TLS-inspecting proxy trusts the proxy's CA; the image's
// stock bundle does not). The bundle goes to /tmp, which is not committed
// into the image.
func trustHostCAs(ctx context.Context, sb *sandbox.Sandbox) ([]string, error) {
	bundle := os.Getenv("SSL_CERT_FILE")
	if bundle == "" {
		bundle = "/etc/ssl/certs/ca-certificates.crt"
	}
	pem, err := os.ReadFile(bundle)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	const inSandbox = "/tmp/frognano-host-ca.crt"
	if err := sb.WriteFile(ctx, inSandbox, pem); err != nil {
		return nil, fmt.Errorf("copy the host's CA bundle into the build sandbox: %w", err)
	}
	return []string{"SSL_CERT_FILE=" + inSandbox, "PIP_CERT=" + inSandbox, "REQUESTS_CA_BUNDLE=" + inSandbox, "GIT_SSL_CAINFO=" + inSandbox}, nil
}

// baseline runs the whole suite once in an episode sandbox (no network,
// read-only root) and records per-test results. A suite that cannot run,
// hangs, passes fewer than o.MinTests tests (at least one) or, unless
// o.AllowCollectionErrors, has test files that fail to collect rejects the
// environment; each refusal says how many test files failed to collect and
// the first error, since that is the usual reason few tests pass.
func (b *Builder) baseline(ctx context.Context, env *records.Environment, spec sandbox.TestSpec, o AddOptions) error {
	b.stage("running the test suite for a baseline")
	timeout := o.SuiteTimeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	spec.Timeout = timeout
	sb, err := b.Runtime.Create(ctx, env.Image, sandbox.Options{RepoDir: env.RepoDir})
	if err != nil {
		return fmt.Errorf("episode sandbox from %s: %w", env.Image, err)
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	report, err := sb.RunTests(ctx, spec, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSuite, err)
	}
	col := testreport.Collection(report.Results)
	because := ""
	if col.Failed > 0 {
		because = " (" + col.String() + ")"
	}
	passing := report.Counts()[testreport.StatusPass]
	switch {
	case report.TimedOut:
		return fmt.Errorf("%w: it did not finish within %v", ErrSuite, timeout)
	case !report.Valid:
		return fmt.Errorf("%w: %s%s", ErrSuite, report.Problem, because)
	case passing == 0:
		return fmt.Errorf("%w (%d results, none passing)%s", ErrNoPassingRun, len(report.Results), because)
	case col.Failed > 0 && !o.AllowCollectionErrors:
		return fmt.Errorf("%w: %s. %s at baseline; fix the source, or pass --allow-collection-errors to register it anyway",
			ErrCollection, col, countTests(passing, "passes", "pass"))
	case passing < o.MinTests:
		return fmt.Errorf("%w: %s, fewer than --min-tests %d%s; lower --min-tests to register it anyway",
			ErrTooFewTests, countTests(passing, "passes", "pass"), o.MinTests, because)
	}
	if col.Failed > 0 {
		b.stage("warning: " + col.String())
		b.log().Warn("environment: registering a suite with collection errors", "env", env.Name, "failed", col.Failed, "files", col.Files, "first", col.FirstID, "error", col.FirstError)
	}
	env.Baseline = report.Proto()
	env.TestFramework = string(spec.Framework)
	env.TestCommand = spec.Command
	env.TestArgs = spec.Args
	env.TestEnv = spec.Env
	return nil
}

// ProtectedSet is an environment's protected set, stored with it at
// registration: the framework's patterns (sandbox.DefaultProtected), then
// the test files and every other file of the repository they match, by
// name, so that the record says what the grader restores.
func ProtectedSet(f testreport.Framework, testFiles, files []string) []string {
	patterns := sandbox.DefaultProtected(f)
	out := slices.Clone(patterns)
	for _, p := range slices.Concat(testFiles, files) {
		if !slices.Contains(out, p) && (slices.Contains(testFiles, p) || sandbox.MatchProtected(patterns, p)) {
			out = append(out, p)
		}
	}
	return out
}

// Protected is what the grader restores for env's tasks: the set stored
// at registration, or, for an environment registered before sets were
// stored, its framework's default patterns and its test files.
func Protected(env *records.Environment) []string {
	if len(env.GetProtected()) > 0 {
		return slices.Clone(env.GetProtected())
	}
	f := testreport.Framework(env.GetTestFramework())
	if f == "" {
		f = defaultSpec(env.GetLanguage(), AddOptions{}).Framework
	}
	return ProtectedSet(f, env.GetTestFiles(), nil)
}

// countTests says "1 test passes" or "3 tests pass".
func countTests(n int, one, many string) string {
	if n == 1 {
		return "1 test " + one
	}
	return fmt.Sprintf("%d tests %s", n, many)
}

// CollectionErrors summarizes the test files of env's suite that failed to
// collect at baseline.
func CollectionErrors(env *records.Environment) testreport.CollectionSummary {
	var results []testreport.Result
	for _, r := range env.GetBaseline().GetResults() {
		res := testreport.Result{ID: r.GetName(), Message: r.GetMessage(), Collection: r.GetCollection()}
		if r.GetStatus() == records.TestStatus_TEST_STATUS_ERROR {
			res.Status = testreport.StatusError
		}
		results = append(results, res)
	}
	return testreport.Collection(results)
}

// Spec is how an environment's tests are run.
func Spec(env *records.Environment) sandbox.TestSpec {
	return sandbox.TestSpec{
		Framework: testreport.Framework(env.TestFramework),
		Dir:       env.RepoDir,
		Command:   env.TestCommand,
		Args:      env.TestArgs,
		Env:       env.TestEnv,
	}
}

func defaultSpec(lang string, o AddOptions) sandbox.TestSpec {
	var s sandbox.TestSpec
	switch lang {
	case "python":
		s = sandbox.TestSpec{Framework: testreport.Pytest, Command: []string{"/venv/bin/python"},
			Args: []string{"--continue-on-collection-errors", "-q"},
			Env:  []string{"PATH=/venv/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE=1"}}
	case "go":
		s = sandbox.TestSpec{Framework: testreport.GoTest, Command: []string{"go"},
			Env: []string{"GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local", "GOSUMDB=off"}}
	}
	if len(o.TestCommand) > 0 {
		s.Command = o.TestCommand
	}
	if o.TestArgs != nil {
		s.Args = o.TestArgs
	}
	return s
}

// Remove unregisters an environment and deletes its image (unless the image
// was the user's own).
func (b *Builder) Remove(ctx context.Context, name string) error {
	env, err := b.Store.Get(ctx, name)
	if err != nil {
		return err
	}
	if err := b.Store.Delete(ctx, name); err != nil {
		return err
	}
	if env.SourceKind != string(Image) {
		b.deleteImage(ctx, env.Image)
	}
	return nil
}

func (b *Builder) deleteImage(ctx context.Context, ref string) {
	ctx = namespaces.WithNamespace(ctx, b.Runtime.Namespace())
	err := b.Runtime.Client().ImageService().Delete(ctx, ref, images.SynchronousDelete())
	if err != nil && !errdefs.IsNotFound(err) {
		b.log().Warn("could not delete image", "image", ref, "err", err)
	}
}

func imageTag(src Source, name string) string {
	sum := sha256.Sum256([]byte(src.String() + "\x00" + name + "\x00" + time.Now().String()))
	return fmt.Sprintf("%x", sum[:6])
}

func tail(b []byte, n int) string {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func detectLanguage(repo string) (string, error) {
	var names []string
	entries, err := os.ReadDir(repo)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if lang := languageOf(names); lang != "" {
		return lang, nil
	}
	return "", fmt.Errorf("%w in %s: no go.mod, pyproject.toml, setup.py or setup.cfg at its root", ErrNoLanguage, repo)
}

// languageOf looks at a repository's top-level file names.
func languageOf(paths []string) string {
	has := func(n string) bool { return slices.Contains(paths, n) }
	switch {
	case has("go.mod"):
		return "go"
	case has("pyproject.toml"), has("setup.py"), has("setup.cfg"):
		return "python"
	}
	return ""
}

func testFilePattern(lang string) string {
	if lang == "go" {
		return "*_test.go"
	}
	return "test_*.py, *_test.py or conftest.py"
}

func isTestFile(rel, lang string) bool {
	base := filepath.Base(rel)
	switch lang {
	case "go":
		return strings.HasSuffix(base, "_test.go")
	case "python":
		return strings.HasSuffix(base, ".py") && (strings.HasPrefix(base, "test_") || strings.HasSuffix(base, "_test.py") || base == "conftest.py")
	}
	return false
}

func findTestFiles(repo, lang string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == ".tox") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(repo, p)
		if !d.IsDir() && isTestFile(rel, lang) {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	return out, err
}
