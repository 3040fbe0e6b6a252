// Package sampler is the Sampler: the policy served for generation. Its
// Engine (plain Go) owns a model and a scheduler goroutine that batches the
// generation requests of many concurrent episodes (continuous batching);
// the Sampler actor wraps an Engine for other actors and nodes, and Client
// reaches one by PID. Engine and Client implement policy.Policy.
//
// # Continuous batching
//
// Requests join and leave between decoding steps. Each step is one
// model.Runner.Forward over every running sequence: one token for each
// sequence that is decoding, and, within the step's token budget, the next
// chunk of the prompts still being read (prefill). A sequence that samples a
// stop id, reaches its MaxTokens or fills its context leaves at once, and a
// waiting request takes its place in the next step. MaxSequences caps the
// sequences in a step and MaxStepTokens its tokens, so a long prompt is read
// in chunks while the others keep decoding.
//
// # Reproducibility
//
// Each request samples from its own generator seeded by its Seed, exactly as
// model.Generate does, so a request gives the same tokens alone or in any
// batch, and with or without a kept or copied cache (the batch, and the layout in which
// a kept or copied cache's positions were computed, change only the float32 summation
// order of the matrix products, within the model's cache tolerance, and so
// the logits in their last bits). Log-probabilities are kernels/sample's: the token's under
// softmax(logits/T) before top-k/top-p truncation.
//
// # Policy versions
//
// The engine holds one policy version at a time. A weight update
// (SetWeights, or UpdateWeights reading a checkpoint) is applied between
// two forward passes (Config.Swap SwapBetweenSteps, the default): the
// sequences in flight go on with the new weights over the keys and values
// the old ones wrote, as PipelineRL does, so a swap costs the time to load
// the weights and no generation waits for it. Such a sequence's result
// carries both versions (policy.GenerateResult's PolicyVersion, the
// oldest, and LastPolicyVersion), and each token's log-prob is the one
// the version that sampled it gave it. With SwapDrain the scheduler
// instead stops admitting requests, lets the running ones finish on the
// old weights, swaps, and resumes, and every result has one version; with
// many long sequences in flight that stalls generation for as long as the
// longest of them takes (minutes for a 1.5B model on two cores). A request
// with MinPolicyVersion waits, unadmitted, until the engine holds that
// version. A swap empties the prefix cache pool, and a cache that holds
// keys and values of an older version is never kept (prefix.go).
//
// # Prefix caching
//
// The KV caches of ended sequences are kept, in a bounded LRU, with the
// tokens they hold; a request whose prompt shares a prefix with one takes
// it over and prefills only the rest of its prompt (prefix.go). An agent
// episode's next turn, whose prompt extends the previous turn's, so reads
// only its new tokens. A request sharing a prompt prefix with a running
// sequence (the G episodes of a group start together with one prompt)
// takes that sequence's keys and values as they are computed instead
// (prefix.go): it reads them where they are when the backend can
// (kernels/model's SharePrefix), and copies them otherwise.
// Stats.ReusedTokens counts the prompt tokens read from kept caches,
// Stats.CopiedTokens those taken from running sequences (SharedTokens the
// ones of them read in place), Stats.PromptTokens those computed.
//
// # Quantized weights
//
// With Config.Quantization "q8_0" or "q8_0-f32" the engine's matrix
// products read Q8_0 copies of the weights (kernels/model's
// SetQuantization); the float32 weights stay the model's, and each version
// swapped in is quantized as it arrives. Log-probabilities are then the
// quantized policy's, which the float32 learner's differ from
// (docs/quantized-sampling.md measures by how much). With q8_0, whose
// activations are int8 too, a request's tokens may also differ between
// batch layouts: a last-bit difference can move an activation by a whole
// int8 step.
package sampler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/frognano/frognano/actors/policy"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/persistence"
)

