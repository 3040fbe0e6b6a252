package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/frognano/frognano/actors/evaluate"
	"github.com/frognano/frognano/actors/frontier"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

type envRow struct {
	Env                                         *records.Environment
	Tasks                                       int
	BaselinePass, BaselineFail, BaselineOther   int
	CoverageTests, CoverageFiles, CoverageLines int
	CoverageTool                                string
	CoverageStale                               bool
	HasCoverage                                 bool
}

// memberRow is a member as the cluster page lists it, with the load it
// last published with its facts in the cluster's gossip state.
type memberRow struct {
	Member
	// Load1, CPU and MemAvail are the machine's figures, "-" where the
	// member did not publish them.
	Load1, CPU, MemAvail string
	// Overloaded: the 1-minute load average exceeds the member's cores.
	Overloaded bool
	// Actors are the member's running actors by kind ("" when it
	// published no load).
	Actors  string
	Sampled int64
}

func newMemberRow(m Member) memberRow {
	row := memberRow{Member: m, Load1: "-", CPU: "-", MemAvail: "-"}
	l := m.Info.GetLoad()
	if l == nil {
		return row
	}
	row.Sampled = l.GetSampledUnixNano()
	if l.Load1 != nil {
		row.Load1 = fmt.Sprintf("%.2f", l.GetLoad1())
		cores := m.Info.GetCapabilities().GetCores()
		row.Overloaded = cores > 0 && l.GetLoad1() > float64(cores)
	}
	if l.CpuBusy != nil {
		row.CPU = fmt.Sprintf("%.0f%%", 100*l.GetCpuBusy())
	}
	if l.MemoryAvailableBytes != nil {
		row.MemAvail = fmt.Sprintf("%.1f GiB", float64(l.GetMemoryAvailableBytes())/(1<<30))
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l.GetKindActors())) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, l.GetKindActors()[k]))
	}
	row.Actors = strings.Join(parts, ", ")
	if row.Actors == "" {
		row.Actors = "none"
	}
	return row
}

// clusterPage lists the environments (baseline, coverage, tasks) and the
// cluster's members (kinds, capabilities, load).
func (s *Server) clusterPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	envs, err := s.cfg.Stores.Environments().List(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var rows []envRow
	for _, e := range envs {
		row := envRow{Env: e}
		if row.Tasks, err = s.cfg.Stores.Tasks().Count(ctx, persistence.TaskFilter{Environment: e.GetName()}); err != nil {
			s.fail(w, r, err)
			return
		}
		for _, res := range e.GetBaseline().GetResults() {
			switch res.GetStatus() {
			case records.TestStatus_TEST_STATUS_PASS:
				row.BaselinePass++
			case records.TestStatus_TEST_STATUS_FAIL, records.TestStatus_TEST_STATUS_ERROR:
				row.BaselineFail++
			default:
				row.BaselineOther++
			}
		}
		cov, err := s.cfg.Stores.Coverage().Get(ctx, e.GetName())
		switch {
		case err == nil:
			row.HasCoverage = true
			row.CoverageTests, row.CoverageFiles, row.CoverageTool = len(cov.GetTests()), len(cov.GetFiles()), cov.GetTool()
			for _, f := range cov.GetFiles() {
				row.CoverageLines += len(f.GetLines())
			}
			row.CoverageStale = cov.GetImage() != e.GetImage()
		case !errors.Is(err, persistence.ErrNotFound):
			s.fail(w, r, err)
			return
		}
		rows = append(rows, row)
	}
	members := s.cfg.Members()
	slices.SortStableFunc(members, func(a, b Member) int { return strings.Compare(a.Address, b.Address) })
	var mrows []memberRow
	for _, m := range members {
		mrows = append(mrows, newMemberRow(m))
	}
	s.render(w, r, "cluster", "Environments and cluster", "cluster", struct {
		Envs    []envRow
		Members []memberRow
	}{rows, mrows})
}

type poolRow struct {
	Stats  *records.TaskStats
	Mean   float64
	Lo, Hi float64
}

type calibPoint struct {
	Predicted float64 `json:"predicted"`
	Observed  float64 `json:"observed"`
	Episodes  float64 `json:"episodes"`
}

func calibration(bins []*records.CalibrationBin) []calibPoint {
	var out []calibPoint
	for _, b := range bins {
		if b.GetEpisodes() > 0 {
			out = append(out, calibPoint{b.GetPredictedSum() / b.GetEpisodes(), b.GetObservedSum() / b.GetEpisodes(), b.GetEpisodes()})
		}
	}
	return out
}

// bandTable is an estimator's pool by band, each band split by the tasks'
// hint level: a column per level any band has.
type bandTable struct {
	Levels []int32
	Rows   []bandRow
	// Err says why the bands could not be computed.
	Err string
}

