package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
	"github.com/frognano/frognano/runtime/config"
)

// Paths served by Handler.
const (
	ChatPath        = "/v1/chat/completions"
	CompletionsPath = "/v1/completions"
	ModelsPath      = "/v1/models"
)

// MaxBody bounds a request body: a long agent conversation is a few
// hundred kilobytes. A node mounting the handler gives it this limit.
const MaxBody = 16 << 20

// Server serves an engine over the OpenAI API.
type Server struct {
	// Engine returns the engine, loading the model on first use.
	Engine func(ctx context.Context) (*sampler.Engine, error)
	// Name is the model id clients see in /v1/models and responses. The
	// "model" field of requests is not checked: there is one model.
	Name   string
	Logger *slog.Logger
}

// Patterns are the endpoints with their methods, as http.ServeMux patterns.
var Patterns = []string{"POST " + ChatPath, "POST " + CompletionsPath, "GET " + ModelsPath}

// Handler routes the three endpoints (another method is a 405 with an Allow
// header); mount it at / or at each of Patterns.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(Patterns[0], s.chat)
	mux.HandleFunc(Patterns[1], s.completions)
	mux.HandleFunc(Patterns[2], s.models)
	return mux
}

// httpError is an error with its status.
type httpError struct {
	status int
	param  string
	msg    string
	allow  string // the Allow header of a 405
}

func (e *httpError) Error() string { return e.msg }

func badRequest(param, format string, a ...any) error {
	return &httpError{status: http.StatusBadRequest, param: param, msg: fmt.Sprintf(format, a...)}
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	var he *httpError
	switch {
	case errors.As(err, &he):
	case errors.Is(err, sampler.ErrBadRequest), errors.Is(err, sampler.ErrPromptTooLong):
		he = &httpError{status: http.StatusBadRequest, msg: err.Error()}
	case errors.Is(err, sampler.ErrClosed):
		he = &httpError{status: http.StatusServiceUnavailable, msg: err.Error()}
	case errors.Is(err, context.Canceled):
		return // the client went away
	default:
		he = &httpError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	typ := "invalid_request_error"
	if he.status >= 500 {
		typ = "server_error"
		if s.Logger != nil {
			s.Logger.Error("openai endpoint", "err", err)
		}
	}
	if he.allow != "" {
		w.Header().Set("Allow", he.allow)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(he.status)
	_ = json.NewEncoder(w).Encode(ErrorResponse{Error: ErrorBody{Message: he.msg, Type: typ, Param: he.param, Code: he.status}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a JSON body, turning syntax and type errors into 400s that
// name the field.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	if r.Method != http.MethodPost {
		return &httpError{status: http.StatusMethodNotAllowed, allow: http.MethodPost, msg: config.Clip(r.Method, 20) + " " + config.Clip(r.URL.Path, 80) + ": use POST"}
	}
	if r.ContentLength > MaxBody {
		return &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("the body is %d bytes; at most %d are read", r.ContentLength, MaxBody)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("the body is over %d bytes", mbe.Limit)}
		}
		return badRequest("", "reading the body: %v", err)
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badRequest(config.Clip(te.Field, 80), "field %q must be %s, not a JSON %s", config.Clip(te.Field, 80), jsonKind(te.Type.Kind().String()), config.Clip(te.Value, 40))
		}
		return badRequest("", "the body is not valid JSON for this endpoint: %v", err)
	}
	return nil
}

// fitTokens caps a request's token limit (0: none) at the room its prompt
// leaves in the context; a prompt that leaves none is a 400.
func fitTokens(limit, prompt, context int, param string) (int, error) {
	room := context - prompt
	if room <= 0 {
		return 0, badRequest(param, "prompt too long: %d tokens, and the model's context holds %d, which leaves no room to generate", prompt, context)
	}
	if limit <= 0 || limit > room {
		return room, nil
	}
	return limit, nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "float32", "float64", "int", "int32", "int64", "uint64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	}
	return goKind
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.fail(w, &httpError{status: http.StatusMethodNotAllowed, allow: "GET, HEAD", msg: "use GET " + ModelsPath})
		return
	}
	e, err := s.Engine(r.Context())
	if err != nil {
		s.fail(w, &httpError{status: http.StatusServiceUnavailable, msg: err.Error()})
		return
	}
	writeJSON(w, ModelList{Object: "list", Data: []ModelInfo{{ID: s.Name, Object: "model", Created: time.Now().Unix(), OwnedBy: "frognano", MaxModelLen: e.ContextLength()}}})
}

