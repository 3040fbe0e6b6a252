package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The tags around a call in Qwen2.5's format, as kernels/tokenizer.RenderChat
// writes them.
const (
	openTag  = "<tool_call>"
	closeTag = "</tool_call>"
)

// ToolCall is one call the model made. Its fields match
// tokenizer.ToolCall, so the harness's loop can convert it to put it back
// into the history.
type ToolCall struct {
	Name      string
	Arguments json.RawMessage
}

// Kinds of malformed tool calls, for errors.Is. Each is the model's
// mistake, shown to it as an observation, never a reason to stop.
var (
	ErrUnclosedTag   = errors.New("unclosed <tool_call> tag")
	ErrMalformedCall = errors.New("malformed tool call")
)

// CallError is a tool call that could not be parsed or does not fit its
// tool's schema (actors/harness checks FrogNano's tools and adds its own
// kinds).
type CallError struct {
	Index  int    // which <tool_call> block, from 0
	Tool   string // empty when the name could not be read
	Err    error  // ErrUnclosedTag, ErrMalformedCall or a checker's kind
	Detail string
}

func (e *CallError) Error() string {
	s := fmt.Sprintf("tool call %d", e.Index)
	if e.Tool != "" {
		s += fmt.Sprintf(" (%s)", e.Tool)
	}
	s += ": " + e.Err.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *CallError) Unwrap() error { return e.Err }

// ToolCallBlock is one <tool_call> block of an assistant turn: the call,
// and the text between the previous block (or the turn's start) and it.
type ToolCallBlock struct {
	Call   ToolCall
	Before string
}

// ParseToolCallBlocks reads the <tool_call> blocks of an assistant turn in
// the format alone, for any tools: each block holds one JSON object with a
// "name" and optional "arguments" (missing or null arguments read as {}).
// It returns the blocks and the text after the last one. The JSON is read
// by a decoder rather than cut at the closing tag, so a string argument may
// itself contain "</tool_call>". The error, if any, is a *CallError.
// harness.ParseToolCalls adds the check against FrogNano's tools; the
// OpenAI endpoint (actors/sampler/openai) uses this for its clients' tools.
func ParseToolCallBlocks(text string) (blocks []ToolCallBlock, after string, err error) {
	for i := 0; ; i++ {
		start := strings.Index(text, openTag)
		if start < 0 {
			return blocks, text, nil
		}
		before := text[:start]
		text = text[start+len(openTag):]
		call, n, cerr := parseBlock(text)
		if cerr != nil {
			cerr.Index = i
			return nil, "", cerr
		}
		blocks = append(blocks, ToolCallBlock{Call: call, Before: before})
		text = text[n:]
	}
}

// parseBlock reads one call from just after an opening tag and returns the
// number of bytes consumed, through the closing tag.
func parseBlock(text string) (ToolCall, int, *CallError) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if !strings.Contains(text, closeTag) {
			return ToolCall{}, 0, &CallError{Err: ErrUnclosedTag}
		}
		return ToolCall{}, 0, &CallError{Err: ErrMalformedCall, Detail: err.Error()}
	}
	end := int(dec.InputOffset())
	rest := strings.TrimLeft(text[end:], " \t\r\n")
	if !strings.HasPrefix(rest, closeTag) {
		if !strings.Contains(rest, closeTag) {
			return ToolCall{}, 0, &CallError{Err: ErrUnclosedTag}
		}
		return ToolCall{}, 0, &CallError{Err: ErrMalformedCall, Detail: "text after the JSON object inside <tool_call>"}
	}
	consumed := len(text) - len(rest) + len(closeTag)

	var body struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&body); err != nil {
		return ToolCall{}, 0, &CallError{Err: ErrMalformedCall, Detail: err.Error()}
	}
	if body.Name == nil || *body.Name == "" {
		return ToolCall{}, 0, &CallError{Err: ErrMalformedCall, Detail: `no "name"`}
	}
	call := ToolCall{Name: *body.Name, Arguments: body.Arguments}
	if len(call.Arguments) == 0 || string(call.Arguments) == "null" {
		call.Arguments = json.RawMessage("{}")
	}
	return call, consumed, nil
}
