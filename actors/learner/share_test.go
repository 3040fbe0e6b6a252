package learner

import (
	"context"
	"testing"

	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/model/modeltest"
	"github.com/frognano/frognano/persistence"
)

// TestSharedLearnerAndSampler is a run's Learner (top 2 of 4 layers) and
// Sampler on one process's shared weights (model.Options.Shared, as the
// node loads them on the CPU): the Learner's steps leave the Sampler's
// weights as they were, train bit for bit as on a private model, and a
// publication loaded into the Sampler gives it the Learner's weights while
// the frozen layers stay one copy.
func TestSharedLearnerAndSampler(t *testing.T) {
	ctx := context.Background()
	spec := modeltest.Llama
	spec.Layers = 4
	dir := tinyDir(t, spec, 21)
	shared := func() *model.Model {
		m, err := model.LoadHF(dir, model.Options{Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	lm, sm := shared(), shared()
	base := weights(t, load(t, dir))
	batches := load(t, dir) // draws the batches: its own Trainer trains nothing here

	run := func(m *model.Model) (*Learner, *Publication, persistence.CheckpointStore) {
		store := persistence.NewMemory().Checkpoints()
		cfg := testConfig(m, store)
		cfg.Train.TrainLayers = 2
		cfg.PublishEvery = 1
		l, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var last *Publication
		for i := range 2 {
			last = step(t, l, batch(t, batches, uint64(60+i))).Published
		}
		return l, last, store
	}
	l, pub, store := run(lm)
	private, _, _ := run(load(t, dir))
	after := weights(t, lm)
	sameBits(t, "shared and private Learners' weights", weights(t, private.Model()), after)
	sameBits(t, "the Sampler's weights after the Learner's steps", base, weights(t, sm))

	frozen := 0
	for name := range after {
		if l.Trainer().Frozen(name) {
			frozen++
			if !lm.Shared(name) || !sm.Shared(name) {
				t.Errorf("frozen %s: shared by the Learner %v, by the Sampler %v", name, lm.Shared(name), sm.Shared(name))
			}
		} else if lm.Shared(name) {
			t.Errorf("trained %s is still shared", name)
		}
	}
	if frozen == 0 {
		t.Fatal("nothing frozen")
	}
	if _, err := LoadPublished(ctx, store, sm, pub.RunID, pub.Step); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "the Sampler after the publication", after, weights(t, sm))
	for name := range after {
		if l.Trainer().Frozen(name) != sm.Shared(name) {
			t.Errorf("%s: frozen %v, the Sampler shares it %v", name, l.Trainer().Frozen(name), sm.Shared(name))
		}
	}
	// Another step of the Learner leaves the Sampler's published weights.
	step(t, l, batch(t, batches, 70))
	sameBits(t, "the Sampler after a later step of the Learner", after, weights(t, sm))
}
