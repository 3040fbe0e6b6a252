package learner

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
	"unsafe"

	"github.com/frognano/frognano/kernels"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/optim"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/failpoint"
)

// Names of the AdamW moments in a checkpoint's optimizer group.
const (
	momentM = "adamw.m/"
	momentV = "adamw.v/"
)

func gradBackend(m *model.Model) kernels.GradBackend {
	gb, _ := m.Backend().(kernels.GradBackend) // NewTrainer has checked
	return gb
}

// ModelConfig describes a model for a checkpoint manifest.
func ModelConfig(m *model.Model) *records.ModelConfig {
	c := m.Config
	return &records.ModelConfig{
		Architecture: c.Architecture, HiddenSize: int32(c.HiddenSize), Layers: int32(c.Layers), Heads: int32(c.Heads),
		KvHeads: int32(c.KVHeads), IntermediateSize: int32(c.FFNSize), VocabSize: int32(c.VocabSize),
		RopeTheta: float64(c.RopeTheta), RmsEps: float64(c.NormEps), TiedEmbeddings: m.Weights().Output == nil,
		MaxPositions: int32(c.ContextLength), HeadDim: int32(c.HeadDim),
	}
}

// describe is a one-line summary of a model configuration for errors.
func describe(c *records.ModelConfig) string {
	return fmt.Sprintf("%s (hidden %d, %d layers, %d/%d heads of %d, ffn %d, vocabulary %d, tied %v, rope theta %g)",
		c.GetArchitecture(), c.GetHiddenSize(), c.GetLayers(), c.GetHeads(), c.GetKvHeads(), c.GetHeadDim(),
		c.GetIntermediateSize(), c.GetVocabSize(), c.GetTiedEmbeddings(), c.GetRopeTheta())
}

// sameModel compares everything that decides the weights' meaning (not
// the context length, which a checkpoint does not depend on).
func sameModel(a, b *records.ModelConfig) bool {
	return a.GetArchitecture() == b.GetArchitecture() && a.GetHiddenSize() == b.GetHiddenSize() &&
		a.GetLayers() == b.GetLayers() && a.GetHeads() == b.GetHeads() && a.GetKvHeads() == b.GetKvHeads() &&
		a.GetIntermediateSize() == b.GetIntermediateSize() && a.GetVocabSize() == b.GetVocabSize() &&
		a.GetHeadDim() == b.GetHeadDim() && a.GetTiedEmbeddings() == b.GetTiedEmbeddings() &&
		float32(a.GetRopeTheta()) == float32(b.GetRopeTheta())
}

func shape64(s []int) []int64 {
	out := make([]int64, len(s))
	for i, d := range s {
		out[i] = int64(d)
	}
	return out
}

// encodeF32 writes x as little-endian float32s: on a little-endian
// machine, one copy of its memory (a checkpoint of a few hundred million
// values took seconds element by element).
func encodeF32(x []float32) []byte {
	b := make([]byte, 4*len(x))
	if littleEndian && len(x) > 0 {
		copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(b)))
		return b
	}
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// littleEndian: this machine stores a float32's bytes as the checkpoint
// format does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

func decodeF32(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	if littleEndian && len(x) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x)), b)
		return x
	}
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

// weightTensors copies the model's weights to the host as checkpoint
// tensors.
func (l *Learner) weightTensors() []persistence.Tensor {
	b := l.m.Backend()
	var out []persistence.Tensor
	for _, p := range l.tr.Params() {
		h := make([]float32, numel(p.Value.Shape()))
		b.ToHost(h, p.Value)
		out = append(out, persistence.Tensor{Name: p.Name, DType: records.DType_DTYPE_F32, Shape: shape64(p.Value.Shape()), Data: encodeF32(h)})
	}
	return out
}

