// Package failpoint injects faults at named points in product code, for the
// fault-injection suite (cmd/internal/faults). It is compiled in only with
// the build tag failpoints; without it (every release build) Inject is an
// empty function the compiler inlines away and the environment is never read.
//
// With the tag, FROGNANO_FAILPOINTS arms points when the process starts:
//
//	FROGNANO_FAILPOINTS="name=term,name=term,..."
//
// A term is [P%][N*]action[@K]: the action runs from the K-th time the
// point is reached (default 1), at most N times (default: every time), and
// each time with probability P percent (default 100). Actions:
//
//	error      Inject returns an error (ErrInjected) that the caller returns
//	panic      Inject panics
//	sleep(MS)  Inject sleeps MS milliseconds, then returns nil
//	kill       the process sends itself SIGKILL (nothing is flushed)
//	off        nothing
//
// Every time an action fires, a line "failpoint NAME: ACTION (hit K)" goes
// to standard error first, so a test can tell that the fault happened.
//
// The points in the product (a hook is one call):
//
//	store/run-put            persistence: a run record written
//	store/eval-put           persistence: an evaluation record written
//	store/schema-migrate     persistence: before each transaction of a schema migration
//	store/trajectory-append  persistence: a trajectory appended
//	store/frontier-commit    persistence: the frontier's state committed
//	learner/checkpoint       actors/learner: a full training checkpoint
//	learner/publish          actors/learner: weights published for Samplers
//	sandbox/create           actors/sandbox: a container created
//	sampler/swap             actors/sampler: the Sampler moves to new weights
package failpoint

import "errors"

// Env is the variable that arms failpoints in a build with the tag.
const Env = "FROGNANO_FAILPOINTS"

// ErrInjected is what Inject returns for the action error.
var ErrInjected = errors.New("failpoint: injected error")
