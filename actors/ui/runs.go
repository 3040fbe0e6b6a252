package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/trainer"
	records "github.com/frognano/frognano/persistence/records/v1"
)

type runRow struct {
	ID       string
	Status   string
	Step     int64
	Steps    int
	Points   int
	Started  time.Time
	Updated  time.Time
	HeldOut  string // newest held-out pass@1 over all levels
	Training bool   // has training settings
}

func rowOf(run *records.Run) runRow {
	r := runRow{ID: run.GetId(), Status: run.GetStatus(), Step: run.GetStep(), Points: len(run.GetCurve()),
		Started: unixNano(run.GetStartedUnixNano()), Updated: unixNano(run.GetUpdatedUnixNano())}
	if s, err := trainer.DecodeSettings(run); err == nil {
		r.Steps, r.Training = s.Steps, true
	}
	for _, p := range slices.Backward(run.GetCurve()) {
		if len(p.GetHeldOut()) > 0 {
			r.HeldOut = trainer.FormatScores(p.GetHeldOut())
			break
		}
	}
	return r
}

func unixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (s *Server) runsPage(w http.ResponseWriter, r *http.Request) {
	runs, err := s.cfg.Stores.Runs().List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rows := make([]runRow, 0, len(runs))
	for _, run := range runs {
		rows = append(rows, rowOf(run))
	}
	slices.SortStableFunc(rows, func(a, b runRow) int { return b.Started.Compare(a.Started) })
	s.render(w, r, "runs", "Runs", "runs", rows)
}

type metricRow struct {
	Name  string
	Value float64
}

type timeRow struct {
	Name    string
	Seconds float64
	Share   float64
}

