package frontier

import (
	"math"
	"math/rand/v2"
)

// sampleBeta draws from Beta(a, b) as X/(X+Y) with X ~ Gamma(a), Y ~ Gamma(b).
func sampleBeta(r *rand.Rand, a, b float64) float64 {
	x := sampleGamma(r, a)
	y := sampleGamma(r, b)
	if x+y == 0 {
		return a / (a + b)
	}
	return x / (x + y)
}

// sampleGamma draws from Gamma(k, 1) by Marsaglia and Tsang's method, with
// the usual boost U^(1/k) for k < 1.
func sampleGamma(r *rand.Rand, k float64) float64 {
	if k <= 0 {
		return 0
	}
	if k < 1 {
		return sampleGamma(r, k+1) * math.Pow(r.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}
