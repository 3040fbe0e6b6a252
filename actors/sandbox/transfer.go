package sandbox

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/images/archive"
	"github.com/containerd/containerd/platforms"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Moving an image between cluster members. A member whose containerd lacks
// an environment's image (it was built on the node that registered the
// environment) fetches it from that node as an OCI archive (ExportImage
// there, ImportImage here) instead of failing the episode.

// ErrArchive wraps an archive ImportImage refuses: not an OCI layout, too
// large, or naming another image than the one asked for.
var ErrArchive = errors.New("image archive refused")

// ExportImage writes ref, as this runtime's namespace holds it, to w as an
// OCI archive (this platform's manifest and layers) that ImportImage on
// another member reads.
func (r *Runtime) ExportImage(ctx context.Context, ref string, w io.Writer) error {
	ctx = r.ctx(ctx)
	is := r.client.ImageService()
	if _, err := is.Get(ctx, ref); err != nil {
		return fmt.Errorf("export %s: %w", ref, err)
	}
	if err := r.client.Export(ctx, w, archive.WithImage(is, ref), archive.WithPlatform(platforms.DefaultStrict())); err != nil {
		return fmt.Errorf("export %s: %w", ref, err)
	}
	return nil
}

// ImportImage reads an OCI archive of ref (ExportImage on another member)
// from src, at most limit bytes, into this runtime's namespace and unpacks
// it. The archive is spooled to a temporary file and its index read first:
// an archive that names any image but ref, or ref more than once, is
// refused before containerd sees it (containerd's import would create or
// move every name the index carries).
func (r *Runtime) ImportImage(ctx context.Context, ref string, src io.Reader, limit int64) error {
	ctx = r.ctx(ctx)
	f, err := os.CreateTemp("", "frognano-image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(src, limit+1))
	if err != nil {
		return fmt.Errorf("receive %s: %w", ref, err)
	}
	if n > limit {
		return fmt.Errorf("%w: %s is larger than %d bytes", ErrArchive, ref, limit)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := archiveNamesOnly(f, ref); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	imgs, err := r.client.Import(ctx, f)
	if err != nil {
		return fmt.Errorf("import %s: %w", ref, err)
	}
	if len(imgs) != 1 || imgs[0].Name != ref {
		return fmt.Errorf("%w: importing %s created %d images", ErrArchive, ref, len(imgs))
	}
	r.forgetImage(ref)
	if _, err := r.images.Ready(ctx, ref); err != nil {
		return err
	}
	return nil
}

// maxIndexBytes bounds the index.json an archive may carry.
const maxIndexBytes = 1 << 20

// archiveNamesOnly checks that the OCI archive in rd has one index.json
// whose manifests name ref exactly once and nothing else.
func archiveNamesOnly(rd io.Reader, ref string) error {
	tr := tar.NewReader(rd)
	var index *ocispec.Index
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %s: not a tar archive: %v", ErrArchive, ref, err)
		}
		if hdr.Name != ocispec.ImageIndexFile && hdr.Name != "./"+ocispec.ImageIndexFile {
			continue
		}
		if index != nil {
			return fmt.Errorf("%w: %s: two index.json entries", ErrArchive, ref)
		}
		b, err := io.ReadAll(io.LimitReader(tr, maxIndexBytes+1))
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrArchive, ref, err)
		}
		if len(b) > maxIndexBytes {
			return fmt.Errorf("%w: %s: index.json larger than %d bytes", ErrArchive, ref, maxIndexBytes)
		}
		index = new(ocispec.Index)
		if err := json.Unmarshal(b, index); err != nil {
			return fmt.Errorf("%w: %s: index.json: %v", ErrArchive, ref, err)
		}
	}
	if index == nil {
		return fmt.Errorf("%w: %s: no index.json (not an OCI archive)", ErrArchive, ref)
	}
	named := 0
	for _, m := range index.Manifests {
		// The name containerd's import gives the manifest: the image name
		// annotation, else the OCI ref name; none creates no image.
		name := m.Annotations[images.AnnotationImageName]
		if name == "" {
			name = m.Annotations[ocispec.AnnotationRefName]
		}
		switch {
		case name == "":
		case name != ref:
			return fmt.Errorf("%w: asked for %s, the archive names %q", ErrArchive, ref, name)
		default:
			named++
		}
	}
	if named != 1 {
		return fmt.Errorf("%w: asked for %s, the archive names it %d times", ErrArchive, ref, named)
	}
	return nil
}