// Errors of the Engine, for errors.Is.
var (
	// ErrClosed is a request to, or left in, an engine that was closed.
	ErrClosed = errors.New("sampler: engine closed")
	// ErrBadRequest is a request the engine refuses before queueing it.
	ErrBadRequest = errors.New("sampler: bad request")
	// ErrPromptTooLong is a prompt that leaves no room in the context for
	// a single new token.
	ErrPromptTooLong = errors.New("sampler: prompt too long")
)

// Config configures an Engine.
type Config struct {
	// Model is the policy. The engine owns it from now on: it runs it from
	// its scheduler goroutine and swaps its weights on updates.
	Model *model.Model
	// Version is the policy version of the model's weights as loaded.
	Version int64
	// MaxSequences caps the sequences in flight (default 16).
	MaxSequences int
	// MaxStepTokens caps the tokens of one forward pass: one per decoding
	// sequence plus prompt chunks (default 256, at least MaxSequences).
	MaxStepTokens int
	// ContextLength caps a sequence's positions, prompt and generated
	// tokens together (default and most: the model's context length, else
	// 8192).
	ContextLength int
	// Checkpoints is where UpdateWeights reads new weights; nil refuses
	// updates by checkpoint (SetWeights still works).
	Checkpoints persistence.CheckpointStore
	// Logger receives weight swaps; nil discards.
	Logger *slog.Logger
	// PrefixCaches is the most KV caches of ended sequences kept for
	// requests that share a prefix with them (default
	// DefaultPrefixCaches; negative keeps none and allocates each
	// request its own cache, sized to it).
	PrefixCaches int
	// PrefixCacheBytes is the most memory those kept caches may hold,
	// counted by their capacities (default DefaultPrefixCacheBytes;
	// negative keeps none). Caches of running sequences are not counted.
	PrefixCacheBytes int64
	// ShareRunning is the fewest prompt tokens a request must share with a
	// running sequence to copy that sequence's keys and values instead of
	// computing them (default DefaultShareRunning; negative never copies).
	ShareRunning int
	// CopyShared makes a request that follows a running sequence copy the
	// shared positions into its own cache even where the backend could
	// read them in place (see prefix.go): what every backend did before,
	// kept for side-by-side comparisons.
	CopyShared bool
	// Quantization is the weights the engine's matrix products read:
	// model.Float32 ("f32"), or "q8_0" (int8 blocks read directly by the
	// CPU kernels, docs/quantized-sampling.md); "" keeps the model's
	// own. Published versions arrive as float32 checkpoints and are
	// quantized as they are swapped in. A type the backend's kernels do
	// not have is served as float32, with one warning.
	Quantization string
	// Swap is when weight updates are applied: SwapBetweenSteps (the
	// default, "") or SwapDrain (see "Policy versions" above).
	Swap string
}

// Swap modes (Config.Swap).
const (
	// SwapBetweenSteps applies an update between two forward passes; the
	// sequences in flight go on with the new weights.
	SwapBetweenSteps = "between-steps"
	// SwapDrain applies an update once every sequence in flight has
	// finished on the old weights, admitting none meanwhile.
	SwapDrain = "drain"
)

// Engine generates continuations for many concurrent callers with
// continuous batching. It is safe for concurrent use.
type Engine struct {
	cfg   Config
	m     *model.Model
	r     *model.Runner
	log   *slog.Logger
	vocab int32

	submit chan *sequence
	swaps  chan *swap
	wake   chan struct{}
	quit   chan struct{}
	exited chan struct{}
	once   sync.Once

	version atomic.Int64
	// weightsOf is the run whose publication the weights are ("": the
	// base model's); only the scheduler reads and writes it.
	weightsOf string
	running   atomic.Int32
	waiting   atomic.Int32
	generated atomic.Int64
	steps     atomic.Int64
	prefilled atomic.Int64
	reused    atomic.Int64
	copied    atomic.Int64
	sharedPos atomic.Int64
	kept      atomic.Int32
	keptBytes atomic.Int64
	swapsDone atomic.Int64
	crossed   atomic.Int64
	drain     bool

	// Scheduler state, owned by the scheduler goroutine.
	queue   []*sequence // submitted, not admitted, in arrival order
	active  []*sequence // admitted, in admission order
	pending []*swap
	caches  []*model.Cache
	tokens  [][]int32
	members []*sequence
	chunks  []int
	ended   []*sequence // finished this iteration, not yet published
	pool    *prefixPool
}

