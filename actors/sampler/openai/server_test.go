package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/frognano/frognano/actors/harness"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/actors/sampler"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
)

var (
	engOnce sync.Once
	eng     *sampler.Engine
	engErr  error
)

// engine serves FROGNANO_TEST_GGUF (SmolLM2-135M-Instruct), or skips.
func engine(t testing.TB) *sampler.Engine {
	t.Helper()
	p := os.Getenv("FROGNANO_TEST_GGUF")
	if p == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: set it to SmolLM2-135M-Instruct.Q4_1.gguf (`frognano model pull smollm2-135m`)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("FROGNANO_TEST_GGUF=%s: %v", p, err)
	}
	engOnce.Do(func() {
		var m *model.Model
		if m, engErr = model.LoadGGUF(p, model.Options{}); engErr == nil {
			// No prefix caches: the tests compare the server's log-probs
			// with the engine's for the same request bit for bit, and a
			// request continuing a kept cache computes its prompt in
			// another layout, which changes their last bits.
			eng, engErr = sampler.New(sampler.Config{Model: m, Version: 7, ContextLength: 1024, PrefixCaches: -1})
		}
	})
	if engErr != nil {
		t.Fatal(engErr)
	}
	return eng
}

func serve(t testing.TB) (*sampler.Engine, *httptest.Server) {
	e := engine(t)
	s := &Server{Engine: func(context.Context) (*sampler.Engine, error) { return e, nil }, Name: "smollm2-135m"}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return e, ts
}

// post sends body as JSON with net/http and decodes the answer into out.
func post(t testing.TB, url string, body any, out any) int {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s answered %s: %v", url, raw, err)
		}
	}
	return resp.StatusCode
}