// params checks the sampling fields shared by both endpoints. OpenAI's
// defaults apply: temperature 1, top_p 1.
func params(temperature, topP *float32, topK *int, seed *int64) (sample.Params, uint64, error) {
	p := sample.Params{Temperature: 1}
	if temperature != nil {
		if t := *temperature; t < 0 || math.IsNaN(float64(t)) || math.IsInf(float64(t), 0) {
			return p, 0, badRequest("temperature", "temperature %v must be a number ≥ 0", t)
		}
		p.Temperature = *temperature
	}
	if topP != nil {
		if v := *topP; !(v > 0 && v <= 1) {
			return p, 0, badRequest("top_p", "top_p %v must be in (0, 1]", v)
		}
		p.TopP = *topP
	}
	if topK != nil {
		if *topK < -1 {
			return p, 0, badRequest("top_k", "top_k %d must be ≥ 0 (0 or -1: all tokens)", *topK)
		}
		p.TopK = max(*topK, 0)
	}
	s := mrand.Uint64()
	if seed != nil {
		s = uint64(*seed)
	}
	return p, s, nil
}

func maxTokens(vals ...*int) (int, error) {
	for _, v := range vals {
		if v != nil {
			if *v <= 0 {
				return 0, badRequest("max_tokens", "max_tokens %d must be positive", *v)
			}
			return *v, nil
		}
	}
	return 0, nil
}

// output is a finished generation as the endpoints report it.
type output struct {
	ids        []int32
	lps        []float32
	offsets    []int // text offset of each token
	text       string
	finish     string // "stop" or "length"
	stopReason any    // the stop id or string, when finish is "stop"
	version    int64
	last       int64 // LastPolicyVersion, when the generation ran to its end
	prompt     int
}

// run generates, decoding text as tokens come and cutting it at the first
// stop string. A final stop id's text is left out, as vLLM does. emit, when
// set, receives text that can no longer be cut (all of it at the end) and
// every token as it comes.
func (s *Server) run(ctx context.Context, e *sampler.Engine, req policy.GenerateRequest, stops []string, emit func(text string, ids []int32, lps []float32) error) (output, error) {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := e.Start(gctx, req)
	if err != nil {
		return output{}, err
	}
	out := output{prompt: st.PromptTokens()}
	tok := e.Model().Tokenizer
	dec := tok.NewStreamDecoder()
	var text strings.Builder
	hold := 0
	for _, s := range stops {
		hold = max(hold, len(s)-1)
	}
	sent, scanned, cut := 0, 0, -1
	for cut < 0 {
		ids, lps, err := st.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return output{}, err
		}
		for _, id := range ids {
			out.offsets = append(out.offsets, text.Len())
			if slices.Contains(req.Stop, id) {
				continue // the last token: its text is not shown
			}
			piece, err := dec.Next(id)
			if err != nil {
				return output{}, err
			}
			text.WriteString(piece)
		}
		out.ids = append(out.ids, ids...)
		out.lps = append(out.lps, lps...)
		t := text.String()
		from := max(0, scanned-hold)
		for _, stop := range stops {
			if i := strings.Index(t[from:], stop); i >= 0 && stop != "" {
				if at := from + i; cut < 0 || at < cut {
					cut, out.stopReason = at, stop
				}
			}
		}
		scanned = len(t)
		if emit != nil {
			upto := len(t) - hold
			if cut >= 0 {
				upto = cut
			}
			if upto > sent {
				if err := emit(t[sent:upto], ids, lps); err != nil {
					return output{}, err
				}
				sent = upto
			} else if err := emit("", ids, lps); err != nil {
				return output{}, err
			}
		}
	}
	if cut >= 0 {
		// A stop string ended it: keep the tokens that began before it.
		cancel()
		n := 0
		for n < len(out.offsets) && out.offsets[n] < cut {
			n++
		}
		out.ids, out.lps, out.offsets = out.ids[:n], out.lps[:n], out.offsets[:n]
		out.text, out.finish, out.version = text.String()[:cut], "stop", st.PolicyVersion()
	} else {
		res, err := st.Result()
		if err != nil {
			return output{}, err
		}
		text.WriteString(dec.Flush())
		out.text, out.version, out.last = text.String(), res.PolicyVersion, res.LastPolicyVersion
		switch res.Finish {
		case policy.FinishStop:
			out.finish, out.stopReason = "stop", res.TokenIDs[len(res.TokenIDs)-1]
		default:
			out.finish = "length"
		}
	}
	if emit != nil && len(out.text) > sent {
		if err := emit(out.text[sent:], nil, nil); err != nil {
			return output{}, err
		}
	}
	return out, nil
}

