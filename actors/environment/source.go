// Package environment turns a real repository — a PyPI sdist, a Go module, a
// local directory or git repository, or an existing OCI image — into a
// frognano environment: a containerd image with the repository at a known
// path, its dependencies installed, its git history squashed to one base
// commit, its test command known and a baseline of per-test results recorded.
// Only an environment that passed all of that is registered.
package environment

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/frognano/frognano/runtime/config"
)

// Kind is where an environment's repository comes from.
type Kind string

const (
	PyPI  Kind = "pypi"  // NAME==VERSION, an sdist that carries its tests
	GoMod Kind = "gomod" // module@version, from the Go module proxy
	Local Kind = "local" // a directory or git repository on this machine
	Image Kind = "image" // an image already in containerd (e.g. a SWE-bench image)
)

// Source names a repository.
type Source struct {
	Kind Kind
	Ref  string
}

func (s Source) String() string { return string(s.Kind) + ":" + s.Ref }

var (
	pypiRef = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$`)
	goRef   = regexp.MustCompile(`^[a-z0-9.-]+\.[a-z]{2,}(/[A-Za-z0-9._~-]+)+@v[0-9][A-Za-z0-9.+-]*$`)
)

// ParseSource reads a source argument: an explicit "pypi:", "go:", "local:"
// or "image:" prefix, or else the shape of the argument (NAME==VERSION,
// module@vX.Y.Z, an existing path).
func ParseSource(arg string) (Source, error) {
	if len(arg) > MaxSourceLen {
		return Source{}, fmt.Errorf("source %q is too long: at most %d bytes", config.Clip(arg, 80), MaxSourceLen)
	}
	if k, ref, ok := strings.Cut(arg, ":"); ok {
		switch k {
		case "pypi":
			return checkSource(Source{PyPI, ref})
		case "go", "gomod":
			return checkSource(Source{GoMod, ref})
		case "local", "dir", "git":
			return checkSource(Source{Local, ref})
		case "image", "oci":
			return checkSource(Source{Image, ref})
		}
	}
	switch {
	case pypiRef.MatchString(arg):
		return Source{PyPI, arg}, nil
	case goRef.MatchString(arg):
		return Source{GoMod, arg}, nil
	}
	if _, err := os.Stat(arg); err == nil {
		return checkSource(Source{Local, arg})
	}
	return Source{}, fmt.Errorf("cannot tell what %q is: use NAME==VERSION (PyPI sdist), module@vX.Y.Z (Go module), a directory, or image:REF", arg)
}

func checkSource(s Source) (Source, error) {
	switch s.Kind {
	case PyPI:
		if !pypiRef.MatchString(s.Ref) {
			return s, fmt.Errorf("PyPI source %q: want NAME==VERSION", s.Ref)
		}
	case GoMod:
		if !goRef.MatchString(s.Ref) {
			return s, fmt.Errorf("Go module source %q: want module/path@vX.Y.Z", s.Ref)
		}
	case Local:
		abs, err := filepath.Abs(s.Ref)
		if err != nil {
			return s, err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return s, fmt.Errorf("local source: %w", err)
		}
		if !st.IsDir() {
			return s, fmt.Errorf("local source %s is not a directory", abs)
		}
		s.Ref = abs
	case Image:
		if s.Ref == "" {
			return s, errors.New("image source: empty reference")
		}
	}
	return s, nil
}

// MaxSourceLen bounds a source argument: no registry name, module path or
// directory comes near it, and a huge one is not echoed back whole.
const MaxSourceLen = 4096

// DefaultName derives an environment name from its source.
func DefaultName(s Source) string {
	var name string
	switch s.Kind {
	case PyPI:
		n, v, _ := strings.Cut(s.Ref, "==")
		name = strings.ToLower(n) + "-" + v
	case GoMod:
		m, v, _ := strings.Cut(s.Ref, "@")
		name = moduleBaseName(m, v) + "-" + v
	case Local:
		name = filepath.Base(s.Ref)
	case Image:
		ref := s.Ref
		if i := strings.LastIndex(ref, "/"); i >= 0 {
			ref = ref[i+1:]
		}
		name = ref
	}
	return sanitizeName(name)
}

var (
	majorSuffix = regexp.MustCompile(`^v[0-9]+$`)              // github.com/o/name/v2
	gopkgSuffix = regexp.MustCompile(`\.v[0-9]+(-unstable)?$`) // gopkg.in/yaml.v2
	nameBad     = regexp.MustCompile(`[^a-z0-9._-]+`)
)

// moduleBaseName is the last element of a module path that names the
// module rather than its major version: "name" for github.com/o/name/v2 at
// v2.x.y, "yaml" for gopkg.in/yaml.v2 (the go tool's two forms of
// major-version suffix, the second only on gopkg.in). A last element "v2"
// at another major version is the module's real name and stays.
func moduleBaseName(path, version string) string {
	elems := strings.Split(path, "/")
	last := elems[len(elems)-1]
	if major, _, _ := strings.Cut(version, "."); len(elems) > 1 && majorSuffix.MatchString(last) && last == major {
		last = elems[len(elems)-2]
	}
	if elems[0] == "gopkg.in" {
		last = gopkgSuffix.ReplaceAllString(last, "")
	}
	return last
}

func sanitizeName(s string) string {
	s = nameBad.ReplaceAllString(strings.ToLower(s), "-")
	return strings.Trim(s, "-.")
}

// ValidName reports whether s can name an environment (it becomes part of an
// image reference).
func ValidName(s string) error {
	if s == "" || s != sanitizeName(s) || len(s) > 100 {
		return fmt.Errorf("environment name %q: use lower-case letters, digits, '.', '_' and '-' (at most 100)", s)
	}
	return nil
}

// fetch puts the source's repository into dir on the host, using the
// ordinary clients (pip, go) for registry sources.
func fetch(ctx context.Context, s Source, dir string, logw io.Writer) error {
	switch s.Kind {
	case PyPI:
		return fetchSdist(ctx, s.Ref, dir, logw)
	case GoMod:
		return fetchGoModule(ctx, s.Ref, dir, logw)
	case Local:
		return copyTree(s.Ref, dir, func(rel string, d fs.DirEntry) bool {
			return d.IsDir() && (d.Name() == ".git" || d.Name() == "__pycache__" || d.Name() == ".venv")
		})
	}
	return fmt.Errorf("fetch: unsupported source kind %q", s.Kind)
}

func fetchSdist(ctx context.Context, ref, dir string, logw io.Writer) error {
	dl, err := os.MkdirTemp("", "frognano-sdist-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dl)
	cmd := exec.CommandContext(ctx, "python3", "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps", "--dest", dl, ref)
	var tail tailBuffer
	cmd.Stdout, cmd.Stderr = logw, io.MultiWriter(logw, &tail)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pip download %s: %w: %s", ref, err, tail.reason())
	}
	entries, err := os.ReadDir(dl)
	if err != nil || len(entries) != 1 {
		return fmt.Errorf("pip download %s: expected one sdist, found %d files", ref, len(entries))
	}
	archive := filepath.Join(dl, entries[0].Name())
	if err := extract(archive, dir); err != nil {
		return fmt.Errorf("unpack %s: %w", entries[0].Name(), err)
	}
	return nil
}

func fetchGoModule(ctx context.Context, ref, dir string, logw io.Writer) error {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", ref)
	cmd.Stderr = logw
	cmd.Dir = os.TempDir() // outside any module
	out, err := cmd.Output()
	var info struct{ Dir, GoMod, Error string }
	_ = json.Unmarshal(out, &info)
	if info.Error != "" {
		return fmt.Errorf("go mod download %s: %s", ref, info.Error)
	}
	if err != nil {
		return fmt.Errorf("go mod download %s: %w", ref, err)
	}
	if info.Dir == "" {
		return fmt.Errorf("go mod download %s: no directory in its answer", ref)
	}
	if err := copyTree(info.Dir, dir, nil); err != nil {
		return err
	}
	// A module published before modules has no go.mod of its own; the proxy
	// serves one it synthesized ("module <path>"), and the go tool builds
	// the module with that. So does the repository we make of it.
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if info.GoMod == "" {
		return fmt.Errorf("go mod download %s: the module has no go.mod and the answer names no synthesized one", ref)
	}
	mod, err := os.Open(info.GoMod)
	if err != nil {
		return fmt.Errorf("the go.mod the proxy synthesized for %s: %w", ref, err)
	}
	defer mod.Close()
	fmt.Fprintf(logw, "frognano: %s has no go.mod; using the one the module proxy serves for it\n", ref)
	return writeOne(dir, "go.mod", 0o644, false, mod)
}

// extract unpacks a .tar.gz or .zip sdist into dir, dropping the single
// top-level directory sdists have, and refusing paths that escape dir.
func extract(archive, dir string) error {
	var files []archivedFile
	switch {
	case strings.HasSuffix(archive, ".zip"):
		zr, err := zip.OpenReader(archive)
		if err != nil {
			return err
		}
		defer zr.Close()
		for _, f := range zr.File {
			f := f
			files = append(files, archivedFile{f.Name, f.Mode(), func() (io.ReadCloser, error) { return f.Open() }})
		}
		return writeArchived(files, dir)
	case strings.HasSuffix(archive, ".tar.gz") || strings.HasSuffix(archive, ".tgz"):
		fh, err := os.Open(archive)
		if err != nil {
			return err
		}
		defer fh.Close()
		gz, err := gzip.NewReader(fh)
		if err != nil {
			return err
		}
		tr := tar.NewReader(gz)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeDir {
				continue
			}
			if err := writeOne(dir, stripTop(h.Name), h.FileInfo().Mode(), h.Typeflag == tar.TypeDir, tr); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown archive type %s", filepath.Base(archive))
}

type archivedFile struct {
	name string
	mode fs.FileMode
	open func() (io.ReadCloser, error)
}

func writeArchived(files []archivedFile, dir string) error {
	for _, f := range files {
		rc, err := f.open()
		if err != nil {
			return err
		}
		err = writeOne(dir, stripTop(f.name), f.mode, f.mode.IsDir(), rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func stripTop(name string) string {
	name = strings.TrimPrefix(filepath.ToSlash(name), "./")
	if i := strings.Index(name, "/"); i >= 0 {
		return name[i+1:]
	}
	return ""
}

func writeOne(dir, rel string, mode fs.FileMode, isDir bool, r io.Reader) error {
	if rel == "" {
		return nil
	}
	dst := filepath.Join(dir, filepath.FromSlash(rel))
	if !strings.HasPrefix(dst, filepath.Clean(dir)+string(os.PathSeparator)) {
		return fmt.Errorf("archive entry %q escapes the destination", rel)
	}
	if isDir {
		return os.MkdirAll(dst, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm()|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// copyTree copies regular files and directories from src to dst (made
// writable: module cache copies are read-only), skipping what skip says.
func copyTree(src, dst string, skip func(rel string, d fs.DirEntry) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if skip != nil && rel != "." && skip(rel, d) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			return writeOne(dst, filepath.ToSlash(rel), info.Mode(), false, in)
		}
		return nil // symlinks and devices are not part of a source tree we take
	})
}

// tailBuffer keeps the last few KiB written to it: a tool's stderr, whose
// own words say why it failed (the log it also goes to may be discarded,
// as it is in embedded mode).
type tailBuffer struct{ b []byte }

const tailMax = 8 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

// reason is what the tool said: its "ERROR:" lines if it wrote any (pip's
// way), else its last non-empty lines; at most 600 bytes.
func (t *tailBuffer) reason() string {
	var errs, all []string
	for _, l := range strings.Split(string(t.b), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		all = append(all, l)
		if strings.HasPrefix(l, "ERROR:") {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		errs = all[max(0, len(all)-3):]
	}
	r := strings.Join(errs, "; ")
	if r == "" {
		return "it printed nothing"
	}
	if len(r) > 600 {
		r = r[:600] + "…"
	}
	return r
}
