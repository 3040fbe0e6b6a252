package harness

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/tokenizer"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// AgentSystemPrompt is the system turn of agent mode; the tools' schemas
// follow it in the ChatML system turn (tokenizer.RenderChat).
const AgentSystemPrompt = `You are a software engineer fixing a bug in the repository in the current directory. Use the tools to read the code, edit the files and run the tests. Change only the code, never the tests. Call one or more tools in every turn. When the failing tests pass, call Submit.`

// noCallReminder is the observation for a turn without a tool call.
const noCallReminder = `Your turn had no tool call. Call a tool in the format shown in the system prompt, for example:
<tool_call>
{"name": "Read", "arguments": {"path": "setup.py"}}
</tool_call>
When the bug is fixed, call Submit.`

// writers are the tools that can change the repository.
var writers = map[string]bool{"Write": true, "Edit": true, "Bash": true}

// agentPrompt is the first user turn.
func agentPrompt(task *records.Task) string {
	return strings.TrimRight(task.GetProblemStatement(), "\n") + "\n"
}

// agent is the tool loop: generate a turn, run its tool calls, show the
// results, until Submit or a limit.
func (e *episode) agent() error {
	msgs := []tokenizer.Message{{Role: "system", Content: AgentSystemPrompt}, {Role: "user", Content: agentPrompt(e.task)}}
	ids, err := e.encodePrompt(msgs, true)
	if err != nil {
		return err
	}
	e.res.Turns = append(e.res.Turns,
		&records.Turn{Role: records.Role_ROLE_SYSTEM, Content: AgentSystemPrompt},
		&records.Turn{Role: records.Role_ROLE_USER, Content: msgs[1].Content})
	if len(ids) >= e.lim.MaxContext {
		return e.end(EndContextFull, fmt.Sprintf("the prompt is %d tokens, the limit is %d", len(ids), e.lim.MaxContext))
	}
	e.appendEnv(ids)
	opts := e.r.Tools
	if opts.OutputLimit <= 0 {
		opts.OutputLimit = 8 << 10
	}
	for n := 0; ; n++ {
		if n == e.lim.MaxTurns {
			return e.end(EndMaxTurns, fmt.Sprintf("%d turns without Submit", n))
		}
		if e.wctx.Err() != nil {
			end, detail, _, err := e.interrupted(e.wctx.Err())
			if err != nil {
				return err
			}
			return e.end(end, detail)
		}
		t, end, detail, err := e.generate()
		if err != nil {
			return err
		}
		if end != "" {
			return e.end(end, detail)
		}
		if strings.TrimSpace(t.text) == "" {
			if t.finish == policy.FinishContext {
				return e.end(EndContextFull, "the context filled up before the model wrote anything")
			}
			return e.end(EndNoOutput, fmt.Sprintf("turn %d: the model emitted %d tokens and no text", n+1, len(t.ids)))
		}
		assistant := e.res.Turns[len(e.res.Turns)-1]
		if t.finish == policy.FinishContext {
			return e.end(EndContextFull, "the context filled up during a turn")
		}

		var (
			obs       []string
			tools     []*records.Turn
			submitted bool
		)
		calls, perr := ParseToolCalls(t.text)
		switch {
		case perr != nil:
			msg := "Error: " + perr.Error()
			if t.finish == policy.FinishLength && errors.Is(perr, policy.ErrUnclosedTag) {
				msg += fmt.Sprintf(" (the turn reached its limit of %d tokens before the tool call was closed; write shorter calls)", e.lim.MaxTurnTokens)
			}
			msg += ". No tool was run."
			obs = append(obs, msg)
			tools = append(tools, &records.Turn{Role: records.Role_ROLE_TOOL, Content: msg})
		case len(calls) == 0:
			msg := noCallReminder
			if t.finish == policy.FinishLength {
				msg = fmt.Sprintf("Your turn reached its limit of %d tokens. ", e.lim.MaxTurnTokens) + msg
			}
			// A plain user turn, not a tool response: nothing was called.
			if !e.appendText(e.closeTurn(t)+"<|im_start|>user\n"+placeholder+"<|im_end|>\n<|im_start|>assistant\n", msg) {
				return e.end(EndContextFull, "the reminder after a turn without a tool call does not fit")
			}
			e.res.Turns = append(e.res.Turns, &records.Turn{Role: records.Role_ROLE_USER, Content: msg})
			continue
		}
		for i, call := range calls {
			id := fmt.Sprintf("call_%d_%d", n, i)
			assistant.ToolCalls = append(assistant.ToolCalls, &records.ToolCall{Id: id, Name: call.Name, ArgumentsJson: string(call.Arguments)})
			if writers[call.Name] {
				e.wrote = true
			}
			ts := time.Now()
			res, err := Run(e.wctx, e.ws, call, opts)
			secs := time.Since(ts).Seconds()
			e.res.SandboxSeconds += secs
			if err != nil {
				if end, detail, ok, cerr := e.interrupted(err); ok {
					if cerr != nil {
						return cerr
					}
					return e.end(end, detail)
				}
				e.res.Turns = append(e.res.Turns, &records.Turn{Role: records.Role_ROLE_TOOL, ToolCallId: id, Content: "sandbox failure: " + err.Error(), Seconds: secs})
				return e.end(EndSandboxFailure, err.Error())
			}
			obs = append(obs, res.Observation)
			tools = append(tools, &records.Turn{Role: records.Role_ROLE_TOOL, ToolCallId: id, Content: res.Observation, Seconds: secs})
			if res.Submitted {
				submitted = true
				break
			}
		}
		e.res.Turns = append(e.res.Turns, tools...)
		if submitted {
			return e.end(EndSubmitted, "")
		}
		var b strings.Builder
		b.WriteString(e.closeTurn(t))
		b.WriteString("<|im_start|>user")
		for range obs {
			b.WriteString("\n<tool_response>\n" + placeholder + "\n</tool_response>")
		}
		b.WriteString("<|im_end|>\n<|im_start|>assistant\n")
		if !e.appendText(b.String(), obs...) {
			return e.end(EndContextFull, "the tool results do not fit in the context")
		}
	}
}
