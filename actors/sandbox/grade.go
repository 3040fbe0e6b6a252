package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/containerd/leases"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/errdefs"
	securejoin "github.com/cyphar/filepath-securejoin"
)

// Helpers for the grader. The reward must come only from a report of tests
// the agent could not change, run in a sandbox nothing of the agent's still
// runs in. PrepareForGrading does both; the report then comes from RunTests
// and the reward from testreport.Grade.

// PrepareForGrading kills every process the agent left in the sandbox, so
// no daemon can rewrite files or reports during the test run, and puts the
// protected set (paths and patterns, see MatchProtected: test files,
// conftest.py, pytest.ini, go.mod, ...) back to what the image holds:
// changed files are restored, deleted ones come back, added ones that
// match a pattern are removed, and every symlink is put back as the image
// has it. except names files never restored (those the task's bug patch
// changes). An error wrapping ErrTampered means the agent made the
// repository impossible to restore safely: grade it 0.
func (s *Sandbox) PrepareForGrading(ctx context.Context, protected []string, except ...string) error {
	if !s.Alive() {
		return fmt.Errorf("prepare %s for grading: %w", s.id, ErrSandboxDead)
	}
	s.KillAll(ctx)
	paths, err := s.protectedPaths(ctx, protected, except)
	if err != nil {
		return err
	}
	return s.RestoreFromImage(ctx, paths)
}

// maxRestoreBytes bounds what RestoreFromImage copies in one call.
const maxRestoreBytes = 256 << 20

