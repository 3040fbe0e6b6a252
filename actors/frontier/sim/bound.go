package sim

import "math"

// The best any sampler can do in this world, whatever tasks it picks or
// makes. Two facts bound the learner's skill after R rollouts:
//
//  1. A group of G episodes carries the signal Σ|r_i − r̄| = 2k(G−k)/G for
//     k successes. That is at most G/2 (k = G/2), and its expectation,
//     2p(1−p)(G−1) at solve rate p, is at most (G−1)/2 (p = 1/2). Per
//     rollout: at most 1/2 on any draw, (G−1)/(2G) in expectation.
//  2. Every group's signal is shared equally among the task's four
//     components, so after a total signal S the general skill has S/4 and
//     each family (operators, hint levels, bug counts) has S/4 spread over
//     its members. Skill averages each family, and Gain·ln(1 + L/Scale) is
//     concave, so by Jensen's inequality a family's mean skill is largest
//     when its S/4 is spread evenly over its n members.
//
// Hence skill ≤ BestSkill(S) = Gain·[ln(1+S/4c) + Σ_family ln(1+S/(4c·n))]
// with c = Scale, and BestSkill grows with S.

// hintLevels is the number of hint levels tasks have (Learner.Skill averages over them).
const hintLevels = 3

// BestSkill is the highest skill a total learning signal s can buy.
func (c Config) BestSkill(s float64) float64 {
	c = c.withDefaults()
	q := s / 4 / c.Scale
	return c.Gain * (math.Log1p(q) + math.Log1p(q/float64(len(c.Operators))) +
		math.Log1p(q/hintLevels) + math.Log1p(q/float64(c.MaxBugs)))
}

// MaxSignalPerRollout is the expected learning signal per rollout of a
// group whose task is solved half the time, the most any sampler can
// expect.
func (c Config) MaxSignalPerRollout() float64 {
	c = c.withDefaults()
	g := float64(c.Group)
	return (g - 1) / (2 * g)
}

// RolloutsBound is the fewest rollouts after which any sampler can expect
// to reach skill target: every group at p = 1/2 and its signal spread
// evenly (-1 if target is not above the untrained learner's 0).
func (c Config) RolloutsBound(target float64) int64 {
	if target <= 0 {
		return -1
	}
	per := c.MaxSignalPerRollout()
	lo, hi := 0.0, 1.0
	for c.BestSkill(hi*per) < target {
		hi *= 2
	}
	for hi-lo > 0.5 {
		mid := (lo + hi) / 2
		if c.BestSkill(mid*per) < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return int64(math.Ceil(hi))
}
