package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Default system prompts of the chat templates frognano renders.
const (
	// SmolLM2DefaultSystem is what SmolLM2-Instruct's template inserts when
	// the conversation does not start with a system message.
	SmolLM2DefaultSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
	// QwenDefaultSystem is Qwen2.5-Instruct's.
	QwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
)

// Message is one chat turn. Role is "system", "user", "assistant" or
// "tool"; an assistant turn may carry tool calls, a tool turn carries a
// tool's result in Content.
type Message struct {
	Role      string
	Content   string
	ToolCalls []ToolCall
}

// ToolCall is a function call made by the assistant. Arguments is a JSON
// object (or any JSON value); it is re-rendered, keys in their given order,
// as Python's json.dumps would.
type ToolCall struct {
	Name      string
	Arguments json.RawMessage
}

// ChatOptions control RenderChat.
type ChatOptions struct {
	// DefaultSystem is rendered as the system turn when the conversation
	// does not start with one; empty means no system turn. See
	// DefaultSystemFor.
	DefaultSystem string
	// Tools are JSON function schemas offered to the model; when present
	// they are listed in the system turn the way Qwen2.5 does.
	Tools []json.RawMessage
	// AddGenerationPrompt appends "<|im_start|>assistant\n" so the model
	// writes the next assistant turn.
	AddGenerationPrompt bool
	// ToolCallExample is the example call the tools section shows; empty
	// means Qwen2.5's {"name": <function-name>, "arguments": <args-json-object>}.
	// Some Qwen2.5 GGUF templates print it with doubled braces; ChatFormat
	// reads the model's own.
	ToolCallExample string
}

// DefaultToolCallExample is the example call in Qwen2.5's tools section.
const DefaultToolCallExample = `{"name": <function-name>, "arguments": <args-json-object>}`

// ErrNoChatTemplate is a model whose metadata carries no chat template, or
// one that frognano cannot render.
var ErrNoChatTemplate = errors.New("tokenizer: no usable chat template")

// ChatFormat is what RenderChat needs to know of a model's Jinja chat
// template: the ChatML templates frognano renders differ only in these.
type ChatFormat struct {
	DefaultSystem   string // rendered when a conversation has no system turn
	ToolCallExample string // the tools section's example call
}

// Options returns ChatOptions carrying the format, for RenderChat.
func (f ChatFormat) Options(tools []json.RawMessage, addGenerationPrompt bool) ChatOptions {
	return ChatOptions{DefaultSystem: f.DefaultSystem, ToolCallExample: f.ToolCallExample, Tools: tools, AddGenerationPrompt: addGenerationPrompt}
}

// toolCallMarker precedes the example call in a Qwen2.5 template's source:
// the example is the Jinja string literal's text up to toolCallEnd.
const (
	toolCallMarker = `within <tool_call></tool_call> XML tags:\n<tool_call>\n`
	toolCallEnd    = `\n</tool_call>`
)

// ParseChatTemplate reads the format of a ChatML chat template (the Jinja
// source in tokenizer.chat_template or tokenizer_config.json): its default
// system prompt and, when it lists tools, its example tool call. An empty
// template, or one that is not ChatML, is ErrNoChatTemplate: RenderChat
// would render something the model was not trained on.
func ParseChatTemplate(tmpl string) (ChatFormat, error) {
	if strings.TrimSpace(tmpl) == "" {
		return ChatFormat{}, fmt.Errorf("%w: the model has none (tokenizer.chat_template is missing or empty)", ErrNoChatTemplate)
	}
	if !strings.Contains(tmpl, "<|im_start|>") || !strings.Contains(tmpl, "<|im_end|>") {
		return ChatFormat{}, fmt.Errorf("%w: the template is not ChatML (no <|im_start|>/<|im_end|>); frognano renders ChatML templates only", ErrNoChatTemplate)
	}
	f := ChatFormat{DefaultSystem: DefaultSystemFor(tmpl), ToolCallExample: DefaultToolCallExample}
	if strings.Contains(tmpl, "<tools>") {
		_, rest, ok := strings.Cut(tmpl, toolCallMarker)
		example, _, ok2 := strings.Cut(rest, toolCallEnd)
		if !ok || !ok2 || example == "" {
			return ChatFormat{}, fmt.Errorf("%w: the template lists tools but not in Qwen2.5's form (no example call between <tool_call> tags)", ErrNoChatTemplate)
		}
		f.ToolCallExample = strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(example)
	}
	return f, nil
}

// DefaultSystemFor picks the default system prompt a model's chat template
// uses: SmolLM2's or Qwen's when the template contains it, else none.
func DefaultSystemFor(chatTemplate string) string {
	for _, s := range []string{SmolLM2DefaultSystem, QwenDefaultSystem} {
		if strings.Contains(chatTemplate, s) {
			return s
		}
	}
	return ""
}

