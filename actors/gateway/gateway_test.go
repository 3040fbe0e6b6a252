package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/diag"
	messages "github.com/frognano/frognano/actors/messages/v1"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// stager answers an EnvAddRequest with two EnvProgress messages and the
// reply, and an EnvGetRequest with a Failure.
func stager() *actor.Props {
	return actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *messages.EnvAddRequest:
			c.Send(c.Sender(), &messages.EnvProgress{Stage: "one"})
			c.Send(c.Sender(), &messages.EnvProgress{Stage: "two"})
			c.Respond(&messages.EnvAddReply{Environment: &records.Environment{Name: m.GetSource()}})
		case *messages.EnvGetRequest:
			c.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND, errors.New("no environment "+m.GetName())))
		}
	})
}

func startNode(t *testing.T, token string) *node.Node {
	t.Helper()
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Node.APIToken = token
	cfg.Log.Level = "warn"
	n, err := node.Start(context.Background(), cfg, diag.NodeOptions(node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Actors:   []node.NamedActor{{Name: "stager", Props: func(*node.Node) *actor.Props { return stager() }}},
		Handlers: []node.Handler{Handler(node.ManagerName, "stager")}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop(context.Background()) })
	return n
}

// TestGatewayCarriesProgressRepliesAndFailures drives the real HTTP server:
// a call with progress messages, a Failure with its code, the manager.
func TestGatewayCarriesProgressRepliesAndFailures(t *testing.T) {
	n := startNode(t, "")
	c := &Client{Base: "http://" + n.HTTPAddr()}
	ctx := context.Background()
	var stages []string
	res, err := c.Ask(ctx, "stager", &messages.EnvAddRequest{Source: "six"}, time.Minute, func(m proto.Message) {
		stages = append(stages, m.(*messages.EnvProgress).GetStage())
	})
	if err != nil || res.(*messages.EnvAddReply).GetEnvironment().GetName() != "six" || strings.Join(stages, ",") != "one,two" {
		t.Fatalf("add: %v, %v, stages %v", res, err, stages)
	}
	if _, err := c.Ask(ctx, "stager", &messages.EnvGetRequest{Name: "x"}, time.Minute, nil); !HasCode(err, rtmsg.FailureCode_FAILURE_CODE_NOT_FOUND) || err.Error() != "no environment x" {
		t.Fatalf("a Failure: %v", err)
	}
	if res, err := c.Ask(ctx, node.ManagerName, &rtmsg.Ping{Seq: 7}, time.Minute, nil); err != nil || res.(*rtmsg.Pong).GetSeq() != 7 {
		t.Fatalf("ping: %v, %v", res, err)
	}
}

// TestGatewayRefusesWhatItDoesNotCarry: unknown actors, types of other
// packages, malformed bodies, and, with a token, calls without it.
func TestGatewayRefusesWhatItDoesNotCarry(t *testing.T) {
	n := startNode(t, strings.Repeat("k", 40))
	base := "http://" + n.HTTPAddr() + Path
	for _, tc := range []struct {
		name, path, body, token string
		status                  int
		says                    string
	}{
		{"no token", "stager", `{"type": "frognano.runtime.v1.Ping", "message": {}}`, "", http.StatusUnauthorized, "unauthorized"},
		{"unknown actor", "learner", `{"type": "frognano.runtime.v1.Ping", "message": {}}`, "k", http.StatusNotFound, "no actor"},
		{"another package", "stager", `{"type": "actor.PoisonPill", "message": {}}`, "k", http.StatusBadRequest, "only messages of"},
		{"unknown type", "stager", `{"type": "frognano.messages.v1.Nope", "message": {}}`, "k", http.StatusBadRequest, "Nope"},
		{"bad message", "stager", `{"type": "frognano.runtime.v1.Ping", "message": {"seq": "x"}}`, "k", http.StatusBadRequest, "Ping"},
		{"unknown field", "stager", `{"type": "frognano.runtime.v1.Ping", "message": {}, "to": "node"}`, "k", http.StatusBadRequest, "unknown field"},
		{"timeout too long", "stager", `{"type": "frognano.runtime.v1.Ping", "message": {}, "timeout_seconds": 1e9}`, "k", http.StatusBadRequest, "timeout_seconds"},
	} {
		req, _ := http.NewRequest(http.MethodPost, base+tc.path, strings.NewReader(tc.body))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+strings.Repeat(tc.token, 40))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.says) {
			t.Errorf("%s: %s %s", tc.name, resp.Status, b)
		}
	}
	// A GET is not a call.
	req, _ := http.NewRequest(http.MethodGet, base+"stager", nil)
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("k", 40))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %v %v", resp.Status, err)
	}
}

// The gateway decodes by full protobuf name, so every package it carries
// must be named in Packages: a record an actor answers with (a Task, an
// Environment) lives in frognano.records.v1, Ping and Failure in
// frognano.runtime.v1, not with the actors' messages.
func TestDecodeByFullName(t *testing.T) {
	for _, tc := range []struct {
		typ, body string
		want      proto.Message
	}{
		{"frognano.messages.v1.EnvGetRequest", `{"name": "x"}`, &messages.EnvGetRequest{Name: "x"}},
		{"frognano.records.v1.Task", `{"id": "t"}`, &records.Task{Id: "t"}},
		{"frognano.runtime.v1.Ping", `{"seq": "3"}`, &rtmsg.Ping{Seq: 3}},
	} {
		m, err := decode(tc.typ, json.RawMessage(tc.body))
		if err != nil || !proto.Equal(m, tc.want) {
			t.Errorf("decode(%s) = %v, %v; want %v", tc.typ, m, err, tc.want)
		}
	}
	for _, typ := range []string{"frognano.records.v1x.Task", "frognano.runtime.v2.Ping", "frognano.Task", "google.protobuf.Empty"} {
		if _, err := decode(typ, nil); err == nil || !strings.Contains(err.Error(), "only messages of") {
			t.Errorf("decode(%s): %v, want a refusal", typ, err)
		}
	}
}