type bandRow struct {
	Band   *messages.FrontierBand
	Counts []int32 // per Levels
}

// poolBands is the pool of the estimator name by band and hint level, as
// the node's frontier actor answers frognano frontier (Snapshot): the
// estimator is opened read-only from the store with the parameters the
// node's frontier actor uses (the defaults) and without the held-out
// environments, whose tasks no run trains on.
func (s *Server) poolBands(ctx context.Context, name string) bandTable {
	est, err := frontier.Open(ctx, frontier.Config{
		Name: name, Tasks: s.cfg.Stores.Tasks(), State: s.cfg.Stores.Frontier(), Params: frontier.DefaultParams(),
		Exclude: heldOut(ctx, s.cfg.Stores.Environments()), Logger: s.cfg.Logger,
	})
	if err != nil {
		return bandTable{Err: err.Error()}
	}
	pool := est.Snapshot(nil).GetPool()
	levels := map[int32]bool{}
	for _, b := range pool {
		for level := range b.GetHintTasks() {
			levels[level] = true
		}
	}
	t := bandTable{Levels: slices.Sorted(maps.Keys(levels))}
	for _, b := range pool {
		row := bandRow{Band: b}
		for _, level := range t.Levels {
			row.Counts = append(row.Counts, b.GetHintTasks()[level])
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// heldOut says whether an environment is held out (actors/evaluate), as
// the node's frontier actor decides it: by its record's source when it is
// registered, else by its name.
func heldOut(ctx context.Context, envs persistence.EnvironmentStore) func(string) bool {
	return func(name string) bool {
		e, err := envs.Get(ctx, name)
		if err != nil {
			return evaluate.CheckTraining(name, nil) != nil
		}
		return evaluate.HeldOutEnvironment(e)
	}
}

// latestEstimator is the estimator with the newest activity among names
// (the frontier actor's "latest"; a training run's estimator is named after
// the run), or the default one when none has any.
func (s *Server) latestEstimator(ctx context.Context, names []string) (string, error) {
	best, newest := persistence.DefaultFrontier, int64(-1)
	for _, n := range names {
		st, err := s.cfg.Stores.Frontier().Get(ctx, n)
		if errors.Is(err, persistence.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", err
		}
		if st.GetActiveUnixNano() > newest {
			best, newest = n, st.GetActiveUnixNano()
		}
	}
	return best, nil
}

// estimatorOf is the estimator whose posteriors a page shows: ?frontier=,
// else the latest one.
func (s *Server) estimatorOf(r *http.Request) (string, []string, error) {
	names, err := s.cfg.Stores.Frontier().Names(r.Context())
	if err != nil {
		return "", nil, err
	}
	if name := r.URL.Query().Get("frontier"); name != "" {
		return name, names, nil
	}
	name, err := s.latestEstimator(r.Context(), names)
	return name, names, err
}

// frontierPage shows one estimator (?name=, the latest one otherwise):
// its pool with posteriors, calibration and synthesis requests.
func (s *Server) frontierPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	store := s.cfg.Stores.Frontier()
	names, err := store.Names(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	name := r.URL.Query().Get("name")
	if name == "" {
		if name, err = s.latestEstimator(ctx, names); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	state, err := store.Get(ctx, name)
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		s.fail(w, r, err)
		return
	}
	stats, err := store.Stats(ctx, name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var pool []poolRow
	for _, st := range stats {
		lo, hi := betaInterval(st)
		pool = append(pool, poolRow{st, betaMean(st), lo, hi})
	}
	slices.SortStableFunc(pool, func(a, b poolRow) int {
		switch {
		case a.Mean < b.Mean:
			return -1
		case a.Mean > b.Mean:
			return 1
		}
		return strings.Compare(a.Stats.GetTaskId(), b.Stats.GetTaskId())
	})
	total := len(pool)
	if len(pool) > maxListed {
		pool = pool[:maxListed]
	}
	calib, _ := json.Marshal(map[string]any{
		"posterior": calibration(state.GetCalibration()),
		"model":     calibration(state.GetModelCalibration()),
	})
	synth := slices.Clone(state.GetSynthesis())
	slices.Reverse(synth) // newest first
	var counters []metricRow
	for k, v := range state.GetCounters() {
		counters = append(counters, metricRow{k, float64(v)})
	}
	slices.SortFunc(counters, func(a, b metricRow) int { return strings.Compare(a.Name, b.Name) })
	effective := frontier.EffectiveFraction(state)
	s.render(w, r, "frontier", "Frontier", "frontier", struct {
		Name      string
		Names     []string
		State     *records.FrontierState
		Pool      []poolRow
		Total     int
		Calib     string
		Synthesis []*records.SynthesisRecord
		Counters  []metricRow
		Effective float64
		Bands     bandTable
	}{name, names, state, pool, total, string(calib), synth, counters, effective, s.poolBands(ctx, name)})
}
