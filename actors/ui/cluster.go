package ui

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/frognano/frognano/actors/frontier"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
)

type envRow struct {
	Env                                         *messages.Environment
	Tasks                                       int
	BaselinePass, BaselineFail, BaselineOther   int
	CoverageTests, CoverageFiles, CoverageLines int
	CoverageTool                                string
	CoverageStale                               bool
	HasCoverage                                 bool
}

// clusterPage lists the environments (baseline, coverage, tasks) and the
// cluster's members (kinds, capabilities).
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
			case messages.TestStatus_TEST_STATUS_PASS:
				row.BaselinePass++
			case messages.TestStatus_TEST_STATUS_FAIL, messages.TestStatus_TEST_STATUS_ERROR:
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
	s.render(w, r, "cluster", "Environments and cluster", "cluster", struct {
		Envs    []envRow
		Members []Member
	}{rows, members})
}

type poolRow struct {
	Stats  *messages.TaskStats
	Mean   float64
	Lo, Hi float64
}

type calibPoint struct {
	Predicted float64 `json:"predicted"`
	Observed  float64 `json:"observed"`
	Episodes  float64 `json:"episodes"`
}

func calibration(bins []*messages.CalibrationBin) []calibPoint {
	var out []calibPoint
	for _, b := range bins {
		if b.GetEpisodes() > 0 {
			out = append(out, calibPoint{b.GetPredictedSum() / b.GetEpisodes(), b.GetObservedSum() / b.GetEpisodes(), b.GetEpisodes()})
		}
	}
	return out
}

// frontierPage shows one estimator (?name=, the default one otherwise):
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
		name = persistence.DefaultFrontier
		if len(names) > 0 && !slices.Contains(names, name) {
			name = names[0]
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
		State     *messages.FrontierState
		Pool      []poolRow
		Total     int
		Calib     string
		Synthesis []*messages.SynthesisRecord
		Counters  []metricRow
		Effective float64
	}{name, names, state, pool, total, string(calib), synth, counters, effective})
}
