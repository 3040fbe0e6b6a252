package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/trainer"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/node"
)

// api is a client of a node's HTTP API (the run service's /v1/runs): the
// node at --node, or one embedded in this process, reached the same way.
type api struct {
	base, token string
	// embedded is the in-process node's client (nil with --node): closing
	// it stops the node.
	embedded *client
}

// openAPI reaches the node at --node over HTTP only (the CLI joins no
// actor system), or starts an embedded node and talks to its HTTP API.
func (a *app) openAPI(cmd *cobra.Command, embed func(*config.Config)) (*api, error) {
	cfg, err := a.load()
	if err != nil {
		return nil, err
	}
	if a.nodeAddr == "" {
		c, err := connect(cmd.Context(), "", a.load, embed)
		if err != nil {
			return nil, err
		}
		return &api{base: "http://" + c.embedded.HTTPAddr(), token: cfg.Node.APIToken, embedded: c}, nil
	}
	if _, err := fetchInfo(cmd.Context(), a.nodeAddr, cfg.Node.APIToken); err != nil {
		return nil, err
	}
	base, err := nodeURL(a.nodeAddr)
	if err != nil {
		return nil, err
	}
	return &api{base: base, token: cfg.Node.APIToken}, nil
}

func (p *api) close() {
	if p.embedded != nil {
		p.embedded.close()
	}
}

// do sends one call and decodes a JSON answer into out (unless nil); an
// error status becomes the node's {"error"} message.
func (p *api) do(ctx context.Context, method, path string, body, out any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("node at %s: %w", p.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return resp, node.ReadAPIError(resp, p.base)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("node at %s: %w", p.base, err)
	}
	switch o := out.(type) {
	case nil:
	case proto.Message:
		if err := protojson.Unmarshal(b, o); err != nil {
			return resp, fmt.Errorf("node at %s answered a record that does not parse: %w", p.base, err)
		}
	default:
		if err := json.Unmarshal(b, out); err != nil {
			return resp, fmt.Errorf("node at %s answered %s %s with something else than JSON: %w", p.base, method, path, err)
		}
	}
	return resp, nil
}

func isStatus(err error, status int) bool {
	var ae *node.APIError
	return errors.As(err, &ae) && ae.Status == status
}

// submitted is the node's answer to a submitted, resumed or stopped run.
type submitted struct {
	ID        string `json:"id"`
	Resumed   bool   `json:"resumed"`
	LogOffset int64  `json:"log_offset"`
}

func (p *api) submit(ctx context.Context, job trainer.Job) (submitted, error) {
	var s submitted
	_, err := p.do(ctx, http.MethodPost, trainer.RunsPath, job, &s)
	return s, err
}

func (p *api) runAction(ctx context.Context, id, action string) (submitted, error) {
	var s submitted
	_, err := p.do(ctx, http.MethodPost, trainer.RunsPath+"/"+url.PathEscape(id)+"/"+action, nil, &s)
	return s, err
}

// run is run id's record, and whether its actor is alive on the node.
func (p *api) run(ctx context.Context, id string) (*records.Run, bool, error) {
	run := &records.Run{}
	resp, err := p.do(ctx, http.MethodGet, trainer.RunsPath+"/"+url.PathEscape(id), nil, run)
	if err != nil {
		return nil, false, err
	}
	active, _ := strconv.ParseBool(resp.Header.Get(trainer.ActiveHeader))
	return run, active, nil
}

func (p *api) list(ctx context.Context) ([]trainer.RunInfo, error) {
	var out []trainer.RunInfo
	_, err := p.do(ctx, http.MethodGet, trainer.RunsPath, nil, &out)
	return out, err
}

// follow copies run id's log from offset to w, following it while the run
// is active, and returns the offset it reached. It ends without error when
// the node closes the stream (the run ended, or the node went away); ctx
// ends it with ctx's error.
func (p *api) follow(ctx context.Context, id string, offset int64, tail bool, w io.Writer) (int64, error) {
	return p.followLog(ctx, trainer.RunsPath, id, offset, tail, w)
}

// followLog is follow for a job of the service at root (/v1/runs,
// /v1/evals).
func (p *api) followLog(ctx context.Context, root, id string, offset int64, tail bool, w io.Writer) (int64, error) {
	path := fmt.Sprintf("%s/%s/logs?offset=%d&follow=%t", root, url.PathEscape(id), offset, tail)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err != nil {
		return offset, err
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return offset, fmt.Errorf("node at %s: %w", p.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return offset, node.ReadAPIError(resp, p.base)
	}
	k, err := io.Copy(w, resp.Body)
	offset += k
	if ctx.Err() != nil {
		return offset, ctx.Err()
	}
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return offset, fmt.Errorf("node at %s: the log stream of %s broke: %w", p.base, id, err)
	}
	return offset, nil
}

// outcome turns a run's final record into the command's result.
func outcome(run *records.Run, active bool) error {
	switch {
	case run.GetStatus() == "done":
		return nil
	case run.GetStatus() == "failed":
		return errors.New(run.GetError())
	case run.GetStatus() == "stopped":
		return fmt.Errorf("run %s stopped (%s): frognano runs resume %s continues it", run.GetId(), run.GetError(), run.GetId())
	case active:
		return fmt.Errorf("run %s is still running on the node: frognano runs logs %s -f follows it", run.GetId(), run.GetId())
	}
	return fmt.Errorf("run %s is %s but no longer runs: its node stopped; a frognano-node resumes it when it starts again (or frognano runs resume %s)", run.GetId(), run.GetStatus(), run.GetId())
}

// waitInactive polls until run id's actor has ended (a stop takes effect
// after the step in flight is cut short), at most d.
func (p *api) waitInactive(ctx context.Context, id string, d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if _, active, err := p.run(ctx, id); err != nil || !active {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
