package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/containerd/containerd/content"
	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/images/archive"
	"github.com/containerd/containerd/platforms"
	"github.com/containerd/errdefs"
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
// it. The archive's blobs go into the content store under a lease; then
// the index containerd itself built from the archive (an OCI index.json,
// or a Docker manifest.json's tags) is read, and it must name ref, once,
// and nothing else, with an image manifest. Only then is ref created or
// moved, to that manifest: no other name in the namespace is touched, as
// containerd's own import would touch every name an archive carries.
func (r *Runtime) ImportImage(ctx context.Context, ref string, src io.Reader, limit int64) error {
	ctx = r.ctx(ctx)
	f, err := os.CreateTemp(r.spoolDir(), "frognano-image-*.tar")
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
	ctx, done, err := r.client.WithLease(ctx)
	if err != nil {
		return err
	}
	defer done(context.WithoutCancel(ctx))
	cs := r.client.ContentStore()
	index, err := archive.ImportIndex(ctx, cs, f)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrArchive, ref, err)
	}
	raw, err := content.ReadBlob(ctx, cs, index)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrArchive, ref, err)
	}
	if len(raw) > maxIndexBytes {
		return fmt.Errorf("%w: %s: index larger than %d bytes", ErrArchive, ref, maxIndexBytes)
	}
	target, err := onlyManifestOf(raw, ref)
	if err != nil {
		return err
	}
	// The labels that keep the manifest's config and layers from
	// containerd's garbage collector once the lease ends.
	if err := images.Walk(ctx, images.SetChildrenLabels(cs, images.ChildrenHandler(cs)), target); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrArchive, ref, err)
	}
	is := r.client.ImageService()
	img := images.Image{Name: ref, Target: target}
	if _, err := is.Update(ctx, img, "target"); errdefs.IsNotFound(err) {
		_, err = is.Create(ctx, img)
		if err != nil {
			return fmt.Errorf("create image %s: %w", ref, err)
		}
	} else if err != nil {
		return fmt.Errorf("update image %s: %w", ref, err)
	}
	r.forgetImage(ref)
	if _, err := r.images.Ready(ctx, ref); err != nil {
		return err
	}
	return nil
}

// spoolDir is where ImportImage keeps an archive while it reads it: the
// image cache's directory, on disk, rather than a /tmp that may be memory.
func (r *Runtime) spoolDir() string {
	if d := r.images.CacheDir; d != "" {
		if err := os.MkdirAll(d, 0o755); err == nil {
			return d
		}
	}
	return ""
}

// maxIndexBytes bounds the index.json an archive may carry.
const maxIndexBytes = 1 << 20

// onlyManifestOf reads an image index (the one containerd built from an
// archive) and returns its one manifest, which must be named ref: any
// other name, ref named twice or not at all, or a target that is not an
// image manifest is refused.
func onlyManifestOf(raw []byte, ref string) (ocispec.Descriptor, error) {
	var index ocispec.Index
	if err := json.Unmarshal(raw, &index); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("%w: %s: index: %v", ErrArchive, ref, err)
	}
	var (
		found ocispec.Descriptor
		named int
	)
	for _, m := range index.Manifests {
		// The name containerd's import would give the manifest: the image
		// name annotation, else the OCI ref name; none creates no image.
		name := m.Annotations[images.AnnotationImageName]
		if name == "" {
			name = m.Annotations[ocispec.AnnotationRefName]
		}
		switch {
		case name == "":
		case name != ref:
			return ocispec.Descriptor{}, fmt.Errorf("%w: asked for %s, the archive names %q", ErrArchive, ref, name)
		default:
			named++
			found = m
		}
	}
	if named != 1 {
		return ocispec.Descriptor{}, fmt.Errorf("%w: asked for %s, the archive names it %d times", ErrArchive, ref, named)
	}
	switch found.MediaType {
	case ocispec.MediaTypeImageManifest, images.MediaTypeDockerSchema2Manifest:
	default:
		return ocispec.Descriptor{}, fmt.Errorf("%w: %s is a %s, not an image manifest", ErrArchive, ref, found.MediaType)
	}
	found.Annotations = nil
	return found, nil
}
