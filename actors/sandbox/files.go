package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// File operations run inside the sandbox as ordinary commands, with the
// sandbox's privileges, seccomp filter and mount namespace. Doing them from
// the host through the container's root would be faster, but the host is
// root with every capability, and a path the agent chose (or a symlink it
// planted) would then be resolved with the host's rights. The commands need
// only POSIX sh, cat, find and mkdir from the image (and git for patches).

// Errors of the file operations, for errors.Is.
var (
	ErrIsDirectory = errors.New("is a directory")
	ErrTooLarge    = errors.New("file too large")
)

// fileOpTimeout bounds one file operation; they are small by construction.
const fileOpTimeout = 30 * time.Second

// resolve makes p absolute, relative paths being relative to RepoDir.
func (s *Sandbox) resolve(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	if !path.IsAbs(p) {
		p = path.Join(s.opts.RepoDir, p)
	}
	return path.Clean(p), nil
}

// shell runs a fixed script with the user's strings as positional
// parameters, never spliced into the script text.
func (s *Sandbox) shell(ctx context.Context, script string, stdin []byte, limit int64, args ...string) (ExecResult, error) {
	req := ExecRequest{
		Argv:        append([]string{"/bin/sh", "-c", script, "sh"}, args...),
		Timeout:     fileOpTimeout,
		OutputLimit: limit,
		Workdir:     "/",
	}
	if stdin != nil {
		req.Stdin = bytes.NewReader(stdin)
	}
	return s.Exec(ctx, req)
}

// ReadFile returns a file's content, at most MaxFileBytes.
func (s *Sandbox) ReadFile(ctx context.Context, p string) ([]byte, error) {
	p, err := s.resolve(p)
	if err != nil {
		return nil, err
	}
	res, err := s.shell(ctx, `[ -e "$1" ] || exit 3; [ -d "$1" ] && exit 4; exec cat -- "$1"`, nil, MaxFileBytes, p)
	if err != nil {
		return nil, err
	}
	if err := fileError("read", p, res); err != nil {
		return nil, err
	}
	if res.Truncated {
		return nil, &fs.PathError{Op: "read", Path: p, Err: fmt.Errorf("%w (limit %d bytes)", ErrTooLarge, MaxFileBytes)}
	}
	return res.Stdout, nil
}

// WriteFile replaces a file's content, creating it and its parent
// directories if needed; an existing file keeps its mode.
func (s *Sandbox) WriteFile(ctx context.Context, p string, content []byte) error {
	p, err := s.resolve(p)
	if err != nil {
		return err
	}
	if len(content) > MaxFileBytes {
		return &fs.PathError{Op: "write", Path: p, Err: fmt.Errorf("%w (%d bytes, limit %d)", ErrTooLarge, len(content), MaxFileBytes)}
	}
	res, err := s.shell(ctx, `[ -d "$1" ] && exit 4; d=$(dirname -- "$1") && mkdir -p -- "$d" && exec cat > "$1"`, content, 64<<10, p)
	if err != nil {
		return err
	}
	return fileError("write", p, res)
}

// ListFiles lists the files (and symlinks) under dir whose path relative to
// dir matches glob, skipping .git directories. In glob, * matches within a
// path segment and ** any number of segments; a glob without a slash matches
// base names at any depth ("*.py"). An empty glob matches everything. Paths
// are relative to dir, sorted.
func (s *Sandbox) ListFiles(ctx context.Context, dir, glob string) ([]string, error) {
	dir, err := s.resolve(dir)
	if err != nil {
		return nil, err
	}
	if _, err := matchGlob(glob, "x"); err != nil {
		return nil, err
	}
	res, err := s.shell(ctx, `[ -e "$1" ] || exit 3; cd "$1" || exit 4; exec find . -name .git -prune -o \( -type f -o -type l \) -print0`, nil, 32<<20, dir)
	if err != nil {
		return nil, err
	}
	if err := fileError("list", dir, res); err != nil {
		return nil, err
	}
	if res.Truncated {
		return nil, &fs.PathError{Op: "list", Path: dir, Err: fmt.Errorf("%w: more than 32 MiB of names", ErrTooLarge)}
	}
	var out []string
	for _, f := range bytes.Split(res.Stdout, []byte{0}) {
		rel := strings.TrimPrefix(string(f), "./")
		if rel == "" || rel == "." {
			continue
		}
		if ok, _ := matchGlob(glob, rel); ok {
			out = append(out, rel)
		}
	}
	slices.Sort(out)
	return out, nil
}

// PatchError is a patch that did not apply; Output is git's explanation,
// which the agent gets to read.
type PatchError struct {
	ExitCode int
	Output   string
}

func (e *PatchError) Error() string {
	return fmt.Sprintf("patch does not apply (git apply exit %d): %s", e.ExitCode, strings.TrimSpace(e.Output))
}

// ApplyPatch applies a unified diff (as git diff writes it, paths relative
// to RepoDir) with git apply: all hunks or none.
func (s *Sandbox) ApplyPatch(ctx context.Context, patch string) error {
	if strings.TrimSpace(patch) == "" {
		return &PatchError{ExitCode: -1, Output: "empty patch"}
	}
	res, err := s.Exec(ctx, ExecRequest{
		Argv:        []string{"git", "apply", "--whitespace=nowarn", "-"},
		Stdin:       strings.NewReader(patch),
		Timeout:     fileOpTimeout,
		OutputLimit: 64 << 10,
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.TimedOut {
		return &PatchError{ExitCode: res.ExitCode, Output: string(res.Stderr) + string(res.Stdout)}
	}
	return nil
}

// fileError maps the file scripts' exit codes to errors. Every failure of
// the operation itself is an *fs.PathError; other errors mean the sandbox
// broke.
func fileError(op, p string, res ExecResult) error {
	var err error
	switch {
	case res.TimedOut:
		err = errors.New("timed out")
	case res.ExitCode == 0:
		return nil
	case res.ExitCode == 3:
		err = fs.ErrNotExist
	case res.ExitCode == 4:
		err = ErrIsDirectory
	default:
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// matchGlob matches a slash-separated path against a glob with ** support.
func matchGlob(glob, p string) (bool, error) {
	if glob == "" {
		return true, nil
	}
	if !strings.Contains(glob, "/") {
		return path.Match(glob, path.Base(p))
	}
	return matchSegments(strings.Split(strings.Trim(glob, "/"), "/"), strings.Split(p, "/"))
}

func matchSegments(glob, p []string) (bool, error) {
	for len(glob) > 0 {
		if glob[0] == "**" {
			for i := 0; i <= len(p); i++ {
				if ok, err := matchSegments(glob[1:], p[i:]); ok || err != nil {
					return ok, err
				}
			}
			return false, nil
		}
		if len(p) == 0 {
			return false, nil
		}
		ok, err := path.Match(glob[0], p[0])
		if !ok || err != nil {
			return false, err
		}
		glob, p = glob[1:], p[1:]
	}
	return len(p) == 0, nil
}
