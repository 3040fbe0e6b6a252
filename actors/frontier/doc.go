// Package frontier is the FrontierEstimator: it keeps the task pool at the
// learnability frontier of the current policy, and the frontier actor that
// serves it on a node.
//
// # Posteriors
//
// Each task's solve rate has a Beta posterior: the difficulty model's
// prediction p̂ as a prior worth PriorStrength episodes, plus the task's own
// evidence (TaskStats.Alpha and Beta: rewards and their complements), which
// is multiplied by Discount for every policy version step since it was
// gathered. Evidence of an old policy thus fades and the posterior falls
// back to the model, which itself follows the policy online. Outcomes of a
// policy more than MaxStaleVersions behind are rejected.
//
// # Difficulty model
//
// An online logistic regression over a task's features (environment,
// operators, bugs, hint level, harness mode one-hot; log edits, files,
// lines, failing tests, test distance) predicts the current policy's solve
// rate of tasks never tried, and of settings the Synthesizer could be asked
// for.
//
// # Selection and retirement
//
// A batch is the n active tasks with the largest expected learning signal
// E[p(1−p)] under their posteriors, spread over operators, hint levels and
// bug counts; untried tasks predicted in the band go first, and untried
// ones predicted outside it are explored through draws from their priors
// (Thompson sampling). A task is in a batch at most once and in
// at most MaxPicks of any PickWindow consecutive batches. Tasks whose
// posterior mean passes MasteredAbove are retired for good; those under
// HopelessBelow after MinHopelessAttempts episodes are retired too, but
// every RevisitEvery-th batch gives a slot to one not graded for
// RevisitAfterVersions versions, and a revisit that goes well revives it.
//
// # Synthesis control
//
// When fewer than TargetFrontier active tasks have a posterior mean in the
// band [BandLow, BandHigh], the estimator asks the Synthesizer for the
// setting (environment, operator, bugs, hint level, mode) whose predicted
// solve rate is nearest the band's centre, penalising settings already
// common in the pool. As the policy improves, easy settings rise out of the
// band and harder ones move in. When every setting is predicted outside
// the band, the request waits while the pool holds as many untried tasks
// predicted at least as near the band as it would bring. Failures,
// timeouts and empty deliveries back a setting off; yields are tracked per
// request.
//
// # Durability
//
// Every change is committed (FrontierState and the changed TaskStats, in
// one Badger transaction) before it takes effect in memory, so the actor
// can die at any moment and a new one continues from the stores.
//
// The simulator in package sim drives this same Estimator to compare it
// with uniform and DAPO-style sampling.
package frontier
