package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/content"
	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/images/archive"
	"github.com/containerd/containerd/labels"
	"github.com/containerd/containerd/mount"
	"github.com/containerd/containerd/platforms"
	"github.com/containerd/containerd/rootfs"
	"github.com/containerd/continuity/fs"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// ConfigEdit changes a derived image's config, e.g. to point WorkingDir at
// the repository or put a virtualenv on PATH.
type ConfigEdit func(*ocispec.ImageConfig)

// Derive makes newRef from baseRef plus one layer: mutate gets the root of a
// writable copy-on-write snapshot of the base, mounted on the host, and
// whatever it changes becomes the new layer. No container runs, so nothing
// in the base image executes.
func (s *Store) Derive(ctx context.Context, baseRef, newRef, comment string, mutate func(root string) error, edit ConfigEdit) error {
	ctx, done, err := s.Client.WithLease(ctx)
	if err != nil {
		return fmt.Errorf("lease for deriving %s: %w", newRef, err)
	}
	defer done(context.WithoutCancel(ctx))

	base, err := s.Ready(ctx, baseRef)
	if err != nil {
		return err
	}
	diffIDs, err := base.RootFS(ctx)
	if err != nil {
		return fmt.Errorf("layers of %s: %w", baseRef, err)
	}
	sn := s.Client.SnapshotService(s.Snapshotter)
	key := "frognano-derive-" + randomHex(8)
	mounts, err := sn.Prepare(ctx, key, identity.ChainID(diffIDs).String())
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", baseRef, err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = sn.Remove(context.WithoutCancel(ctx), key)
		}
	}()
	if err := mount.WithTempMount(ctx, mounts, mutate); err != nil {
		return fmt.Errorf("derive %s: %w", newRef, err)
	}
	layer, err := rootfs.CreateDiff(ctx, key, sn, s.Client.DiffService())
	if err != nil {
		return fmt.Errorf("diff for %s: %w", newRef, err)
	}
	diffID, err := uncompressedDigest(ctx, s.Client.ContentStore(), layer)
	if err != nil {
		return err
	}
	// The prepared snapshot already holds exactly base + layer: commit it
	// under the new chain ID instead of unpacking the layer a second time.
	chain := identity.ChainID(append(append([]digest.Digest{}, diffIDs...), diffID)).String()
	if err := sn.Commit(ctx, chain, key); err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("commit snapshot %s: %w", chain, err)
	}
	committed = true
	if err := s.appendLayer(ctx, base, newRef, comment, layer, diffID, chain, edit); err != nil {
		return err
	}
	_, err = s.Ready(ctx, newRef)
	return err
}

// CopyInto is a Derive mutation that copies the host directory src to dst
// inside the image (e.g. a repository to /repo), keeping modes and owners.
func CopyInto(src, dst string) func(root string) error {
	return func(root string) error {
		target := filepath.Join(root, filepath.Clean("/"+dst))
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := fs.CopyDir(target, src, fs.WithAllowXAttrErrors()); err != nil {
			return fmt.Errorf("copy %s to %s: %w", src, dst, err)
		}
		return nil
	}
}

// CommitSnapshot makes newRef from baseRef plus the changes in the active
// snapshot key (a build container's root file system). Pause the container
// first so the layer is a consistent picture.
func (s *Store) CommitSnapshot(ctx context.Context, baseRef, key, newRef, comment string, edit ConfigEdit) error {
	ctx, done, err := s.Client.WithLease(ctx)
	if err != nil {
		return fmt.Errorf("lease for committing %s: %w", newRef, err)
	}
	defer done(context.WithoutCancel(ctx))
	base, err := s.Ready(ctx, baseRef)
	if err != nil {
		return err
	}
	layer, err := rootfs.CreateDiff(ctx, key, s.Client.SnapshotService(s.Snapshotter), s.Client.DiffService())
	if err != nil {
		return fmt.Errorf("diff of snapshot %s: %w", key, err)
	}
	diffID, err := uncompressedDigest(ctx, s.Client.ContentStore(), layer)
	if err != nil {
		return err
	}
	if err := s.appendLayer(ctx, base, newRef, comment, layer, diffID, "", edit); err != nil {
		return err
	}
	_, err = s.Ready(ctx, newRef)
	return err
}

