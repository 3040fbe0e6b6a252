package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/frognano/frognano/actors/sandbox/testreport"
)

// The protected set: everything in a repository that configures, extends
// or is the test run. The grader puts all of it back to what the image
// holds before the tests run (PrepareForGrading): files the agent changed
// are restored, files it deleted come back, and files it added that match
// are removed. An entry is either a path relative to the repository (a
// file, or a directory restored as a whole tree) or a pattern over
// slash-separated relative paths in which "*" matches within one segment
// and a "**" segment matches any number of segments ("**/conftest.py" is
// every conftest.py; "**/tests/**" is every tests directory and what it
// holds).

// PythonProtected are the patterns every pytest environment protects: test
// modules and directories, every pytest configuration file, interpreter
// start-up hooks, and top-level modules that would shadow pytest or its
// dependencies on sys.path.
var PythonProtected = []string{
	"**/test_*.py", "**/*_test.py", "**/tests/**", "**/test/**",
	"**/conftest.py", "**/pytest.ini", "**/.pytest.ini", "**/tox.ini", "**/setup.cfg", "**/pyproject.toml",
	"**/sitecustomize.py", "**/usercustomize.py", "**/*.pth",
	"**/__pycache__/**", "**/*.pyc",
	"pytest.py", "_pytest/**", "pluggy.py", "pluggy/**", "py.py", "iniconfig/**", "packaging/**",
}

// GoProtected are the patterns every go test environment protects: test
// files (and with them TestMain), test data, module and workspace files
// (replace directives, toolchain lines) and a vendor tree.
var GoProtected = []string{
	"**/*_test.go", "**/testdata/**",
	"**/go.mod", "**/go.sum", "go.work", "go.work.sum", "vendor/**",
}

// DefaultProtected is the protected set of a framework's environments,
// for environments registered before the set was stored with them.
func DefaultProtected(f testreport.Framework) []string {
	switch f {
	case testreport.Pytest:
		return slices.Clone(PythonProtected)
	case testreport.GoTest:
		return slices.Clone(GoProtected)
	}
	return nil
}

// IsPattern reports whether a protected entry is a pattern rather than a
// path.
func IsPattern(entry string) bool {
	return strings.ContainsAny(entry, "*?[")
}

// MatchProtected reports whether the relative path rel is in the protected
// set: equal to or below a path entry, or matched by a pattern entry.
func MatchProtected(protected []string, rel string) bool {
	rel = strings.Trim(path.Clean("/"+rel), "/")
	for _, e := range protected {
		if IsPattern(e) {
			if ok, err := matchSegments(strings.Split(strings.Trim(e, "/"), "/"), strings.Split(rel, "/")); ok && err == nil {
				return true
			}
			continue
		}
		e = strings.Trim(path.Clean("/"+e), "/")
		if rel == e || strings.HasPrefix(rel, e+"/") {
			return true
		}
	}
	return false
}

// ErrTampered marks a grading preparation that failed because of what the
// agent did to the repository (a protected path behind a symlink it
// planted): the episode grades 0, it is not an infrastructure failure.
var ErrTampered = errors.New("the repository was tampered with")

// protectedPaths lists what PrepareForGrading restores: the path entries,
// and every file, link or directory matching a pattern entry in the
// sandbox's repository or in the image's, less except (files the task's
// bug patch changes: they are source, and restoring them would undo the
// bug). Paths below another listed directory are left out. The sandbox's
// listing comes from find run after KillAll, so nothing of the agent's
// runs while it is taken; the image's is read on the host.
func (s *Sandbox) protectedPaths(ctx context.Context, protected, except []string) ([]string, error) {
	set := map[string]bool{}
	var patterns []string
	for _, e := range protected {
		if IsPattern(e) {
			patterns = append(patterns, e)
			continue
		}
		set[strings.Trim(path.Clean("/"+e), "/")] = true
	}
	if len(patterns) > 0 {
		res, err := s.Exec(ctx, ExecRequest{
			Argv:        []string{"find", ".", "-mindepth", "1", "(", "-path", "./.git", "-prune", ")", "-o", "-printf", `%y%p\0`},
			Workdir:     s.opts.RepoDir,
			Timeout:     10 * fileOpTimeout,
			OutputLimit: 64 << 20,
		})
		if err != nil {
			return nil, err
		}
		if res.ExitCode != 0 || res.TimedOut || res.Truncated {
			return nil, fmt.Errorf("list %s for grading: exit %d: %s", s.opts.RepoDir, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		for _, p := range bytes.Split(res.Stdout, []byte{0}) {
			if len(p) < 2 {
				continue
			}
			rel := strings.TrimPrefix(string(p[1:]), "./")
			// Every symlink is put back as the image has it (or removed):
			// a link to a directory outside the repository would bring
			// test configuration the patterns never see (pytest follows
			// directory links when it collects).
			if rel != "" && (p[0] == 'l' || MatchProtected(patterns, rel)) {
				set[rel] = true
			}
		}
		err = s.withPristineRoot(ctx, func(root string) error {
			repo, err := securejoin.SecureJoin(root, s.opts.RepoDir)
			if err != nil {
				return err
			}
			return filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					if errors.Is(err, fs.ErrNotExist) {
						return nil
					}
					return err
				}
				rel, _ := filepath.Rel(repo, p)
				rel = filepath.ToSlash(rel)
				if rel == "." {
					return nil
				}
				if rel == ".git" {
					return filepath.SkipDir
				}
				if MatchProtected(patterns, rel) {
					set[rel] = true
				}
				return nil
			})
		})
		if err != nil {
			return nil, fmt.Errorf("list the protected files of %s: %w", s.image, err)
		}
	}
	for _, e := range except {
		delete(set, strings.Trim(path.Clean("/"+e), "/"))
	}
	paths := make([]string, 0, len(set))
	for p := range set {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	// Drop what a listed directory covers ("tests" covers "tests/x.py"),
	// unless an exception lies below that directory: then its files are
	// restored one by one.
	var out []string
	for _, p := range paths {
		covered := false
		for _, q := range out {
			if strings.HasPrefix(p, q+"/") {
				covered = true
				break
			}
		}
		if covered {
			continue
		}
		if slices.ContainsFunc(except, func(e string) bool { return strings.HasPrefix(strings.Trim(path.Clean("/"+e), "/"), p+"/") }) {
			continue // a directory holding an exception: its other entries are listed themselves
		}
		out = append(out, p)
	}
	return out, nil
}