type pointRow struct {
	Point
	SolveRate  string
	HeldOut    string
	EvalLink   string // trajectories of its held-out evaluation
	TrainLink  string // training episodes played at its policy version
	EvalPoints bool
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request) {
	run, err := s.cfg.Stores.Runs().Get(r.Context(), r.URL.Query().Get("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var metrics []metricRow
	for _, k := range slices.Sorted(maps.Keys(run.GetMetrics())) {
		metrics = append(metrics, metricRow{k, run.GetMetrics()[k]})
	}
	// Where the run's time went: the trainer's cumulative seconds_* totals
	// (asking the frontier, rollouts, reporting outcomes, learning, weight
	// swaps, the warm start's parts).
	var times []timeRow
	var spent float64
	for _, k := range slices.Sorted(maps.Keys(run.GetMetrics())) {
		if name, ok := strings.CutPrefix(k, "seconds_"); ok && run.GetMetrics()[k] > 0 {
			times = append(times, timeRow{Name: strings.ReplaceAll(name, "_", " "), Seconds: run.GetMetrics()[k]})
			spent += run.GetMetrics()[k]
		}
	}
	// Held-out evaluation is outside the training budget (and outside the
	// seconds_* totals) but is time the run spent.
	if v := run.GetMetrics()[trainer.MetricEvalSeconds]; v > 0 {
		times = append(times, timeRow{Name: "held-out evaluation", Seconds: v})
		spent += v
	}
	for i := range times {
		times[i].Share = times[i].Seconds / spent
	}
	episodeTimes := episodeTimeRows(run.GetMetrics())
	var rows []pointRow
	for i, p := range run.GetCurve() {
		row := pointRow{Point: PointOf(i, p), SolveRate: "-", HeldOut: "-"}
		if v, ok := p.GetMetrics()["solve_rate"]; ok {
			row.SolveRate = strconv.FormatFloat(v, 'f', 3, 64)
		}
		if len(p.GetHeldOut()) > 0 {
			row.HeldOut = trainer.FormatScores(p.GetHeldOut())
			row.EvalLink = fmt.Sprintf("%strajectories?run=%s&eval=%s-%d", Prefix, queryEscape(run.GetId()), queryEscape(p.GetPhase()), p.GetStep())
		}
		if p.GetPhase() == trainer.PhaseStep {
			row.TrainLink = fmt.Sprintf("%strajectories?run=%s&version=%d", Prefix, queryEscape(run.GetId()), trainingVersion(run, i))
			if s := int64(p.GetMetrics()[trainer.PointMaxStaleness]); s > 0 {
				row.TrainLink += fmt.Sprintf("&min_version=%d", max(0, trainingVersion(run, i)-s))
			}
		}
		rows = append(rows, row)
	}
	slices.Reverse(rows) // newest first
	s.render(w, r, "run", "Run "+run.GetId(), "runs", struct {
		Run     runRow
		Config  string
		Metrics []metricRow
		Times   []timeRow
		Episode []timeRow
		Points  []pointRow
	}{rowOf(run), run.GetConfigYaml(), metrics, times, episodeTimes, rows})
}

// episodeTimeRows splits the training episodes' own time (summed over
// episodes, which run side by side): generation, and the sandbox with its
// grading shown apart; shares of the episodes' total. None when the run
// recorded no episode time (runs from before these totals existed).
func episodeTimeRows(m map[string]float64) []timeRow {
	gen, sandbox, grading := m[trainer.MetricEpisodeGeneration], m[trainer.MetricEpisodeSandbox], m[trainer.MetricEpisodeGrading]
	total := gen + sandbox
	if total <= 0 {
		return nil
	}
	rows := []timeRow{
		{Name: "generation (waiting for the policy)", Seconds: gen},
		{Name: "sandbox: setup and tools", Seconds: max(0, sandbox-grading)},
		{Name: "sandbox: grading", Seconds: grading},
	}
	for i := range rows {
		rows[i].Share = rows[i].Seconds / total
	}
	return rows
}

// trainingVersion is the policy version a step's episodes were played at:
// the version before the step's own update, which the previous point
// records. In an asynchronous run a step trains on groups played up to its
// max_staleness_seen versions earlier, so its link asks for that range
// (min_version): the previous point's version alone can hold none of the
// step's episodes.
func trainingVersion(run *records.Run, i int) int64 {
	if i > 0 {
		return run.GetCurve()[i-1].GetPolicyVersion()
	}
	return 0
}

func (s *Server) runData(w http.ResponseWriter, r *http.Request) {
	run, err := s.cfg.Stores.Runs().Get(r.Context(), r.URL.Query().Get("id"))
	if err != nil {
		httpError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(struct {
		ID     string  `json:"id"`
		Status string  `json:"status"`
		Step   int64   `json:"step"`
		Points []Point `json:"points"`
	}{run.GetId(), run.GetStatus(), run.GetStep(), Points(run)})
}

// runEvents streams a run's new and changed curve points as server-sent
// events: "point" with a Point (its index says which one: a step's point
// is rewritten when its held-out evaluation fills in) and "status" when
// the run's status or step changes. The client says how many points it
// has with ?have=N; the newest of those is sent again if it changed since.
func (s *Server) runEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	id := q.Get("id")
	ctx := r.Context()
	run, err := s.cfg.Stores.Runs().Get(ctx, id)
	if err != nil {
		httpError(w, err)
		return
	}
	have, _ := strconv.Atoi(q.Get("have"))
	if have < 0 || have > len(run.GetCurve()) {
		have = 0
	}
	// ResponseController finds the Flusher under the node's wrappers of w.
	flusher := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	if err := flusher.Flush(); err != nil {
		s.cfg.Logger.Warn("ui: run stream: the response cannot be flushed", "err", err)
		return
	}

	// sent holds the encoding of every point the client has, so a point
	// rewritten in place is sent again.
	sent := make([][]byte, 0, len(run.GetCurve()))
	for _, p := range run.GetCurve()[:have] {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(p)
		sent = append(sent, b)
	}
	// The first status event always goes out: it tells the client the
	// stream is up and where the run stands.
	status, step := "", int64(-1)
	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()
	beat := time.NewTicker(s.cfg.Heartbeat)
	defer beat.Stop()
	send := func(event string, v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		return true
	}
	for {
		changed := false
		for i, p := range run.GetCurve() {
			b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(p)
			if i < len(sent) && bytes.Equal(sent[i], b) {
				continue
			}
			if !send("point", PointOf(i, p)) {
				return
			}
			if i < len(sent) {
				sent[i] = b
			} else {
				sent = append(sent, b)
			}
			changed = true
		}
		if run.GetStatus() != status || run.GetStep() != step {
			status, step = run.GetStatus(), run.GetStep()
			if !send("status", map[string]any{"status": status, "step": step, "points": len(sent)}) {
				return
			}
			changed = true
		}
		if changed {
			flusher.Flush()
		}
	wait:
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
			goto wait
		case <-poll.C:
		}
		next, err := s.cfg.Stores.Runs().Get(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Warn("ui: run stream: reading the run failed", "run", id, "err", err)
			}
			return
		}
		run = next
	}
}

func (s *Server) runExport(w http.ResponseWriter, r *http.Request) {
	run, err := s.cfg.Stores.Runs().Get(r.Context(), r.URL.Query().Get("id"))
	if err != nil {
		httpError(w, err)
		return
	}
	name := safeFileName(run.GetId())
	switch f := r.URL.Query().Get("format"); f {
	case "csv", "":
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name+".csv"))
		err = WriteCSV(w, run)
	case "jsonl":
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name+".jsonl"))
		err = WriteJSONL(w, run)
	default:
		http.Error(w, fmt.Sprintf("format %q: want csv or jsonl", f), http.StatusBadRequest)
		return
	}
	if err != nil {
		s.cfg.Logger.Warn("ui: export failed", "run", run.GetId(), "err", err)
	}
}

func safeFileName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}
