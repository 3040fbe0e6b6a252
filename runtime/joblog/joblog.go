// Package joblog is the log of a job a node runs for its clients (a
// training run, an evaluation): a file under the node's data directory that
// the job appends to, and an HTTP handler that streams it from an offset,
// following it while the job's actor is alive. A client that leaves and
// comes back reads on from where it was.
package joblog

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/persistence"
)

// Log is a job's log file. Writes are appended; followers wait on Changed
// rather than poll.
type Log struct {
	mu sync.Mutex
	f  *os.File
	// written is closed (and replaced) after every write.
	written chan struct{}
}

// Open opens (creating it and its directory) the log at path for appending.
func Open(path string) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Log{f: f, written: make(chan struct{})}, nil
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.f.Write(p)
	close(l.written)
	l.written = make(chan struct{})
	return n, err
}

// Changed is closed at the next write.
func (l *Log) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written
}

// Close closes the file.
func (l *Log) Close() error { return l.f.Close() }

// Size is the size of the log at path (0 when there is none yet): the
// offset a client follows a job from when it starts or resumes it.
func Size(path string) int64 {
	if fi, err := os.Stat(path); err == nil {
		return fi.Size()
	}
	return 0
}

// Registry knows which jobs of a service are alive on the node and their
// open logs. The zero value is ready to use.
type Registry struct {
	mu     sync.Mutex
	active map[string]bool
	logs   map[string]*Log
}

// Active says whether job id's actor is alive.
func (r *Registry) Active(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active[id]
}

// AnyActive is a job whose actor is alive, if there is one.
func (r *Registry) AnyActive() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.active {
		return id, true
	}
	return "", false
}

// SetActive records job id's actor alive or ended.
func (r *Registry) SetActive(id string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active == nil {
		r.active = map[string]bool{}
	}
	if on {
		r.active[id] = true
	} else {
		delete(r.active, id)
	}
}

// SetLog records job id's open log (nil: closed).
func (r *Registry) SetLog(id string, l *Log) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logs == nil {
		r.logs = map[string]*Log{}
	}
	if l == nil {
		delete(r.logs, id)
	} else {
		r.logs[id] = l
	}
}

// changed is closed when job id's log is next written (nil when it has no
// open log).
func (r *Registry) changed(id string) <-chan struct{} {
	r.mu.Lock()
	l := r.logs[id]
	r.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Changed()
}

// ErrBadQuery is answered (400) to a log request whose offset or follow
// does not parse.
var ErrBadQuery = errors.New("offset must be a byte count ≥ 0 and follow true or false")

// Follow answers a request for job id's log at path from ?offset (bytes,
// default 0); with ?follow=true it goes on writing what is appended until
// the job's actor has ended and the log is drained, or the client leaves.
// The caller has checked that the job exists.
func (r *Registry) Follow(w http.ResponseWriter, req *http.Request, id, path string) {
	q := req.URL.Query()
	offset, err := strconv.ParseInt(q.Get("offset"), 10, 64)
	if q.Get("offset") == "" {
		offset, err = 0, nil
	}
	follow, err2 := strconv.ParseBool(q.Get("follow"))
	if q.Get("follow") == "" {
		follow, err2 = false, nil
	}
	if err != nil || err2 != nil || offset < 0 {
		WriteError(w, http.StatusBadRequest, ErrBadQuery)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		active := r.Active(id) // before reading: what the job wrote before it ended is read below
		changed := r.changed(id)
		if f, err := os.Open(path); err == nil {
			if _, err := f.Seek(offset, io.SeekStart); err == nil {
				for {
					k, err := f.Read(buf)
					if k > 0 {
						if _, werr := w.Write(buf[:k]); werr != nil {
							f.Close()
							return
						}
						offset += int64(k)
					}
					if err != nil {
						break
					}
				}
			}
			f.Close()
		}
		if flusher != nil {
			flusher.Flush()
		}
		if !follow || !active {
			return
		}
		select {
		case <-req.Context().Done():
			return
		case <-changed: // nil (no open log yet, or any more): wait for the timer
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// WriteRecord answers a job's stored record as protojson, with header
// saying whether the job's actor is alive on this node.
func WriteRecord(w http.ResponseWriter, rec proto.Message, header string, active bool) {
	b, err := protojson.Marshal(rec)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(header, strconv.FormatBool(active))
	w.Write(b)
}

// WriteJSON answers v as JSON with status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers {"error": err} with status code, as every call of the
// node's API does (node.ReadAPIError reads it).
func WriteError(w http.ResponseWriter, code int, err error) {
	WriteJSON(w, code, map[string]string{"error": err.Error()})
}

// StatusOf is the status a store's error is answered with.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, persistence.ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
