package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/membership"
)

const testToken = "test-token-0123456789abcdef"

// startWith starts a node with options (a quiet logger added).
func startWith(t testing.TB, cfg config.Config, opts Options) *Node {
	t.Helper()
	opts.Logger, opts.Version = quiet, "test"
	n, err := Start(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	return n
}

// do sends one request and returns its status, body and headers.
func do(t *testing.T, method, url, token string, body io.Reader) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// localURL reaches a node's HTTP server over loopback, whatever it bound.
func localURL(n *Node) string {
	_, port, _ := net.SplitHostPort(n.HTTPAddr())
	return "http://127.0.0.1:" + port
}

func TestOffLoopbackNeedsAToken(t *testing.T) {
	cfg := testConfig(t)
	cfg.Node.HTTPAddr = "0.0.0.0:0"
	_, err := Start(context.Background(), cfg, Options{Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "node.api_token") || !strings.Contains(err.Error(), "FROGNANO_NODE_API_TOKEN") {
		t.Fatalf("a node on 0.0.0.0 without a token started or failed unclearly: %v", err)
	}
	if _, statErr := os.Stat(cfg.Node.DataDir); !errors.Is(statErr, os.ErrNotExist) {
		t.Errorf("data dir created for a refused config: %v", statErr)
	}
}

func TestTokenGuardsEveryAPIPath(t *testing.T) {
	cfg := testConfig(t)
	cfg.Node.HTTPAddr = "0.0.0.0:0"
	cfg.Node.APIToken = testToken
	n := startWith(t, cfg, Options{})
	base := localURL(n)

	for _, open := range []string{"/healthz", "/livez", "/readyz"} {
		if code, body, _ := do(t, "GET", base+open, "", nil); code != 200 {
			t.Errorf("probe %s without a token = %d %s", open, code, body)
		}
	}
	for _, path := range []string{InfoPath, "/metrics", membership.Path, "/no/such/path", "/healthz/", "/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline"} {
		for _, tok := range []string{"", "wrong-token-0123456789abcdef", testToken + "x", strings.ToLower(testToken[:5])} {
			code, body, h := do(t, "GET", base+path, tok, nil)
			if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("GET %s with token %q = %d %q, want 401 with WWW-Authenticate", path, tok, code, body)
			}
		}
	}
	// Another scheme or a bare token is not a bearer token.
	for _, auth := range []string{testToken, "Basic " + testToken, "bearer " + testToken, "Bearer  " + testToken} {
		req, _ := http.NewRequest("GET", base+InfoPath, nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q = %d, want 401", auth, resp.StatusCode)
		}
	}
	if code, body, _ := do(t, "GET", base+InfoPath, testToken, nil); code != 200 || !strings.Contains(body, n.Address()) {
		t.Errorf("GET %s with the token = %d %s", InfoPath, code, body)
	}
	if code, body, _ := do(t, "GET", base+"/metrics", testToken, nil); code != 200 || !strings.Contains(body, "frognano_cluster_members 1") {
		t.Errorf("GET /metrics with the token = %d %.200s", code, body)
	}
	// A heap profile, with the token: gzipped protobuf (magic 1f 8b).
	if code, body, _ := do(t, "GET", base+"/debug/pprof/heap", testToken, nil); code != 200 || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("GET /debug/pprof/heap with the token = %d, %d bytes starting %q", code, len(body), body[:min(len(body), 8)])
	}
	if code, _, h := do(t, "POST", base+"/debug/pprof/heap", testToken, nil); code != http.StatusMethodNotAllowed || h.Get("Allow") == "" {
		t.Errorf("POST /debug/pprof/heap = %d (Allow %q), want 405", code, h.Get("Allow"))
	}
}

