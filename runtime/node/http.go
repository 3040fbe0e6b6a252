package node

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/membership"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/placement"
	"github.com/frognano/frognano/runtime/supervise"
)

// InfoPath serves the node's facts as JSON; clients read the remoting address here.
const InfoPath = "/v1/node"

// check is one named readiness condition.
type check struct {
	name string
	fn   func(ctx context.Context) error
}

func (n *Node) checks() []check {
	return []check{
		{"store", func(ctx context.Context) error { return n.db.Ping(ctx) }},
		{"actors", func(ctx context.Context) error {
			res, err := n.system.Root.RequestFuture(n.manager, &rtmsg.Ping{Seq: 1}, time.Second).Result()
			if err != nil {
				return err
			}
			if _, ok := res.(*rtmsg.Pong); !ok {
				return fmt.Errorf("manager answered %T", res)
			}
			return nil
		}},
		{"cluster", func(context.Context) error {
			for _, m := range n.clusterMembers() {
				if m.Address() == n.system.Address() {
					return nil
				}
			}
			return errors.New("this node is not in its own member list")
		}},
	}
}

// HTTPLimits bound what one client of the node's HTTP server can hold.
// Zero fields take DefaultHTTPLimits' values.
type HTTPLimits struct {
	// ReadHeader is the time a client has to send the request line and
	// headers; Read the time to send the whole request, body included. Once
	// the body has been read, net/http lifts the read deadline and a handler
	// may run as long as it needs (a generation).
	ReadHeader, Read time.Duration
	// Write is how long one write may wait on a client that does not read;
	// every write a handler makes gets this much anew, so a long stream runs
	// while its client reads and is cut once it stops.
	Write time.Duration
	// Idle is how long a keep-alive connection may wait for its next request.
	Idle time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
	// MaxBody bounds a request body on mounted handlers that set no
	// MaxBody of their own; the node's own paths take no body.
	MaxBody int64
}

// DefaultHTTPLimits are the limits of a node's HTTP server.
var DefaultHTTPLimits = HTTPLimits{
	ReadHeader:     5 * time.Second,
	Read:           30 * time.Second,
	Write:          30 * time.Second,
	Idle:           2 * time.Minute,
	MaxHeaderBytes: 64 << 10,
	MaxBody:        1 << 20,
}

func (l HTTPLimits) withDefaults() HTTPLimits {
	d := DefaultHTTPLimits
	if l.ReadHeader > 0 {
		d.ReadHeader = l.ReadHeader
	}
	if l.Read > 0 {
		d.Read = l.Read
	}
	if l.Write > 0 {
		d.Write = l.Write
	}
	if l.Idle > 0 {
		d.Idle = l.Idle
	}
	if l.MaxHeaderBytes > 0 {
		d.MaxHeaderBytes = l.MaxHeaderBytes
	}
	if l.MaxBody > 0 {
		d.MaxBody = l.MaxBody
	}
	return d
}

// openPaths answer without the API token: probes must work without secrets.
var openPaths = map[string]bool{"/healthz": true, "/livez": true, "/readyz": true}

func (n *Node) serveHTTP() {
	n.metrics = prometheus.NewRegistry()
	n.metrics.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		supervise.Restarts,
		placement.Retries,
		KindActorsStarted,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "frognano", Name: "cluster_members", Help: "Live cluster members seen by this node."},
			func() float64 { return float64(len(n.clusterMembers())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "frognano", Name: "node_gpus", Help: "GPUs found on this node."},
			func() float64 { return float64(len(n.caps.Gpus)) }),
	)
	n.metrics.MustRegister(n.collectors...)
	lim := n.limits
	mux := http.NewServeMux()
	// The node's own paths are GET (and so HEAD) only and take no body;
	// ServeMux answers other methods 405 with an Allow header.
	own := func(pattern string, h http.Handler) { mux.Handle("GET "+pattern, n.bounded(0, h)) }
	own("/healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	}))
	own("/livez", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	}))
	own("/readyz", http.HandlerFunc(n.readyz))
	own("/metrics", promhttp.HandlerFor(n.metrics, promhttp.HandlerOpts{}))
	own(membership.Path, n.membership.Handler())
	own(InfoPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := protojson.Marshal(n.Info())
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	// Profiles of the running process (net/http/pprof), behind the same
	// token as every other path: where the heap goes during a run is a
	// question `go tool pprof http://HOST:PORT/debug/pprof/heap` answers.
	own("/debug/pprof/", http.HandlerFunc(pprof.Index))
	own("/debug/pprof/cmdline", http.HandlerFunc(pprof.Cmdline))
	own("/debug/pprof/profile", http.HandlerFunc(pprof.Profile))
	own("/debug/pprof/symbol", http.HandlerFunc(pprof.Symbol))
	own("/debug/pprof/trace", http.HandlerFunc(pprof.Trace))
	for _, h := range n.handlers {
		max := h.MaxBody
		if max <= 0 {
			max = lim.MaxBody
		}
		mux.Handle(h.Pattern, n.bounded(max, h.Handler(n)))
	}
	n.http = &http.Server{
		Handler:           n.guard(mux),
		ReadHeaderTimeout: lim.ReadHeader,
		ReadTimeout:       lim.Read,
		WriteTimeout:      lim.Write,
		IdleTimeout:       lim.Idle,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := n.http.Serve(n.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("http server stopped", "error", err)
		}
	}()
}

