// Package gateway is the JSON face of a node's actors: a client of the
// node's HTTP API (the frognano CLI) sends a message to one of the node's
// named actors and reads its answer, with the progress messages that come
// before it, without joining the actor system. A node on another machine
// thus never has to reach the client, and every call passes the HTTP API's
// checks (its bearer token, its limits).
//
//	POST /v1/actors/{name}
//	{"type": "frognano.messages.v1.EnvListRequest", "message": {}, "timeout_seconds": 60}
//
// The answer is a stream of JSON lines, one per message the actor sends
// back: {"type": "frognano.messages.v1.EnvProgress", "message": {...}}
// for progress (a type whose name ends in "Progress"), then the final one
// (the reply, or a frognano.runtime.v1.Failure, its code by name:
// {"code": "FAILURE_CODE_NOT_FOUND", "message": "..."}), or {"error": "..."}
// when none came within the timeout.
package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// Path is the gateway's root on the node's HTTP server.
const Path = "/v1/actors/"

// Packages are the protobuf packages whose messages the gateway carries: the
// actors' messages, the records some of them carry or answer with, and the
// runtime's (Ping, NodeInfoRequest, SpawnRequest, the Failure every actor
// answers with).
var Packages = []string{"frognano.messages.v1", "frognano.records.v1", "frognano.runtime.v1"}

// carries says whether the gateway carries messages of this full name.
func carries(name string) bool {
	for _, p := range Packages {
		if strings.HasPrefix(name, p+".") {
			return true
		}
	}
	return false
}

// MaxTimeout bounds a call's timeout_seconds.
const MaxTimeout = 24 * time.Hour

// Request is the body of a call.
type Request struct {
	Type           string          `json:"type"`
	Message        json.RawMessage `json:"message"`
	TimeoutSeconds float64         `json:"timeout_seconds,omitempty"`
}

// Line is one line of an answer.
type Line struct {
	Type    string          `json:"type,omitempty"`
	Message json.RawMessage `json:"message,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// Progress says whether a message is a progress message (more follow).
func Progress(m proto.Message) bool {
	return strings.HasSuffix(string(m.ProtoReflect().Descriptor().Name()), "Progress")
}

// Handler is the gateway to the node's actors named names (no other is
// reachable through it).
func Handler(names ...string) node.Handler {
	allowed := map[string]bool{}
	for _, n := range names {
		allowed[n] = true
	}
	return node.Handler{Pattern: "POST " + Path + "{name}", MaxBody: 16 << 20, Handler: func(n *node.Node) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			name := r.PathValue("name")
			if !allowed[name] {
				httpError(w, http.StatusNotFound, fmt.Errorf("no actor %q behind this gateway (it serves %s)", name, strings.Join(names, ", ")))
				return
			}
			var req Request
			if code, err := node.DecodeJSON(r.Body, &req); err != nil {
				httpError(w, code, fmt.Errorf("the body is not a gateway request: %w", err))
				return
			}
			if !(req.TimeoutSeconds >= 0 && req.TimeoutSeconds <= MaxTimeout.Seconds()) {
				httpError(w, http.StatusBadRequest, fmt.Errorf("timeout_seconds: 0 (a minute) to %v", MaxTimeout))
				return
			}
			msg, err := decode(req.Type, req.Message)
			if err != nil {
				httpError(w, http.StatusBadRequest, err)
				return
			}
			timeout := time.Duration(req.TimeoutSeconds * float64(time.Second))
			if timeout <= 0 {
				timeout = time.Minute
			}
			serve(r.Context(), n, name, msg, timeout, w)
		})
	}}
}

// decode makes the message of a request: a known type of Packages.
func decode(typ string, body json.RawMessage) (proto.Message, error) {
	if !carries(typ) {
		return nil, fmt.Errorf("type %q: the gateway carries only messages of %s", typ, strings.Join(Packages, ", "))
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typ))
	if err != nil {
		return nil, fmt.Errorf("type %q: %w", typ, err)
	}
	msg := mt.New().Interface()
	if len(body) > 0 {
		if err := protojson.Unmarshal(body, msg); err != nil {
			return nil, fmt.Errorf("message of type %s: %w", typ, err)
		}
	}
	return msg, nil
}

// serve sends msg to the named actor from a short-lived actor and writes
// what comes back, line by line, until the final message.
func serve(ctx context.Context, n *node.Node, name string, msg proto.Message, timeout time.Duration, w http.ResponseWriter) {
	root := n.System().Root
	target := actor.NewPID(n.Address(), name)
	got := make(chan proto.Message, 16)
	done := make(chan struct{})
	defer close(done)
	pid := root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case *actor.Started:
			c.Request(target, msg)
		case proto.Message:
			if !carries(string(m.ProtoReflect().Descriptor().FullName())) {
				return // protoactor's own (a dead letter's answer…)
			}
			select {
			case got <- m:
			case <-done:
			}
		}
	}))
	defer root.Stop(pid)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m := <-got:
			b, err := protojson.Marshal(m)
			if err != nil {
				_ = enc.Encode(Line{Error: fmt.Sprintf("cannot encode the answer: %v", err)})
				return
			}
			if err := enc.Encode(Line{Type: string(m.ProtoReflect().Descriptor().FullName()), Message: b}); err != nil {
				return // the client left
			}
			if flusher != nil {
				flusher.Flush()
			}
			if !Progress(m) {
				// A spawn through the gateway is a check: its client, outside
				// the actor system, could never reach or stop the actor.
				if r, ok := m.(*rtmsg.SpawnReply); ok {
					root.Stop(actor.NewPID(r.GetAddress(), r.GetId()))
				}
				return
			}
		case <-timer.C:
			_ = enc.Encode(Line{Error: fmt.Sprintf("%s did not answer within %v", name, timeout)})
			return
		case <-ctx.Done():
			return
		}
	}
}

func httpError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// FailureError is the Failure an actor answered with.
type FailureError struct {
	Code    rtmsg.FailureCode
	Message string
}

func (e *FailureError) Error() string { return e.Message }

// HasCode says whether err is an actor's Failure with this code.
func HasCode(err error, code rtmsg.FailureCode) bool {
	var f *FailureError
	return errors.As(err, &f) && f.Code == code
}

// Client calls a node's actors through its gateway.
type Client struct {
	// Base is the node's HTTP API, http://HOST:PORT.
	Base  string
	Token string
}

// Ask sends req to the node's actor name and returns the final message
// (a Failure as an error), calling progress, when set, with each progress
// message before it.
func (c *Client) Ask(ctx context.Context, name string, req proto.Message, timeout time.Duration, progress func(proto.Message)) (proto.Message, error) {
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(Request{Type: string(req.ProtoReflect().Descriptor().FullName()), Message: body, TimeoutSeconds: timeout.Seconds()})
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+Path+url.PathEscape(name), bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("node at %s: %w", c.Base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("node at %s: %w", c.Base, node.ReadAPIError(resp, c.Base))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("node at %s answered a line that is not JSON: %w", c.Base, err)
		}
		if l.Error != "" {
			return nil, errors.New(l.Error)
		}
		m, err := decode(l.Type, l.Message)
		if err != nil {
			return nil, fmt.Errorf("node at %s: %w", c.Base, err)
		}
		if f, ok := m.(*rtmsg.Failure); ok {
			return nil, &FailureError{Code: f.GetCode(), Message: f.GetMessage()}
		}
		if Progress(m) {
			if progress != nil {
				progress(m)
			}
			continue
		}
		return m, nil
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("node at %s: the answer of %s broke off: %w", c.Base, name, err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("node at %s: %s's answer ended without a reply", c.Base, name)
}
