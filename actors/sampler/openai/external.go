package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/frognano/frognano/actors/policy"
)

// External is a policy.Policy served by another OpenAI-compatible server,
// for evaluation and synthesis with models frognano does not run itself.
// It posts token-id prompts to BaseURL + "/v1/completions" and reads the
// sampled ids and their log-probabilities back. What it relies on:
//
//   - prompt as an array of token ids (OpenAI, vLLM, llama-server);
//   - the sampled ids: vLLM's "return_token_ids" (choice.token_ids, vLLM ≥
//     0.10.2) or "return_tokens_as_token_ids" (logprobs tokens
//     "token_id:N"), or llama-server's "return_tokens" (choice.tokens) or
//     logprobs.content[].id; External asks for all of them;
//   - "stop_token_ids" (vLLM) for Stop, with "ignore_eos" so only Stop
//     ends a turn; llama-server has no stop_token_ids, so there the model's
//     end-of-generation token ends it;
//   - "top_k", "seed"; for llama-server also "min_p": 0 and
//     "repeat_penalty": 1, which turn off its default extra samplers.
//
// Log-probabilities: vLLM returns, by default (--logprobs-mode
// raw_logprobs), those of the raw logits, before temperature; frognano's are
// of softmax(logits/T). They agree at temperature 1 (and greedy, whose
// frognano log-probs are at T = 1); for other temperatures start vLLM with
// --logprobs-mode processed_logprobs (vLLM ≥ 0.10.2), which applies the
// temperature (and may reflect top-k/top-p too: leave those off where the
// values must match exactly). llama-server's n_probs report probabilities
// after its samplers.
//
// A server that ends on a stop id without returning it (older servers drop
// it) gets it appended with log-probability 0, so that TokenIDs always ends
// with the stop id on FinishStop, as the harness extends its prompt with it.
// MaxTokens 0 asks for the rest of the context, read from /v1/models
// (vLLM's max_model_len). PolicyVersion is the server's frognano
// policy_version when it reports one, else Version.
type External struct {
	BaseURL string // e.g. http://127.0.0.1:8000 (without /v1)
	Model   string // the model name the server serves
	APIKey  string // sent as a bearer token when set
	Client  *http.Client
	Version int64 // reported as the policy version

	once   sync.Once
	maxLen int
	lenErr error
}

var _ policy.Policy = (*External)(nil)

func (x *External) client() *http.Client {
	if x.Client != nil {
		return x.Client
	}
	return http.DefaultClient
}

func (x *External) url(path string) string { return strings.TrimRight(x.BaseURL, "/") + path }

func (x *External) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, x.url(path), rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if x.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+x.APIKey)
	}
	resp, err := x.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e ErrorResponse
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return fmt.Errorf("%s %s: %s: %s", method, x.url(path), resp.Status, msg)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: unexpected answer: %w", method, x.url(path), err)
	}
	return nil
}

// contextLength reads the served model's max_model_len once.
func (x *External) contextLength(ctx context.Context) (int, error) {
	x.once.Do(func() {
		var list ModelList
		if x.lenErr = x.do(ctx, http.MethodGet, "/v1/models", nil, &list); x.lenErr != nil {
			return
		}
		for _, m := range list.Data {
			if m.ID == x.Model || (x.Model == "" && len(list.Data) == 1) {
				x.maxLen = m.MaxModelLen
			}
		}
		if x.maxLen <= 0 {
			x.lenErr = fmt.Errorf("%s does not report max_model_len for %q; set MaxTokens", x.url("/v1/models"), x.Model)
		}
	})
	return x.maxLen, x.lenErr
}