func userPrompt(t testing.TB, e *sampler.Engine, user string) []int32 {
	tok := e.Model().Tokenizer
	text, err := tokenizer.RenderChat([]tokenizer.Message{{Role: "user", Content: user}}, tokenizer.ChatOptions{
		DefaultSystem: tokenizer.DefaultSystemFor(tok.ChatTemplate()), AddGenerationPrompt: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encode(text)
}

// TestChat asks a question through /v1/chat/completions and checks the
// answer against the engine's own for the same prompt and seed, with
// usage and log-probs; then streams the same request.
func TestChat(t *testing.T) {
	e, ts := serve(t)
	const q = "What is the capital of France?"
	want, err := e.Generate(context.Background(), policy.GenerateRequest{
		PromptIDs: userPrompt(t, e, q), MaxTokens: 30, Sampling: sample.Params{Temperature: 0.5, TopP: 0.9}, Seed: 42, Stop: chatStops(e.Model().Tokenizer),
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := want.TokenIDs
	if want.Finish == policy.FinishStop {
		ids = ids[:len(ids)-1]
	}
	wantText, _ := e.Model().Tokenizer.Decode(ids)

	req := map[string]any{
		"model": "smollm2-135m", "messages": []map[string]any{{"role": "user", "content": q}},
		"temperature": 0.5, "top_p": 0.9, "seed": 42, "max_tokens": 30, "logprobs": true,
	}
	var res ChatResponse
	if code := post(t, ts.URL+ChatPath, req, &res); code != http.StatusOK {
		t.Fatalf("status %d: %+v", code, res)
	}
	if res.Object != "chat.completion" || res.Model != "smollm2-135m" || len(res.Choices) != 1 || !strings.HasPrefix(res.ID, "chatcmpl-") {
		t.Fatalf("response: %+v", res)
	}
	c := res.Choices[0]
	if c.Message.Role != "assistant" || c.Message.Content.text() != wantText {
		t.Fatalf("content %q, engine %q", c.Message.Content.text(), wantText)
	}
	wantFinish := map[policy.FinishReason]string{policy.FinishStop: "stop", policy.FinishLength: "length"}[want.Finish]
	if *c.FinishReason != wantFinish {
		t.Fatalf("finish %s, engine %s", *c.FinishReason, want.Finish)
	}
	if res.Usage.PromptTokens != len(userPrompt(t, e, q)) || res.Usage.CompletionTokens != len(want.TokenIDs) || res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
		t.Fatalf("usage %+v, engine generated %d", res.Usage, len(want.TokenIDs))
	}
	if c.Logprobs == nil || len(c.Logprobs.Content) != len(want.TokenIDs) {
		t.Fatalf("logprobs: %+v", c.Logprobs)
	}
	for i, lp := range c.Logprobs.Content {
		if lp.Logprob != want.LogProbs[i] && fmt.Sprint(lp.Logprob) != fmt.Sprint(want.LogProbs[i]) {
			t.Fatalf("logprob %d: %v, engine %v", i, lp.Logprob, want.LogProbs[i])
		}
	}
	t.Logf("answer: %q (%s)", wantText, *c.FinishReason)

	// The same request streamed: the deltas add up to the same content.
	req["stream"] = true
	req["stream_options"] = map[string]any{"include_usage": true}
	b, _ := json.Marshal(req)
	resp, err := http.Post(ts.URL+ChatPath, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("stream: %s %s", resp.Status, ct)
	}
	var content strings.Builder
	var finish string
	var usage *Usage
	var logprobs, chunks int
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || done {
			t.Fatalf("unexpected line %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var chunk ChatResponse
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatal(err)
		}
		if chunk.Object != "chat.completion.chunk" {
			t.Fatalf("chunk %s", data)
		}
		chunks++
		if chunk.Usage != nil {
			usage = chunk.Usage
			continue
		}
		d := chunk.Choices[0]
		content.WriteString(d.Delta.Content.text())
		if d.FinishReason != nil {
			finish = *d.FinishReason
		}
		if d.Logprobs != nil {
			logprobs += len(d.Logprobs.Content)
		}
	}
	if !done || content.String() != wantText || finish != wantFinish || usage == nil || usage.CompletionTokens != len(want.TokenIDs) || logprobs != len(want.TokenIDs) {
		t.Fatalf("stream: done %v, content %q, finish %q, usage %+v, %d logprobs in %d chunks", done, content.String(), finish, usage, logprobs, chunks)
	}
}

// TestStopString cuts the answer at a client's stop string.
func TestStopString(t *testing.T) {
	_, ts := serve(t)
	msgs := []map[string]any{{"role": "user", "content": "What is the capital of France?"}}
	var full ChatResponse
	if code := post(t, ts.URL+ChatPath, map[string]any{"messages": msgs, "temperature": 0, "max_tokens": 20}, &full); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	text := full.Choices[0].Message.Content.text()
	words := strings.Fields(text)
	if len(words) < 3 {
		t.Fatalf("answer too short to cut: %q", text)
	}
	stop := " " + words[2]
	var cut ChatResponse
	if code := post(t, ts.URL+ChatPath, map[string]any{"messages": msgs, "temperature": 0, "max_tokens": 20, "stop": stop}, &cut); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	want := text[:strings.Index(text, stop)]
	if got := cut.Choices[0].Message.Content.text(); got != want || *cut.Choices[0].FinishReason != "stop" {
		t.Fatalf("stop %q: %q (%s), want %q", stop, got, *cut.Choices[0].FinishReason, want)
	}
	if cut.Usage.CompletionTokens >= full.Usage.CompletionTokens {
		t.Fatalf("cut answer used %d tokens, the full one %d", cut.Usage.CompletionTokens, full.Usage.CompletionTokens)
	}
}

// TestToolCalls renders an assistant turn with calls as the chat template
// does and parses it back, agreeing with harness.ParseToolCalls; then runs
// a conversation with FrogNano's tools, a call and its result through the
// endpoint.
func TestToolCalls(t *testing.T) {
	calls := []tokenizer.ToolCall{
		{Name: "Read", Arguments: json.RawMessage(`{"path": "src/app.py", "offset": 3}`)},
		{Name: "Bash", Arguments: json.RawMessage(`{"command": "echo '</tool_call>' && pytest -q"}`)},
	}
	text, err := tokenizer.RenderChat([]tokenizer.Message{{Role: "assistant", Content: "Let me look.", ToolCalls: calls}}, tokenizer.ChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimSuffix(strings.TrimPrefix(text, "<|im_start|>assistant\n"), "<|im_end|>\n")
	got, before, ok := parseToolCalls(body)
	if !ok || before != "Let me look." || len(got) != 2 {
		t.Fatalf("parse %q: %v %q %v", body, got, before, ok)
	}
	ref, err := harness.ParseToolCalls(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		var a, b, c map[string]any
		json.Unmarshal([]byte(got[i].Function.Arguments), &a)
		json.Unmarshal(ref[i].Arguments, &b)
		json.Unmarshal(calls[i].Arguments, &c)
		if got[i].Function.Name != calls[i].Name || ref[i].Name != calls[i].Name || fmt.Sprint(a) != fmt.Sprint(c) || fmt.Sprint(b) != fmt.Sprint(c) {
			t.Fatalf("call %d: ours %+v, harness %+v, rendered %+v", i, got[i], ref[i], calls[i])
		}
	}
	for _, bad := range []string{"no calls here", "<tool_call>\n{\"name\": \"Read\"\n", "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"X\"}</tool_call> trailing prose"} {
		if c, _, ok := parseToolCalls(bad); ok {
			t.Fatalf("%q parsed as %v", bad, c)
		}
	}

	_, ts := serve(t)
	var tools []json.RawMessage
	tools = append(tools, harness.Schemas()...)
	req := map[string]any{
		"messages": []map[string]any{
			{"role": "system", "content": "You fix bugs in the repository. Call tools."},
			{"role": "user", "content": "Read the file src/app.py."},
			{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": "call_1", "type": "function", "function": map[string]any{"name": "Read", "arguments": `{"path": "src/app.py"}`}}}},
			{"role": "tool", "tool_call_id": "call_1", "content": "1\tdef add(a, b):\n2\t    return a - b"},
			{"role": "user", "content": "Now run the tests with the Bash tool."},
		},
		"tools": tools, "temperature": 0, "max_tokens": 60,
	}
	var res ChatResponse
	if code := post(t, ts.URL+ChatPath, req, &res); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	c := res.Choices[0]
	switch *c.FinishReason {
	case "tool_calls":
		if len(c.Message.ToolCalls) == 0 {
			t.Fatal("finish_reason tool_calls without calls")
		}
		for _, tc := range c.Message.ToolCalls {
			if tc.Type != "function" || tc.Function.Name == "" || !json.Valid([]byte(tc.Function.Arguments)) || !strings.HasPrefix(tc.ID, "call_") {
				t.Fatalf("tool call %+v", tc)
			}
		}
		t.Logf("the model called %+v", c.Message.ToolCalls)
	case "stop", "length":
		if len(c.Message.ToolCalls) != 0 {
			t.Fatalf("tool calls with finish_reason %s", *c.FinishReason)
		}
		t.Logf("the model answered in prose: %q", c.Message.Content.text())
	default:
		t.Fatalf("finish_reason %q", *c.FinishReason)
	}
}

// TestBadRequests checks the 400s (and 405s) name what is wrong.
func TestBadRequests(t *testing.T) {
	_, ts := serve(t)
	user := `"messages": [{"role": "user", "content": "hi"}]`
	cases := []struct {
		name, path, body string
		status           int
		mention          string
	}{
		{"not JSON", ChatPath, `{"messages": [`, 400, "not valid JSON"},
		{"temperature as a string", ChatPath, `{` + user + `, "temperature": "hot"}`, 400, "temperature"},
		{"messages not an array", ChatPath, `{"messages": "hi"}`, 400, "messages"},
		{"no messages", ChatPath, `{"messages": []}`, 400, "messages is empty"},
		{"unknown role", ChatPath, `{"messages": [{"role": "robot", "content": "hi"}]}`, 400, `role "robot"`},
		{"image content", ChatPath, `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, 400, "only text"},
		{"n = 2", ChatPath, `{` + user + `, "n": 2}`, 400, "n must be 1"},
		{"negative temperature", ChatPath, `{` + user + `, "temperature": -1}`, 400, "temperature"},
		{"top_p 0", ChatPath, `{` + user + `, "top_p": 0}`, 400, "top_p"},
		{"zero max_tokens", ChatPath, `{` + user + `, "max_tokens": 0}`, 400, "max_tokens"},
		{"tool arguments not JSON", ChatPath, `{"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}`, 400, "not JSON"},
		{"malformed tool", ChatPath, `{` + user + `, "tools": [{"type": "function"}]}`, 400, "tools[0]"},
		{"forced tool choice", ChatPath, `{` + user + `, "tool_choice": "required"}`, 400, "tool_choice"},
		{"too long", ChatPath, `{"messages": [{"role": "user", "content": "` + strings.Repeat("lorem ipsum ", 1200) + `"}]}`, 400, "prompt too long"},
		{"prompt of the wrong type", CompletionsPath, `{"prompt": {"text": "hi"}}`, 400, "prompt"},
		{"no prompt", CompletionsPath, `{"max_tokens": 3}`, 400, "prompt is missing"},
		{"two prompts", CompletionsPath, `{"prompt": ["a", "b"]}`, 400, "one prompt"},
		{"token outside the vocabulary", CompletionsPath, `{"prompt": [1, 2, 999999]}`, 400, "vocabulary"},
		{"echo", CompletionsPath, `{"prompt": "hi", "echo": true}`, 400, "echo"},
	}
	for _, c := range cases {
		var res ErrorResponse
		resp, err := http.Post(ts.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatalf("%s: %s", c.name, raw)
		}
		if resp.StatusCode != c.status || res.Error.Code != c.status || !strings.Contains(res.Error.Message, c.mention) {
			t.Errorf("%s: %d %q, want %d mentioning %q", c.name, resp.StatusCode, res.Error.Message, c.status, c.mention)
		}
	}
	resp, err := http.Get(ts.URL + ChatPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET %s: %s, Allow %q", ChatPath, resp.Status, resp.Header.Get("Allow"))
	}
	req, _ := http.NewRequest("DELETE", ts.URL+ModelsPath, nil)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(resp.Header.Get("Allow"), "GET") {
		t.Fatalf("DELETE %s: %s, Allow %q", ModelsPath, resp.Status, resp.Header.Get("Allow"))
	}
}

// TestHugeArgumentsAreNotEchoed: an error about a huge field quotes only
// its start.
func TestHugeArgumentsAreNotEchoed(t *testing.T) {
	_, ts := serve(t)
	huge := strings.Repeat("{oops", 200000)
	for name, body := range map[string]string{
		"tool arguments": `{"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "` + huge + `"}}]}]}`,
		"role":           `{"messages": [{"role": "` + huge + `", "content": "hi"}]}`,
		"huge number":    `{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1` + strings.Repeat("0", 500000) + `}`,
	} {
		resp, err := http.Post(ts.URL+ChatPath, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || len(raw) > 1000 {
			t.Errorf("%s: %d, %d bytes of error: %.300s", name, resp.StatusCode, len(raw), raw)
		}
	}
}

func TestOversizeBodyIs413(t *testing.T) {
	_, ts := serve(t)
	body := `{"prompt": "` + strings.Repeat("x", MaxBody) + `"}`
	resp, err := http.Post(ts.URL+CompletionsPath, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over %d bytes: %d %s", MaxBody, resp.StatusCode, raw)
	}
}

// TestMaxTokensIsCappedAtTheContext: a max_tokens beyond what the context
// leaves after the prompt generates only that room (the engine's context
// here is 1024); a prompt that fills the context is a clear 400.
func TestMaxTokensIsCappedAtTheContext(t *testing.T) {
	e, ts := serve(t)
	ctx := e.ContextLength()
	ids := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(100 + i%50)
		}
		return p
	}
	for _, max := range []int64{1 << 62, 9223372036854775807, int64(ctx)} {
		var res CompletionResponse
		code := post(t, ts.URL+CompletionsPath, map[string]any{
			"prompt": ids(ctx - 4), "max_tokens": max, "temperature": 0, "ignore_eos": true,
		}, &res)
		if code != 200 || len(res.Choices) != 1 {
			t.Fatalf("max_tokens %d: %d %+v", max, code, res)
		}
		if res.Usage.CompletionTokens != 4 || res.Usage.TotalTokens != ctx || *res.Choices[0].FinishReason != "length" {
			t.Errorf("max_tokens %d with %d of %d positions taken: usage %+v, finish %s; want 4 tokens, the context full",
				max, ctx-4, ctx, *res.Usage, *res.Choices[0].FinishReason)
		}
	}
	for _, n := range []int{ctx, ctx + 1, 3 * ctx} {
		var res ErrorResponse
		code := post(t, ts.URL+CompletionsPath, map[string]any{"prompt": ids(n), "max_tokens": 1}, &res)
		if code != 400 || !strings.Contains(res.Error.Message, fmt.Sprintf("%d tokens", n)) || !strings.Contains(res.Error.Message, "no room") {
			t.Errorf("a prompt of %d tokens in a context of %d: %d %q", n, ctx, code, res.Error.Message)
		}
	}
}

// TestCompletions sends a token-id prompt to /v1/completions and checks
// ids, log-probs and text against the engine; and lists the model.
func TestCompletions(t *testing.T) {
	e, ts := serve(t)
	prompt := userPrompt(t, e, "Name three colours.")
	stop := chatStops(e.Model().Tokenizer)
	want, err := e.Generate(context.Background(), policy.GenerateRequest{PromptIDs: prompt, MaxTokens: 20, Sampling: sample.Params{Temperature: 0.8, TopK: 30}, Seed: 3, Stop: stop})
	if err != nil {
		t.Fatal(err)
	}
	var res CompletionResponse
	code := post(t, ts.URL+CompletionsPath, map[string]any{
		"prompt": prompt, "max_tokens": 20, "temperature": 0.8, "top_k": 30, "seed": 3, "stop_token_ids": stop, "ignore_eos": true,
		"logprobs": 1, "return_token_ids": true, "return_tokens_as_token_ids": true,
	}, &res)
	if code != http.StatusOK || len(res.Choices) != 1 {
		t.Fatalf("status %d: %+v", code, res)
	}
	c := res.Choices[0]
	if !slices.Equal(c.TokenIDs, want.TokenIDs) || !slices.Equal(c.PromptTokenIDs, prompt) || *c.PolicyVersion != 7 {
		t.Fatalf("token ids %v (version %v), engine %v", c.TokenIDs, *c.PolicyVersion, want.TokenIDs)
	}
	for i, tk := range c.Logprobs.Tokens {
		if tk != fmt.Sprintf("token_id:%d", want.TokenIDs[i]) || *c.Logprobs.TokenLogprobs[i] != want.LogProbs[i] {
			t.Fatalf("logprob %d: %s %v, engine %d %v", i, tk, *c.Logprobs.TokenLogprobs[i], want.TokenIDs[i], want.LogProbs[i])
		}
	}
	ids := want.TokenIDs
	if want.Finish == policy.FinishStop {
		ids = ids[:len(ids)-1]
	}
	text, _ := e.Model().Tokenizer.Decode(ids)
	if c.Text != text {
		t.Fatalf("text %q, engine %q", c.Text, text)
	}

	var list ModelList
	resp, err := http.Get(ts.URL + ModelsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) != 1 || list.Data[0].ID != "smollm2-135m" || list.Data[0].MaxModelLen != 1024 {
		t.Fatalf("models: %+v %v", list, err)
	}
}

// TestExternal uses frognano's own endpoint as the "external" server: a
// real round trip over HTTP must give what the engine gives directly.
func TestExternal(t *testing.T) {
	e, ts := serve(t)
	x := &External{BaseURL: ts.URL, Model: "smollm2-135m"}
	stop := chatStops(e.Model().Tokenizer)
	for i, p := range []sample.Params{{}, {Temperature: 0.9, TopP: 0.9}} {
		req := policy.GenerateRequest{PromptIDs: userPrompt(t, e, "Say hello in French."), MaxTokens: 16, Sampling: p, Seed: uint64(i), Stop: stop}
		want, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := x.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.TokenIDs, want.TokenIDs) || !slices.Equal(got.LogProbs, want.LogProbs) || got.Finish != want.Finish || got.PolicyVersion != 7 {
			t.Fatalf("%+v: external %+v, engine %+v", p, got, want)
		}
	}
	// MaxTokens 0: the rest of the context, from /v1/models.
	req := policy.GenerateRequest{PromptIDs: userPrompt(t, e, "What is 2+2?"), Stop: stop}
	got, err := x.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Finish != policy.FinishStop || got.TokenIDs[len(got.TokenIDs)-1] != stop[0] && got.TokenIDs[len(got.TokenIDs)-1] != stop[len(stop)-1] {
		t.Fatalf("until stop: %+v", got)
	}
	// A too-long prompt is the server's 400, as an error.
	long := slices.Repeat([]int32{100}, 2000)
	if _, err := x.Generate(context.Background(), policy.GenerateRequest{PromptIDs: long, MaxTokens: 4}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("too long: %v", err)
	}
}
