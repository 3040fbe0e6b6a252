package sampler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/sample"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/failpoint"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// Kind is the actor kind nodes register, so that a Sampler can be spawned
// on the node that has the accelerator; ActorName is a node's own Sampler.
const (
	Kind      = "sampler"
	ActorName = "sampler"
)

// ActorConfig is what a Sampler actor needs from its node.
type ActorConfig struct {
	// Engine returns the engine to generate with, loading the model on
	// first use; a node's actors of this kind share one.
	Engine func(ctx context.Context) (*Engine, error)
	Logger *slog.Logger
}

// Props builds a Sampler actor. It answers GenerateRequest with
// GenerateResponse (or a Failure), WeightsPublished with WeightsApplied,
// and SamplerStatusRequest with SamplerStatus. Generation runs off the
// actor's goroutine, so one mailbox serves many concurrent episodes and
// the engine batches them; GenerateCancel withdraws a request whose asker
// gave up.
func Props(cfg ActorConfig) *actor.Props {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return actor.PropsFromProducer(func() actor.Actor {
		ctx, cancel := context.WithCancel(context.Background())
		return &samplerActor{cfg: cfg, ctx: ctx, cancel: cancel, inflight: map[string]context.CancelFunc{}}
	})
}

type samplerActor struct {
	cfg      ActorConfig
	ctx      context.Context // ends when the actor stops
	cancel   context.CancelFunc
	inflight map[string]context.CancelFunc // by the asker's PID
}

// generateDone tells the actor a request it started has been answered.
type generateDone struct{ key string }

func pidKey(address, id string) string { return address + "/" + id }

func code(err error) rtmsg.FailureCode {
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrPromptTooLong):
		return rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST
	case errors.Is(err, ErrStaleVersion):
		return rtmsg.FailureCode_FAILURE_CODE_STALE_VERSION
	case errors.Is(err, ErrClosed):
		return rtmsg.FailureCode_FAILURE_CODE_CLOSED
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return rtmsg.FailureCode_FAILURE_CODE_CANCELLED
	}
	return rtmsg.FailureCode_FAILURE_CODE_ERROR
}

func (a *samplerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Stopping:
		a.cancel() // requests in flight end; the shared engine stays
	case *messages.GenerateRequest:
		a.generate(ctx, m)
	case *generateDone:
		if cancel, ok := a.inflight[m.key]; ok {
			cancel()
			delete(a.inflight, m.key)
		}
	case *messages.GenerateCancel:
		if cancel, ok := a.inflight[pidKey(m.RequestAddress, m.RequestId)]; ok {
			cancel()
		}
	case *messages.WeightsPublished:
		a.update(ctx, m)
	case *messages.SamplerStatusRequest:
		a.status(ctx)
	}
}

func (a *samplerActor) generate(ctx actor.Context, m *messages.GenerateRequest) {
	sender, self, root := ctx.Sender(), ctx.Self(), ctx.ActorSystem().Root
	if sender == nil {
		a.cfg.Logger.Warn("GenerateRequest without a sender: nobody to answer, not generating")
		return
	}
	key := pidKey(sender.Address, sender.Id)
	gctx, cancel := context.WithCancel(a.ctx)
	a.inflight[key] = cancel
	req := RequestFromProto(m)
	go func() {
		var reply any
		e, err := a.cfg.Engine(gctx)
		if err == nil {
			var res policy.GenerateResult
			if res, err = e.Generate(gctx, req); err == nil {
				reply = ResultToProto(res)
			}
		}
		if err != nil {
			reply = rtmsg.Fail(code(err), err)
		}
		root.Send(sender, reply)
		root.Send(self, &generateDone{key: key})
	}()
}

func (a *samplerActor) update(ctx actor.Context, m *messages.WeightsPublished) {
	sender, root := ctx.Sender(), ctx.ActorSystem().Root
	u := Update{RunID: m.RunId, Step: m.Step, Version: m.PolicyVersion}
	log := a.cfg.Logger
	go func() {
		var reply any = &messages.WeightsApplied{RunId: u.RunID, Step: u.Step, PolicyVersion: u.Version}
		e, err := a.cfg.Engine(a.ctx)
		if err == nil {
			err = failpoint.Inject("sampler/swap")
		}
		if err == nil {
			err = e.UpdateWeights(a.ctx, u)
		}
		switch {
		case errors.Is(err, ErrStaleVersion):
			// Redelivered: the version (or a newer one) is already in use.
			reply = &messages.WeightsApplied{RunId: u.RunID, Step: u.Step, PolicyVersion: e.Version()}
		case err != nil:
			log.Error("weight update failed", "run", u.RunID, "step", u.Step, "version", u.Version, "err", err)
			reply = rtmsg.Fail(code(err), err)
		}
		if sender != nil {
			root.Send(sender, reply)
		}
	}()
}

func (a *samplerActor) status(ctx actor.Context) {
	sender, root := ctx.Sender(), ctx.ActorSystem().Root
	if sender == nil {
		return
	}
	go func() {
		e, err := a.cfg.Engine(a.ctx)
		if err != nil {
			root.Send(sender, rtmsg.Fail(code(err), err))
			return
		}
		root.Send(sender, e.Status())
	}()
}

