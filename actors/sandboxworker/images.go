package sandboxworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// Environment images travel between members: an environment is built on
// the node that registers it, and a SandboxWorker spawned on another
// member, whose containerd lacks the image, fetches it from the member
// that asked for the sandbox (the request's sender, a live member over
// authenticated remoting) through that member's node HTTP API, with the
// cluster's API token, instead of failing the episode.

// ImagesPath is the node API path that serves an environment's image as an
// OCI archive: GET ImagesPath?ref=REF.
const ImagesPath = "/v1/images/export"

// MaxImageBytes bounds an image archive a worker accepts.
const MaxImageBytes = 8 << 30

// ImagesHandler serves the images of the environments registered on the
// node (and only those: any other ref is 404, whatever containerd holds),
// behind the node API's token like every path.
func ImagesHandler(rt func(context.Context) (*sandbox.Runtime, error)) node.Handler {
	return node.Handler{Pattern: "GET " + ImagesPath, Handler: func(n *node.Node) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ref := r.URL.Query().Get("ref")
			if ref == "" {
				http.Error(w, "400 bad request: ?ref=IMAGE is required", http.StatusBadRequest)
				return
			}
			if !registered(r.Context(), n.DB().Environments(), ref) {
				http.Error(w, "404 not found: no environment registered on this node uses image "+config.Clip(ref, 200), http.StatusNotFound)
				return
			}
			runtime, err := rt(r.Context())
			if err != nil {
				http.Error(w, "503 service unavailable: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/x-tar")
			if r.Method == http.MethodHead {
				return // no export for a HEAD
			}
			cw := &countingWriter{w: w}
			if err := runtime.ExportImage(r.Context(), ref, cw); err != nil {
				n.Logger().Warn("image export failed", "ref", ref, "err", err)
				if cw.n > 0 {
					// Part of the archive is out: cut the connection, so
					// the client sees a broken transfer, not a 200.
					panic(http.ErrAbortHandler)
				}
				http.Error(w, "500 internal server error: "+err.Error(), http.StatusInternalServerError)
			}
		})
	}}
}

// registered reports whether an environment in envs uses image ref.
func registered(ctx context.Context, envs persistence.EnvironmentStore, ref string) bool {
	list, err := envs.List(ctx)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(list, func(e *records.Environment) bool { return e.GetImage() == ref })
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Fetcher fetches images from other members for this node's workers.
type Fetcher struct {
	// Runtime is this node's containerd connection.
	Runtime func(context.Context) (*sandbox.Runtime, error)
	// Members lists the live members: an image is fetched only from the
	// member that asked for the sandbox (the request's sender), at the
	// HTTP address that member gossiped.
	Members func() []*rtmsg.NodeInfo
	// Self is this node's remoting address: never a source.
	Self func() string
	// Token is the cluster's node API token (node.api_token), if any.
	Token  string
	Client *http.Client
	Logger *slog.Logger

	mu       sync.Mutex
	inflight map[string]*fetch
	failed   map[string]failure // recent failed transfers, by ref
}

// failure is a failed transfer, answered again for failureMemory rather
// than tried at once by every episode that wants the image.
type failure struct {
	at  time.Time
	err error
}

const failureMemory = 30 * time.Second

type fetch struct {
	done chan struct{}
	err  error
}

// ErrSource wraps a fetch refused because the member that asked is not a
// live member with an HTTP address (or is this node).
var ErrSource = errors.New("no image source")

// Fetch makes ref present in this node's containerd, fetching it from the
// member whose remoting address is member. Concurrent fetches of one ref
// share one transfer, which goes on when the caller's ctx ends (the next
// episode finds the image); a failed one is answered again for 30 s, then
// tried anew.
func (f *Fetcher) Fetch(ctx context.Context, member, ref string) error {
	source, err := f.source(member)
	if err != nil {
		return err
	}
	f.mu.Lock()
	if f.inflight == nil {
		f.inflight, f.failed = map[string]*fetch{}, map[string]failure{}
	}
	if last, ok := f.failed[ref]; ok && time.Since(last.at) < failureMemory {
		f.mu.Unlock()
		return fmt.Errorf("%w (tried %s ago)", last.err, time.Since(last.at).Round(time.Second))
	}
	op, ok := f.inflight[ref]
	if !ok {
		op = &fetch{done: make(chan struct{})}
		f.inflight[ref] = op
		go func() {
			// Not the caller's ctx: other callers wait on this transfer.
			op.err = f.transfer(context.WithoutCancel(ctx), source, ref)
			f.mu.Lock()
			delete(f.inflight, ref)
			if op.err != nil {
				f.failed[ref] = failure{at: time.Now(), err: op.err}
			} else {
				delete(f.failed, ref)
			}
			f.mu.Unlock()
			close(op.done)
		}()
	}
	f.mu.Unlock()
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		return fmt.Errorf("image %s: still arriving from %s: %w", ref, source, ctx.Err())
	}
}

// source is the HTTP address of the live member whose remoting address is
// member. A member bound to an unspecified host (0.0.0.0:PORT) is dialled
// at its remoting host.
func (f *Fetcher) source(member string) (string, error) {
	if member == "" || (f.Self != nil && member == f.Self()) {
		return "", fmt.Errorf("%w: the sandbox was asked for by this node", ErrSource)
	}
	for _, m := range f.Members() {
		if m.GetAddress() != member {
			continue
		}
		addr := m.GetHttpAddress()
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", fmt.Errorf("%w: member %s gossips no HTTP address", ErrSource, config.Clip(member, 80))
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			rhost, _, err := net.SplitHostPort(member)
			if err != nil {
				return "", fmt.Errorf("%w: member %s", ErrSource, config.Clip(member, 80))
			}
			addr = net.JoinHostPort(rhost, port)
		}
		return addr, nil
	}
	return "", fmt.Errorf("%w: %s is not a live member", ErrSource, config.Clip(member, 80))
}

// client is Client, or one that uses no proxy (the token must not pass
// through one) and follows no redirect (it must not go elsewhere).
func (f *Fetcher) client() *http.Client {
	if f.Client != nil {
		return f.Client
	}
	return &http.Client{
		Transport:     &http.Transport{Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// transferTimeout bounds one image's transfer.
const transferTimeout = 30 * time.Minute

func (f *Fetcher) transfer(ctx context.Context, source, ref string) error {
	ctx, cancel := context.WithTimeout(ctx, transferTimeout)
	defer cancel()
	rt, err := f.Runtime(ctx)
	if err != nil {
		return err
	}
	if ok, err := rt.Images().Exists(ctx, ref); err == nil && ok {
		return nil // another worker's fetch brought it
	}
	start := time.Now()
	u := url.URL{Scheme: "http", Host: source, Path: ImagesPath, RawQuery: url.Values{"ref": {ref}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if f.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.Token)
	}
	resp, err := f.client().Do(req)
	if err != nil {
		return fmt.Errorf("fetch image %s from %s: %w", ref, source, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch image %s from %s: %s", ref, source, resp.Status)
	}
	if err := rt.ImportImage(ctx, ref, resp.Body, MaxImageBytes); err != nil {
		return fmt.Errorf("fetch image %s from %s: %w", ref, source, err)
	}
	if f.Logger != nil {
		f.Logger.Info("fetched an environment image from a member", "ref", ref, "source", source, "seconds", time.Since(start).Seconds())
	}
	return nil
}
