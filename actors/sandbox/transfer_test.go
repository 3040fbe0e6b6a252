package sandbox

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/images"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// otherNamespace stands for another member's containerd: images do not
// cross containerd namespaces.
const otherNamespace = "frognano-test-transfer"

// TestImageMovesToAnotherMember exports the base image from the test
// namespace and imports it into another, where a sandbox of it then runs:
// what a worker on a member without an environment's image does.
func TestImageMovesToAnotherMember(t *testing.T) {
	rt, img := needRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	other, err := New(ctx, Config{Namespace: otherNamespace, Address: os.Getenv("FROGNANO_CONTAINERD_ADDRESS")})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	drop := func() {
		err := other.client.ImageService().Delete(other.ctx(context.Background()), img, images.SynchronousDelete())
		if err != nil && !errdefs.IsNotFound(err) {
			t.Errorf("remove %s from %s: %v", img, otherNamespace, err)
		}
		other.forgetImage(img)
	}
	drop()
	defer drop()
	if ok, err := other.Images().Exists(ctx, img); err != nil || ok {
		t.Fatalf("before the transfer the other namespace holds %s: %v, %v", img, ok, err)
	}

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(rt.ExportImage(ctx, img, pw)) }()
	if err := other.ImportImage(ctx, img, pr, 8<<30); err != nil {
		t.Fatal(err)
	}
	sb, err := other.Create(ctx, img, Options{})
	if err != nil {
		t.Fatalf("a sandbox of the imported image: %v", err)
	}
	defer sb.Destroy(context.Background())
	if res := run(t, sb, "echo moved; python3 -c 'print(6*7)'"); res.ExitCode != 0 || string(res.Stdout) != "moved\n42\n" {
		t.Fatalf("in the imported image: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	// Too large for the limit: refused, nothing imported beside it.
	pr, pw = io.Pipe()
	go func() { pw.CloseWithError(rt.ExportImage(ctx, img, pw)) }()
	if err := other.ImportImage(ctx, img, pr, 1<<20); !errors.Is(err, ErrArchive) {
		t.Fatalf("an archive above the limit: %v, want ErrArchive", err)
	}
	pr.Close()
}

// TestImportRefusesArchivesNamingOtherImages: a member that sends an
// archive naming other images (or the asked-for one twice, or none) could
// otherwise repoint any image in this node's namespace. Nothing reaches
// containerd.
func TestImportRefusesArchivesNamingOtherImages(t *testing.T) {
	rt, _ := needRuntime(t)
	ctx := context.Background()
	const want = "frognano.local/env/wanted:1"
	tarOf := func(files ...string) []byte { // name, content, name, content…
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for i := 0; i+1 < len(files); i += 2 {
			tw.WriteHeader(&tar.Header{Name: files[i], Mode: 0o644, Size: int64(len(files[i+1])), Typeflag: tar.TypeReg})
			tw.Write([]byte(files[i+1]))
		}
		tw.Close()
		return buf.Bytes()
	}
	index := func(manifests ...map[string]string) string {
		idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex}
		idx.SchemaVersion = 2
		for i, a := range manifests {
			idx.Manifests = append(idx.Manifests, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest,
				Digest: digest.Digest("sha256:" + strings.Repeat(string(rune('a'+i)), 64)), Size: 10, Annotations: a})
		}
		b, _ := json.Marshal(idx)
		return string(b)
	}
	const layout = `{"imageLayoutVersion":"1.0.0"}`
	archive := func(manifests ...map[string]string) []byte {
		return tarOf("oci-layout", layout, "index.json", index(manifests...))
	}
	cases := map[string][]byte{
		"another image":         archive(map[string]string{images.AnnotationImageName: "frognano.local/env/other:1"}),
		"the image and another": archive(map[string]string{images.AnnotationImageName: want}, map[string]string{images.AnnotationImageName: "docker.io/library/debian:12"}),
		"a bare ref name":       archive(map[string]string{ocispec.AnnotationRefName: "latest"}),
		"the image twice":       archive(map[string]string{images.AnnotationImageName: want}, map[string]string{images.AnnotationImageName: want}),
		"no name":               archive(map[string]string{}),
		"not a tar":             []byte("this is not an archive"),
		// containerd cleans entry names and the last of two wins: a second
		// index behind a path that cleans to index.json.
		"a second index.json": tarOf("oci-layout", layout, "index.json", index(map[string]string{images.AnnotationImageName: want}),
			"x/../index.json", index(map[string]string{images.AnnotationImageName: "docker.io/library/victim:latest"})),
		// Without oci-layout containerd reads a Docker manifest.json and
		// names the image by its RepoTags.
		"docker manifest.json tags": tarOf("manifest.json", `[{"Config":"c.json","RepoTags":["victim:latest","`+want+`"],"Layers":[]}]`,
			"c.json", `{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			err := rt.ImportImage(ctx, want, bytes.NewReader(b), 1<<20)
			if !errors.Is(err, ErrArchive) {
				t.Fatalf("ImportImage: %v, want ErrArchive", err)
			}
			t.Log(err)
			for _, ref := range []string{want, "frognano.local/env/other:1", "docker.io/library/debian:12", "latest", "docker.io/library/victim:latest"} {
				if ok, _ := rt.Images().Exists(ctx, ref); ok {
					t.Errorf("%s exists after a refused import", ref)
				}
			}
		})
	}
}