func TestClusterWithTokenFormsAndRefusesOutsiders(t *testing.T) {
	mk := func(token string, seeds ...string) config.Config {
		cfg := testConfig(t)
		cfg.Node.HTTPAddr = "0.0.0.0:0"
		cfg.Node.APIToken = token
		cfg.Cluster.Seeds = seeds
		return cfg
	}
	a := startWith(t, mk(testToken), Options{})
	seed := strings.TrimPrefix(localURL(a), "http://")
	b := startWith(t, mk(testToken, seed), Options{})
	waitMembers(t, 2, a, b)

	// A node with another token is refused by the cluster and never
	// polled back: it stays alone, and the cluster stays two.
	c := startWith(t, mk("another-token-0123456789", seed), Options{})
	time.Sleep(10 * c.cfg.Cluster.Heartbeat)
	if got := len(c.Members()); got != 1 {
		t.Errorf("node with a wrong token sees %d members", got)
	}
	if got := len(a.Members()); got != 2 {
		t.Errorf("seed admitted a node with a wrong token: %d members", got)
	}
}

func TestWrongMethodIs405WithAllow(t *testing.T) {
	echo := Handler{Pattern: "POST /test/echo", Handler: func(*Node) http.Handler { return http.HandlerFunc(echoBody) }}
	n := startWith(t, testConfig(t), Options{Handlers: []Handler{echo}})
	base := localURL(n)
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/metrics", InfoPath, membership.Path} {
		for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
			code, body, h := do(t, m, base+path, "", strings.NewReader("{}"))
			if code != http.StatusMethodNotAllowed || !strings.Contains(h.Get("Allow"), "GET") {
				t.Errorf("%s %s = %d %q, Allow %q; want 405 with Allow: GET", m, path, code, body, h.Get("Allow"))
			}
		}
		if code, _, _ := do(t, "HEAD", base+path, "", nil); code >= 400 && code != http.StatusServiceUnavailable {
			t.Errorf("HEAD %s = %d", path, code)
		}
	}
	code, _, h := do(t, "GET", base+"/test/echo", "", nil)
	if code != http.StatusMethodNotAllowed || h.Get("Allow") != "POST" {
		t.Errorf("GET on a POST handler = %d, Allow %q", code, h.Get("Allow"))
	}
}

func echoBody(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%d", len(b))
}

func TestOversizeBodyIs413(t *testing.T) {
	small := Handler{Pattern: "POST /test/small", MaxBody: 1000, Handler: func(*Node) http.Handler { return http.HandlerFunc(echoBody) }}
	dflt := Handler{Pattern: "POST /test/default", Handler: func(*Node) http.Handler { return http.HandlerFunc(echoBody) }}
	n := startWith(t, testConfig(t), Options{Handlers: []Handler{small, dflt}, HTTP: HTTPLimits{MaxBody: 4096}})
	base := localURL(n)

	if code, body, _ := do(t, "POST", base+"/test/small", "", strings.NewReader(strings.Repeat("x", 1000))); code != 200 || body != "1000" {
		t.Errorf("a body at the limit = %d %q", code, body)
	}
	// Declared too large: refused before a byte is read.
	if code, _, _ := do(t, "POST", base+"/test/small", "", strings.NewReader(strings.Repeat("x", 1001))); code != http.StatusRequestEntityTooLarge {
		t.Errorf("declared oversize body = %d, want 413", code)
	}
	// Chunked, with no length to refuse up front: cut while reading.
	if code, _, _ := do(t, "POST", base+"/test/small", "", io.MultiReader(strings.NewReader(strings.Repeat("x", 5000)))); code != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked oversize body = %d, want 413", code)
	}
	if code, _, _ := do(t, "POST", base+"/test/default", "", strings.NewReader(strings.Repeat("x", 4097))); code != http.StatusRequestEntityTooLarge {
		t.Errorf("body over the node's default limit = %d, want 413", code)
	}
	// The node's own paths take no body.
	for _, path := range []string{InfoPath, membership.Path, "/metrics"} {
		if code, _, _ := do(t, "GET", base+path, "", strings.NewReader(strings.Repeat("x", 10<<20))); code != http.StatusRequestEntityTooLarge {
			t.Errorf("GET %s with a 10 MiB body = %d, want 413", path, code)
		}
	}
}