// Export writes ref as an OCI archive, so derived images can be cached or
// moved to another node like the base image is.
func (s *Store) Export(ctx context.Context, ref, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := s.Client.Export(ctx, f, archive.WithImage(s.Client.ImageService(), ref), archive.WithPlatform(platforms.DefaultStrict())); err != nil {
		return fmt.Errorf("export %s: %w", ref, err)
	}
	return f.Close()
}

func uncompressedDigest(ctx context.Context, cs content.Store, layer ocispec.Descriptor) (digest.Digest, error) {
	info, err := cs.Info(ctx, layer.Digest)
	if err != nil {
		return "", fmt.Errorf("layer %s: %w", layer.Digest, err)
	}
	d, err := digest.Parse(info.Labels[labels.LabelUncompressed])
	if err != nil {
		return "", fmt.Errorf("layer %s has no uncompressed digest: %w", layer.Digest, err)
	}
	return d, nil
}

// appendLayer writes the config and manifest of base+layer and points newRef
// at them. The GC labels keep the blobs (and, when snapshotChain is set, the
// committed snapshot) alive as long as the image exists.
func (s *Store) appendLayer(ctx context.Context, base containerd.Image, newRef, comment string, layer ocispec.Descriptor, diffID digest.Digest, snapshotChain string, edit ConfigEdit) error {
	cs := s.Client.ContentStore()
	manifest, err := images.Manifest(ctx, cs, base.Target(), platforms.Default())
	if err != nil {
		return fmt.Errorf("manifest of %s: %w", base.Name(), err)
	}
	cfg, err := base.Spec(ctx)
	if err != nil {
		return fmt.Errorf("config of %s: %w", base.Name(), err)
	}
	created := time.Now().UTC()
	cfg.Created = &created
	cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, diffID)
	cfg.History = append(cfg.History, ocispec.History{Created: &created, CreatedBy: comment})
	if edit != nil {
		edit(&cfg.Config)
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(cfgJSON), Size: int64(len(cfgJSON))}
	var cfgLabels map[string]string
	if snapshotChain != "" {
		cfgLabels = map[string]string{"containerd.io/gc.ref.snapshot." + s.Snapshotter: snapshotChain}
	}
	if err := content.WriteBlob(ctx, cs, "frognano-config-"+cfgDesc.Digest.Encoded(), bytes.NewReader(cfgJSON), cfgDesc, content.WithLabels(cfgLabels)); err != nil {
		return fmt.Errorf("write config: %w", err)
	}

	manifest.Config = cfgDesc
	manifest.Layers = append(manifest.Layers, layer)
	manifest.MediaType = ocispec.MediaTypeImageManifest
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	manifestDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(manifestJSON), Size: int64(len(manifestJSON))}
	gcLabels := map[string]string{"containerd.io/gc.ref.content.config": cfgDesc.Digest.String()}
	for i, l := range manifest.Layers {
		gcLabels["containerd.io/gc.ref.content.l."+strconv.Itoa(i)] = l.Digest.String()
	}
	if err := content.WriteBlob(ctx, cs, "frognano-manifest-"+manifestDesc.Digest.Encoded(), bytes.NewReader(manifestJSON), manifestDesc, content.WithLabels(gcLabels)); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}

	img := images.Image{Name: newRef, Target: manifestDesc, Labels: map[string]string{"io.frognano.base": base.Name()}}
	is := s.Client.ImageService()
	if _, err := is.Update(ctx, img, "target", "labels"); err != nil {
		if !errdefs.IsNotFound(err) {
			return fmt.Errorf("update image %s: %w", newRef, err)
		}
		if _, err := is.Create(ctx, img); err != nil {
			return fmt.Errorf("create image %s: %w", newRef, err)
		}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
