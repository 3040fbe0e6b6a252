package mapfile

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestOpenReadsWhatWasWritten(t *testing.T) {
	for _, content := range []string{"", "x", "hello, mapped world"} {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if f.Size != int64(len(content)) {
			t.Errorf("Size = %d, want %d", f.Size, len(content))
		}
		got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size))
		if err != nil || string(got) != content {
			t.Errorf("read %q, %v; want %q", got, err, content)
		}
		if len(content) > 0 && string(f.Bytes) != content {
			t.Errorf("Bytes = %q, want the mapped file", f.Bytes)
		}
		buf := make([]byte, 4)
		if n, err := f.ReadAt(buf, f.Size); n != 0 || err != io.EOF {
			t.Errorf("ReadAt past the end = %d, %v", n, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("opened a missing file")
	}
}
