// Package harness is FrogNano's agent harness, in plain Go: it parses the
// tool calls a model writes in ChatML (Qwen2.5's format, as
// kernels/tokenizer.RenderChat renders them), runs FrogNano's tools against
// a Sandbox, and plays whole episodes (Runner.Run): in agent mode the tool
// loop (agent.go), in patch mode one answer of search/replace edits
// (patch.go), both extending the policy's token ids turn by turn and
// grading the repository at the end. The episode's sandbox over containerd
// is workspace.go; ScriptedPolicy (scripted.go) is a deterministic policy
// for tests. The rollout actor (actors/rollout) runs groups of episodes.
package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/frognano/frognano/actors/policy"
)

// Kinds of tool calls that do not fit FrogNano's tools, for errors.Is,
// beside policy.ErrUnclosedTag and policy.ErrMalformedCall. Each is the
// model's mistake, shown to it as an observation, never a reason to stop.
var (
	ErrUnknownTool        = errors.New("unknown tool")
	ErrMissingArgument    = errors.New("missing argument")
	ErrUnexpectedArgument = errors.New("unexpected argument")
	ErrArgumentType       = errors.New("wrong argument type")
	ErrArgumentRange      = errors.New("argument out of range")
)

// ParseToolCalls extracts the <tool_call> blocks from an assistant turn and
// checks each against FrogNano's tools. Text outside the blocks is the
// model's own and ignored. On any error no calls are returned: the turn is
// rejected as a whole, and the error (a *policy.CallError) becomes the
// observation.
func ParseToolCalls(text string) ([]policy.ToolCall, error) {
	blocks, _, err := policy.ParseToolCallBlocks(text)
	if err != nil {
		return nil, err
	}
	var calls []policy.ToolCall
	for i, b := range blocks {
		if err := validate(b.Call); err != nil {
			err.Index, err.Tool = i, b.Call.Name
			return nil, err
		}
		calls = append(calls, b.Call)
	}
	return calls, nil
}

// validate checks a call's arguments against its tool's parameters.
func validate(call policy.ToolCall) *policy.CallError {
	tool, ok := lookupTool(call.Name)
	if !ok {
		return &policy.CallError{Err: ErrUnknownTool, Detail: fmt.Sprintf("%q; tools are %s", call.Name, strings.Join(toolNames(), ", "))}
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(call.Arguments, &args); err != nil || args == nil {
		return &policy.CallError{Err: policy.ErrMalformedCall, Detail: `"arguments" must be a JSON object`}
	}
	for name := range args {
		if _, ok := tool.param(name); !ok {
			return &policy.CallError{Err: ErrUnexpectedArgument, Detail: name}
		}
	}
	for _, p := range tool.Params {
		v, ok := args[p.Name]
		if !ok || string(v) == "null" {
			if p.Required {
				return &policy.CallError{Err: ErrMissingArgument, Detail: p.Name}
			}
			continue
		}
		switch p.Type {
		case TypeString:
			var s string
			if json.Unmarshal(v, &s) != nil {
				return &policy.CallError{Err: ErrArgumentType, Detail: p.Name + " must be a string"}
			}
		case TypeInteger:
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return &policy.CallError{Err: ErrArgumentType, Detail: p.Name + " must be an integer"}
			}
			if n < p.Min {
				return &policy.CallError{Err: ErrArgumentRange, Detail: fmt.Sprintf("%s must be at least %d", p.Name, p.Min)}
			}
		}
	}
	return nil
}