// TestSlowlorisConnectionsAreClosed opens 20 connections that never finish
// their headers or never send their bodies; the server closes each within
// its read timeouts, and still answers others meanwhile.
func TestSlowlorisConnectionsAreClosed(t *testing.T) {
	echo := Handler{Pattern: "POST /test/echo", Handler: func(*Node) http.Handler { return http.HandlerFunc(echoBody) }}
	lim := HTTPLimits{ReadHeader: 500 * time.Millisecond, Read: time.Second}
	n := startWith(t, testConfig(t), Options{Handlers: []Handler{echo}, HTTP: lim})
	_, port, _ := net.SplitHostPort(n.HTTPAddr())
	addr := "127.0.0.1:" + port

	start := time.Now()
	closed := make(chan time.Duration, 20)
	for i := range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i%2 == 0 { // headers never finished
			fmt.Fprintf(c, "POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Len")
		} else { // body promised, never sent
			fmt.Fprintf(c, "POST /test/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789")
		}
		go func() {
			_, _ = io.Copy(io.Discard, c) // returns once the server closes
			closed <- time.Since(start)
		}()
	}
	// Meanwhile others are served.
	if code, _, _ := do(t, "GET", "http://"+addr+"/healthz", "", nil); code != 200 {
		t.Errorf("healthz during the attack = %d", code)
	}
	deadline := time.After(lim.Read + 4*time.Second)
	var slowest time.Duration
	for range 20 {
		select {
		case d := <-closed:
			slowest = max(slowest, d)
		case <-deadline:
			t.Fatalf("a slow connection was still open %v after it started (read timeout %v)", time.Since(start), lim.Read)
		}
	}
	t.Logf("20 slow connections closed, the last after %v (read timeout %v)", slowest.Round(time.Millisecond), lim.Read)
}

// TestLongHandlerOutlivesTheTimeouts: once the body is read, a handler (a
// generation) may run longer than the read and write timeouts without its
// context being cancelled, and its answer reaches the client.
func TestLongHandlerOutlivesTheTimeouts(t *testing.T) {
	var ctxErr atomic.Value
	slow := Handler{Pattern: "POST /test/slow", Handler: func(*Node) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			select {
			case <-r.Context().Done():
				ctxErr.Store(r.Context().Err().Error())
				return
			case <-time.After(1500 * time.Millisecond):
			}
			fmt.Fprintf(w, "done %d", len(b))
		})
	}}
	lim := HTTPLimits{ReadHeader: 300 * time.Millisecond, Read: 500 * time.Millisecond, Write: 500 * time.Millisecond}
	n := startWith(t, testConfig(t), Options{Handlers: []Handler{slow}, HTTP: lim})
	code, body, _ := do(t, "POST", localURL(n)+"/test/slow", "", strings.NewReader("abc"))
	if code != 200 || body != "done 3" {
		t.Fatalf("a 1.5 s handler under 0.5 s timeouts = %d %q (context: %v)", code, body, ctxErr.Load())
	}
}

// TestStalledReaderIsCutOff: a client that stops reading a stream holds
// the handler only until one write has waited the write timeout.
func TestStalledReaderIsCutOff(t *testing.T) {
	stopped := make(chan error, 1)
	stream := Handler{Pattern: "GET /test/stream", Handler: func(*Node) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			chunk := []byte(strings.Repeat("data: xxxxxxxx\n\n", 4096))
			for i := 0; ; i++ {
				if _, err := w.Write(chunk); err != nil {
					stopped <- err
					return
				}
				w.(http.Flusher).Flush()
				if i > 100000 {
					stopped <- errors.New("wrote 6 GB to a client that reads nothing")
					return
				}
			}
		})
	}}
	lim := HTTPLimits{Write: 500 * time.Millisecond}
	n := startWith(t, testConfig(t), Options{Handlers: []Handler{stream}, HTTP: lim})
	_, port, _ := net.SplitHostPort(n.HTTPAddr())
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /test/stream HTTP/1.1\r\nHost: x\r\n\r\n")
	// Read the status line, then nothing more.
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status line %q: %v", line, err)
	}
	select {
	case err := <-stopped:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("the stream stopped with %v, want a write timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stream to a client that stopped reading was still writing after 10 s")
	}
}

// counter is a local HTTP listener that records every request it gets.
type counter struct {
	mu   sync.Mutex
	reqs []string
	addr string
}

func newCounter(t *testing.T, host string, answer func(w http.ResponseWriter)) *counter {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Skipf("cannot listen on %s: %v", host, err)
	}
	c := &counter{addr: ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.reqs = append(c.reqs, r.Method+" "+r.URL.RequestURI())
		c.mu.Unlock()
		if answer != nil {
			answer(w)
			return
		}
		http.NotFound(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return c
}

func (c *counter) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.reqs...)
}

