// Package openai speaks the OpenAI HTTP API in both directions: Handler
// serves a sampler.Engine as /v1/chat/completions, /v1/completions and
// /v1/models, so standard clients can talk to the policy; External is a
// policy.Policy backed by another OpenAI-compatible server (vLLM,
// llama.cpp's llama-server) through /v1/completions with token-id prompts.
package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ChatRequest is the body of POST /v1/chat/completions. Fields frognano
// does not use are ignored, as OpenAI-compatible servers do; a field of the
// wrong JSON type is a 400.
type ChatRequest struct {
	Model               string            `json:"model"`
	Messages            []ChatMessage     `json:"messages"`
	Tools               []json.RawMessage `json:"tools,omitempty"`
	ToolChoice          json.RawMessage   `json:"tool_choice,omitempty"`
	Temperature         *float32          `json:"temperature,omitempty"`
	TopP                *float32          `json:"top_p,omitempty"`
	TopK                *int              `json:"top_k,omitempty"`
	MaxTokens           *int              `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int              `json:"max_completion_tokens,omitempty"`
	Seed                *int64            `json:"seed,omitempty"`
	Stop                Stop              `json:"stop,omitempty"`
	N                   *int              `json:"n,omitempty"`
	Stream              bool              `json:"stream,omitempty"`
	StreamOptions       *StreamOptions    `json:"stream_options,omitempty"`
	Logprobs            bool              `json:"logprobs,omitempty"`
	TopLogprobs         int               `json:"top_logprobs,omitempty"`
}

// StreamOptions asks for a last chunk with the usage counts.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one turn. Content is a string, null, or an array of text
// parts.
type ChatMessage struct {
	Role       string     `json:"role,omitempty"`
	Content    *Content   `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// Content is a message's text: a JSON string or an array of
// {"type": "text", "text": …} parts, which are concatenated.
type Content string

// UnmarshalJSON reads either form.
func (c *Content) UnmarshalJSON(b []byte) error {
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")) {
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var s string
		for _, p := range parts {
			if p.Type != "text" {
				return fmt.Errorf("content part of type %q: only text parts are supported", p.Type)
			}
			s += p.Text
		}
		*c = Content(s)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*c = Content(s)
	return nil
}

func (c *Content) text() string {
	if c == nil {
		return ""
	}
	return string(*c)
}

// ToolCall is a function call in an assistant message. Arguments is a JSON
// object serialised as a string, as OpenAI sends it.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"` // stream deltas only
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and its arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Stop is the "stop" field: a string or an array of strings.
type Stop []string

// UnmarshalJSON reads either form.
func (s *Stop) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = Stop{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop must be a string or an array of strings")
	}
	*s = many
	return nil
}

// ChatResponse is a chat completion.
type ChatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *Usage       `json:"usage,omitempty"`
}

// ChatChoice is the one answer (n is always 1). In stream chunks Delta
// replaces Message.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      *ChatMessage  `json:"message,omitempty"`
	Delta        *ChatMessage  `json:"delta,omitempty"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// ChatLogprobs are the sampled tokens' log-probabilities.
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
}

// TokenLogprob is one sampled token. frognano returns no alternatives
// (TopLogprobs is always empty).
type TokenLogprob struct {
	Token       string         `json:"token"`
	Logprob     float32        `json:"logprob"`
	Bytes       []int          `json:"bytes"`
	TopLogprobs []TokenLogprob `json:"top_logprobs"`
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// CompletionRequest is the body of POST /v1/completions. Beside OpenAI's
// fields it takes vLLM's extensions that a token-level client needs
// (top_k, stop_token_ids, ignore_eos, return_token_ids,
// return_tokens_as_token_ids) and frognano's min_policy_version.
type CompletionRequest struct {
	Model                  string          `json:"model"`
	Prompt                 json.RawMessage `json:"prompt"`
	MaxTokens              *int            `json:"max_tokens,omitempty"`
	Temperature            *float32        `json:"temperature,omitempty"`
	TopP                   *float32        `json:"top_p,omitempty"`
	TopK                   *int            `json:"top_k,omitempty"`
	Seed                   *int64          `json:"seed,omitempty"`
	Stop                   Stop            `json:"stop,omitempty"`
	StopTokenIDs           []int32         `json:"stop_token_ids,omitempty"`
	IgnoreEOS              bool            `json:"ignore_eos,omitempty"`
	N                      *int            `json:"n,omitempty"`
	Echo                   bool            `json:"echo,omitempty"`
	Stream                 bool            `json:"stream,omitempty"`
	Logprobs               *int            `json:"logprobs,omitempty"`
	ReturnTokenIDs         bool            `json:"return_token_ids,omitempty"`
	ReturnTokensAsTokenIDs bool            `json:"return_tokens_as_token_ids,omitempty"`
	MinPolicyVersion       int64           `json:"min_policy_version,omitempty"`

	// llama.cpp's llama-server: return_tokens puts the generated ids in
	// "tokens"; its sampler defaults (min_p 0.05, repeat_penalty 1.1) are
	// turned off by External. frognano ignores these.
	ReturnTokens  bool     `json:"return_tokens,omitempty"`
	MinP          *float32 `json:"min_p,omitempty"`
	RepeatPenalty *float32 `json:"repeat_penalty,omitempty"`
}

// CompletionResponse is a text completion.
type CompletionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// CompletionChoice is the one answer. TokenIDs (vLLM's return_token_ids),
// PolicyVersion and LastPolicyVersion are extensions (policy.GenerateResult:
// the last is set when the Sampler swapped weights while the answer was in
// flight and it ran to its end; an answer cut at a stop string reports its
// first version only).
type CompletionChoice struct {
	Index             int                 `json:"index"`
	Text              string              `json:"text"`
	Logprobs          *CompletionLogprobs `json:"logprobs"`
	FinishReason      *string             `json:"finish_reason"`
	StopReason        any                 `json:"stop_reason,omitempty"`
	TokenIDs          []int32             `json:"token_ids,omitempty"`
	PromptTokenIDs    []int32             `json:"prompt_token_ids,omitempty"`
	PolicyVersion     *int64              `json:"policy_version,omitempty"`
	LastPolicyVersion int64               `json:"last_policy_version,omitempty"`
	// Tokens is llama-server's return_tokens output, read by External.
	Tokens []int32 `json:"tokens,omitempty"`
}

// CompletionLogprobs is the legacy completions format: parallel arrays.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float32           `json:"token_logprobs"`
	TopLogprobs   []map[string]float32 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
	// Content is llama-server's per-token form (id, token, logprob), read
	// by External.
	Content []struct {
		ID      *int32  `json:"id"`
		Token   string  `json:"token"`
		Logprob float32 `json:"logprob"`
	} `json:"content,omitempty"`
}

// ModelList is GET /v1/models.
type ModelList struct {
	Object string      `json:"object"`
	Data   []ModelInfo `json:"data"`
}

// ModelInfo describes the served model; MaxModelLen is vLLM's field.
type ModelInfo struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
}

// ErrorResponse is every error's body.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what went wrong.
type ErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    int    `json:"code"`
}