// chatStops are the ids that end an assistant turn.
func chatStops(tok *tokenizer.Tokenizer) []int32 {
	var ids []int32
	if id, ok := tok.TokenID("<|im_end|>"); ok {
		ids = append(ids, id)
	}
	if eos := tok.EOS(); eos >= 0 && !slices.Contains(ids, eos) {
		ids = append(ids, eos)
	}
	return ids
}

func encodePrompt(tok *tokenizer.Tokenizer, text string) []int32 {
	ids := tok.Encode(text)
	if tok.AddBOS() && tok.BOS() >= 0 && (len(ids) == 0 || ids[0] != tok.BOS()) {
		ids = append([]int32{tok.BOS()}, ids...)
	}
	return ids
}

func newID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// chatPrompt renders the conversation with the model's chat template.
func chatPrompt(req *ChatRequest, tok *tokenizer.Tokenizer) (ids []int32, tools bool, err error) {
	if len(req.Messages) == 0 {
		return nil, false, badRequest("messages", "messages is empty")
	}
	var msgs []tokenizer.Message
	for i, m := range req.Messages {
		p := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "system", "developer":
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: m.Content.text()})
		case "user", "tool":
			msgs = append(msgs, tokenizer.Message{Role: m.Role, Content: m.Content.text()})
		case "assistant":
			msg := tokenizer.Message{Role: "assistant", Content: m.Content.text()}
			for j, tc := range m.ToolCalls {
				if tc.Function.Name == "" {
					return nil, false, badRequest(p+".tool_calls", "%s.tool_calls[%d] has no function name", p, j)
				}
				args := json.RawMessage(tc.Function.Arguments)
				if strings.TrimSpace(tc.Function.Arguments) == "" {
					args = json.RawMessage("{}")
				}
				if !json.Valid(args) {
					return nil, false, badRequest(p+".tool_calls", "%s.tool_calls[%d].function.arguments is not JSON: %q", p, j, config.Clip(tc.Function.Arguments, 80))
				}
				msg.ToolCalls = append(msg.ToolCalls, tokenizer.ToolCall{Name: tc.Function.Name, Arguments: args})
			}
			msgs = append(msgs, msg)
		case "":
			return nil, false, badRequest(p+".role", "%s has no role", p)
		default:
			return nil, false, badRequest(p+".role", "%s has role %q; roles are system, developer, user, assistant and tool", p, config.Clip(m.Role, 40))
		}
	}
	offer := len(req.Tools) > 0
	if len(req.ToolChoice) > 0 {
		var choice string
		if json.Unmarshal(req.ToolChoice, &choice) != nil || (choice != "auto" && choice != "none") {
			return nil, false, badRequest("tool_choice", `tool_choice must be "auto" or "none" (frognano does not force calls)`)
		}
		offer = offer && choice == "auto"
	}
	var schemas []json.RawMessage
	if offer {
		for i, t := range req.Tools {
			var def struct {
				Type     string `json:"type"`
				Function *struct {
					Name string `json:"name"`
				} `json:"function"`
			}
			if err := json.Unmarshal(t, &def); err != nil || def.Type != "function" || def.Function == nil || def.Function.Name == "" {
				return nil, false, badRequest("tools", `tools[%d] must be {"type": "function", "function": {"name": …, …}}`, i)
			}
			schemas = append(schemas, t)
		}
	}
	text, err := tokenizer.RenderChat(msgs, chatFormat(tok).Options(schemas, true))
	if err != nil {
		return nil, false, badRequest("messages", "%v", err)
	}
	return encodePrompt(tok, text), offer, nil
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req ChatRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	if req.N != nil && *req.N != 1 {
		s.fail(w, badRequest("n", "n must be 1"))
		return
	}
	if req.TopLogprobs != 0 {
		s.fail(w, badRequest("top_logprobs", "top_logprobs is not supported: frognano returns each sampled token's log-probability only"))
		return
	}
	p, seed, err := params(req.Temperature, req.TopP, req.TopK, req.Seed)
	if err != nil {
		s.fail(w, err)
		return
	}
	limit, err := maxTokens(req.MaxCompletionTokens, req.MaxTokens)
	if err != nil {
		s.fail(w, err)
		return
	}
	e, err := s.Engine(r.Context())
	if err != nil {
		s.fail(w, &httpError{status: http.StatusServiceUnavailable, msg: err.Error()})
		return
	}
	tok := e.Model().Tokenizer
	prompt, tools, err := chatPrompt(&req, tok)
	if err != nil {
		s.fail(w, err)
		return
	}
	if limit, err = fitTokens(limit, len(prompt), e.ContextLength(), "messages"); err != nil {
		s.fail(w, err)
		return
	}
	greq := policy.GenerateRequest{PromptIDs: prompt, MaxTokens: limit, Sampling: p, Seed: seed, Stop: chatStops(tok)}
	if req.Stream {
		s.chatStream(w, r, e, &req, greq, tools)
		return
	}
	out, err := s.run(r.Context(), e, greq, req.Stop, nil)
	if err != nil {
		s.fail(w, err)
		return
	}
	msg := &ChatMessage{Role: "assistant"}
	finish := out.finish
	content := out.text
	if tools {
		if calls, before, ok := parseToolCalls(out.text); ok {
			msg.ToolCalls, content, finish = calls, before, "tool_calls"
		}
	}
	if content != "" || len(msg.ToolCalls) == 0 {
		c := Content(content)
		msg.Content = &c
	}
	choice := ChatChoice{Message: msg, FinishReason: &finish}
	if req.Logprobs {
		choice.Logprobs = chatLogprobs(tok, out.ids, out.lps)
	}
	writeJSON(w, ChatResponse{
		ID: newID("chatcmpl-"), Object: "chat.completion", Created: time.Now().Unix(), Model: s.Name,
		Choices: []ChatChoice{choice},
		Usage:   &Usage{PromptTokens: out.prompt, CompletionTokens: len(out.ids), TotalTokens: out.prompt + len(out.ids)},
	})
}

