package gateway

// Probes of the actor gateway as an attacker and a careless user would
// call it, on the real HTTP server of a real node.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/runtime/node"
)

// localActors counts the actors (processes) of n's actor system.
func localActors(n *node.Node) int {
	k := 0
	for _, m := range n.System().ProcessRegistry.LocalPIDs.LocalPIDs {
		k += m.Count()
	}
	return k
}

func post(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func settle(n *node.Node, want int) int {
	deadline := time.Now().Add(3 * time.Second)
	k := localActors(n)
	for k > want && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		k = localActors(n)
	}
	return k
}

// TestAttackGatewaySpawnLeavesNoActorBehind: a SpawnRequest to the manager
// through the gateway (frognano cluster spawn KIND) spawns an actor whose
// PID goes back to an HTTP client, which can neither reach nor stop it
// (the gateway serves named actors only). Calls must not leave an actor
// per call on the node for ever.
func TestAttackGatewaySpawnLeavesNoActorBehind(t *testing.T) {
	n := startNode(t, "")
	url := "http://" + n.HTTPAddr() + Path + node.ManagerName
	post(t, url, "", `{"type": "frognano.runtime.v1.Ping", "message": {}}`) // warm up
	before := settle(n, 0)
	const calls = 50
	for i := 0; i < calls; i++ {
		code, body := post(t, url, "", `{"type": "frognano.runtime.v1.SpawnRequest", "message": {"kind": "diag"}, "timeout_seconds": 10}`)
		if code != http.StatusOK || !strings.Contains(body, "SpawnReply") {
			if code == http.StatusOK || code/100 == 4 {
				return // refused: holds
			}
			t.Fatalf("spawn %d: %d %s", i, code, body)
		}
	}
	if after := settle(n, before); after >= before+calls/2 {
		t.Errorf("%d gateway SpawnRequests left %d more actors on the node (%d before, %d after), unreachable and never stopped",
			calls, after-before, before, after)
	}
}

// TestAttackGatewayTimeoutsOutOfRange: a timeout_seconds the gateway
// cannot honour is refused (400), not silently replaced by a minute.
func TestAttackGatewayTimeoutsOutOfRange(t *testing.T) {
	n := startNode(t, "")
	url := "http://" + n.HTTPAddr() + Path + "stager"
	for _, ts := range []string{"-1", "-1e300", "1e300", "1e10", "9.3e9"} {
		code, body := post(t, url, "", `{"type": "frognano.messages.v1.EnvGetRequest", "message": {"name": "x"}, "timeout_seconds": `+ts+`}`)
		if code != http.StatusBadRequest {
			t.Errorf("timeout_seconds %s: %d %s, want 400", ts, code, strings.TrimSpace(body))
		}
	}
}

// TestAttackGatewayClientsThatLeave: clients that leave a call before the
// answer leave no actor or goroutine behind.
func TestAttackGatewayClientsThatLeave(t *testing.T) {
	n := startNode(t, "")
	url := "http://" + n.HTTPAddr() + Path + "stager"
	post(t, url, "", `{"type": "frognano.messages.v1.EnvGetRequest", "message": {"name": "x"}}`)
	before, gBefore := settle(n, 0), runtime.NumGoroutine()
	for i := 0; i < 40; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		// stager never answers a Ping: the call waits for its timeout (an hour).
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"type": "frognano.runtime.v1.Ping", "message": {}, "timeout_seconds": 3600}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
	}
	http.DefaultClient.CloseIdleConnections()
	if after := settle(n, before); after > before+2 {
		t.Errorf("40 calls whose clients left: %d actors before, %d after", before, after)
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > gBefore+5 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > gBefore+5 {
		t.Errorf("40 calls whose clients left: %d goroutines before, %d after", gBefore, g)
	}
}

// TestAttackGatewayNameTricks: escaped dots, slashes, NULs and case in the
// {name} reach no actor but the ones served.
func TestAttackGatewayNameTricks(t *testing.T) {
	n := startNode(t, "")
	base := "http://" + n.HTTPAddr() + Path
	body := `{"type": "frognano.messages.v1.EnvGetRequest", "message": {"name": "x"}, "timeout_seconds": 2}`
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, name := range []string{"", "%2e%2e", "..%2Fnode", "stager%2F..", "stager%00", "Stager", "stager%20", "%20stager", "stager/", "stager/x",
		"node%2F$1", "$1", "runs", "runs%2Fx", "learner", "%2Fstager", "..%2Fstager", "stager%2F"} {
		req, _ := http.NewRequest(http.MethodPost, base+name, strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("POST %s%s: %s %s", Path, name, resp.Status, b)
		}
	}
}

// TestAttackGatewayHostileBodies: huge, endless, deep and concatenated
// bodies.
func TestAttackGatewayHostileBodies(t *testing.T) {
	n := startNode(t, "")
	url := "http://" + n.HTTPAddr() + Path + "stager"
	// Deep nesting inside the message (protojson) and around it (encoding/json).
	if code, body := post(t, url, "", `{"type": "frognano.messages.v1.EnvAddRequest", "message": `+strings.Repeat(`{"a":`, 100000)+`1`+strings.Repeat(`}`, 100000)+`}`); code != http.StatusBadRequest {
		t.Errorf("deeply nested message: %d %.200s", code, body)
	}
	if code, body := post(t, url, "", strings.Repeat("[", 1<<20)); code != http.StatusBadRequest {
		t.Errorf("deep array: %d %.200s", code, body)
	}
	// Beyond the 16 MiB limit, without a declared length: 413.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`{"type": "frognano.runtime.v1.Ping", "message": {"payload": "`))
		chunk := []byte(strings.Repeat("A", 1<<20))
		for i := 0; i < 17; i++ {
			if _, err := pw.Write(chunk); err != nil {
				break
			}
		}
		pw.Write([]byte(`"}}`))
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, url, pr)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a 17 MiB chunked body: %d %.200s, want 413", resp.StatusCode, b)
	}
	// Two requests in one body: one is carried, the other dropped in silence.
	code, body := post(t, url, "", `{"type": "frognano.messages.v1.EnvGetRequest", "message": {"name": "one"}, "timeout_seconds": 5}{"type": "frognano.messages.v1.EnvAddRequest", "message": {"source": "two"}}`)
	if code != http.StatusBadRequest {
		t.Errorf("a body of two requests: %d %s, want 400", code, strings.TrimSpace(body))
	}
}

// TestAttackGatewayNeedsTheToken: with a token, nothing reaches an actor
// without it (no spawn happens), whatever the spelling.
func TestAttackGatewayNeedsTheToken(t *testing.T) {
	token := strings.Repeat("k", 40)
	n := startNode(t, token)
	before := settle(n, 0)
	base := "http://" + n.HTTPAddr()
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer " + token[:39], "Bearer " + token + "k", "Basic " + token, token, "Bearer  " + token, "Token " + token} {
		for _, path := range []string{Path + node.ManagerName, "//v1/actors/node", "/healthz/../v1/actors/node", "/ui/login/../../v1/actors/node", "/readyz%2F..%2Fv1/actors/node"} {
			req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(`{"type": "frognano.runtime.v1.SpawnRequest", "message": {"kind": "diag"}}`))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized && !(path == "/readyz%2F..%2Fv1/actors/node" && resp.StatusCode/100 == 4) {
				t.Errorf("POST %s with Authorization %q: %s %.200s", path, auth, resp.Status, b)
			}
		}
	}
	if after := settle(n, before); after != before {
		t.Errorf("calls without the token changed the node's actors: %d before, %d after", before, after)
	}
	_ = fmt.Sprint
}