// Generate asks the server for one continuation.
func (x *External) Generate(ctx context.Context, req policy.GenerateRequest) (policy.GenerateResult, error) {
	if len(req.PromptIDs) == 0 {
		return policy.GenerateResult{}, errors.New("openai: empty prompt")
	}
	limit := req.MaxTokens
	if limit <= 0 {
		n, err := x.contextLength(ctx)
		if err != nil {
			return policy.GenerateResult{}, err
		}
		if limit = n - len(req.PromptIDs); limit <= 0 {
			return policy.GenerateResult{}, fmt.Errorf("openai: %d prompt tokens leave no room in a context of %d", len(req.PromptIDs), n)
		}
	}
	temp, topP, topK := req.Sampling.Temperature, req.Sampling.TopP, req.Sampling.TopK
	if topP <= 0 {
		topP = 1
	}
	seed := int64(req.Seed)
	one, zero, unit := 1, float32(0), float32(1)
	body := CompletionRequest{
		Model: x.Model, MaxTokens: &limit, Temperature: &temp, TopP: &topP, TopK: &topK, Seed: &seed,
		StopTokenIDs: req.Stop, IgnoreEOS: true, Logprobs: &one,
		ReturnTokenIDs: true, ReturnTokensAsTokenIDs: true, ReturnTokens: true,
		MinP: &zero, RepeatPenalty: &unit, MinPolicyVersion: req.MinPolicyVersion,
	}
	body.Prompt, _ = json.Marshal(req.PromptIDs)
	var resp CompletionResponse
	if err := x.do(ctx, http.MethodPost, "/v1/completions", body, &resp); err != nil {
		return policy.GenerateResult{}, err
	}
	if len(resp.Choices) != 1 {
		return policy.GenerateResult{}, fmt.Errorf("openai: %d choices in the answer, want 1", len(resp.Choices))
	}
	c := resp.Choices[0]
	ids, lps, err := tokensOf(c)
	if err != nil {
		return policy.GenerateResult{}, err
	}
	res := policy.GenerateResult{TokenIDs: ids, LogProbs: lps, PolicyVersion: x.Version}
	if c.PolicyVersion != nil {
		res.PolicyVersion, res.LastPolicyVersion = *c.PolicyVersion, c.LastPolicyVersion
	}
	finish := ""
	if c.FinishReason != nil {
		finish = *c.FinishReason
	}
	switch {
	case finish == "length" && len(ids) < limit:
		res.Finish = policy.FinishContext
	case finish == "length":
		res.Finish = policy.FinishLength
	case finish == "stop":
		res.Finish = policy.FinishStop
		if len(ids) == 0 || !slices.Contains(req.Stop, ids[len(ids)-1]) {
			id, ok := stopID(c.StopReason)
			if !ok || !slices.Contains(req.Stop, id) {
				return policy.GenerateResult{}, fmt.Errorf("openai: the server stopped (stop_reason %v) on none of the stop ids %v", c.StopReason, req.Stop)
			}
			res.TokenIDs = append(res.TokenIDs, id)
			res.LogProbs = append(res.LogProbs, 0)
		}
	default:
		return policy.GenerateResult{}, fmt.Errorf("openai: finish_reason %q", finish)
	}
	return res, nil
}

func stopID(v any) (int32, bool) {
	f, ok := v.(float64)
	if !ok || f != float64(int32(f)) {
		return 0, false
	}
	return int32(f), true
}

// tokensOf reads the sampled ids and log-probs from whichever fields the
// server filled.
func tokensOf(c CompletionChoice) ([]int32, []float32, error) {
	lp := c.Logprobs
	if lp == nil {
		return nil, nil, errors.New("openai: the answer has no logprobs; the server must support logprobs on /v1/completions")
	}
	var ids []int32
	var lps []float32
	switch {
	case len(lp.Content) > 0: // llama-server
		for _, t := range lp.Content {
			if t.ID == nil {
				return nil, nil, errors.New("openai: logprobs.content entries carry no token id")
			}
			ids = append(ids, *t.ID)
			lps = append(lps, t.Logprob)
		}
	default:
		for i, p := range lp.TokenLogprobs {
			if p == nil {
				return nil, nil, fmt.Errorf("openai: token %d has a null logprob", i)
			}
			lps = append(lps, *p)
		}
		switch {
		case c.TokenIDs != nil:
			ids = c.TokenIDs
		case c.Tokens != nil:
			ids = c.Tokens
		default:
			for _, t := range lp.Tokens {
				n, err := strconv.ParseInt(strings.TrimPrefix(t, "token_id:"), 10, 32)
				if !strings.HasPrefix(t, "token_id:") || err != nil {
					return nil, nil, fmt.Errorf("openai: logprobs token %q is not token_id:N; the server must support return_token_ids or return_tokens_as_token_ids", t)
				}
				ids = append(ids, int32(n))
			}
		}
	}
	if len(ids) != len(lps) {
		return nil, nil, fmt.Errorf("openai: %d token ids but %d logprobs", len(ids), len(lps))
	}
	return ids, lps, nil
}