// poll sends one membership poll carrying header as X-Frognano-Member.
func poll(t *testing.T, base, token, header string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+membership.Path, nil)
	req.Header.Set("X-Frognano-Member", header)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestMembershipHeaderCannotMakeTheNodeFetch replays the attack of issue
// 18: polls whose X-Frognano-Member header names another host and path.
func TestMembershipHeaderCannotMakeTheNodeFetch(t *testing.T) {
	t.Run("with a token, an unauthenticated poll is refused and never polled back", func(t *testing.T) {
		target := newCounter(t, "127.0.0.1", nil)
		cfg := testConfig(t)
		cfg.Node.HTTPAddr, cfg.Node.APIToken = "0.0.0.0:0", testToken
		n := startWith(t, cfg, Options{})
		for i := range 50 {
			for _, h := range []string{target.addr, target.addr + "/steal?x=" + fmt.Sprint(i), "user@" + target.addr} {
				if code := poll(t, localURL(n), "", h); code != http.StatusUnauthorized {
					t.Fatalf("unauthenticated poll = %d, want 401", code)
				}
			}
		}
		time.Sleep(8 * cfg.Cluster.Heartbeat)
		if got := target.seen(); len(got) != 0 {
			t.Fatalf("the node sent %d requests where headers pointed it: %v", len(got), got)
		}
		if got := len(n.Members()); got != 1 {
			t.Fatalf("%d members after the attack", got)
		}
	})
	t.Run("on loopback, a header names only a port of the poller's own address", func(t *testing.T) {
		// elsewhere listens on another loopback address: no header may
		// make the node reach it, nor any path but the membership path.
		elsewhere := newCounter(t, "127.0.0.2", nil)
		_, port, _ := net.SplitHostPort(elsewhere.addr)
		own := newCounter(t, "127.0.0.1", nil)
		_, ownPort, _ := net.SplitHostPort(own.addr)
		n := startWith(t, testConfig(t), Options{})
		base := localURL(n)
		attacks := []string{
			elsewhere.addr, elsewhere.addr + "/x", "http://" + elsewhere.addr + "/", "user@" + elsewhere.addr,
			"evil.example:" + port, "127.0.0.1:" + ownPort + "/steal?x=1", "127.0.0.1:" + ownPort + "#f",
			strings.Repeat("a", 100000) + ":" + ownPort,
		}
		for range 20 {
			for _, h := range attacks {
				poll(t, base, "", h)
			}
		}
		time.Sleep(8 * n.cfg.Cluster.Heartbeat)
		if got := elsewhere.seen(); len(got) != 0 {
			t.Fatalf("headers made the node reach another address: %v", got)
		}
		// "evil.example:PORT" is taken as "poll me back on PORT" at the
		// poller's own address: at most one GET of the membership path per
		// round, only while polls keep coming, and never a member.
		for _, r := range own.seen() {
			if r != "GET "+membership.Path {
				t.Fatalf("the node sent %q", r)
			}
		}
		before := len(own.seen())
		time.Sleep(8 * n.cfg.Cluster.Heartbeat)
		if after := len(own.seen()); after != before {
			t.Fatalf("the node kept polling a non-member: %d requests, then %d", before, after)
		}
		if before > 20 {
			t.Fatalf("%d polls of a non-member for 20 rounds of headers", before)
		}
		if got := len(n.Members()); got != 1 {
			t.Fatalf("%d members after the attack", got)
		}
	})
}