// guard is the outer layer of every request: each write gets the write
// limit anew, and with an API token configured every path but the probes
// needs it (`Authorization: Bearer <token>`, compared in constant time).
func (n *Node) guard(next http.Handler) http.Handler {
	token := n.cfg.Node.APIToken
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w = &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: n.limits.Write}
		if token != "" && r.URL.Path == UILoginPath {
			n.uiLogin(w, r, token)
			return
		}
		if token != "" && !openPaths[r.URL.Path] {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			sum := sha256.Sum256([]byte(got))
			authed := ok && subtle.ConstantTimeCompare(sum[:], want[:]) == 1
			if !authed && (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasPrefix(r.URL.Path, uiPrefix) {
				if c, err := r.Cookie(uiCookie); err == nil {
					authed = subtle.ConstantTimeCompare([]byte(c.Value), []byte(uiSession(token))) == 1
				}
				if !authed {
					http.Redirect(w, r, UILoginPath, http.StatusSeeOther)
					return
				}
			}
			if !authed {
				w.Header().Set("WWW-Authenticate", `Bearer realm="frognano"`)
				http.Error(w, "401 unauthorized: this node's API needs `Authorization: Bearer <node.api_token>`", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// The dashboard in a browser, which cannot send a bearer header: with an
// API token configured, GET /ui/login shows a form, POST /ui/login with the
// right token sets a cookie holding an HMAC of the token (never the token
// itself; HttpOnly, SameSite=Strict, path /ui/), and the guard accepts that
// cookie for GET and HEAD under /ui/ only — the dashboard is read-only, and
// every other path still needs the header.
const (
	UILoginPath = "/ui/login"
	uiPrefix    = "/ui/"
	uiCookie    = "frognano_ui"
)

// uiSession is the dashboard cookie's value for token.
func uiSession(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("frognano dashboard session v1"))
	return hex.EncodeToString(m.Sum(nil))
}

const uiLoginForm = `<!doctype html><html><head><meta charset="utf-8"><title>frognano: sign in</title></head>
<body style="font-family:sans-serif;margin:3em"><h1>frognano dashboard</h1>
<p>This node's API needs its token (<code>node.api_token</code>).</p>%s
<form method="post" action="/ui/login"><input type="password" name="token" autocomplete="current-password" size="40" autofocus>
<button type="submit">Sign in</button></form></body></html>`

func (n *Node) uiLogin(w http.ResponseWriter, r *http.Request, token string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		fmt.Fprintf(w, uiLoginForm, "")
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 4096)
		got := r.PostFormValue("token")
		a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, uiLoginForm, "<p><b>Wrong token.</b></p>")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: uiSession(token), Path: uiPrefix, HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		http.Redirect(w, r, uiPrefix, http.StatusSeeOther)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
	}
}

// DecodeJSON reads exactly one JSON value with no unknown fields from a
// request body (what mounted handlers take); the status to answer with when it cannot (413 for a body
// past the handler's limit).
func DecodeJSON(body io.Reader, v any) (int, error) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.Decode(&struct{}{}) != io.EOF {
			err = errors.New("more than one JSON value")
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return http.StatusOK, nil
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("larger than the %d bytes this path takes", tooBig.Limit)
	}
	return http.StatusBadRequest, err
}

// bounded limits a handler's request body to max bytes: 413 at once for a
// declared length beyond it, http.MaxBytesError from the body's Read past it
// otherwise.
func (n *Node) bounded(max int64, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > max {
			http.Error(w, fmt.Sprintf("413 request body too large: %d bytes, this path takes at most %d", r.ContentLength, max), http.StatusRequestEntityTooLarge)
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, max)
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineWriter gives every write (and flush) d to complete.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) Flush() {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.d))
	_ = w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// readyz runs every named check; ?verbose lists them like etcd and Kubernetes do.
func (n *Node) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	type result struct {
		Name  string `json:"name"`
		OK    bool   `json:"ok"`
		Error string `json:"error,omitempty"`
	}
	var results []result
	ok := true
	for _, c := range n.checks() {
		err := c.fn(ctx)
		res := result{Name: c.name, OK: err == nil}
		if err != nil {
			ok = false
			res.Error = err.Error()
		}
		results = append(results, res)
	}
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"ready": ok, "checks": results})
}

// APIError is a call a node's HTTP API refused: its status and what it
// said (the {"error": …} body of the run service and the gateway, or the
// status line).
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return e.Message }

// ReadAPIError reads the answer of a refused call (status ≥ 300) from
// the node at base.
func ReadAPIError(resp *http.Response, base string) *APIError {
	text, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(text, &e) == nil && e.Error != "" {
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	msg := fmt.Sprintf("node at %s: %s %s: %s", base, resp.Request.Method, resp.Request.URL.Path, resp.Status)
	if t := strings.TrimSpace(string(text)); t != "" {
		msg += ": " + config.Clip(t, 200)
	}
	return &APIError{Status: resp.StatusCode, Message: msg}
}
