package ui

import (
	"context"
	"errors"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"

	"github.com/frognano/frognano/actors/evaluate"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

type taskRow struct {
	ID          string
	Environment string
	Operators   []string
	Hint        int32
	Mode        string
	FailToPass  int
	Lines       int32
	Attempts    int64
	Successes   int64
	Mean        float64 // posterior mean solve rate (default estimator)
	HasStats    bool
}

func operatorsOf(t *records.Task) []string {
	ops := t.GetDifficulty().GetOperators()
	if len(ops) == 0 && t.GetProvenance().GetOperator() != "" {
		ops = []string{t.GetProvenance().GetOperator()}
	}
	return ops
}

func taskRowOf(t *records.Task, st *records.TaskStats) taskRow {
	d := t.GetDifficulty()
	row := taskRow{ID: t.GetId(), Environment: t.GetEnvironment(), Operators: operatorsOf(t), Hint: d.GetHintLevel(),
		Mode: d.GetMode(), FailToPass: len(t.GetFailToPass()), Lines: d.GetLinesTouched()}
	if st != nil {
		row.HasStats = true
		row.Attempts, row.Successes = st.GetAttempts(), st.GetSuccesses()
		row.Mean = betaMean(st)
	}
	return row
}

func betaMean(st *records.TaskStats) float64 {
	a, b := st.GetAlpha(), st.GetBeta()
	if a+b <= 0 {
		return 0
	}
	return a / (a + b)
}

// betaInterval is a 95% interval of the Beta(alpha, beta) posterior by its
// normal approximation (mean ± 1.96 sd, clipped to [0, 1]).
func betaInterval(st *records.TaskStats) (lo, hi float64) {
	a, b := st.GetAlpha(), st.GetBeta()
	if a+b <= 0 {
		return 0, 1
	}
	m := a / (a + b)
	sd := math.Sqrt(a * b / ((a + b) * (a + b) * (a + b + 1)))
	return max(0, m-1.96*sd), min(1, m+1.96*sd)
}

// tasksPage lists tasks, filtered by ?env=, ?op= (an operator) and ?hint=.
func (s *Server) tasksPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	env, op, hintArg := q.Get("env"), q.Get("op"), q.Get("hint")
	hint := int64(-1)
	if hintArg != "" {
		h, err := strconv.ParseInt(hintArg, 10, 32)
		if err != nil {
			s.renderStatus(w, r, http.StatusBadRequest, "hint: "+err.Error())
			return
		}
		hint = h
	}
	tasks, err := s.cfg.Stores.Tasks().List(ctx, persistence.TaskFilter{Environment: env})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	estimator, estimators, err := s.estimatorOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	stats, err := s.cfg.Stores.Frontier().Stats(ctx, estimator)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	byTask := map[string]*records.TaskStats{}
	for _, st := range stats {
		byTask[st.GetTaskId()] = st
	}
	envs, err := s.cfg.Stores.Environments().List(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	envNames := map[string]bool{}
	for _, e := range envs {
		envNames[e.GetName()] = true
	}
	ops, hints := map[string]bool{}, map[int32]bool{}
	var rows []taskRow
	total := 0
	for _, t := range tasks {
		envNames[t.GetEnvironment()] = true
		tOps := operatorsOf(t)
		for _, o := range tOps {
			ops[o] = true
		}
		hints[t.GetDifficulty().GetHintLevel()] = true
		if op != "" && !slices.Contains(tOps, op) {
			continue
		}
		if hint >= 0 && int64(t.GetDifficulty().GetHintLevel()) != hint {
			continue
		}
		total++
		if len(rows) < maxListed {
			rows = append(rows, taskRowOf(t, byTask[t.GetId()]))
		}
	}
	s.render(w, r, "tasks", "Tasks", "tasks", struct {
		Env, Op, Hint string
		Envs, Ops     []string
		Hints         []int32
		Rows          []taskRow
		Total         int
		Estimator     string
		Estimators    []string
	}{env, op, hintArg, slices.Sorted(maps.Keys(envNames)), slices.Sorted(maps.Keys(ops)), slices.Sorted(maps.Keys(hints)), rows, total,
		estimator, estimators})
}

func (s *Server) taskPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.URL.Query().Get("id")
	t, err := s.cfg.Stores.Tasks().Get(ctx, id)
	heldOut := false
	if errors.Is(err, persistence.ErrNotFound) {
		// Held-out episodes name tasks of the committed held-out set,
		// which the store does not hold.
		if h := s.heldOutTask(ctx, id); h != nil {
			t, err, heldOut = h, nil, true
		}
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	estimator, _, err := s.estimatorOf(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var st *records.TaskStats
	stats, err := s.cfg.Stores.Frontier().Stats(ctx, estimator)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, x := range stats {
		if x.GetTaskId() == t.GetId() {
			st = x
		}
	}
	trajs, err := s.cfg.Stores.Trajectories().ListByTask(ctx, t.GetId())
	if err != nil && !errors.Is(err, persistence.ErrNotFound) {
		s.fail(w, r, err)
		return
	}
	var rows []trajRow
	for i, tr := range trajs {
		if i >= maxListed {
			break
		}
		rows = append(rows, trajRowOf(tr))
	}
	var lo, hi float64
	if st != nil {
		lo, hi = betaInterval(st)
	}
	s.render(w, r, "task", "Task "+t.GetId(), "tasks", struct {
		Task      *records.Task
		Row       taskRow
		Stats     *records.TaskStats
		Estimator string
		HeldOut   bool
		Lo, Hi    float64
		Episodes  []trajRow
		Total     int
	}{t, taskRowOf(t, st), st, estimator, heldOut, lo, hi, rows, len(trajs)})
}

// heldOutTask is the task id of the committed held-out set
// (actors/evaluate), in its registered environment; nil when id is not
// one of the set's.
func (s *Server) heldOutTask(ctx context.Context, id string) *records.Task {
	ins, err := evaluate.HeldOutInstances()
	if err != nil {
		s.cfg.Logger.Warn("ui: reading the held-out set failed", "err", err)
		return nil
	}
	for _, in := range ins {
		if in.InstanceID != id {
			continue
		}
		e, err := s.cfg.Stores.Environments().Get(ctx, in.Environment)
		if err != nil {
			e = &records.Environment{Name: in.Environment, Language: in.Language}
		}
		return in.Task(e)
	}
	return nil
}
