// Package image builds and caches the container images sandboxes start from:
// a Debian base image made locally with debootstrap (no registry is ever
// contacted), and images derived from a base by adding a directory or by
// committing a build container's changes.
//
// Images are named frognano.local/<name>:<tag>. The base image's tag is a hash
// of its recipe, so a recipe change builds a new image and an unchanged recipe
// reuses the cached one; the built OCI archive is also kept on disk so that a
// wiped containerd store needs an import, not a new debootstrap.
package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// Registry is the host part of every image name frognano makes. It is not a
// reachable registry: images under it only ever come from local builds.
const Registry = "frognano.local"

// recipeRevision is bumped whenever the build steps change in a way the
// Recipe fields cannot express, so stale cached images are not reused.
const recipeRevision = 2

// Recipe says what goes into the base image. Its Hash names the image, so two
// hosts with the same recipe agree on the tag without talking to each other.
type Recipe struct {
	// Suite and Variant are passed to debootstrap (e.g. "bookworm", "minbase").
	Suite   string `json:"suite"`
	Variant string `json:"variant"`
	// Mirror is the Debian archive to bootstrap from; empty means the one
	// the host's apt uses (HostMirror), looked up only when the image has
	// to be built. It is not part of the hash: two mirrors of one suite
	// serve the same packages, so changing mirrors rebuilds nothing.
	Mirror string `json:"-"`
	// Packages are installed on top of the variant.
	Packages []string `json:"packages"`
	// GoRoot is a host Go installation copied to /usr/local/go; empty means
	// no Go toolchain. Only GoVersion enters the hash, not the host path.
	GoRoot    string `json:"-"`
	GoVersion string `json:"go_version"`
	// WarmGoCache compiles the standard library once at build time so that
	// the first `go test` in a fresh sandbox does not spend its time budget
	// rebuilding it.
	WarmGoCache bool `json:"warm_go_cache"`
	Revision    int  `json:"revision"`
}

// DefaultPackages is what every environment needs before its own
// dependencies: Python with pip/venv and pytest, git for patches and grading.
var DefaultPackages = []string{
	"ca-certificates",
	"git",
	"python3",
	"python3-pip",
	"python3-pytest",
	"python3-venv",
}

// DefaultRecipe is Debian bookworm minbase with DefaultPackages and the Go
// toolchain the host uses (found with `go env`), bootstrapped from the
// host's Debian mirror unless the caller sets Mirror.
func DefaultRecipe(ctx context.Context) (Recipe, error) {
	r := Recipe{
		Suite:       "bookworm",
		Variant:     "minbase",
		Packages:    slices.Clone(DefaultPackages),
		WarmGoCache: true,
		Revision:    recipeRevision,
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOROOT", "GOVERSION").Output()
	if err != nil {
		return Recipe{}, fmt.Errorf("find the host Go toolchain for the base image (go env): %w", err)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 {
		return Recipe{}, fmt.Errorf("unexpected `go env GOROOT GOVERSION` output %q", out)
	}
	r.GoRoot, r.GoVersion = fields[0], fields[1]
	return r, nil
}

// Hash is a stable digest of the fields that decide the image's content.
func (r Recipe) Hash() string {
	c := r
	c.Packages = slices.Clone(r.Packages)
	slices.Sort(c.Packages)
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // a struct of strings, ints and bools always marshals
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Ref is the image name the recipe builds: frognano.local/base:<hash prefix>.
func (r Recipe) Ref() string {
	return Registry + "/base:" + r.Hash()[:16]
}

func (r Recipe) validate() error {
	switch {
	case r.Suite == "" || r.Variant == "":
		return fmt.Errorf("recipe needs a suite and a variant: %+v", r)
	case r.GoRoot != "" && r.GoVersion == "":
		return fmt.Errorf("recipe copies GOROOT %s but names no Go version", r.GoRoot)
	case r.WarmGoCache && r.GoRoot == "":
		return fmt.Errorf("recipe warms the Go build cache but has no Go toolchain")
	}
	return nil
}
