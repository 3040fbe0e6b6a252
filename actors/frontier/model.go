package frontier

import (
	"fmt"
	"math"
	"slices"
	"strings"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// The difficulty model is a logistic regression, p = σ(w·x), over a task's
// feature vector (Features.vector), trained online by stochastic gradient
// ascent on the log-likelihood of graded episodes with L2 shrinkage. It is
// never frozen: the step size stays constant, so the model follows the
// policy as it improves, and older evidence fades from it as newer evidence
// pulls the weights. Its state is the DifficultyModel record, persisted with
// the rest of the estimator's state.

// meanCountCap bounds the running means' counts so they follow drift.
const meanCountCap = 1000

func newModel() *records.DifficultyModel {
	return &records.DifficultyModel{
		Weights: map[string]float64{}, Evidence: map[string]float64{},
		NumericMeans: map[string]float64{}, NumericCounts: map[string]float64{},
	}
}

// ensureModel fills the maps of a decoded model (proto drops empty maps).
func ensureModel(m *records.DifficultyModel) *records.DifficultyModel {
	if m == nil {
		return newModel()
	}
	if m.Weights == nil {
		m.Weights = map[string]float64{}
	}
	if m.Evidence == nil {
		m.Evidence = map[string]float64{}
	}
	if m.NumericMeans == nil {
		m.NumericMeans = map[string]float64{}
	}
	if m.NumericCounts == nil {
		m.NumericCounts = map[string]float64{}
	}
	return m
}

// predict returns the model's solve rate for f.
func predict(m *records.DifficultyModel, f Features) float64 {
	z := 0.0
	for _, x := range f.vector() {
		z += m.GetWeights()[x.name] * x.value
	}
	return sigmoid(z)
}

// learn takes one gradient step for a group of episodes of one task:
// successes (the sum of rewards in [0, 1]) out of episodes, each counting
// weight (less for episodes of older policies).
func learn(m *records.DifficultyModel, f Features, successes, episodes, weight, rate, l2 float64) {
	p := predict(m, f)
	g := weight * (successes - episodes*p)
	for _, x := range f.vector() {
		w := m.Weights[x.name]
		m.Weights[x.name] = signed(x.name, w+rate*(g*x.value-l2*w))
		m.Evidence[x.name] += episodes * weight
	}
	for i, x := range f.numeric() {
		key := fmt.Sprintf("bugs=%d/%s", min(f.Bugs, 4), numericNames[i])
		n := math.Min(m.NumericCounts[key]+1, meanCountCap)
		m.NumericCounts[key] = n
		m.NumericMeans[key] += (x - m.NumericMeans[key]) / n
	}
	m.Updates++
}

// signed keeps an ordered feature's weight on its side of zero (see
// Features.vector): a hint step's is never negative, a bug step's and
// those of harderWithMore never positive.
func signed(name string, w float64) float64 {
	switch {
	case strings.HasPrefix(name, hintStep):
		return max(w, 0)
	case strings.HasPrefix(name, bugsStep), slices.Contains(harderWithMore, name):
		return min(w, 0)
	}
	return w
}
