// Package policy is what the harness asks of a policy and what a sampler
// serves: the Policy interface, its request and result, and the
// <tool_call> format a policy writes its calls in (toolcall.go). It
// imports no actor, so actors/harness, actors/sampler and
// actors/sampler/openai all build on it without importing each other.
package policy

import (
	"context"
	"slices"

	"github.com/frognano/frognano/kernels/sample"
)

// Policy generates continuations of token sequences: the model under
// training served by a Sampler (actors/sampler), or an external
// OpenAI-compatible server used for evaluation and synthesis.
//
// It works on token ids, not text, so that a trajectory records exactly the
// tokens that were sampled and the log-probabilities the sampler gave them,
// which the learner's importance ratios need. The harness owns the chat
// template: it renders the conversation into ids, and extends them turn by
// turn (prompt, generated tokens, then the rendered tool results) rather than
// re-rendering, so no turn's tokens change after they were sampled.
type Policy interface {
	Generate(ctx context.Context, req GenerateRequest) (GenerateResult, error)
}

// GenerateRequest asks for one continuation of PromptIDs.
type GenerateRequest struct {
	PromptIDs []int32
	MaxTokens int           // most new tokens, the stop token included
	Sampling  sample.Params // zero: greedy
	Seed      uint64        // same prompt, seed and policy version: same tokens
	Stop      []int32       // ids that end the turn
	// StopSeqs end the turn once the continuation ends with one of these
	// token sequences, which stay part of it (FinishStopSeq): the end of
	// an answer's search/replace block. A policy that cannot honour them
	// (an external server) may ignore them; the turn then ends on Stop or
	// MaxTokens as before.
	StopSeqs [][]int32
	// MinPolicyVersion, when positive, asks for a policy at least this
	// recent: a Sampler holding an older version waits for the newer one.
	MinPolicyVersion int64
}

// FinishReason says why a continuation ended.
type FinishReason string

const (
	FinishStop    FinishReason = "stop"          // a Stop id was sampled; it is the last of TokenIDs
	FinishStopSeq FinishReason = "stop_sequence" // TokenIDs end with one of StopSeqs
	FinishLength  FinishReason = "length"        // MaxTokens reached
	FinishContext FinishReason = "context"       // the model's context (or the sampler's cache) is full
)

// GenerateResult is a continuation: the sampled ids, each one's
// log-probability under the distribution it was sampled from (softmax of
// the temperature-scaled logits, before top-k/top-p truncation; see
// kernels/sample), and the policy versions that sampled them.
//
// PolicyVersion is the oldest version whose weights worked on the
// continuation (computed its prompt's keys and values or sampled a token). A Sampler that
// swaps weights between decoding steps (actors/sampler, the default) may
// sample the later tokens of a continuation in flight at the swap with the
// newer version, LastPolicyVersion; each such token's log-prob is the newer
// version's (computed over the keys and values the older one wrote), so
// the log-probs stay those of the distribution that really sampled each
// token, which is what an importance ratio needs. LastPolicyVersion 0
// means one version sampled every token.
type GenerateResult struct {
	TokenIDs          []int32
	LogProbs          []float32
	Finish            FinishReason
	PolicyVersion     int64
	LastPolicyVersion int64
}

// Versions returns the oldest and the newest policy version that sampled
// the continuation.
func (r GenerateResult) Versions() (first, last int64) {
	return r.PolicyVersion, max(r.PolicyVersion, r.LastPolicyVersion)
}

// StopSeqEnd is the length of the shortest prefix of ids that ends with one
// of seqs (0: none occurs).
func StopSeqEnd(ids []int32, seqs [][]int32) int {
	for n := 1; n <= len(ids); n++ {
		if EndsWithStopSeq(ids[:n], seqs) {
			return n
		}
	}
	return 0
}

// EndsWithStopSeq reports whether ids end with one of seqs (empty ones
// never match).
func EndsWithStopSeq(ids []int32, seqs [][]int32) bool {
	for _, s := range seqs {
		if len(s) > 0 && len(ids) >= len(s) && slices.Equal(ids[len(ids)-len(s):], s) {
			return true
		}
	}
	return false
}
