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

// TestFetchOnlyFromLiveMembers: the source of an image comes in a
// SandboxCreate, and the fetch carries this node's API token, so a source
// that is not a live member's HTTP address (or is this node) is refused
// before any connection is made.
func TestFetchOnlyFromLiveMembers(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("the token went to %s", r.Host)
		}
		http.Error(w, "no", http.StatusTeapot)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	member := "127.0.0.1:1" // a member's address: the listener above is not one
	f := &Fetcher{
		Runtime: func(context.Context) (*sandbox.Runtime, error) { return nil, errors.New("no containerd in this test") },
		Members: func() []*rtmsg.NodeInfo {
			return []*rtmsg.NodeInfo{{HttpAddress: member}, {HttpAddress: "127.0.0.1:2"}}
		},
		Self:  func() string { return "127.0.0.1:2" },
		Token: "secret-token",
	}
	for _, source := range []string{host, "127.0.0.1:2", "", "not an address", "127.0.0.1:1/../x"} {
		if err := f.Fetch(context.Background(), source, "frognano.local/env/x:1"); !errors.Is(err, ErrSource) {
			t.Errorf("source %q: %v, want ErrSource", source, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached a server that is not a member", n)
	}
	// A member is tried (here its containerd is missing, so it fails there).
	if err := f.Fetch(context.Background(), member, "frognano.local/env/x:1"); err == nil || errors.Is(err, ErrSource) {
		t.Fatalf("a member's address: %v", err)
	}
}