// New starts an engine and its scheduler goroutine. Close stops it.
func New(cfg Config) (*Engine, error) {
	if cfg.Model == nil {
		return nil, fmt.Errorf("%w: no model", ErrBadRequest)
	}
	if cfg.MaxSequences <= 0 {
		cfg.MaxSequences = 16
	}
	if cfg.MaxStepTokens <= 0 {
		cfg.MaxStepTokens = 256
	}
	cfg.MaxStepTokens = max(cfg.MaxStepTokens, cfg.MaxSequences)
	ctxLen := cfg.Model.Config.ContextLength
	if ctxLen <= 0 {
		ctxLen = 8192
	}
	if cfg.ContextLength <= 0 || cfg.ContextLength > ctxLen {
		cfg.ContextLength = ctxLen
	}
	if cfg.PrefixCaches == 0 {
		cfg.PrefixCaches = DefaultPrefixCaches
	}
	if cfg.PrefixCacheBytes == 0 {
		cfg.PrefixCacheBytes = DefaultPrefixCacheBytes
	}
	if cfg.ShareRunning == 0 {
		cfg.ShareRunning = DefaultShareRunning
	}
	switch cfg.Swap {
	case "":
		cfg.Swap = SwapBetweenSteps
	case SwapBetweenSteps, SwapDrain:
	default:
		return nil, fmt.Errorf("%w: swap mode %q: want %s or %s", ErrBadRequest, cfg.Swap, SwapBetweenSteps, SwapDrain)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e := &Engine{
		cfg: cfg, m: cfg.Model, r: cfg.Model.NewRunner(), log: log,
		vocab:  int32(cfg.Model.Config.VocabSize),
		drain:  cfg.Swap == SwapDrain,
		submit: make(chan *sequence),
		swaps:  make(chan *swap),
		wake:   make(chan struct{}, 1),
		quit:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	if q := cfg.Quantization; q != "" && q != cfg.Model.Quantization() {
		if err := cfg.Model.SetQuantization(q); err != nil {
			log.Warn("the kernels cannot serve this quantization; serving dequantized weights", "quantization", q, "serving", cfg.Model.Quantization(), "err", err)
		} else {
			log.Info("serving quantized weights", "quantization", q, "bytes", cfg.Model.QuantizedBytes())
		}
	}
	e.pool = newPrefixPool(cfg.Model, cfg.PrefixCaches, cfg.PrefixCacheBytes)
	e.version.Store(cfg.Version)
	go e.run()
	return e, nil
}

var _ policy.Policy = (*Engine)(nil)

// Model is the engine's model (its tokenizer and configuration; the
// weights may be swapped at any time between steps).
func (e *Engine) Model() *model.Model { return e.m }

// Quantization is the weights the engine serves: "f32" or e.g. "q8_0".
func (e *Engine) Quantization() string { return e.m.Quantization() }

// ContextLength is the most positions a sequence may hold.
func (e *Engine) ContextLength() int { return e.cfg.ContextLength }

// Version is the policy version the engine generates with now.
func (e *Engine) Version() int64 { return e.version.Load() }

// Stats are counters of an engine's work.
type Stats struct {
	Version         int64
	Running         int   // sequences in flight
	Waiting         int   // requests not yet admitted
	GeneratedTokens int64 // sampled tokens, all requests
	PromptTokens    int64 // prompt tokens computed (prefilled)
	ReusedTokens    int64 // prompt tokens found in kept caches, not computed
	CopiedTokens    int64 // prompt tokens taken from running sequences, not computed
	SharedTokens    int64 // of those, the ones read in place (kernels/model's SharePrefix), not copied
	Steps           int64 // forward passes
	PrefixCaches    int   // caches kept for reuse now
	PrefixBytes     int64 // their memory, by capacity
	Swaps           int64 // weight updates applied
	AcrossSwaps     int64 // sequences in flight when an update was applied (SwapBetweenSteps)
}

// Stats reports the counters now.
func (e *Engine) Stats() Stats {
	return Stats{
		Version: e.version.Load(), Running: int(e.running.Load()), Waiting: int(e.waiting.Load()),
		GeneratedTokens: e.generated.Load(), PromptTokens: e.prefilled.Load(), ReusedTokens: e.reused.Load(), CopiedTokens: e.copied.Load(),
		SharedTokens: e.sharedPos.Load(),
		Steps:        e.steps.Load(), PrefixCaches: int(e.kept.Load()), PrefixBytes: e.keptBytes.Load(),
		Swaps: e.swapsDone.Load(), AcrossSwaps: e.crossed.Load(),
	}
}

// Close stops the scheduler; requests not finished fail with ErrClosed.
func (e *Engine) Close() error {
	e.once.Do(func() { close(e.quit) })
	<-e.exited
	return nil
}

// Generate runs one request to its end (policy.Policy). When ctx ends
// first it returns ctx's error and the sequence leaves the batch at the
// next step.
func (e *Engine) Generate(ctx context.Context, req policy.GenerateRequest) (policy.GenerateResult, error) {
	s, err := e.Start(ctx, req)
	if err != nil {
		return policy.GenerateResult{}, err
	}
	select {
	case <-s.seq.done:
		return s.Result()
	case <-ctx.Done():
		e.poke()
		return policy.GenerateResult{}, ctx.Err()
	}
}

// Stream is a generation in progress, for callers that pass tokens on as
// they come (an HTTP stream) or stop early (stop strings): cancelling the
// context given to Start ends it.
type Stream struct {
	e    *Engine
	seq  *sequence
	read int
}

// Start queues a request and returns at once. The generation runs until
// it finishes or ctx ends.
func (e *Engine) Start(ctx context.Context, req policy.GenerateRequest) (*Stream, error) {
	if err := e.check(req); err != nil {
		return nil, err
	}
	s := &sequence{
		req:    req,
		ctx:    ctx,
		sm:     sample.New(req.Sampling, rand.New(rand.NewPCG(req.Seed, 0x9e3779b97f4a7c15))),
		done:   make(chan struct{}),
		notify: make(chan struct{}, 1),
	}
	s.req.PromptIDs = slices.Clone(req.PromptIDs)
	s.req.Stop = slices.Clone(req.Stop)
	s.req.StopSeqs = make([][]int32, len(req.StopSeqs))
	for i, q := range req.StopSeqs {
		s.req.StopSeqs[i] = slices.Clone(q)
	}
	select {
	case e.submit <- s:
		return &Stream{e: e, seq: s}, nil
	case <-e.quit:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// check refuses what would fail later, inside a shared batch.
func (e *Engine) check(req policy.GenerateRequest) error {
	p := req.Sampling
	switch {
	case len(req.PromptIDs) == 0:
		return fmt.Errorf("%w: empty prompt", ErrBadRequest)
	case req.MaxTokens < 0:
		return fmt.Errorf("%w: MaxTokens %d is negative", ErrBadRequest, req.MaxTokens)
	case p.Temperature < 0 || math.IsNaN(float64(p.Temperature)) || math.IsInf(float64(p.Temperature), 0):
		return fmt.Errorf("%w: temperature %v must be finite and not negative", ErrBadRequest, p.Temperature)
	case p.TopK < 0:
		return fmt.Errorf("%w: top-k %d is negative", ErrBadRequest, p.TopK)
	case p.TopP < 0 || p.TopP > 1 || math.IsNaN(float64(p.TopP)):
		return fmt.Errorf("%w: top-p %v is outside [0, 1]", ErrBadRequest, p.TopP)
	case len(req.PromptIDs) >= e.cfg.ContextLength:
		return fmt.Errorf("%w: %d prompt tokens, the context holds %d", ErrPromptTooLong, len(req.PromptIDs), e.cfg.ContextLength)
	}
	for i, id := range req.PromptIDs {
		if id < 0 || id >= e.vocab {
			return fmt.Errorf("%w: prompt token %d is id %d, outside the vocabulary of %d", ErrBadRequest, i, id, e.vocab)
		}
	}
	for _, q := range req.StopSeqs {
		for _, id := range q {
			if id < 0 || id >= e.vocab {
				return fmt.Errorf("%w: stop sequence id %d is outside the vocabulary of %d", ErrBadRequest, id, e.vocab)
			}
		}
	}
	for _, id := range req.Stop {
		if id < 0 || id >= e.vocab {
			return fmt.Errorf("%w: stop id %d is outside the vocabulary of %d", ErrBadRequest, id, e.vocab)
		}
	}
	return nil
}

// Next waits for tokens not yet returned and returns them with their
// log-probabilities; after the last one it returns io.EOF (then Result
// tells how the generation ended), or the error that ended it.
func (s *Stream) Next() ([]int32, []float32, error) {
	q := s.seq
	for {
		q.mu.Lock()
		ids, lps, finished := q.ids[s.read:], q.lps[s.read:], q.finished
		err := q.err
		q.mu.Unlock()
		if len(ids) > 0 {
			s.read += len(ids)
			return ids, lps, nil
		}
		if finished {
			if err != nil {
				return nil, nil, err
			}
			return nil, nil, io.EOF
		}
		select {
		case <-q.notify:
		case <-q.done:
		case <-q.ctx.Done():
			s.e.poke()
			return nil, nil, q.ctx.Err()
		}
	}
}

// Result waits for the generation to end and returns it.
func (s *Stream) Result() (policy.GenerateResult, error) {
	q := s.seq
	select {
	case <-q.done:
	case <-q.ctx.Done():
		s.e.poke()
		return policy.GenerateResult{}, q.ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return policy.GenerateResult{}, q.err
	}
	return policy.GenerateResult{
		TokenIDs: slices.Clone(q.ids), LogProbs: slices.Clone(q.lps),
		Finish: q.finish, PolicyVersion: q.version, LastPolicyVersion: q.last,
	}, nil
}

// PolicyVersion is the oldest version that worked on the stream (see
// policy.GenerateResult), known once its first token has come.
func (s *Stream) PolicyVersion() int64 {
	s.seq.mu.Lock()
	defer s.seq.mu.Unlock()
	return s.seq.version
}

// PromptTokens is the number of prompt tokens of the request.
func (s *Stream) PromptTokens() int { return len(s.seq.req.PromptIDs) }

// sequence is one request in the engine.
type sequence struct {
	req policy.GenerateRequest
	ctx context.Context
	sm  *sample.Sampler

	// Scheduler-owned.
	cache     *model.Cache
	held      []int32   // a buffer for the tokens the cache holds, when it is kept
	limit     int       // most positions: the context, or prompt + MaxTokens
	fed       int       // prompt tokens in the cache
	lead      *sequence // a running sequence whose prompt positions this one copies
	share     int       // prompt positions to copy from lead
	next      int32     // sampled, not yet fed
	one       [1]int32
	version   int64 // at admission: the oldest weights its cache holds
	crossed   bool  // in flight when a swap was applied
	ended     bool
	endReason policy.FinishReason
	endErr    error
	endLast   int64 // the version at the end, when crossed

	mu       sync.Mutex
	ids      []int32
	lps      []float32
	finish   policy.FinishReason
	err      error
	last     int64 // LastPolicyVersion
	finished bool
	done     chan struct{}
	notify   chan struct{}
}

func (s *sequence) decoding() bool { return s.fed == len(s.req.PromptIDs) }

// emit records a sampled token and wakes a reader.
func (s *sequence) emit(tok int32, lp float32) {
	s.mu.Lock()
	s.ids = append(s.ids, tok)
	s.lps = append(s.lps, lp)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// end finishes the sequence with a reason or an error. Its caller sees it
// once the scheduler publishes it, after updating the counters. The cache
// of a sequence that finished or was cancelled is kept for reuse; after a
// failed forward pass or on shutdown it is dropped.
func (e *Engine) end(s *sequence, reason policy.FinishReason, err error) {
	s.endReason, s.endErr, s.ended = reason, err, true
	if s.crossed {
		s.endLast = e.version.Load()
	}
	// A cache that holds an older version's keys and values is dropped:
	// a request taking it over would mix versions unannounced.
	if s.cache != nil && (err == nil || errors.Is(err, s.ctx.Err())) && !s.crossed {
		e.keep(s)
	} else if s.cache != nil {
		s.cache.Release()
	}
	s.cache, s.held = nil, nil
	e.ended = append(e.ended, s)
}

// keep puts s's cache in the pool with the tokens it holds: the prompt read
// so far, then every sampled token but the last (sampled, never fed).
func (e *Engine) keep(s *sequence) {
	n := s.cache.Len()
	if !e.pool.enabled() || n == 0 {
		s.cache.Release()
		return
	}
	held := append(s.held[:0], s.req.PromptIDs[:s.fed]...)
	if n > s.fed {
		s.mu.Lock()
		held = append(held, s.ids[:n-s.fed]...)
		s.mu.Unlock()
	}
	if len(held) != n {
		panic(fmt.Sprintf("sampler: a cache of %d positions with %d known tokens", n, len(held)))
	}
	// A kept cache holds its own positions: one that read its lead's
	// prompt in place copies it now, so the lead's cache is neither kept
	// alive nor pinned by the pool, whose limits count only its entries.
	s.cache.Own()
	e.pool.put(s.cache, held)
	e.poolChanged()
}

// poolChanged publishes the pool's totals.
func (e *Engine) poolChanged() {
	e.kept.Store(int32(len(e.pool.entries)))
	e.keptBytes.Store(e.pool.bytes)
}

// publish hands finished sequences to their callers.
func (e *Engine) publish() {
	e.running.Store(int32(len(e.active)))
	e.waiting.Store(int32(len(e.queue)))
	for _, s := range e.ended {
		s.mu.Lock()
		s.finish, s.err, s.last, s.finished = s.endReason, s.endErr, s.endLast, true
		s.mu.Unlock()
		close(s.done)
	}
	clear(e.ended)
	e.ended = e.ended[:0]
}

// poke wakes an idle scheduler so it notices a cancelled request.
func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// run is the scheduler.
func (e *Engine) run() {
	defer close(e.exited)
	for {
		if len(e.active) == 0 && !e.admissible() {
			select {
			case s := <-e.submit:
				e.queue = append(e.queue, s)
			case sw := <-e.swaps:
				e.pending = append(e.pending, sw)
			case <-e.wake:
			case <-e.quit:
				e.shutdown()
				return
			}
		}
		for more := true; more; {
			select {
			case s := <-e.submit:
				e.queue = append(e.queue, s)
			case sw := <-e.swaps:
				e.pending = append(e.pending, sw)
			case <-e.quit:
				e.shutdown()
				return
			default:
				more = false
			}
		}
		e.dropCancelled()
		if len(e.pending) > 0 && (len(e.active) == 0 || !e.drain) {
			e.applySwaps()
		}
		e.admit()
		if len(e.active) > 0 {
			e.step()
		}
		e.publish()
	}
}

// admissible says whether a queued request could start now.
func (e *Engine) admissible() bool {
	if len(e.pending) > 0 {
		return len(e.active) == 0 || !e.drain // a swap is due
	}
	v := e.version.Load()
	for _, s := range e.queue {
		if s.req.MinPolicyVersion <= v || s.ctx.Err() != nil {
			return true
		}
	}
	return false
}

func (e *Engine) dropCancelled() {
	e.queue = slices.DeleteFunc(e.queue, func(s *sequence) bool {
		if err := s.ctx.Err(); err != nil {
			e.end(s, "", err)
			return true
		}
		return false
	})
	e.active = slices.DeleteFunc(e.active, func(s *sequence) bool {
		if err := s.ctx.Err(); err != nil {
			e.end(s, "", err)
			return true
		}
		return false
	})
}

// admit moves queued requests into the batch, oldest first, while there is
// room, no swap is pending (SwapDrain), and the engine holds the version
// they need.
func (e *Engine) admit() {
	if len(e.pending) > 0 {
		return
	}
	v := e.version.Load()
	e.queue = slices.DeleteFunc(e.queue, func(s *sequence) bool {
		if len(e.active) >= e.cfg.MaxSequences || s.req.MinPolicyVersion > v {
			return false
		}
		s.limit = e.cfg.ContextLength
		if s.req.MaxTokens > 0 && s.req.MaxTokens < s.limit-len(s.req.PromptIDs) {
			// (compared so, a huge MaxTokens cannot overflow the sum)
			s.limit = len(s.req.PromptIDs) + s.req.MaxTokens
		}
		s.mu.Lock()
		s.version = v
		s.mu.Unlock()
		e.assignCache(s)
		e.active = append(e.active, s)
		return true
	})
}

// assignCache gives an admitted sequence its cache: a kept one sharing a
// prefix with its prompt (whose tokens are then not prefilled again), a
// recycled one, or a new one, with headroom for the conversation's next
// turns when caches are kept.
func (e *Engine) assignCache(s *sequence) {
	prompt := s.req.PromptIDs
	alloc := s.limit
	if e.pool.enabled() {
		alloc = min(e.cfg.ContextLength, s.limit+len(prompt))
	}
	c, held, shared := e.pool.take(prompt, s.limit, alloc)
	if c == nil {
		s.cache, s.held, s.fed = e.m.NewCache(alloc), nil, 0
	} else {
		s.cache, s.held, s.fed = c, held, shared
		e.reused.Add(int64(shared))
		e.poolChanged()
	}
	e.follow(s)
}

// follow makes s copy, rather than compute, the prompt positions it shares
// with a running sequence (the episodes of one group start together with
// one prompt): the running sequence sharing the longest prefix beyond what
// s holds already, by at least ShareRunning tokens, becomes its lead. At
// least one prompt token is left to compute, for the first sampled token's
// logits.
func (e *Engine) follow(s *sequence) {
	if e.cfg.ShareRunning < 0 {
		return
	}
	prompt := s.req.PromptIDs
	best, bestN := (*sequence)(nil), s.fed+e.cfg.ShareRunning-1
	for _, a := range e.active {
		if a.ended || a.cache == nil || a.fed < s.fed {
			continue // a lead behind s would only make it wait
		}
		if a.crossed {
			continue // its prompt positions may be an older version's
		}
		if n := min(commonPrefix(a.req.PromptIDs, prompt), len(prompt)-1); n > bestN {
			best, bestN = a, n
		}
	}
	if best != nil {
		s.lead, s.share = best, bestN
	}
}

// copyFromLeads brings every following sequence's cache up to what its lead
// has computed of their shared prompt. A sequence whose lead has ended, or
// that has copied all it shares, stops following and computes the rest.
func (e *Engine) copyFromLeads() {
	for _, s := range e.active {
		a := s.lead
		if a == nil {
			continue
		}
		if a.ended || a.cache == nil {
			s.lead = nil
			continue
		}
		if n := min(s.share, a.fed); n > s.fed {
			if e.cfg.CopyShared {
				s.cache.CopyPrefix(a.cache, n)
			} else if s.cache.SharePrefix(a.cache, n) {
				e.sharedPos.Add(int64(n - s.fed))
			}
			e.copied.Add(int64(n - s.fed))
			s.fed = n
		}
		if s.fed >= s.share {
			s.lead = nil
		}
	}
}

// step runs one forward pass over the batch and samples.
func (e *Engine) step() {
	e.copyFromLeads()
	budget := e.cfg.MaxStepTokens
	e.caches, e.tokens, e.members, e.chunks = e.caches[:0], e.tokens[:0], e.members[:0], e.chunks[:0]
	for _, s := range e.active {
		if s.decoding() {
			s.one[0] = s.next
			e.caches = append(e.caches, s.cache)
			e.tokens = append(e.tokens, s.one[:])
			e.members = append(e.members, s)
			e.chunks = append(e.chunks, 0)
			budget--
		}
	}
	for _, s := range e.active {
		if s.decoding() || s.lead != nil || budget <= 0 {
			continue // a follower waits for its lead to compute the shared prompt
		}
		n := min(len(s.req.PromptIDs)-s.fed, budget)
		e.caches = append(e.caches, s.cache)
		e.tokens = append(e.tokens, s.req.PromptIDs[s.fed:s.fed+n])
		e.members = append(e.members, s)
		e.chunks = append(e.chunks, n)
		budget -= n
	}
	logits, err := e.r.Forward(e.caches, e.tokens, false)
	e.steps.Add(1)
	if err != nil {
		// The requests were checked on arrival, so this is the engine's
		// fault; every member fails rather than retrying forever.
		for _, s := range e.members {
			e.end(s, "", fmt.Errorf("sampler: forward pass: %w", err))
		}
		e.active = slices.DeleteFunc(e.active, func(s *sequence) bool { return s.ended })
		return
	}
	var ended bool
	for i, s := range e.members {
		if n := e.chunks[i]; n > 0 {
			s.fed += n
			e.prefilled.Add(int64(n))
			if !s.decoding() {
				continue // more prompt to read
			}
		}
		tok, lp := s.sm.Sample(logits.Row(i))
		e.generated.Add(1)
		s.emit(tok, lp)
		s.next = tok
		if reason, done := e.finished(s, tok); done {
			e.end(s, reason, nil)
			ended = true
		}
	}
	if ended {
		e.active = slices.DeleteFunc(e.active, func(s *sequence) bool { return s.ended })
	}
}

// finished says whether s ends after sampling tok.
func (e *Engine) finished(s *sequence, tok int32) (policy.FinishReason, bool) {
	if slices.Contains(s.req.Stop, tok) {
		return policy.FinishStop, true
	}
	s.mu.Lock()
	n := len(s.ids)
	seq := len(s.req.StopSeqs) > 0 && policy.EndsWithStopSeq(s.ids, s.req.StopSeqs)
	s.mu.Unlock()
	if seq {
		return policy.FinishStopSeq, true
	}
	if s.req.MaxTokens > 0 && n >= s.req.MaxTokens {
		return policy.FinishLength, true
	}
	if s.cache.Len() >= s.limit {
		return policy.FinishContext, true
	}
	return "", false
}

func (e *Engine) shutdown() {
	defer e.publish()
	for _, s := range e.active {
		e.end(s, "", ErrClosed)
	}
	for _, s := range e.queue {
		e.end(s, "", ErrClosed)
	}
	for _, sw := range e.pending {
		sw.done <- ErrClosed
	}
	e.active, e.queue, e.pending = nil, nil, nil
	e.pool.clear()
	e.poolChanged()
	for {
		select {
		case s := <-e.submit:
			e.end(s, "", ErrClosed)
		case sw := <-e.swaps:
			sw.done <- ErrClosed
		default:
			return
		}
	}
}
