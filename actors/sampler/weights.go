package sampler

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// ErrStaleVersion is an update to a version not newer than the engine's.
// Redelivered updates are expected (the learner publishes each version once
// per Sampler, retries resend it), so the actor treats it as success.
var ErrStaleVersion = errors.New("sampler: policy version not newer than the one held")

// Update names a published policy version: the learner's checkpoint of run
// RunID at Step holds its weights.
type Update struct {
	RunID   string
	Step    int64
	Version int64
}

type swap struct {
	version int64
	run     string // the run whose publication this is ("": weights set directly)
	params  map[string][]float32
	done    chan error
}

// SetWeights makes version the engine's policy: the scheduler swaps the
// weights between two forward passes (with Config.Swap SwapDrain, once the
// sequences in flight have finished on the old weights, admitting none
// meanwhile). It returns once the new weights are in use,
// or with ErrStaleVersion when version is not newer than the engine's. If
// ctx ends first it returns ctx's error, and the swap still happens.
func (e *Engine) SetWeights(ctx context.Context, version int64, params map[string][]float32) error {
	return e.setWeights(ctx, version, "", params)
}

// setWeights is SetWeights for a publication of run (when run is set, the
// publication may hold only the weights the run trains; see applySwaps).
func (e *Engine) setWeights(ctx context.Context, version int64, run string, params map[string][]float32) error {
	if len(params) == 0 {
		return fmt.Errorf("%w: no weights for version %d", ErrBadRequest, version)
	}
	sw := &swap{version: version, run: run, params: params, done: make(chan error, 1)}
	select {
	case e.swaps <- sw:
	case <-e.quit:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-sw.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// UpdateWeights reads the update's checkpoint from Config.Checkpoints
// (while generation goes on) and then swaps it in like SetWeights. A run
// that trains only some weights (the top layers) publishes only those: the
// engine applies such a publication over the base model's weights or over
// an earlier publication of the same run, and refuses it over another
// run's, whose other weights it would silently mix in.
func (e *Engine) UpdateWeights(ctx context.Context, u Update) error {
	if u.Version <= e.Version() {
		return fmt.Errorf("%w: update to %d, the engine holds %d", ErrStaleVersion, u.Version, e.Version())
	}
	if e.cfg.Checkpoints == nil {
		return fmt.Errorf("%w: the engine has no checkpoint store to read version %d from", ErrBadRequest, u.Version)
	}
	params, err := LoadWeights(ctx, e.cfg.Checkpoints, u.RunID, u.Step)
	if err != nil {
		return err
	}
	return e.setWeights(ctx, u.Version, u.RunID, params)
}

// applySwaps runs on the scheduler between forward passes (with SwapDrain,
// with no sequence in flight). The sequences in flight are marked: they go
// on with the new weights over caches that hold the old ones' keys and
// values, so their results carry both versions, their caches are not kept,
// and no new request copies their prompt positions.
func (e *Engine) applySwaps() {
	for _, sw := range e.pending {
		cur := e.version.Load()
		if sw.version <= cur {
			sw.done <- fmt.Errorf("%w: update to %d, the engine holds %d", ErrStaleVersion, sw.version, cur)
			continue
		}
		partial := sw.run != "" && len(sw.params) < len(e.m.Params())
		var err error
		switch {
		case partial && e.weightsOf != "" && e.weightsOf != sw.run:
			err = fmt.Errorf("%w: version %d of run %s holds %d of the model's %d weights (the run trains only those), and the engine holds run %s's weights, not the base model's the rest must come from",
				ErrBadRequest, sw.version, sw.run, len(sw.params), len(e.m.Params()), e.weightsOf)
		case partial:
			err = e.m.UpdateParams(sw.params)
		default:
			err = e.m.SetParams(sw.params)
		}
		if err != nil {
			e.log.Error("weight swap failed; keeping the current version", "version", cur, "update", sw.version, "err", err)
			sw.done <- err
			continue
		}
		e.weightsOf = sw.run
		if sw.run == "" {
			e.weightsOf = "(weights set directly)"
		}
		// The kept caches hold keys and values of the old weights.
		e.pool.clear()
		e.poolChanged()
		e.version.Store(sw.version)
		e.swapsDone.Add(1)
		crossed := 0
		for _, s := range e.active {
			if s.cache.Len() == 0 && s.lead == nil {
				// Nothing computed yet: all of it will be the new version's.
				s.mu.Lock()
				s.version = sw.version
				s.mu.Unlock()
				continue
			}
			if !s.crossed {
				s.crossed = true
				e.crossed.Add(1)
			}
			crossed++
		}
		e.log.Info("policy weights swapped", "from", cur, "to", sw.version, "in_flight", crossed)
		sw.done <- nil
	}
	e.pending = e.pending[:0]
}

// LoadWeights reads every weight tensor of a checkpoint as float32, by
// name, for model.SetParams. F16 and BF16 tensors are widened.
func LoadWeights(ctx context.Context, store persistence.CheckpointStore, runID string, step int64) (map[string][]float32, error) {
	m, err := store.Load(ctx, runID, step)
	if err != nil {
		return nil, fmt.Errorf("sampler: checkpoint %s step %d: %w", runID, step, err)
	}
	if len(m.Tensors) == 0 {
		return nil, fmt.Errorf("sampler: checkpoint %s step %d has no weights", runID, step)
	}
	out := make(map[string][]float32, len(m.Tensors))
	for _, t := range m.Tensors {
		b, err := store.ReadTensor(ctx, runID, step, t.Name)
		if err != nil {
			return nil, fmt.Errorf("sampler: checkpoint %s step %d: %w", runID, step, err)
		}
		v, err := decodeTensor(t.Dtype, b)
		if err != nil {
			return nil, fmt.Errorf("sampler: checkpoint %s step %d tensor %s: %w", runID, step, t.Name, err)
		}
		out[t.Name] = v
	}
	return out, nil
}

func decodeTensor(d records.DType, b []byte) ([]float32, error) {
	switch d {
	case records.DType_DTYPE_F32:
		if len(b)%4 != 0 {
			return nil, fmt.Errorf("%d bytes is not a whole number of float32s", len(b))
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, nil
	case records.DType_DTYPE_BF16:
		if len(b)%2 != 0 {
			return nil, fmt.Errorf("%d bytes is not a whole number of bfloat16s", len(b))
		}
		v := make([]float32, len(b)/2)
		for i := range v {
			v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
		return v, nil
	case records.DType_DTYPE_F16:
		if len(b)%2 != 0 {
			return nil, fmt.Errorf("%d bytes is not a whole number of float16s", len(b))
		}
		v := make([]float32, len(b)/2)
		for i := range v {
			v[i] = halfToFloat(binary.LittleEndian.Uint16(b[2*i:]))
		}
		return v, nil
	}
	return nil, fmt.Errorf("unsupported dtype %v", d)
}

// halfToFloat widens an IEEE 754 binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf, NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: normalise
		e := uint32(127 - 15 + 1)
		for frac&0x400 == 0 {
			frac <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (frac&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}