// Status describes the engine as a message.
func (e *Engine) Status() *messages.SamplerStatus {
	st := e.Stats()
	c := e.m.Config
	return &messages.SamplerStatus{
		Model: e.m.Source, PolicyVersion: st.Version, Running: int32(st.Running), Waiting: int32(st.Waiting),
		GeneratedTokens: st.GeneratedTokens, Steps: st.Steps, ContextLength: int32(e.cfg.ContextLength), Weights: e.m.Quantization(),
		Config: &records.ModelConfig{
			Architecture: c.Architecture, HiddenSize: int32(c.HiddenSize), Layers: int32(c.Layers),
			Heads: int32(c.Heads), KvHeads: int32(c.KVHeads), IntermediateSize: int32(c.FFNSize),
			VocabSize: int32(c.VocabSize), RopeTheta: float64(c.RopeTheta), RmsEps: float64(c.NormEps),
			TiedEmbeddings: e.m.Weights().Output == nil, MaxPositions: int32(c.ContextLength), HeadDim: int32(c.HeadDim),
		},
	}
}

// RequestFromProto reads a GenerateRequest message.
func RequestFromProto(m *messages.GenerateRequest) policy.GenerateRequest {
	var seqs [][]int32
	for _, s := range m.GetStopSeqs() {
		seqs = append(seqs, s.GetIds())
	}
	return policy.GenerateRequest{
		PromptIDs: m.PromptIds, MaxTokens: int(m.MaxTokens),
		Sampling: sample.Params{Temperature: m.Temperature, TopP: m.TopP, TopK: int(m.TopK)},
		Seed:     m.Seed, Stop: m.StopIds, StopSeqs: seqs, MinPolicyVersion: m.MinPolicyVersion,
	}
}

// RequestToProto writes a GenerateRequest message.
func RequestToProto(r policy.GenerateRequest) *messages.GenerateRequest {
	var seqs []*messages.TokenSequence
	for _, s := range r.StopSeqs {
		seqs = append(seqs, &messages.TokenSequence{Ids: s})
	}
	return &messages.GenerateRequest{
		PromptIds: r.PromptIDs, MaxTokens: int32(r.MaxTokens),
		Temperature: r.Sampling.Temperature, TopP: r.Sampling.TopP, TopK: int32(r.Sampling.TopK),
		Seed: r.Seed, StopIds: r.Stop, StopSeqs: seqs, MinPolicyVersion: r.MinPolicyVersion,
	}
}

// ResultToProto writes a GenerateResponse message.
func ResultToProto(r policy.GenerateResult) *messages.GenerateResponse {
	return &messages.GenerateResponse{TokenIds: r.TokenIDs, Logprobs: r.LogProbs, FinishReason: string(r.Finish), PolicyVersion: r.PolicyVersion, LastPolicyVersion: r.LastPolicyVersion}
}

// ResultFromProto reads a GenerateResponse message.
func ResultFromProto(m *messages.GenerateResponse) policy.GenerateResult {
	return policy.GenerateResult{TokenIDs: m.TokenIds, LogProbs: m.Logprobs, Finish: policy.FinishReason(m.FinishReason), PolicyVersion: m.PolicyVersion, LastPolicyVersion: m.LastPolicyVersion}
}

// Client is a policy.Policy that asks a Sampler actor, on this node or
// another, so that a Rollout anywhere in the cluster can use it.
type Client struct {
	Root *actor.RootContext
	PID  *actor.PID
	// Timeout bounds a request whose context has no deadline (default 30
	// minutes: a long continuation on a busy CPU sampler).
	Timeout time.Duration
}

var _ policy.Policy = (*Client)(nil)

// Generate asks the Sampler and waits for its answer. When ctx ends first
// it sends GenerateCancel, so the Sampler stops generating for nobody.
// Failures the Sampler reports as bad requests wrap ErrBadRequest.
func (c *Client) Generate(ctx context.Context, req policy.GenerateRequest) (policy.GenerateResult, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Minute
	}
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return policy.GenerateResult{}, context.DeadlineExceeded
		}
	}
	f := c.Root.RequestFuture(c.PID, RequestToProto(req), timeout)
	type answer struct {
		res any
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := f.Result()
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		if a.err != nil {
			if errors.Is(a.err, actor.ErrTimeout) && ctx.Err() != nil {
				return policy.GenerateResult{}, ctx.Err()
			}
			return policy.GenerateResult{}, fmt.Errorf("sampler %s: %w", c.PID, a.err)
		}
		switch m := a.res.(type) {
		case *messages.GenerateResponse:
			return ResultFromProto(m), nil
		case *rtmsg.Failure:
			err := errors.New(m.Message)
			switch m.GetCode() {
			case rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST:
				err = fmt.Errorf("%w: %s", ErrBadRequest, m.Message)
			case rtmsg.FailureCode_FAILURE_CODE_CLOSED:
				err = fmt.Errorf("%w: %s", ErrClosed, m.Message)
			}
			return policy.GenerateResult{}, fmt.Errorf("sampler %s: %w", c.PID, err)
		default:
			return policy.GenerateResult{}, fmt.Errorf("sampler %s answered %T", c.PID, a.res)
		}
	case <-ctx.Done():
		p := f.PID()
		c.Root.Send(c.PID, &messages.GenerateCancel{RequestAddress: p.Address, RequestId: p.Id})
		return policy.GenerateResult{}, ctx.Err()
	}
}
