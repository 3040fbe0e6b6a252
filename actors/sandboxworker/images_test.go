package sandboxworker

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/frognano/frognano/actors/sandbox"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// TestFetchOnlyFromTheAskingMember: an image is fetched only from the
// member that asked for the sandbox, at the HTTP address it gossiped (its
// remoting host where it bound an unspecified one); never from this node,
// an unknown address, or a member without an HTTP address. A failed
// transfer is answered again for a while rather than tried by every
// episode.
func TestFetchOnlyFromTheAskingMember(t *testing.T) {
	members := []*rtmsg.NodeInfo{
		{Address: "10.0.0.5:7071", HttpAddress: "10.0.0.5:7070"},
		{Address: "10.0.0.6:7071", HttpAddress: "0.0.0.0:7070"},
		{Address: "10.0.0.7:7071", HttpAddress: "[::]:8080"},
		{Address: "10.0.0.8:7071"},
		{Address: "10.0.0.9:7071", HttpAddress: "10.0.0.9:7070"},
	}
	var runtimes atomic.Int64
	f := &Fetcher{
		Runtime: func(context.Context) (*sandbox.Runtime, error) {
			runtimes.Add(1)
			return nil, errors.New("no containerd in this test")
		},
		Members: func() []*rtmsg.NodeInfo { return members },
		Self:    func() string { return "10.0.0.9:7071" },
		Token:   "secret-token",
	}
	for member, want := range map[string]string{
		"10.0.0.5:7071": "10.0.0.5:7070",
		"10.0.0.6:7071": "10.0.0.6:7070",
		"10.0.0.7:7071": "10.0.0.7:8080",
	} {
		if got, err := f.source(member); err != nil || got != want {
			t.Errorf("source of %s: %q, %v; want %q", member, got, err, want)
		}
	}
	for _, member := range []string{"10.0.0.9:7071", "10.0.0.8:7071", "10.0.0.1:7071", "", "not an address"} {
		if err := f.Fetch(context.Background(), member, "frognano.local/env/x:1"); !errors.Is(err, ErrSource) {
			t.Errorf("member %q: %v, want ErrSource", member, err)
		}
	}
	if n := runtimes.Load(); n != 0 {
		t.Fatalf("%d refused fetches went on to the transfer", n)
	}
	// A member is tried (its transfer fails here: no containerd), and the
	// failure is remembered.
	err := f.Fetch(context.Background(), "10.0.0.5:7071", "frognano.local/env/x:1")
	if err == nil || errors.Is(err, ErrSource) {
		t.Fatalf("the asking member: %v", err)
	}
	err = f.Fetch(context.Background(), "10.0.0.5:7071", "frognano.local/env/x:1")
	if err == nil || !strings.Contains(err.Error(), "ago") || runtimes.Load() != 1 {
		t.Fatalf("again at once: %v after %d transfers, want the remembered failure", err, runtimes.Load())
	}
}

// TestFetchClientFollowsNoRedirect: the token must not follow a redirect
// to another address.
func TestFetchClientFollowsNoRedirect(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	member := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/steal", http.StatusFound)
	}))
	defer member.Close()
	req, _ := http.NewRequest(http.MethodGet, member.URL+ImagesPath, nil)
	req.Header.Set("Authorization", "Bearer secret-token")
	resp, err := (&Fetcher{}).client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || elsewhere.Load() != 0 {
		t.Fatalf("status %d, %d requests elsewhere: the redirect was followed", resp.StatusCode, elsewhere.Load())
	}
}
