package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/frognano/frognano/actors/evaluate"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/cmd/internal/services"
	"github.com/frognano/frognano/runtime/config"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/node"
)

// TestClientSendsTheAPIToken: the CLI reaches a node that binds off
// loopback (and so needs a token) with the token from its configuration,
// and says which setting is missing without it.
func TestClientSendsTheAPIToken(t *testing.T) {
	const token = "cli-test-token-0123456789"
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr, cfg.Node.APIToken = "0.0.0.0:0", "127.0.0.1:0", token
	cfg.Log.Level = "warn"
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Handlers: []node.Handler{services.Gateway()}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop(context.Background())
	_, port, _ := net.SplitHostPort(n.HTTPAddr())
	addr := "127.0.0.1:" + port

	load := func(tok string) func() (config.Config, error) {
		return func() (config.Config, error) {
			c := config.Default()
			c.Node.APIToken = tok
			return c, nil
		}
	}
	ctx := context.Background()
	if _, err := connect(ctx, addr, load(""), nil); err == nil || !strings.Contains(err.Error(), "FROGNANO_NODE_API_TOKEN") {
		t.Errorf("without a token: %v, want an error naming FROGNANO_NODE_API_TOKEN", err)
	}
	if _, err := connect(ctx, addr, load("wrong-token-0123456789"), nil); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("with a wrong token: %v", err)
	}
	c, err := connect(ctx, addr, load(token), nil)
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	defer c.close()
	if res, err := c.ask(&rtmsg.Ping{Seq: 3}, 10*time.Second); err != nil || res.(*rtmsg.Pong).Seq != 3 {
		t.Fatalf("ping through the node: %v %v", res, err)
	}
	if _, err := nodeURL("http://" + strings.Repeat("x", 1<<20) + ":1/path"); err == nil || len(err.Error()) > 300 {
		t.Errorf("a huge --node is echoed back: %d bytes", len(err.Error()))
	}
}

// TestEvalSendsOPENAI_API_KEY: `frognano eval --model URL` reaches the
// OpenAI endpoints of a node that needs a token with OPENAI_API_KEY, and is
// refused without it.
func TestEvalSendsOPENAI_API_KEY(t *testing.T) {
	gguf := os.Getenv("FROGNANO_TEST_GGUF")
	if gguf == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset")
	}
	const token = "eval-test-token-0123456789"
	cfg := config.Default()
	cfg.Node.DataDir = filepath.Join(t.TempDir(), "data")
	cfg.Node.HTTPAddr, cfg.Node.RemoteAddr, cfg.Node.APIToken = "0.0.0.0:0", "127.0.0.1:0", token
	cfg.Log.Level = "warn"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	served := services.NewPolicy(services.PolicyConfig{Model: gguf, ContextLength: 256, Logger: quiet})
	defer served.Close()
	kinds, actors, handlers := served.Options()
	n, err := node.Start(context.Background(), cfg, node.Options{Logger: quiet, Kinds: kinds, Actors: actors, Handlers: handlers})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop(context.Background())
	_, port, _ := net.SplitHostPort(n.HTTPAddr())
	f := &evalFlags{job: evaluate.DefaultJob(), wall: time.Minute}
	f.job.Model, f.job.ServedModel, f.job.Tokenizer, f.job.HeldOut = "http://127.0.0.1:"+port, gguf, gguf, true
	openPolicy := func(f *evalFlags) (*evaluate.Policy, error) {
		job, err := f.evalJob()
		if err != nil {
			return nil, err
		}
		return evaluate.OpenPolicy(&evaluate.Deps{AnyPath: true}, job)
	}

	req := policy.GenerateRequest{PromptIDs: []int32{1, 2, 3}, MaxTokens: 2}
	t.Setenv("OPENAI_API_KEY", "")
	p, err := openPolicy(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Policy.Generate(context.Background(), req); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without OPENAI_API_KEY: %v, want a 401", err)
	}
	t.Setenv("OPENAI_API_KEY", token)
	if p, err = openPolicy(f); err != nil {
		t.Fatal(err)
	}
	res, err := p.Policy.Generate(context.Background(), req)
	if err != nil || len(res.TokenIDs) == 0 {
		t.Fatalf("with OPENAI_API_KEY: %v %v", res, err)
	}
}