// RestoreFromImage puts the given paths (files or whole directories,
// relative to RepoDir or absolute below it) back to what the sandbox's image
// holds: the agent's edits are replaced, files it added inside a restored
// directory are deleted, and a path that does not exist in the image is
// deleted. The pristine copy is read on the host from a read-only view of the
// image's layers, never from the sandbox (whose git history the agent could
// have rewritten). A path whose parent the agent replaced with a symlink is
// refused rather than followed.
func (s *Sandbox) RestoreFromImage(ctx context.Context, paths []string) error {
	if len(paths) == 0 {
		return nil
	}
	ctx = s.rt.ctx(ctx)
	abs := make([]string, 0, len(paths))
	for _, p := range paths {
		a, err := s.resolve(p)
		if err != nil {
			return err
		}
		if a == s.opts.RepoDir || !strings.HasPrefix(a, s.opts.RepoDir+"/") {
			return fmt.Errorf("restore %s: only paths inside %s can be restored", p, s.opts.RepoDir)
		}
		abs = append(abs, a)
	}
	var archive bytes.Buffer
	if err := s.withPristineRoot(ctx, func(root string) error {
		return tarPaths(&archive, root, abs)
	}); err != nil {
		return fmt.Errorf("read pristine files from %s: %w", s.image, err)
	}
	// Refuse parents that are not what they claim to be (a symlink planted
	// by the agent), then delete and unpack.
	script := `set -e
for p in "$@"; do
	d=$(dirname -- "$p")
	r=$(realpath -m -- "$d")
	if [ "$r" != "$d" ]; then echo "refusing to restore $p: $d resolves to $r" >&2; exit 7; fi
done
rm -rf -- "$@"
exec tar -xpf - -C /`
	res, err := s.Exec(ctx, ExecRequest{
		Argv:    append([]string{"/bin/sh", "-c", script, "sh"}, abs...),
		Stdin:   &archive,
		Timeout: fileOpTimeout,
		Workdir: "/",
	})
	if err != nil {
		return err
	}
	if res.ExitCode == 7 && !res.TimedOut {
		return fmt.Errorf("restore protected paths in %s: %w: %s", s.id, ErrTampered, strings.TrimSpace(string(res.Stderr)))
	}
	if res.ExitCode != 0 || res.TimedOut {
		return fmt.Errorf("restore protected paths in %s: exit %d: %s", s.id, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

// withPristineRoot mounts a read-only view of the sandbox's image on the host
// and calls f with its root. Tmpfs sandboxes already hold such a view; a
// snapshot sandbox gets a temporary one under its lease.
func (s *Sandbox) withPristineRoot(ctx context.Context, f func(root string) error) error {
	sn := s.rt.client.SnapshotService(s.rt.cfg.Snapshotter)
	key := s.id
	if s.opts.Storage != StorageTmpfs {
		key = s.id + "-pristine-" + randomHex(4)
		if _, err := sn.View(withLease(ctx, s.id), key, s.chainID); err != nil {
			return fmt.Errorf("view of %s: %w", s.image, err)
		}
		defer func() {
			if err := sn.Remove(context.WithoutCancel(ctx), key); err != nil && !errdefs.IsNotFound(err) {
				s.rt.cfg.Logger.Warn("remove pristine view", "key", key, "err", err)
			}
		}()
	}
	mounts, err := sn.Mounts(ctx, key)
	if err != nil {
		return fmt.Errorf("mounts of view %s: %w", key, err)
	}
	return mount.WithReadonlyTempMount(ctx, mounts, f)
}

// tarPaths writes the given absolute paths, as found under root, to a tar
// stream with names relative to "/". Symlinks are stored, not followed; a
// path missing under root is left out (the sandbox then deletes it).
func tarPaths(w *bytes.Buffer, root string, paths []string) error {
	tw := tar.NewWriter(w)
	for _, p := range paths {
		// SecureJoin resolves symlinks inside the image relative to root, so
		// an image symlink cannot lead the host outside the view.
		dir, err := securejoin.SecureJoin(root, path.Dir(p))
		if err != nil {
			return err
		}
		start := filepath.Join(dir, path.Base(p))
		if _, err := os.Lstat(start); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		err = filepath.WalkDir(start, func(hostPath string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if d.Type()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(hostPath); err != nil {
					return err
				}
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(start, hostPath)
			if err != nil {
				return err
			}
			hdr.Name = strings.TrimPrefix(path.Join(p, filepath.ToSlash(rel)), "/")
			if d.IsDir() {
				hdr.Name += "/"
			}
			hdr.Uname, hdr.Gname = "", ""
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if !info.Mode().IsRegular() {
				return nil
			}
			if w.Len()+int(info.Size()) > maxRestoreBytes {
				return fmt.Errorf("protected paths hold more than %d bytes", maxRestoreBytes)
			}
			b, err := os.ReadFile(hostPath)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		})
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// SquashGitHistory replaces the repository's history at dir (default
// RepoDir) with a single commit of its current tree, and returns that
// commit's hash. Environment images are built with it, so that no later
// commit — the fix of a mined bug, say — is left in the object database for
// the agent to find. The .git directory is rebuilt from scratch: no reflog,
// stash, remote, tag or dangling object survives.
func (s *Sandbox) SquashGitHistory(ctx context.Context, dir, message string) (string, error) {
	if dir == "" {
		dir = s.opts.RepoDir
	}
	script := `set -e
cd "$1"
rm -rf .git
git init -q
git add -A
git commit -q --allow-empty --no-verify -m "$2"
git rev-parse HEAD`
	res, err := s.Exec(ctx, ExecRequest{
		Argv:    []string{"/bin/sh", "-c", script, "sh", dir, message},
		Timeout: 10 * fileOpTimeout,
		Workdir: "/",
		Env: []string{
			"GIT_AUTHOR_NAME=frognano", "GIT_AUTHOR_EMAIL=frognano@frognano.local", "GIT_AUTHOR_DATE=@0 +0000",
			"GIT_COMMITTER_NAME=frognano", "GIT_COMMITTER_EMAIL=frognano@frognano.local", "GIT_COMMITTER_DATE=@0 +0000",
		},
	})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 || res.TimedOut {
		return "", fmt.Errorf("squash git history in %s: exit %d: %s", dir, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

// VerifyGitHistory checks that the repository at dir holds exactly one
// commit object — reachable or not, loose or packed — and borrows none from
// elsewhere (alternates, submodule stores). Build pipelines call it before
// committing an environment image.
func (s *Sandbox) VerifyGitHistory(ctx context.Context, dir string) error {
	if dir == "" {
		dir = s.opts.RepoDir
	}
	script := `set -e
cd "$1"
g=$(git rev-parse --git-dir)
if [ -e "$g/objects/info/alternates" ]; then echo "alternates borrow objects from another repository" >&2; exit 3; fi
if [ -d "$g/modules" ]; then echo "submodule object stores under $g/modules" >&2; exit 3; fi
git cat-file --batch-all-objects --batch-check='%(objecttype)'`
	res, err := s.Exec(ctx, ExecRequest{
		Argv:        []string{"/bin/sh", "-c", script, "sh", dir},
		Timeout:     10 * fileOpTimeout,
		OutputLimit: 256 << 20,
		Workdir:     "/",
	})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.TimedOut || res.Truncated {
		return fmt.Errorf("git history of %s: exit %d: %s", dir, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	commits := 0
	for _, t := range strings.Fields(string(res.Stdout)) {
		if t == "commit" {
			commits++
		}
	}
	if commits != 1 {
		return fmt.Errorf("git history of %s holds %s commits, want exactly 1 (run SquashGitHistory)", dir, strconv.Itoa(commits))
	}
	return nil
}

// withLease attaches the sandbox's lease, so that what is created under it
// goes when the sandbox goes (or when Sweep finds it).
func withLease(ctx context.Context, id string) context.Context {
	return leases.WithLease(ctx, id)
}
