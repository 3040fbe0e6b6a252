package learner

import (
	"context"
	"os"
	"testing"

	"github.com/frognano/frognano/kernels/model"
)

// TestSmolLM2Demo runs the demo on SmolLM2-135M (FROGNANO_TEST_GGUF): one
// GRPO step on a batch with rewards lowers the batch's loss, raises the
// mean log-prob of the rewarded answers and lowers that of the others.
func TestSmolLM2Demo(t *testing.T) {
	path := os.Getenv("FROGNANO_TEST_GGUF")
	if path == "" {
		t.Skip("FROGNANO_TEST_GGUF is not set")
	}
	m, err := model.Load(path, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Demo(context.Background(), m, 1e-5)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loss %.5f → %.5f; rewarded log-prob %.4f → %.4f; unrewarded %.4f → %.4f; grad norm %.3f",
		r.LossBefore, r.LossAfter, r.RewardedBefore, r.RewardedAfter, r.OtherBefore, r.OtherAfter, r.Step.GradNorm)
	if !(r.LossAfter < r.LossBefore) {
		t.Errorf("loss %v → %v, want lower", r.LossBefore, r.LossAfter)
	}
	if !(r.RewardedAfter > r.RewardedBefore) {
		t.Errorf("rewarded log-prob %v → %v, want higher", r.RewardedBefore, r.RewardedAfter)
	}
	if !(r.OtherAfter < r.OtherBefore) {
		t.Errorf("unrewarded log-prob %v → %v, want lower", r.OtherBefore, r.OtherAfter)
	}
}

// BenchmarkTrainStep measures GRPO training steps on SmolLM2-135M
// (FROGNANO_TEST_GGUF) at batch 4 × 256 tokens: forward, backward and
// AdamW. `frognano learn bench` prints the same with per-step times.
func BenchmarkTrainStep(b *testing.B) {
	path := os.Getenv("FROGNANO_TEST_GGUF")
	if path == "" {
		b.Skip("FROGNANO_TEST_GGUF is not set")
	}
	m, err := model.Load(path, model.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	r, err := Bench(context.Background(), m, 4, 256, 0, 1, b.N, model.TrainOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.TokensPerSecond, "tokens/s")
}