func chatLogprobs(tok *tokenizer.Tokenizer, ids []int32, lps []float32) *ChatLogprobs {
	lp := &ChatLogprobs{Content: []TokenLogprob{}}
	for i, id := range ids {
		b := tok.TokenBytes(id)
		ints := make([]int, len(b))
		for j, c := range b {
			ints[j] = int(c)
		}
		lp.Content = append(lp.Content, TokenLogprob{Token: string(b), Logprob: lps[i], Bytes: ints, TopLogprobs: []TokenLogprob{}})
	}
	return lp
}

// chatStream answers with server-sent events, one chunk per piece of text
// that can no longer be cut by a stop string. With tools offered, text from
// a "<tool_call>" on is held back and sent as tool_calls at the end if it
// parses (as plain content otherwise).
func (s *Server) chatStream(w http.ResponseWriter, r *http.Request, e *sampler.Engine, req *ChatRequest, greq policy.GenerateRequest, tools bool) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		s.fail(w, &httpError{status: http.StatusInternalServerError, msg: "streaming is not supported by this connection"})
		return
	}
	id, created, tok := newID("chatcmpl-"), time.Now().Unix(), e.Model().Tokenizer
	started := false
	send := func(c ChatChoice, usage *Usage) error {
		if !started {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		chunk := ChatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.Name, Choices: []ChatChoice{c}, Usage: usage}
		if usage != nil {
			chunk.Choices = []ChatChoice{}
		}
		b, _ := json.Marshal(chunk)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		flusher.Flush()
		return nil
	}
	delta := func(text string) *ChatMessage {
		c := Content(text)
		return &ChatMessage{Content: &c}
	}
	var pending strings.Builder // text held back after a possible tool call
	first := true
	emit := func(text string, ids []int32, lps []float32) error {
		c := ChatChoice{Delta: delta("")}
		if first {
			c.Delta.Role = "assistant"
			first = false
		}
		if tools && (pending.Len() > 0 || strings.Contains(text, "<tool_call>")) {
			i := strings.Index(text, "<tool_call>")
			if pending.Len() > 0 {
				i = 0
			}
			pending.WriteString(text[i:])
			text = text[:i]
		}
		c.Delta = &ChatMessage{Role: c.Delta.Role, Content: delta(text).Content}
		if req.Logprobs && len(ids) > 0 {
			c.Logprobs = chatLogprobs(tok, ids, lps)
		}
		if text == "" && c.Logprobs == nil && c.Delta.Role == "" {
			return nil
		}
		return send(c, nil)
	}
	out, err := s.run(r.Context(), e, greq, req.Stop, emit)
	if err != nil {
		if !started {
			s.fail(w, err)
			return
		}
		b, _ := json.Marshal(ErrorResponse{Error: ErrorBody{Message: err.Error(), Type: "server_error", Code: http.StatusInternalServerError}})
		fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
		return
	}
	finish := out.finish
	last := ChatChoice{Delta: &ChatMessage{}, FinishReason: &finish}
	if pending.Len() > 0 {
		if calls, _, ok := parseToolCalls(pending.String()); ok {
			for i := range calls {
				calls[i].Index = &i
			}
			last.Delta.ToolCalls, finish = calls, "tool_calls"
		} else {
			last.Delta.Content = delta(pending.String()).Content
		}
	}
	if err := send(last, nil); err != nil {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		if err := send(ChatChoice{}, &Usage{PromptTokens: out.prompt, CompletionTokens: len(out.ids), TotalTokens: out.prompt + len(out.ids)}); err != nil {
			return
		}
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	flusher.Flush()
}