// TestAPeersAnswerCannotAddMembers: a seed whose answer lists made-up
// members (one with a path in its address, one off loopback, one on another
// loopback port) adds none of them: they are probed at most, directly, and
// never at another path.
func TestAPeersAnswerCannotAddMembers(t *testing.T) {
	probed := newCounter(t, "127.0.0.1", nil)
	var seed *counter
	seed = newCounter(t, "127.0.0.1", func(w http.ResponseWriter) {
		host, port, _ := net.SplitHostPort(seed.addr)
		var p int
		fmt.Sscan(port, &p)
		self := membership.Member{ID: "fake-seed", Cluster: "frognano", Host: host, Port: p, HTTP: seed.addr}
		view := map[string]any{"self": self, "members": []membership.Member{
			self,
			{ID: "ghost-1", Cluster: "frognano", Host: "127.0.0.1", Port: 1, HTTP: probed.addr + "/steal?x=1"},
			{ID: "ghost-2", Cluster: "frognano", Host: "10.9.9.9", Port: 1, HTTP: "10.9.9.9:80"},
			{ID: "ghost-3", Cluster: "frognano", Host: "127.0.0.1", Port: 2, HTTP: probed.addr},
		}}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(view)
	})
	cfg := testConfig(t)
	cfg.Cluster.Seeds = []string{seed.addr}
	n := startWith(t, cfg, Options{})
	time.Sleep(10 * cfg.Cluster.Heartbeat)
	for _, m := range n.Members() {
		if strings.HasPrefix(m.ID, "ghost") {
			t.Errorf("a peer's answer added member %+v", m)
		}
	}
	for _, r := range probed.seen() {
		if r != "GET "+membership.Path {
			t.Errorf("the node sent %q to a listed address", r)
		}
	}
	if len(probed.seen()) == 0 {
		t.Errorf("the listed loopback member was never probed directly (the test proves nothing)")
	}
}

// TestDashboardLoginCookie: with a token, a browser signs in at /ui/login
// and gets a cookie that opens GET under /ui/ only; the cookie is not the
// token, a forged one or a wrong token opens nothing, and no other path
// takes the cookie instead of the bearer header.
func TestDashboardLoginCookie(t *testing.T) {
	cfg := testConfig(t)
	cfg.Node.HTTPAddr = "0.0.0.0:0"
	cfg.Node.APIToken = testToken
	n := startWith(t, cfg, Options{Handlers: []Handler{{Pattern: "/ui/", Handler: func(*Node) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "dashboard "+r.Method) })
	}}}})
	base := localURL(n)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string, cookie *http.Cookie, form string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(form))
		if form != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := send("GET", "/ui/", nil, ""); r.StatusCode != http.StatusSeeOther || r.Header.Get("Location") != UILoginPath {
		t.Fatalf("GET /ui/ signed out = %d to %q, want 303 to the login page", r.StatusCode, r.Header.Get("Location"))
	}
	if r := send("GET", UILoginPath, nil, ""); r.StatusCode != 200 {
		t.Fatalf("GET %s = %d, want the form", UILoginPath, r.StatusCode)
	}
	if r := send("POST", UILoginPath, nil, "token=wrong-token-0123456789abcdef"); r.StatusCode != http.StatusUnauthorized || len(r.Cookies()) != 0 {
		t.Fatalf("a wrong token signed in: %d, cookies %v", r.StatusCode, r.Cookies())
	}
	r := send("POST", UILoginPath, nil, "token="+testToken)
	if r.StatusCode != http.StatusSeeOther || len(r.Cookies()) != 1 {
		t.Fatalf("sign-in with the token = %d, cookies %v", r.StatusCode, r.Cookies())
	}
	c := r.Cookies()[0]
	if strings.Contains(c.Value, testToken) || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" {
		t.Fatalf("cookie %+v: want an HttpOnly, SameSite=Strict cookie for /ui/ that is not the token", c)
	}
	if r := send("GET", "/ui/run?id=x", c, ""); r.StatusCode != 200 {
		t.Fatalf("GET /ui/ with the cookie = %d", r.StatusCode)
	}
	for _, path := range []string{InfoPath, "/metrics", membership.Path} {
		if r := send("GET", path, c, ""); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s with the dashboard cookie = %d, want 401", path, r.StatusCode)
		}
	}
	if r := send("POST", "/ui/run", c, "x=1"); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST under /ui/ with the cookie = %d, want 401 (the cookie opens reads only)", r.StatusCode)
	}
	forged := &http.Cookie{Name: c.Name, Value: strings.Repeat("0", len(c.Value))}
	if r := send("GET", "/ui/", forged, ""); r.StatusCode != http.StatusSeeOther {
		t.Errorf("a forged cookie = %d, want 303 to the login page", r.StatusCode)
	}
}