func numel(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Publish stores the current weights for Samplers as checkpoint step =
// policy version of run RunID, prunes old publications, and returns what
// to announce. It stores nothing when this version is already published.
func (l *Learner) Publish(ctx context.Context) (Publication, error) {
	p := Publication{RunID: l.cfg.RunID, Step: l.version, PolicyVersion: l.version}
	if l.lastPublished == l.version {
		return p, nil
	}
	if err := failpoint.Inject("learner/publish"); err != nil {
		return Publication{}, fmt.Errorf("learner: publish version %d: %w", l.version, err)
	}
	start := time.Now()
	man := &records.Checkpoint{RunId: l.cfg.RunID, Step: l.version, PolicyVersion: l.version, Model: ModelConfig(l.m), CreatedUnixNano: time.Now().UnixNano()}
	if err := l.cfg.Store.Save(ctx, man, l.weightTensors(), nil); err != nil {
		return Publication{}, fmt.Errorf("learner: publish version %d: %w", l.version, err)
	}
	l.lastPublished = l.version
	if _, err := l.cfg.Store.Prune(ctx, l.cfg.RunID, l.cfg.KeepPublished); err != nil {
		l.log.Warn("learner: pruning publications failed", "err", err)
	}
	l.log.Info("learner: published", "policy_version", l.version, "seconds", time.Since(start).Seconds())
	return p, nil
}

// Checkpoint writes the full training state at the current step, unless
// it is already stored, and prunes older checkpoints.
func (l *Learner) Checkpoint(ctx context.Context) error {
	if l.lastCheckpoint == l.step {
		return nil
	}
	if err := failpoint.Inject("learner/checkpoint"); err != nil {
		return fmt.Errorf("learner: checkpoint step %d: %w", l.step, err)
	}
	start := time.Now()
	rng, err := l.pcg.MarshalBinary()
	if err != nil {
		return fmt.Errorf("learner: checkpoint: RNG state: %w", err)
	}
	st := l.opt.State()
	var opt []persistence.Tensor
	for _, p := range l.tr.Params() {
		shape := shape64(p.Value.Shape())
		opt = append(opt,
			persistence.Tensor{Name: momentM + p.Name, DType: records.DType_DTYPE_F32, Shape: shape, Data: encodeF32(st.M[p.Name])},
			persistence.Tensor{Name: momentV + p.Name, DType: records.DType_DTYPE_F32, Shape: shape, Data: encodeF32(st.V[p.Name])})
	}
	run := TrainRunID(l.cfg.RunID)
	man := &records.Checkpoint{RunId: run, Step: l.step, PolicyVersion: l.version, Model: ModelConfig(l.m),
		RngState: rng, CreatedUnixNano: time.Now().UnixNano()}
	if err := l.cfg.Store.Save(ctx, man, l.weightTensors(), opt); err != nil {
		return fmt.Errorf("learner: checkpoint step %d: %w", l.step, err)
	}
	l.lastCheckpoint = l.step
	if _, err := l.cfg.Store.Prune(ctx, run, l.cfg.KeepCheckpoints); err != nil {
		l.log.Warn("learner: pruning checkpoints failed", "err", err)
	}
	l.log.Info("learner: checkpoint", "step", l.step, "policy_version", l.version, "seconds", time.Since(start).Seconds())
	return nil
}

// Close writes a final checkpoint if the state moved since the last one.
func (l *Learner) Close(ctx context.Context) error {
	if l.step == 0 && l.lastCheckpoint < 0 {
		return nil // nothing trained
	}
	return l.Checkpoint(ctx)
}

// LoadCheckpoint restores the training state stored at step of the run's
// training checkpoints. Everything is read and checked before anything
// changes: a checkpoint of another model wraps ErrModelMismatch, a
// truncated or damaged one ErrCorrupt, and in both cases the Learner keeps
// its state and another step can be loaded.
func (l *Learner) LoadCheckpoint(ctx context.Context, step int64) error {
	run := TrainRunID(l.cfg.RunID)
	fail := func(kind error, format string, a ...any) error {
		return fmt.Errorf("%w: %s@%d: %s", kind, run, step, fmt.Sprintf(format, a...))
	}
	man, err := l.cfg.Store.Load(ctx, run, step)
	if err != nil {
		return fmt.Errorf("learner: load checkpoint: %w", err)
	}
	if want := ModelConfig(l.m); !sameModel(man.GetModel(), want) {
		return fail(ErrModelMismatch, "it holds a %s, the learner trains a %s", describe(man.GetModel()), describe(want))
	}
	params := l.tr.Params()
	read := func(metas []*records.TensorMeta, name string, shape []int) ([]float32, error) {
		var meta *records.TensorMeta
		for _, m := range metas {
			if m.GetName() == name {
				meta = m
			}
		}
		if meta == nil {
			return nil, fail(ErrCorrupt, "tensor %s is missing", name)
		}
		if meta.GetDtype() != records.DType_DTYPE_F32 || fmt.Sprint(meta.GetShape()) != fmt.Sprint(shape64(shape)) {
			return nil, fail(ErrModelMismatch, "tensor %s is %v %v, the model's is F32 %v", name, meta.GetDtype(), meta.GetShape(), shape)
		}
		raw, err := l.cfg.Store.ReadTensor(ctx, run, step, name)
		if err != nil {
			return nil, fail(ErrCorrupt, "%v", err)
		}
		if len(raw) != 4*numel(shape) {
			return nil, fail(ErrCorrupt, "tensor %s holds %d bytes, its shape %v needs %d", name, len(raw), shape, 4*numel(shape))
		}
		return decodeF32(raw), nil
	}
	trained := map[string]bool{}
	for _, p := range params {
		trained[p.Name] = true
	}
	for _, p := range l.m.Params() {
		switch has := hasTensor(man.GetTensors(), p.Name); {
		case !trained[p.Name] && has:
			return fail(ErrModelMismatch, "it trains %s, which this learner keeps frozen (TrainLayers %d): resume with the run's own setting", p.Name, l.cfg.Train.TrainLayers)
		case trained[p.Name] && !has && len(man.GetTensors()) > 0 && !hasTensor(man.GetTensors(), l.m.Params()[0].Name):
			return fail(ErrModelMismatch, "it trains only some weights (not %s), this learner trains them (TrainLayers %d): resume with the run's own setting", p.Name, l.cfg.Train.TrainLayers)
		}
	}
	known := map[string]bool{}
	weights := map[string][]float32{}
	st := optim.State{Step: int(man.GetStep()), M: map[string][]float32{}, V: map[string][]float32{}}
	for _, p := range params {
		known[p.Name] = true
		shape := p.Value.Shape()
		if weights[p.Name], err = read(man.GetTensors(), p.Name, shape); err != nil {
			return err
		}
		if st.M[p.Name], err = read(man.GetOptimizer(), momentM+p.Name, shape); err != nil {
			return err
		}
		if st.V[p.Name], err = read(man.GetOptimizer(), momentV+p.Name, shape); err != nil {
			return err
		}
	}
	for _, t := range man.GetTensors() {
		if !known[t.GetName()] {
			return fail(ErrModelMismatch, "tensor %s is not a weight of this model", t.GetName())
		}
	}
	for _, t := range man.GetOptimizer() {
		n := strings.TrimPrefix(strings.TrimPrefix(t.GetName(), momentM), momentV)
		if !known[n] {
			return fail(ErrModelMismatch, "optimizer tensor %s belongs to no weight of this model", t.GetName())
		}
	}
	pcg := &rand.PCG{}
	if err := pcg.UnmarshalBinary(man.GetRngState()); err != nil {
		return fail(ErrCorrupt, "RNG state: %v", err)
	}
	if man.GetPolicyVersion() < 0 || man.GetStep() < 0 {
		return fail(ErrCorrupt, "step %d, policy version %d", man.GetStep(), man.GetPolicyVersion())
	}

	if err := l.m.UpdateParams(weights); err != nil {
		return fail(ErrModelMismatch, "%v", err)
	}
	if err := l.opt.SetState(st); err != nil {
		return fail(ErrModelMismatch, "%v", err)
	}
	l.pcg = pcg
	l.rng = rand.New(pcg)
	l.step, l.version, l.lastCheckpoint = man.GetStep(), man.GetPolicyVersion(), man.GetStep()
	l.tr.ZeroGrad()
	l.log.Info("learner: resumed", "step", l.step, "policy_version", l.version)
	return nil
}

// LoadPublished copies the weights published as checkpoint step of run
// into m (a Sampler's, or the exporter's model): the Samplers' side of
// the publication contract. A run that trains only its top layers
// (TrainOptions.TrainLayers) publishes only those; m's other weights are
// left as they are, which is right when m holds the run's base model (or
// an earlier publication of the same run), as a Sampler of the run does.
// A publication must hold at least one weight, and each of them in full.
func LoadPublished(ctx context.Context, store persistence.CheckpointStore, m *model.Model, runID string, step int64) (*records.Checkpoint, error) {
	man, err := store.Load(ctx, runID, step)
	if err != nil {
		return nil, err
	}
	if want := ModelConfig(m); !sameModel(man.GetModel(), want) {
		return nil, fmt.Errorf("%w: %s@%d holds a %s, the model is a %s", ErrModelMismatch, runID, step, describe(man.GetModel()), describe(want))
	}
	weights := map[string][]float32{}
	for _, p := range m.Params() {
		if !hasTensor(man.GetTensors(), p.Name) {
			continue
		}
		raw, err := store.ReadTensor(ctx, runID, step, p.Name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s@%d: %w", ErrCorrupt, runID, step, err)
		}
		if len(raw) != 4*numel(p.Value.Shape()) {
			return nil, fmt.Errorf("%w: %s@%d: tensor %s holds %d bytes, the model's %v needs %d", ErrCorrupt, runID, step, p.Name, len(raw), p.Value.Shape(), 4*numel(p.Value.Shape()))
		}
		weights[p.Name] = decodeF32(raw)
	}
	if len(weights) == 0 || len(weights) < len(man.GetTensors()) {
		var unknown []string
		for _, t := range man.GetTensors() {
			if _, ok := weights[t.GetName()]; !ok {
				unknown = append(unknown, t.GetName())
			}
		}
		return nil, fmt.Errorf("%w: %s@%d holds %d tensors, %d of them weights of this model (not: %s)", ErrModelMismatch, runID, step,
			len(man.GetTensors()), len(weights), strings.Join(unknown, ", "))
	}
	if err := m.UpdateParams(weights); err != nil {
		return nil, fmt.Errorf("%w: %s@%d: %w", ErrModelMismatch, runID, step, err)
	}
	return man, nil
}

// hasTensor reports whether metas lists a tensor called name.
func hasTensor(metas []*records.TensorMeta, name string) bool {
	for _, m := range metas {
		if m.GetName() == name {
			return true
		}
	}
	return false
}