// parseToolCalls reads the <tool_call> blocks of an assistant turn in the
// format the chat template asks for (policy.ParseToolCallBlocks: Qwen2.5's
// format, for any client's tools), each call's arguments a JSON object. It
// returns the calls and the text before the first block; ok is false when
// there is no block, a block is malformed, or prose stands between or after
// the calls, and then the whole text is the answer.
func parseToolCalls(text string) (calls []ToolCall, before string, ok bool) {
	blocks, after, err := policy.ParseToolCallBlocks(text)
	if err != nil || len(blocks) == 0 || strings.TrimSpace(after) != "" {
		return nil, "", false
	}
	for i, b := range blocks {
		if i > 0 && strings.TrimSpace(b.Before) != "" {
			return nil, "", false // prose between the calls
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(b.Call.Arguments, &obj) != nil || obj == nil {
			return nil, "", false
		}
		calls = append(calls, ToolCall{ID: newID("call_"), Type: "function", Function: FunctionCall{Name: b.Call.Name, Arguments: string(b.Call.Arguments)}})
	}
	return calls, strings.TrimSpace(blocks[0].Before), true
}

// completionPrompt reads "prompt": a string, an array of token ids, or a
// one-element array of either.
func completionPrompt(raw json.RawMessage, tok *tokenizer.Tokenizer) ([]int32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt", "prompt is missing")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, badRequest("prompt", "prompt is empty")
		}
		return encodePrompt(tok, text), nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return nil, badRequest("prompt", "prompt is empty")
		}
		return ids, nil
	}
	var many []json.RawMessage
	if json.Unmarshal(raw, &many) == nil {
		if len(many) != 1 {
			return nil, badRequest("prompt", "one prompt per request (got %d)", len(many))
		}
		var inner []json.RawMessage
		if json.Unmarshal(many[0], &inner) == nil || json.Unmarshal(many[0], &text) == nil {
			return completionPrompt(many[0], tok)
		}
	}
	return nil, badRequest("prompt", "prompt must be a string, an array of token ids, or a one-element array of either")
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if err := decode(w, r, &req); err != nil {
		s.fail(w, err)
		return
	}
	switch {
	case req.N != nil && *req.N != 1:
		s.fail(w, badRequest("n", "n must be 1"))
		return
	case req.Echo:
		s.fail(w, badRequest("echo", "echo is not supported"))
		return
	case req.Stream:
		s.fail(w, badRequest("stream", "stream is supported on "+ChatPath+" only"))
		return
	case req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > 20):
		s.fail(w, badRequest("logprobs", "logprobs must be in [0, 20]"))
		return
	}
	p, seed, err := params(req.Temperature, req.TopP, req.TopK, req.Seed)
	if err != nil {
		s.fail(w, err)
		return
	}
	sixteen := 16 // OpenAI's default
	limit, err := maxTokens(req.MaxTokens, &sixteen)
	if err != nil {
		s.fail(w, err)
		return
	}
	e, err := s.Engine(r.Context())
	if err != nil {
		s.fail(w, &httpError{status: http.StatusServiceUnavailable, msg: err.Error()})
		return
	}
	tok := e.Model().Tokenizer
	prompt, err := completionPrompt(req.Prompt, tok)
	if err != nil {
		s.fail(w, err)
		return
	}
	if limit, err = fitTokens(limit, len(prompt), e.ContextLength(), "prompt"); err != nil {
		s.fail(w, err)
		return
	}
	stop := slices.Clone(req.StopTokenIDs)
	if eos := tok.EOS(); !req.IgnoreEOS && eos >= 0 && !slices.Contains(stop, eos) {
		stop = append(stop, eos)
	}
	out, err := s.run(r.Context(), e, policy.GenerateRequest{
		PromptIDs: prompt, MaxTokens: limit, Sampling: p, Seed: seed, Stop: stop, MinPolicyVersion: req.MinPolicyVersion,
	}, req.Stop, nil)
	if err != nil {
		s.fail(w, err)
		return
	}
	finish := out.finish
	version := out.version
	choice := CompletionChoice{Text: out.text, FinishReason: &finish, StopReason: out.stopReason, PolicyVersion: &version, LastPolicyVersion: out.last}
	if req.ReturnTokenIDs || req.ReturnTokens {
		choice.TokenIDs, choice.PromptTokenIDs = out.ids, prompt
	}
	if req.Logprobs != nil {
		lp := &CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []*float32{}, TopLogprobs: []map[string]float32{}, TextOffset: []int{}}
		for i, id := range out.ids {
			t := string(tok.TokenBytes(id))
			if req.ReturnTokensAsTokenIDs {
				t = "token_id:" + strconv.Itoa(int(id))
			}
			lp.Tokens = append(lp.Tokens, t)
			lp.TokenLogprobs = append(lp.TokenLogprobs, &out.lps[i])
			lp.TopLogprobs = append(lp.TopLogprobs, nil)
			lp.TextOffset = append(lp.TextOffset, out.offsets[i])
		}
		choice.Logprobs = lp
	}
	writeJSON(w, CompletionResponse{
		ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(), Model: s.Name,
		Choices: []CompletionChoice{choice},
		Usage:   &Usage{PromptTokens: out.prompt, CompletionTokens: len(out.ids), TotalTokens: out.prompt + len(out.ids)},
	})
}

// chatFormat is how tok's model renders a conversation (its default system
// turn, its tools section's example call); a template frognano cannot read
// renders as SmolLM2's did before formats were read.
func chatFormat(tok *tokenizer.Tokenizer) tokenizer.ChatFormat {
	f, err := tokenizer.ParseChatTemplate(tok.ChatTemplate())
	if err != nil {
		return tokenizer.ChatFormat{DefaultSystem: tokenizer.DefaultSystemFor(tok.ChatTemplate()), ToolCallExample: tokenizer.DefaultToolCallExample}
	}
	return f
}
