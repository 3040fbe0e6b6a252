package frontier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func task(id, env, op string, bugs, hint int) *records.Task {
	ops := make([]string, bugs)
	for i := range ops {
		ops[i] = op
	}
	return &records.Task{Id: id, Environment: env, Difficulty: &records.DifficultyFeatures{
		Operators: ops, Edits: int32(bugs), Files: 1, LinesTouched: int32(bugs), FailingTests: 1, HintLevel: int32(hint), Mode: "agent"}}
}

type fixture struct {
	mem   *persistence.Memory
	state persistence.FrontierStore
	clock time.Time
}

func newFixture(t *testing.T, tasks ...*records.Task) *fixture {
	t.Helper()
	f := &fixture{mem: persistence.NewMemory(), clock: time.Unix(1_700_000_000, 0)}
	f.state = f.mem.Frontier()
	if len(tasks) > 0 {
		if err := f.mem.Tasks().PutMany(context.Background(), tasks); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) open(t *testing.T, p Params) *Estimator {
	t.Helper()
	e, err := Open(context.Background(), Config{Tasks: f.mem.Tasks(), State: f.state,
		Params: p, Logger: quiet, Now: func() time.Time { return f.clock }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func outcomes(id string, version int64, rewards ...float64) []*messages.EpisodeOutcome {
	var out []*messages.EpisodeOutcome
	for _, r := range rewards {
		out = append(out, &messages.EpisodeOutcome{TaskId: id, PolicyVersion: version, Reward: r})
	}
	return out
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestPosteriorUpdateAndDiscount(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, task("a", "env", "off_by_one", 1, 1))
	e := f.open(t, Params{Discount: 0.5, MaxStaleVersions: 4})
	res, err := e.Record(ctx, outcomes("a", 0, 1, 1, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Recorded != 4 || res.Groups != 1 || res.Effective != 1 {
		t.Errorf("result %+v, want 4 recorded in 1 effective group", res)
	}
	st := e.Stats("a")
	if st.GetAlpha() != 3 || st.GetBeta() != 1 || st.GetAttempts() != 4 || st.GetSuccesses() != 3 {
		t.Fatalf("stats after 3 of 4: %v", st)
	}
	// Two versions later the old evidence counts a quarter; an episode of
	// the policy one version back counts half.
	if _, err := e.Record(ctx, append(outcomes("a", 2, 0, 0), outcomes("a", 1, 1)...)); err != nil {
		t.Fatal(err)
	}
	st = e.Stats("a")
	if !near(st.GetAlpha(), 3*0.25+0.5, 1e-12) || !near(st.GetBeta(), 1*0.25+2, 1e-12) || st.GetPolicyVersion() != 2 || st.GetAttempts() != 7 {
		t.Errorf("stats after discounting: %v", st)
	}
	// The posterior mean moves toward the model's prior as evidence fades.
	before, _ := e.Mean("a")
	if _, err := e.SelectBatch(ctx, 1, 40, 1, ""); err != nil {
		t.Fatal(err)
	}
	after, _ := e.Mean("a")
	prior := e.Predict(task("a", "env", "off_by_one", 1, 1))
	if !(math.Abs(after-prior) < math.Abs(before-prior)) || !near(after, prior, 0.01) {
		t.Errorf("mean %v → %v after 38 versions, prior %v: evidence did not fade", before, after, prior)
	}
	// Outcomes of a policy more than MaxStaleVersions behind are rejected.
	res, err = e.Record(ctx, outcomes("a", 35, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Recorded != 0 || res.Rejected[CountStaleVersion] != 2 || e.State().GetCounters()[CountStaleVersion] != 2 {
		t.Errorf("stale outcomes: %+v, counters %v", res, e.State().GetCounters())
	}
}

func TestBadInputCountedAndLeftOut(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, task("a", "env", "off_by_one", 1, 1))
	e := f.open(t, Params{})
	in := []*messages.EpisodeOutcome{
		{TaskId: "ghost", PolicyVersion: 0, Reward: 1},
		{TaskId: "a", PolicyVersion: 0, Reward: 2},
		{TaskId: "a", PolicyVersion: 0, Reward: math.NaN()},
		{TaskId: "a", PolicyVersion: -1, Reward: 1},
		{TaskId: "a", PolicyVersion: 0, Reward: 1, SandboxFailure: true},
		{TaskId: "a", PolicyVersion: 0, Reward: 1},
	}
	res, err := e.Record(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{CountUnknownTask: 1, CountBadOutcome: 3, CountSandboxFailure: 1}
	for k, n := range want {
		if res.Rejected[k] != n || e.State().GetCounters()[k] != int64(n) {
			t.Errorf("%s: result %d, counter %d, want %d", k, res.Rejected[k], e.State().GetCounters()[k], n)
		}
	}
	if res.Recorded != 1 || e.Stats("a").GetAttempts() != 1 {
		t.Errorf("recorded %d, attempts %d, want 1", res.Recorded, e.Stats("a").GetAttempts())
	}
	if e.Stats("ghost") != nil {
		t.Errorf("an unknown task got stats")
	}
	for _, n := range []int{0, -3, 1 << 20} {
		if _, err := e.SelectBatch(ctx, n, 0, 0, ""); !errors.Is(err, ErrBadRequest) {
			t.Errorf("SelectBatch(%d) = %v, want ErrBadRequest", n, err)
		}
	}
	if _, err := e.SelectBatch(ctx, 1, -1, 0, ""); !errors.Is(err, ErrBadRequest) {
		t.Errorf("SelectBatch(version -1) = %v, want ErrBadRequest", err)
	}
	if _, err := Open(ctx, Config{Tasks: f.mem.Tasks()}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Open without stores = %v, want ErrBadRequest", err)
	}
	if _, err := Open(ctx, Config{Tasks: f.mem.Tasks(), State: f.state, Params: Params{BandLow: 0.9, BandHigh: 0.1}}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Open with an inverted band = %v, want ErrBadRequest", err)
	}
	// An outcome for a task stored after the estimator loaded its pool is
	// not unknown: the pool is reloaded first.
	if err := f.mem.Tasks().Put(ctx, task("late", "env", "off_by_one", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if res, _ := e.Record(ctx, outcomes("late", 0, 1)); res.Recorded != 1 {
		t.Errorf("outcome of a newly stored task: %+v", res)
	}
}

// TestModelLearnsKnownFunction trains the difficulty model on episodes drawn
// from a known logistic function of the features and checks its predictions
// for settings it was trained on and for unseen combinations.
func TestModelLearnsKnownFunction(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	ops := []string{"a", "b", "c", "d"}
	opW := map[string]float64{"a": 1.5, "b": 0.5, "c": -0.5, "d": -1.5}
	truth := func(f Features) float64 {
		return sigmoid(opW[f.Operators[0]] - 0.8*float64(f.Bugs-1) + 0.6*float64(f.HintLevel-1))
	}
	m := newModel()
	feat := func(op string, bugs, hint int) Features {
		return FeaturesOf(task("x", "env", op, bugs, hint))
	}
	for range 60000 {
		f := feat(ops[r.IntN(4)], 1+r.IntN(3), r.IntN(3))
		s := 0.0
		for range 8 {
			if r.Float64() < truth(f) {
				s++
			}
		}
		learn(m, f, s, 8, 1, 0.003, 1e-5)
	}
	worst := 0.0
	for _, op := range ops {
		for bugs := 1; bugs <= 3; bugs++ {
			for hint := 0; hint <= 2; hint++ {
				f := feat(op, bugs, hint)
				worst = math.Max(worst, math.Abs(predict(m, f)-truth(f)))
			}
		}
	}
	if worst > 0.06 {
		t.Errorf("worst prediction error %.3f, want ≤ 0.06", worst)
	}
	if !(predict(m, feat("a", 1, 2)) > predict(m, feat("d", 3, 0))) {
		t.Errorf("model does not rank an easy setting above a hard one")
	}
}

func TestSelectionPrefersFrontierCapsAndExplores(t *testing.T) {
	ctx := context.Background()
	var tasks []*records.Task
	for i := range 30 {
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), "env", "off_by_one", 1, 1))
	}
	f := newFixture(t, tasks...)
	e := f.open(t, Params{MaxPicks: 1, PickWindow: 2, RevisitEvery: 1000, Discount: 1})
	// Evidence: t00–t09 solved 1 in 20, t10–t19 half, t20–t29 19 in 20
	// (all short of retirement thresholds by design: high MinRetireEvidence).
	e.p.MinRetireEvidence = 1e9
	for i, tk := range tasks {
		k := []int{1, 10, 19}[i/10]
		rw := make([]float64, 20)
		for j := range k {
			rw[j] = 1
		}
		if _, err := e.Record(ctx, outcomes(tk.GetId(), 0, rw...)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.mem.Tasks().Put(ctx, task("unseen", "env", "off_by_one", 1, 1)); err != nil {
		t.Fatal(err)
	}
	picks := map[string]int{}
	last := map[string]int{}
	for b := 1; b <= 200; b++ {
		batch, err := e.SelectBatch(ctx, 5, 0, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) != 5 {
			t.Fatalf("batch %d has %d tasks", b, len(batch))
		}
		seen := map[string]bool{}
		for _, tk := range batch {
			id := tk.GetId()
			if seen[id] {
				t.Fatalf("batch %d has %s twice", b, id)
			}
			seen[id] = true
			if l, ok := last[id]; ok && b-l < 2 {
				t.Fatalf("%s picked in batches %d and %d: over its cap of 1 in 2", id, l, b)
			}
			last[id] = b
			picks[id]++
		}
	}
	band := func(lo, hi int) (n int) {
		for i := lo; i < hi; i++ {
			n += picks[fmt.Sprintf("t%02d", i)]
		}
		return n
	}
	hard, mid, easy := band(0, 10), band(10, 20), band(20, 30)
	if !(mid > 3*hard && mid > 3*easy) {
		t.Errorf("picks: hard %d, mid %d, easy %d: want p≈0.5 preferred", hard, mid, easy)
	}
	if picks["unseen"] == 0 {
		t.Errorf("an untried task was never explored in 200 batches")
	}
	if e.State().GetCounters()[CountCapRelaxed] != 0 {
		t.Errorf("cap relaxed with a pool of 31 for batches of 5")
	}
	// Same seed, same stores: the same batch.
	f2 := newFixture(t, tasks...)
	a, _ := f2.open(t, Params{}).SelectBatch(ctx, 5, 0, 42, "")
	f3 := newFixture(t, tasks...)
	b, _ := f3.open(t, Params{}).SelectBatch(ctx, 5, 0, 42, "")
	for i := range a {
		if a[i].GetId() != b[i].GetId() {
			t.Fatalf("same seed, different batches")
		}
	}
}

func TestRetirementAndRevisit(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, task("easy", "env", "off_by_one", 1, 2), task("hard", "env", "remove_branch", 3, 0), task("mid", "env", "swap_args", 1, 1))
	e := f.open(t, Params{RevisitEvery: 2, RevisitAfterVersions: 5, MinRetireEvidence: 8, MinHopelessAttempts: 16})
	ones, zeros := make([]float64, 8), make([]float64, 8)
	for i := range ones {
		ones[i] = 1
	}
	for v := int64(0); v < 2; v++ {
		if _, err := e.Record(ctx, append(outcomes("easy", v, ones...), outcomes("hard", v, zeros...)...)); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.Stats("easy"); !st.GetRetired() || st.GetRetiredReason() != Mastered {
		t.Errorf("easy after 16 of 16: %v", st)
	}
	if st := e.Stats("hard"); !st.GetRetired() || st.GetRetiredReason() != Hopeless {
		t.Errorf("hard after 0 of 16: %v", st)
	}
	// Retired tasks are not selected; before RevisitAfterVersions the
	// hopeless one is not revisited.
	for range 4 {
		batch, err := e.SelectBatch(ctx, 3, 2, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) != 1 || batch[0].GetId() != "mid" {
			t.Fatalf("batch %v, want only the active task", ids(batch))
		}
	}
	// Later, a revisit slot goes to the hopeless task (never the mastered one).
	revisited := false
	for range 4 {
		batch, err := e.SelectBatch(ctx, 3, 10, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range batch {
			if tk.GetId() == "easy" {
				t.Fatalf("mastered task selected")
			}
			revisited = revisited || tk.GetId() == "hard"
		}
	}
	if !revisited || e.State().GetCounters()[CountRevisits] == 0 {
		t.Fatalf("hopeless task not revisited after 8 versions")
	}
	// The policy improved: successes on the revisit bring it back.
	if _, err := e.Record(ctx, outcomes("hard", 10, 1, 1, 1, 0, 0, 1, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if st := e.Stats("hard"); st.GetRetired() || e.State().GetCounters()[CountRevived] != 1 {
		t.Errorf("hard after 5 of 8 on revisit: %v, counters %v", st, e.State().GetCounters())
	}
}

func ids(ts []*records.Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.GetId())
	}
	return out
}

func TestSynthesisControl(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, task("seed", "six", "off_by_one", 1, 1))
	p := Params{TargetFrontier: 10, MaxRequestTasks: 4, Operators: []string{"off_by_one", "remove_branch"}, SpecBackoff: 5, RequestTimeout: time.Hour}
	e := f.open(t, p)
	// A model that finds hint 2 easy, hint 0 hard, two bugs harder still.
	// (Hint levels 3 and 4 no easier than 2.)
	e.state.Model.Weights = map[string]float64{"bias": -0.3, "hint>=1": 0.6, "hint>=2": 2.2, "bugs>=2": -1.5, "bugs>=3": -1.5, "op=remove_branch": -0.2}
	recs, err := e.PlanSynthesis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("planned %d requests, want 1", len(recs))
	}
	r := recs[0]
	if r.GetAsked() != 4 || r.GetSpec().GetEnvironment() != "six" || r.GetPredicted() < e.p.BandLow || r.GetPredicted() > e.p.BandHigh {
		t.Errorf("request %v: want 4 tasks of six predicted inside the band", r)
	}
	firstHint := r.GetSpec().GetHintLevel()
	// One request in flight: nothing more is planned.
	if more, _ := e.PlanSynthesis(ctx, nil); len(more) != 0 {
		t.Errorf("planned %d more with one pending", len(more))
	}
	req := SynthesizeRequestOf(r)
	if req.GetCount() != 4 || req.GetTarget().GetHintLevel() != firstHint || req.GetBugs() != r.GetSpec().GetBugs() || req.GetSeed() == 0 {
		t.Errorf("SynthesizeRequest %v from %v", req, r)
	}
	// Delivery: tasks join the pool and the request's yield is tracked.
	made := []*records.Task{task("n1", "six", "off_by_one", 1, int(firstHint)), task("n2", "six", "off_by_one", 1, int(firstHint))}
	if err := f.mem.Tasks().PutMany(ctx, made); err != nil {
		t.Fatal(err)
	}
	if err := e.Delivered(ctx, r.GetId(), []string{"n1", "n2"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Mean("n1"); !ok {
		t.Fatalf("delivered task not in the pool")
	}
	if _, err := e.Record(ctx, outcomes("n1", 0, 1, 0, 1, 0)); err != nil {
		t.Fatal(err)
	}
	got := findRequest(e.state, r.GetId())
	if got.GetStatus() != StatusDone || got.GetGraded() != 1 || got.GetEffective() != 1 || e.State().GetCounters()[CountSynthShort] != 1 {
		t.Errorf("record after delivery: %v, counters %v", got, e.State().GetCounters())
	}
	// The policy improves: everything at that hint level is now easy, so
	// the control moves to harder settings.
	e.state.Model.Weights["bias"] = 2.5
	recs, _ = e.PlanSynthesis(ctx, nil)
	if len(recs) != 1 {
		t.Fatalf("no request after the policy improved")
	}
	harder := recs[0].GetSpec()
	if !(harder.GetHintLevel() < firstHint || harder.GetBugs() > r.GetSpec().GetBugs()) {
		t.Errorf("after improvement asked for %v, before %v: want harder", SpecKey(harder), SpecKey(r.GetSpec()))
	}
	// A synthesizer that cannot deliver: failure counted, setting backed off.
	if err := e.Delivered(ctx, recs[0].GetId(), nil, errors.New("containerd is not running")); err != nil {
		t.Fatal(err)
	}
	if e.State().GetCounters()[CountSynthFailed] != 1 || e.State().GetSpecBackoff()[SpecKey(harder)] == 0 {
		t.Errorf("after failure: counters %v, backoff %v", e.State().GetCounters(), e.State().GetSpecBackoff())
	}
	next, _ := e.PlanSynthesis(ctx, nil)
	if len(next) != 1 || SpecKey(next[0].GetSpec()) == SpecKey(harder) {
		t.Errorf("after a failure the same setting was asked for again: %v", next)
	}
	// No answer within the timeout: failed and counted.
	f.clock = f.clock.Add(2 * time.Hour)
	if _, err := e.PlanSynthesis(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if rec := findRequest(e.state, next[0].GetId()); rec.GetStatus() != StatusFailed || e.State().GetCounters()[CountSynthTimeout] != 1 {
		t.Errorf("after the timeout: %v", rec)
	}
	// An answer nobody waits for.
	if err := e.Delivered(ctx, "default-999", []string{"x"}, nil); err != nil {
		t.Fatal(err)
	}
	if e.State().GetCounters()[CountSynthUnknown] != 1 {
		t.Errorf("unknown answer not counted")
	}
	// No environment anywhere: counted, nothing planned.
	f2 := newFixture(t)
	e2 := f2.open(t, p)
	if recs, _ := e2.PlanSynthesis(ctx, nil); len(recs) != 0 || e2.State().GetCounters()[CountSynthNoEnv] != 1 {
		t.Errorf("without environments: %v, counters %v", recs, e2.State().GetCounters())
	}
	if recs, _ := e2.PlanSynthesis(ctx, []string{"uuid"}); len(recs) != 1 || recs[0].GetSpec().GetEnvironment() != "uuid" {
		t.Errorf("with a fallback environment: %v", recs)
	}
}

// TestSynthesisDeferredWhileUntriedAsNear: when every setting is predicted
// below the band, no request is sent while the pool holds as many untried
// tasks predicted at least as high as the best setting as the request would
// bring (counted); untried tasks predicted lower do not count, and once
// enough of the nearer ones are tried the request goes out, counted as
// outside the band.
func TestSynthesisDeferredWhileUntriedAsNear(t *testing.T) {
	ctx := context.Background()
	var pool []*records.Task
	for i := range 6 {
		pool = append(pool, task(fmt.Sprintf("near%d", i), "six", "off_by_one", 1, 2))
		pool = append(pool, task(fmt.Sprintf("far%d", i), "six", "off_by_one", 1, 0))
	}
	f := newFixture(t, pool...)
	// Synthesis may ask for hint levels 0 and 1 only; hint 2 tasks are
	// predicted higher than any setting, hint 0 ones lower than the best.
	p := Params{TargetFrontier: 10, MaxRequestTasks: 4, Operators: []string{"off_by_one"}, HintLevels: []int{0, 1}, Bugs: []int{1}, RequestTimeout: time.Hour}
	e := f.open(t, p)
	e.state.Model.Weights = map[string]float64{"bias": -4, "hint>=1": 0.5, "hint>=2": 0.5}
	recs, err := e.PlanSynthesis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := e.State().GetCounters()
	if len(recs) != 0 || c[CountSynthDeferred] != 1 || c[CountSynthRequests] != 0 {
		t.Fatalf("6 untried tasks predicted above the best setting: planned %v, counters %v; want none, deferred", recs, c)
	}
	// Three of the near ones are tried (and fail): three untried remain,
	// fewer than the 4 a request brings; the far ones do not count.
	for i := range 3 {
		if _, err := e.Record(ctx, outcomes(fmt.Sprintf("near%d", i), 0, 0, 0)); err != nil {
			t.Fatal(err)
		}
	}
	recs, err = e.PlanSynthesis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	c = e.State().GetCounters()
	if len(recs) != 1 || recs[0].GetSpec().GetHintLevel() != 1 || c[CountSynthOutside] != 1 || c[CountSynthDeferred] != 1 {
		t.Fatalf("3 untried near tasks: planned %v, counters %v; want a request at hint 1, outside the band", recs, c)
	}
	// Nearness is distance to the band, on either side: for a setting at
	// 0.1 (0.2 below [0.3, 0.7]), 0.15, 0.5 and 0.85 are as near, 0.05 and
	// 0.95 are not; for one at 0.8, 0.75, 0.5 and 0.2 are.
	if got := nearerUntried([]float64{0.05, 0.15, 0.5, 0.85, 0.95}, 0.1, 0.3, 0.7); got != 3 {
		t.Fatalf("below the band: %d tasks as near as 0.1, want 3", got)
	}
	if got := nearerUntried([]float64{0.9, 0.85, 0.75, 0.5, 0.2, 0.05}, 0.8, 0.3, 0.7); got != 3 {
		t.Fatalf("above the band: %d tasks as near as 0.8, want 3", got)
	}

	// Tasks that are never tried cannot stop synthesis for longer than
	// MaxDeferral.
	f2 := newFixture(t, pool...)
	p.MaxDeferral = 20 * time.Minute
	e2 := f2.open(t, p)
	e2.state.Model.Weights = map[string]float64{"bias": -4, "hint=2": 1, "hint=1": 0.5}
	for _, wait := range []time.Duration{0, 10 * time.Minute, 11 * time.Minute} {
		f2.clock = f2.clock.Add(wait)
		recs, err := e2.PlanSynthesis(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != map[bool]int{false: 0, true: 1}[wait == 11*time.Minute] {
			t.Fatalf("after %v more: planned %v (counters %v)", wait, recs, e2.State().GetCounters())
		}
	}
	if c := e2.State().GetCounters(); c[CountSynthDeferred] != 2 || c[CountSynthOutside] != 1 || e2.State().GetSynthesisDeferredUnixNano() != 0 {
		t.Fatalf("deferred twice, then asked after 21 minutes: counters %v, deferred since %d", c, e2.State().GetSynthesisDeferredUnixNano())
	}
}

// TestRestartLosesNothing drives an estimator on Badger, closes the
// database, opens it again and checks state, posteriors and the next batch
// are identical.
func TestRestartLosesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := persistence.Open(dir, persistence.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	var tasks []*records.Task
	for i := range 12 {
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), "six", []string{"off_by_one", "remove_branch"}[i%2], 1+i%3, i%3))
	}
	if err := db.Tasks().PutMany(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(1_700_000_000, 0)
	open := func(db *persistence.DB) *Estimator {
		e, err := Open(ctx, Config{Tasks: db.Tasks(), State: db.Frontier(), Logger: quiet, Now: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open(db)
	r := rand.New(rand.NewPCG(3, 3))
	for v := int64(0); v < 5; v++ {
		batch, err := e.SelectBatch(ctx, 4, v, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		var outs []*messages.EpisodeOutcome
		for _, tk := range batch {
			for range 4 {
				outs = append(outs, &messages.EpisodeOutcome{TaskId: tk.GetId(), PolicyVersion: v, Reward: float64(r.IntN(2))})
			}
		}
		if _, err := e.Record(ctx, outs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.PlanSynthesis(ctx, nil); err != nil {
		t.Fatal(err)
	}
	wantState := e.State()
	wantSnap := e.Snapshot(nil)
	wantStats := map[string]*records.TaskStats{}
	for _, tk := range tasks {
		wantStats[tk.GetId()] = e.Stats(tk.GetId())
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = persistence.Open(dir, persistence.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e2 := open(db)
	if got := e2.State(); !proto.Equal(got, wantState) {
		t.Errorf("state after restart differs:\n got %v\nwant %v", got, wantState)
	}
	for id, want := range wantStats {
		if !proto.Equal(e2.Stats(id), want) {
			t.Errorf("stats of %s after restart: %v, want %v", id, e2.Stats(id), want)
		}
	}
	snap := e2.Snapshot(nil)
	if snap.GetFrontierTasks() != wantSnap.GetFrontierTasks() || snap.GetPoolTasks() != wantSnap.GetPoolTasks() {
		t.Errorf("snapshot after restart: %d frontier of %d, want %d of %d", snap.GetFrontierTasks(), snap.GetPoolTasks(), wantSnap.GetFrontierTasks(), wantSnap.GetPoolTasks())
	}
}

// A batch spreads over operators: with two equally good operators, one
// slightly ahead on evidence, BatchDiversity takes both; switched off, the
// batch is all the leading one.
func TestSelectionSpreadsOverSettings(t *testing.T) {
	ctx := context.Background()
	var tasks []*records.Task
	for i := range 20 {
		tasks = append(tasks, task(fmt.Sprintf("a%02d", i), "env", "off_by_one", 1, 1), task(fmt.Sprintf("b%02d", i), "env", "flip_comparison", 1, 1))
	}
	ops := func(p Params) map[string]int {
		f := newFixture(t, tasks...)
		e := f.open(t, p)
		for _, tk := range tasks {
			rw := []float64{1, 1, 1, 1, 1, 0, 0, 0, 0, 0} // 5 of 10
			if tk.GetId()[0] == 'b' {
				rw = rw[:8] // 5 of 8: a little further from 0.5, less evidence
			}
			if _, err := e.Record(ctx, outcomes(tk.GetId(), 0, rw...)); err != nil {
				t.Fatal(err)
			}
		}
		batch, err := e.SelectBatch(ctx, 10, 0, 1, "")
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, tk := range batch {
			n[tk.GetDifficulty().GetOperators()[0]]++
		}
		return n
	}
	if n := ops(Params{BatchDiversity: -1}); n["off_by_one"] != 10 {
		t.Errorf("without spreading: %v, want the 10 best-scored (off_by_one)", n)
	}
	if n := ops(Params{}); n["off_by_one"] < 4 || n["flip_comparison"] < 4 {
		t.Errorf("spread batch: %v, want both operators", n)
	}
}

// A run's first batches come from a pool nobody has tried, where every
// task with the same features scores the same: they spread over the
// pool's environments rather than taking the first environment's tasks
// in id order (a run on 13 environments once spent its first steps on
// boltons alone).
func TestFirstBatchSpreadsOverEnvironments(t *testing.T) {
	ctx := context.Background()
	var tasks []*records.Task
	for _, env := range []string{"alpha", "beta", "gamma", "delta"} {
		for i := range 6 {
			tasks = append(tasks, task(fmt.Sprintf("%s.%02d", env, i), env, "off_by_one", 1, 4))
		}
	}
	envs := func(p Params) map[string]int {
		e := newFixture(t, tasks...).open(t, p)
		batch, err := e.SelectBatch(ctx, 4, 0, 1, "")
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, tk := range batch {
			n[tk.GetEnvironment()]++
		}
		return n
	}
	if n := envs(Params{BatchDiversity: -1}); n["alpha"] != 4 {
		t.Errorf("without spreading: %v, want alpha's four (id order)", n)
	}
	if n := envs(Params{}); len(n) != 4 {
		t.Errorf("first batch: %v, want one task of each of the 4 environments", n)
	}
}

// Episodes played in patch mode teach the model about patch mode, not about
// the agent mode the tasks were tagged with; the mode is kept in the state,
// so predictions and synthesis requests follow it; a bad mode is refused.
func TestPlayModeReachesTheDifficultyModel(t *testing.T) {
	ctx := context.Background()
	var tasks []*records.Task
	for i := range 20 {
		tasks = append(tasks, task(fmt.Sprintf("t%02d", i), "env", "off_by_one", 1, 1))
	}
	fresh := task("fresh", "env", "off_by_one", 1, 1)
	f := newFixture(t, append(tasks, fresh)...)
	e := f.open(t, Params{})
	before, _ := e.Mean("fresh")
	for round := range 10 {
		for _, tk := range tasks {
			out := outcomes(tk.GetId(), int64(round), 0, 0, 0, 0, 0, 0, 0, 0)
			for _, o := range out {
				o.Mode = "patch"
			}
			if _, err := e.Record(ctx, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := e.State().GetMode(); got != "patch" {
		t.Fatalf("state mode %q, want patch", got)
	}
	after, _ := e.Mean("fresh")
	if !(after < before-0.2) {
		t.Errorf("untried task's mean %.3f → %.3f after failures in patch mode: want it to fall", before, after)
	}
	agent := FeaturesOf(fresh)
	patch := agent
	patch.Mode = "patch"
	if pa, pp := predict(e.State().GetModel(), agent), predict(e.State().GetModel(), patch); !(pp < pa) {
		t.Errorf("model: agent %.3f, patch %.3f: the failures should weigh on patch mode", pa, pp)
	}
	recs, err := e.PlanSynthesis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.GetSpec().GetMode() != "patch" {
			t.Errorf("synthesis asked for mode %q, want patch", r.GetSpec().GetMode())
		}
	}
	// The mode survives a restart, and a batch request can change it.
	e2 := f.open(t, Params{})
	if e2.State().GetMode() != "patch" {
		t.Errorf("mode after reopening: %q", e2.State().GetMode())
	}
	if _, err := e2.SelectBatch(ctx, 3, 10, 1, "agent"); err != nil {
		t.Fatal(err)
	}
	if e2.State().GetMode() != "agent" {
		t.Errorf("mode after an agent batch: %q", e2.State().GetMode())
	}
	if _, err := e2.SelectBatch(ctx, 3, 10, 1, "chat"); !errors.Is(err, ErrBadRequest) {
		t.Errorf("SelectBatch(mode chat) = %v, want ErrBadRequest", err)
	}
	bad := outcomes("t00", 10, 1)
	bad[0].Mode = "chat"
	res, err := e2.Record(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rejected[CountBadOutcome] != 1 {
		t.Errorf("outcome in mode chat: rejected %v, want bad_outcome", res.Rejected)
	}
}

// TestStepRecordedOnce: a training step's outcomes are recorded once. The
// step replayed after a crash (same step, other episodes) changes nothing,
// also for an estimator reopened from the store, and answers with the
// first report's count; the next step is recorded; a step older than the
// newest is a duplicate too; step 0 (no step) is always recorded.
func TestStepRecordedOnce(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, task("a", "env", "off_by_one", 1, 1))
	e := f.open(t, Params{})
	res, err := e.RecordStep(ctx, 1, outcomes("a", 0, 1, 0))
	if err != nil || res.Recorded != 2 || res.Duplicate {
		t.Fatalf("step 1: %+v, %v", res, err)
	}
	before := e.Stats("a")
	e = f.open(t, Params{}) // the process that resumes
	res, err = e.RecordStep(ctx, 1, outcomes("a", 0, 1, 1, 1))
	if err != nil || !res.Duplicate || res.Recorded != 2 {
		t.Fatalf("step 1 again: %+v, %v", res, err)
	}
	if st := e.Stats("a"); st.GetAttempts() != before.GetAttempts() || st.GetAlpha() != before.GetAlpha() || e.State().GetReports() != 1 ||
		e.State().GetCounters()[CountRecorded] != 2 {
		t.Fatalf("a duplicate step changed the state: %v, reports %d, counters %v", st, e.State().GetReports(), e.State().GetCounters())
	}
	if res, err = e.RecordStep(ctx, 2, outcomes("a", 1, 0, 0)); err != nil || res.Duplicate || res.Recorded != 2 || e.Stats("a").GetAttempts() != 4 {
		t.Fatalf("step 2: %+v, %v, stats %v", res, err, e.Stats("a"))
	}
	if res, err = e.RecordStep(ctx, 1, outcomes("a", 1, 1)); err != nil || !res.Duplicate || res.Recorded != 2 || e.Stats("a").GetAttempts() != 4 {
		t.Fatalf("step 1 after step 2: %+v, %v", res, err)
	}
	for range 2 {
		if res, err = e.Record(ctx, outcomes("a", 1, 1)); err != nil || res.Duplicate || res.Recorded != 1 {
			t.Fatalf("no step: %+v, %v", res, err)
		}
	}
	if st := e.State(); st.GetLastStep() != 2 || st.GetLastStepRecorded() != 2 || e.Stats("a").GetAttempts() != 6 {
		t.Fatalf("state: last step %d (%d recorded), attempts %d", st.GetLastStep(), st.GetLastStepRecorded(), e.Stats("a").GetAttempts())
	}
}

// The snapshot's bands split their tasks by hint level: every task is
// counted once, in its band, at its own level.
func TestSnapshotSplitsBandsByHintLevel(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, task("easy", "env", "off_by_one", 1, 2), task("hard", "env", "remove_branch", 3, 0),
		task("mid1", "env", "swap_args", 1, 1), task("mid2", "env", "swap_args", 1, 1), task("mid3", "env", "off_by_one", 2, 3))
	e := f.open(t, Params{MinRetireEvidence: 8, MinHopelessAttempts: 16})
	ones, zeros := make([]float64, 8), make([]float64, 8)
	for i := range ones {
		ones[i] = 1
	}
	for v := int64(0); v < 2; v++ {
		if _, err := e.Record(ctx, append(outcomes("easy", v, ones...), outcomes("hard", v, zeros...)...)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Record(ctx, outcomes("mid1", 2, 1, 0, 1, 0)); err != nil {
		t.Fatal(err)
	}
	snap := e.Snapshot(nil)
	active := map[int32]int32{}
	for _, b := range snap.GetPool() {
		var sum int32
		for level, n := range b.GetHintTasks() {
			sum += n
			if b.GetName() != BandRetiredMastered && b.GetName() != BandRetiredHopeless {
				active[level] += n
			}
		}
		if sum != b.GetTasks() {
			t.Errorf("band %s: %d tasks, %v by hint level", b.GetName(), b.GetTasks(), b.GetHintTasks())
		}
		switch b.GetName() {
		case BandRetiredMastered:
			if b.GetTasks() != 1 || b.GetHintTasks()[2] != 1 {
				t.Errorf("mastered band %v, want the hint-2 task", b)
			}
		case BandRetiredHopeless:
			if b.GetTasks() != 1 || b.GetHintTasks()[0] != 1 {
				t.Errorf("hopeless band %v, want the hint-0 task", b)
			}
		}
	}
	if len(active) != 2 || active[1] != 2 || active[3] != 1 {
		t.Errorf("active tasks by hint level %v, want two at level 1 and one at level 3", active)
	}
}

// TestFailingPolicyGetsEasierTasks replays what a learning run of a weak
// policy saw (docs/learning.md, 2026-12-07): a pool of tasks at hint
// levels 3 and 4 with one bug, every episode failed but one at level 4.
// The difficulty model must then predict no setting with less hint or more
// bugs as easier than what was played, and synthesis must ask for the
// easiest setting (the highest hint level, one bug: hint 5, never played,
// is predicted at least as easy as 4) — with one-hot levels it asked for
// hint 0 and two or three bugs, the levels it had never seen fail. Once
// the policy solves level 4 nearly always, synthesis moves to harder
// settings.
func TestFailingPolicyGetsEasierTasks(t *testing.T) {
	ctx := context.Background()
	task := func(id, env, op string, bugs, hint int) *records.Task {
		t := task(id, env, op, bugs, hint)
		t.Difficulty.Mode = "patch"
		return t
	}
	var pool []*records.Task
	for i := range 12 {
		pool = append(pool, task(fmt.Sprintf("h4-%d", i), "six", "off_by_one", 1, 4), task(fmt.Sprintf("h3-%d", i), "six", "negate_condition", 1, 3))
	}
	for _, t := range pool {
		t.Difficulty.FailingTests = 4 // more than a setting never made would assume
	}
	f := newFixture(t, pool...)
	// Patch mode, as the learning benchmark plays: levels 4 and 5 exist only there.
	p := Params{TargetFrontier: 100, MaxRequestTasks: 4, Operators: []string{"off_by_one", "negate_condition"}, Modes: []string{"patch"}, MaxDeferral: time.Nanosecond, RequestTimeout: time.Hour}
	e := f.open(t, p)
	// Before any outcome every setting is predicted alike (in the band):
	// the first request is for the easiest.
	first, err := e.PlanSynthesis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 1 || first[0].GetSpec().GetHintLevel() != maxHint || first[0].GetSpec().GetBugs() != 1 {
		t.Fatalf("first request of an untrained model: %v, want hint %d, one bug", first, maxHint)
	}
	fs := first[0].GetSpec()
	var made []string
	for i := range 4 {
		id := fmt.Sprintf("s-%d", i)
		if err := f.mem.Tasks().PutMany(ctx, []*records.Task{task(id, fs.GetEnvironment(), fs.GetOperators()[0], int(fs.GetBugs()), int(fs.GetHintLevel()))}); err != nil {
			t.Fatal(err)
		}
		made = append(made, id)
	}
	if err := e.Delivered(ctx, first[0].GetId(), made, nil); err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		for _, id := range made {
			if _, err := e.Record(ctx, outcomes(id, 0, 0, 0, 0, 0, 0, 0, 0, 0)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 12 {
			r4 := []float64{0, 0, 0, 0, 0, 0, 0, 0}
			if i == 0 && round == 0 {
				r4[0] = 1
			}
			if _, err := e.Record(ctx, outcomes(fmt.Sprintf("h4-%d", i), 0, r4...)); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Record(ctx, outcomes(fmt.Sprintf("h3-%d", i), 0, 0, 0, 0, 0, 0, 0, 0, 0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	at := func(op string, bugs, hint int) float64 {
		return predict(e.State().GetModel(), FeaturesOf(task("x", "six", op, bugs, hint)))
	}
	for _, op := range []string{"off_by_one", "negate_condition"} {
		for hint := range maxHint {
			if at(op, 1, hint) > at(op, 1, hint+1)+1e-12 {
				t.Errorf("%s: hint %d predicted %.4f, above hint %d's %.4f", op, hint, at(op, 1, hint), hint+1, at(op, 1, hint+1))
			}
		}
		for bugs := 2; bugs <= 3; bugs++ {
			if at(op, bugs, 4) > at(op, 1, 4)+1e-12 {
				t.Errorf("%s: %d bugs predicted %.4f, above one bug's %.4f", op, bugs, at(op, bugs, 4), at(op, 1, 4))
			}
		}
	}
	// So are the settings synthesis ranks, whose numeric features are the
	// pool's means: a bug count never made borrows those of one bug.
	spec := func(op string, bugs, hint int) float64 {
		s := &records.SynthesisSpec{Environment: "six", Operators: []string{op}, Bugs: int32(bugs), HintLevel: int32(hint), Mode: "patch"}
		return predict(e.State().GetModel(), specFeatures(s, e.State().GetModel()))
	}
	for _, op := range []string{"off_by_one", "negate_condition"} {
		for hint := range maxHint + 1 {
			for bugs := 2; bugs <= 3; bugs++ {
				if spec(op, bugs, hint) > spec(op, bugs-1, hint)+1e-12 {
					t.Errorf("setting %s hint %d: %d bugs predicted %.4f, above %d bugs' %.4f", op, hint, bugs, spec(op, bugs, hint), bugs-1, spec(op, bugs-1, hint))
				}
			}
		}
	}
	f.clock = f.clock.Add(time.Minute) // past MaxDeferral
	recs, err := e.PlanSynthesis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("planned %d requests, want 1", len(recs))
	}
	if s := recs[0].GetSpec(); s.GetHintLevel() != maxHint || s.GetBugs() != 1 {
		t.Errorf("a policy that solves nothing got %s (predicted %.3f): want hint %d, one bug", SpecKey(s), recs[0].GetPredicted(), maxHint)
	}
	if err := e.Delivered(ctx, recs[0].GetId(), nil, nil); err != nil {
		t.Fatal(err)
	}
	// The policy now solves hint 4 nearly always (new tasks: the failed
	// ones are retired as hopeless).
	var more []*records.Task
	for i := range 12 {
		more = append(more, task(fmt.Sprintf("g4-%d", i), "six", "off_by_one", 1, 4))
	}
	if err := f.mem.Tasks().PutMany(ctx, more); err != nil {
		t.Fatal(err)
	}
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		for i := range 12 {
			if _, err := e.Record(ctx, outcomes(fmt.Sprintf("g4-%d", i), 1, 1, 1, 1, 1, 1, 1, 1, 0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := at("off_by_one", 1, 4); got < 0.7 {
		t.Fatalf("hint 4 predicted %.3f after the policy solved it", got)
	}
	recs, err = e.PlanSynthesis(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("planned %d requests after the policy improved, want 1", len(recs))
	}
	if s := recs[0].GetSpec(); s.GetHintLevel() >= 4 && s.GetBugs() == 1 {
		t.Errorf("after the policy mastered hint 4 it got %s (predicted %.3f) again: want a harder setting", SpecKey(s), recs[0].GetPredicted())
	}
}

// In agent mode hint levels 4 and 5 play like 3 (they give part of a patch
// answer): synthesis never asks for them there.
func TestAgentModeSkipsPatchOnlyHints(t *testing.T) {
	f := newFixture(t, task("a-0", "six", "off_by_one", 1, 0))
	e := f.open(t, Params{TargetFrontier: 100, MaxRequestTasks: 4, Operators: []string{"off_by_one"}, Modes: []string{"agent"}, MaxDeferral: time.Nanosecond, RequestTimeout: time.Hour})
	recs, err := e.PlanSynthesis(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].GetSpec().GetHintLevel() != 3 || recs[0].GetSpec().GetMode() != "agent" {
		t.Fatalf("agent mode, untrained model: %v, want hint 3 (the easiest level an agent plays differently)", recs)
	}
}
