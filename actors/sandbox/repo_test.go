package sandbox

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/sandbox/image"
)

// writeTree writes files (relative path → content) under a new temp dir.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// hostGit runs git on the host in dir.
func hostGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// deriveRepoImage makes an image of the base image plus dir at /repo and
// deletes it when the test ends.
func deriveRepoImage(t *testing.T, name, dir string) string {
	t.Helper()
	rt, base := needRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ref := image.Registry + "/test-" + name + ":" + randomHex(4)
	if err := rt.DeriveImage(ctx, base, ref, map[string]string{"/repo": dir}, nil); err != nil {
		t.Fatalf("derive %s: %v", ref, err)
	}
	t.Cleanup(func() { deleteImage(t, ref) })
	return ref
}

func deleteImage(t *testing.T, ref string) {
	if err := testRT.client.ImageService().Delete(testRT.ctx(context.Background()), ref); err != nil {
		t.Logf("delete image %s: %v", ref, err)
	}
	testRT.forgetImage(ref)
}

// createFrom starts a sandbox of ref, destroyed when the test ends.
func createFrom(t *testing.T, ref string, opts Options) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := testRT.Create(ctx, ref, opts)
	if err != nil {
		t.Fatalf("create from %s: %v", ref, err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}
