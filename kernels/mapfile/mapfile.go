// Package mapfile opens model files read-only, memory-mapped where the system
// allows it (so a multi-gigabyte file is paged in on demand, not copied), and
// read lazily with ReadAt elsewhere. The GGUF and safetensors readers share it.
package mapfile

import (
	"io"
	"os"
)

// File is an open read-only file.
type File struct {
	io.ReaderAt
	// Size is the file's length in bytes.
	Size int64
	// Bytes is the whole file when it is memory-mapped, else nil. It must not
	// be used after Close.
	Bytes []byte
	fh    *os.File
}

// Open opens path, mapping it when it can.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, err
	}
	f := &File{ReaderAt: fh, Size: st.Size(), fh: fh}
	if f.Size > 0 {
		if m, err := mmapFile(fh, f.Size); err == nil {
			f.Bytes, f.ReaderAt = m, bytesReaderAt(m)
		}
	}
	return f, nil
}

// Close unmaps the file and closes its handle.
func (f *File) Close() error {
	var err error
	if f.Bytes != nil {
		err = munmapFile(f.Bytes)
		f.Bytes = nil
	}
	if cerr := f.fh.Close(); err == nil {
		err = cerr
	}
	return err
}

type bytesReaderAt []byte

func (b bytesReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
