package sandboxworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// that asked for the sandbox (SandboxCreate.image_source) over the node
// HTTP API, with the cluster's API token, instead of failing the episode.

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
			if err := runtime.ExportImage(r.Context(), ref, w); err != nil {
				// Headers may be out already: the client sees a truncated
				// archive, which its import refuses.
				n.Logger().Warn("image export failed", "ref", ref, "err", err)
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

// Fetcher fetches images from other members for this node's workers.
type Fetcher struct {
	// Runtime is this node's containerd connection.
	Runtime func(context.Context) (*sandbox.Runtime, error)
	// Members lists the live members; only a live member's HTTP address is
	// fetched from (a SandboxCreate names the source, and this node sends
	// its API token there).
	Members func() []*rtmsg.NodeInfo
	// Self is this node's own HTTP address, never a source.
	Self func() string
	// Token is the cluster's node API token (node.api_token), if any.
	Token  string
	Client *http.Client
	Logger *slog.Logger

	mu       sync.Mutex
	inflight map[string]*fetch
}

type fetch struct {
	done chan struct{}
	err  error
}

// ErrSource wraps a fetch refused because its source is not a live member.
var ErrSource = errors.New("image source is not a live cluster member")

// Fetch makes ref present in this node's containerd, fetching it from the
// member at source. Concurrent fetches of one ref share one transfer; a
// failed one is tried again by the next call.
func (f *Fetcher) Fetch(ctx context.Context, source, ref string) error {
	if !f.member(source) {
		return fmt.Errorf("%w: %q", ErrSource, config.Clip(source, 80))
	}
	f.mu.Lock()
	if f.inflight == nil {
		f.inflight = map[string]*fetch{}
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
			f.mu.Unlock()
			close(op.done)
		}()
	}
	f.mu.Unlock()
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *Fetcher) member(source string) bool {
	if source == "" || config.HostPort(source) != nil || (f.Self != nil && source == f.Self()) {
		return false
	}
	return slices.ContainsFunc(f.Members(), func(m *rtmsg.NodeInfo) bool { return m.GetHttpAddress() == source })
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
	client := f.Client
	if client == nil {
		client = &http.Client{}
	}
	resp, err := client.Do(req)
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