// RenderChat renders a conversation in ChatML, exactly as SmolLM2-Instruct's
// and Qwen2.5-Instruct's Jinja templates do (checked against transformers'
// apply_chat_template in the golden tests):
//
//	<|im_start|>system\n{system}<|im_end|>\n
//	<|im_start|>user\n{content}<|im_end|>\n
//	<|im_start|>assistant\n{content}<|im_end|>\n
//
// The system turn is the first message if its role is "system", otherwise
// opts.DefaultSystem (omitted when empty). With opts.Tools the system turn
// becomes Qwen2.5's:
//
//	{system}\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n
//	You are provided with function signatures within <tools></tools> XML tags:\n<tools>
//	\n{tool json}   (one line per tool)
//	\n</tools>\n\nFor each function call, return a json object with function name and arguments
//	within <tool_call></tool_call> XML tags:\n<tool_call>\n{example}\n</tool_call>
//
// (the two wrapped lines above are single lines; {example} is
// opts.ToolCallExample). An assistant turn with tool
// calls is rendered as
//
//	<|im_start|>assistant[\n{content}]\n<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>...<|im_end|>\n
//
// and consecutive "tool" messages become one user turn:
//
//	<|im_start|>user\n<tool_response>\n{result 1}\n</tool_response>\n<tool_response>\n{result 2}\n</tool_response><|im_end|>\n
//
// JSON (tools and arguments) is rendered like Python's json.dumps with
// ensure_ascii=False: ", " and ": " separators, keys in the order given.
// Any other role is rendered as a plain turn with that role.
func RenderChat(msgs []Message, opts ChatOptions) (string, error) {
	var b strings.Builder
	if len(msgs) == 0 && len(opts.Tools) == 0 {
		opts.DefaultSystem = "" // as the templates do: no turns, no system turn
	}
	system, rest := opts.DefaultSystem, msgs
	hasSystem := len(msgs) > 0 && msgs[0].Role == "system"
	if hasSystem {
		system, rest = msgs[0].Content, msgs[1:]
	}
	if len(opts.Tools) > 0 {
		b.WriteString("<|im_start|>system\n")
		b.WriteString(system)
		b.WriteString("\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
		for i, tool := range opts.Tools {
			s, err := PythonJSON(tool)
			if err != nil {
				return "", fmt.Errorf("tool %d: %w", i, err)
			}
			b.WriteString("\n")
			b.WriteString(s)
		}
		example := opts.ToolCallExample
		if example == "" {
			example = DefaultToolCallExample
		}
		b.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n" + example + "\n</tool_call><|im_end|>\n")
	} else if hasSystem || system != "" {
		b.WriteString("<|im_start|>system\n" + system + "<|im_end|>\n")
	}
	for i, m := range rest {
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			b.WriteString("<|im_start|>assistant")
			if m.Content != "" {
				b.WriteString("\n" + m.Content)
			}
			for _, tc := range m.ToolCalls {
				raw := tc.Arguments
				if len(raw) == 0 {
					raw = json.RawMessage("{}")
				}
				args, err := PythonJSON(raw)
				if err != nil {
					return "", fmt.Errorf("tool call %q arguments: %w", tc.Name, err)
				}
				b.WriteString("\n<tool_call>\n{\"name\": \"" + tc.Name + "\", \"arguments\": " + args + "}\n</tool_call>")
			}
			b.WriteString("<|im_end|>\n")
		case m.Role == "tool":
			if i == 0 || rest[i-1].Role != "tool" {
				b.WriteString("<|im_start|>user")
			}
			b.WriteString("\n<tool_response>\n" + m.Content + "\n</tool_response>")
			if i == len(rest)-1 || rest[i+1].Role != "tool" {
				b.WriteString("<|im_end|>\n")
			}
		default:
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
	}
	if opts.AddGenerationPrompt {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}

// PythonJSON re-renders a JSON value the way Python's json.dumps(value,
// ensure_ascii=False) prints it after json.loads: ", " and ": " separators,
// object keys in their original order, non-ASCII text unescaped, floats in
// Python's repr form (1e-05, 100.0, 1e+16). Chat templates render tool
// schemas and arguments with it, so the model sees the format it was trained on.
func PythonJSON(raw json.RawMessage) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	if err := pyValue(dec, &b); err != nil {
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("tokenizer: trailing data after JSON value")
	}
	return b.String(), nil
}

func pyValue(dec *json.Decoder, b *strings.Builder) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("tokenizer: invalid JSON: %w", err)
	}
	switch v := tok.(type) {
	case json.Delim:
		closer := map[json.Delim]json.Delim{'{': '}', '[': ']'}[v]
		b.WriteRune(rune(v))
		for first := true; dec.More(); first = false {
			if !first {
				b.WriteString(", ")
			}
			if v == '{' {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				pyString(b, k.(string))
				b.WriteString(": ")
			}
			if err := pyValue(dec, b); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil {
			return err
		}
		b.WriteRune(rune(closer))
	case string:
		pyString(b, v)
	case json.Number:
		b.WriteString(pyNumber(v))
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case nil:
		b.WriteString("null")
	}
	return nil
}

// pyString quotes s as json.dumps(ensure_ascii=False) does.
func pyString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&15])
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// pyNumber prints a JSON number as Python prints json.loads of it: integers
// unchanged, floats as repr(float).
func pyNumber(n json.Number) string {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if s == "-0" {
			return "0"
		}
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		if f > 0 {
			return "Infinity"
		} else if f < 0 {
			return "-Infinity"
		}
		return s
	}
	// repr: shortest round-tripping digits; scientific when the decimal
	// exponent is < -4 or >= 16.
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s = strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
