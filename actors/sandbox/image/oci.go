package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/containerd/containerd/archive"
	"github.com/containerd/containerd/images"
	"github.com/klauspost/compress/gzip"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// layerFile is a gzip-compressed layer written to a temporary file, with the
// two digests an image needs: of the compressed blob and of the tar inside.
type layerFile struct {
	path   string
	desc   ocispec.Descriptor
	diffID digest.Digest
}

// countingWriter counts what passes through it, for the blob size.
type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// writeRootfsLayer packs the whole tree under rootfs as one layer. It reuses
// containerd's own diff writer against an empty directory, so hard links,
// xattrs (file capabilities) and special files come out exactly as
// containerd's unpacker expects them. BestSpeed gzip: the layer is imported
// once per host, and on two cores compression time dominates the build.
func writeRootfsLayer(ctx context.Context, dir, rootfs string) (layerFile, error) {
	f, err := os.CreateTemp(dir, "layer-*.tar.gz")
	if err != nil {
		return layerFile{}, err
	}
	defer f.Close()
	empty, err := os.MkdirTemp(dir, "empty-")
	if err != nil {
		return layerFile{}, err
	}
	defer os.RemoveAll(empty)

	compressed := digest.Canonical.Digester()
	size := &countingWriter{}
	gz, err := gzip.NewWriterLevel(io.MultiWriter(f, compressed.Hash(), size), gzip.BestSpeed)
	if err != nil {
		return layerFile{}, err
	}
	uncompressed := digest.Canonical.Digester()
	if err := archive.WriteDiff(ctx, io.MultiWriter(gz, uncompressed.Hash()), empty, rootfs); err != nil {
		return layerFile{}, fmt.Errorf("tar %s: %w", rootfs, err)
	}
	if err := gz.Close(); err != nil {
		return layerFile{}, err
	}
	if err := f.Close(); err != nil {
		return layerFile{}, err
	}
	return layerFile{
		path: f.Name(),
		desc: ocispec.Descriptor{
			MediaType: ocispec.MediaTypeImageLayerGzip,
			Digest:    compressed.Digest(),
			Size:      size.n,
		},
		diffID: uncompressed.Digest(),
	}, nil
}

// imageConfig is the OCI config of a single-layer image.
func imageConfig(cfg ocispec.ImageConfig, diffID digest.Digest, comment string) ocispec.Image {
	created := time.Now().UTC()
	return ocispec.Image{
		Created: &created,
		Platform: ocispec.Platform{
			Architecture: runtime.GOARCH,
			OS:           "linux",
		},
		Config: cfg,
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		History: []ocispec.History{{
			Created:   &created,
			CreatedBy: comment,
		}},
	}
}

// writeOCIArchive writes an OCI image layout as a tar stream (what
// client.Import reads): oci-layout, index.json naming ref, and the blobs.
func writeOCIArchive(w io.Writer, ref string, layer layerFile, cfg ocispec.Image) error {
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgDesc := ocispec.Descriptor{
		MediaType: ocispec.MediaTypeImageConfig,
		Digest:    digest.FromBytes(cfgJSON),
		Size:      int64(len(cfgJSON)),
	}
	manifest := ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfgDesc,
		Layers:    []ocispec.Descriptor{layer.desc},
	}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	manifestDesc := ocispec.Descriptor{
		MediaType: ocispec.MediaTypeImageManifest,
		Digest:    digest.FromBytes(manifestJSON),
		Size:      int64(len(manifestJSON)),
		Platform:  &cfg.Platform,
		Annotations: map[string]string{
			images.AnnotationImageName: ref,
			ocispec.AnnotationRefName:  ref,
		},
	}
	index := ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manifestDesc},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	layoutJSON, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	addBytes := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.Copy(tw, bytes.NewReader(b))
		return err
	}
	blob := func(d digest.Digest) string {
		return filepath.Join(ocispec.ImageBlobsDir, d.Algorithm().String(), d.Encoded())
	}
	if err := addBytes(ocispec.ImageLayoutFile, layoutJSON); err != nil {
		return err
	}
	lf, err := os.Open(layer.path)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := tw.WriteHeader(&tar.Header{Name: blob(layer.desc.Digest), Mode: 0o644, Size: layer.desc.Size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, lf); err != nil {
		return err
	}
	if err := addBytes(blob(cfgDesc.Digest), cfgJSON); err != nil {
		return err
	}
	if err := addBytes(blob(manifestDesc.Digest), manifestJSON); err != nil {
		return err
	}
	if err := addBytes(ocispec.ImageIndexFile, indexJSON); err != nil {
		return err
	}
	return tw.Close()
}
