package ui

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// Point is one curve point as the dashboard's charts, its event stream and
// the jsonl export carry it. Metrics that are not finite (a NaN loss) are
// left out, since JSON has no number for them.
type Point struct {
	Index         int                `json:"index"`
	Phase         string             `json:"phase"`
	Step          int64              `json:"step"`
	PolicyVersion int64              `json:"policy_version"`
	WallSeconds   float64            `json:"wall_seconds"`
	CPUSeconds    float64            `json:"cpu_seconds"`
	Metrics       map[string]float64 `json:"metrics,omitempty"`
	HeldOut       []HeldOut          `json:"held_out,omitempty"`
}

// HeldOut is the held-out pass@1 at one hint level (-1: all levels) with
// its 95% bootstrap interval over tasks.
type HeldOut struct {
	HintLevel int32   `json:"hint_level"`
	Mode      string  `json:"mode,omitempty"`
	Tasks     int32   `json:"tasks"`
	Episodes  int32   `json:"episodes"`
	Pass1     float64 `json:"pass1"`
	Low       float64 `json:"pass1_low"`
	High      float64 `json:"pass1_high"`
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// PointOf converts the i-th point of a run's curve.
func PointOf(i int, p *records.RunPoint) Point {
	out := Point{Index: i, Phase: p.GetPhase(), Step: p.GetStep(), PolicyVersion: p.GetPolicyVersion(),
		WallSeconds: p.GetWallSeconds(), CPUSeconds: p.GetCpuSeconds()}
	if len(p.GetMetrics()) > 0 {
		out.Metrics = map[string]float64{}
		for k, v := range p.GetMetrics() {
			if finite(v) {
				out.Metrics[k] = v
			}
		}
	}
	for _, h := range p.GetHeldOut() {
		out.HeldOut = append(out.HeldOut, HeldOut{HintLevel: h.GetHintLevel(), Mode: h.GetMode(), Tasks: h.GetTasks(),
			Episodes: h.GetEpisodes(), Pass1: h.GetPass1(), Low: h.GetPass1Low(), High: h.GetPass1High()})
	}
	return out
}

// Points converts a run's whole curve.
func Points(run *records.Run) []Point {
	out := make([]Point, len(run.GetCurve()))
	for i, p := range run.GetCurve() {
		out[i] = PointOf(i, p)
	}
	return out
}

// WriteJSONL writes a run's curve, one JSON object per point, each with
// the run's id.
func WriteJSONL(w io.Writer, run *records.Run) error {
	enc := json.NewEncoder(w)
	for _, p := range Points(run) {
		if err := enc.Encode(struct {
			Run string `json:"run"`
			Point
		}{run.GetId(), p}); err != nil {
			return err
		}
	}
	return nil
}

// heldOutName names a hint level's columns in the csv export.
func heldOutName(level int32) string {
	if level < 0 {
		return "pass1_all"
	}
	return fmt.Sprintf("pass1_hint_%d", level)
}

// WriteCSV writes a run's curve as one row per point: phase, step, policy
// version, wall and CPU seconds, every metric any point has (sorted by
// name) and held-out pass@1 with its interval per hint level. A cell a
// point has no value for is empty.
func WriteCSV(w io.Writer, run *records.Run) error {
	metricKeys := map[string]bool{}
	levels := map[int32]bool{}
	for _, p := range run.GetCurve() {
		for k := range p.GetMetrics() {
			metricKeys[k] = true
		}
		for _, h := range p.GetHeldOut() {
			levels[h.GetHintLevel()] = true
		}
	}
	keys := slices.Sorted(maps.Keys(metricKeys))
	lv := slices.Sorted(maps.Keys(levels))
	header := []string{"run", "index", "phase", "step", "policy_version", "wall_seconds", "cpu_seconds"}
	header = append(header, keys...)
	for _, l := range lv {
		n := heldOutName(l)
		header = append(header, n, n+"_low", n+"_high", n+"_tasks")
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	num := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	for i, p := range run.GetCurve() {
		row := []string{run.GetId(), strconv.Itoa(i), p.GetPhase(), strconv.FormatInt(p.GetStep(), 10),
			strconv.FormatInt(p.GetPolicyVersion(), 10), num(p.GetWallSeconds()), num(p.GetCpuSeconds())}
		for _, k := range keys {
			if v, ok := p.GetMetrics()[k]; ok {
				row = append(row, num(v))
			} else {
				row = append(row, "")
			}
		}
		byLevel := map[int32]*records.HeldOutScore{}
		for _, h := range p.GetHeldOut() {
			byLevel[h.GetHintLevel()] = h
		}
		for _, l := range lv {
			if h, ok := byLevel[l]; ok {
				row = append(row, num(h.GetPass1()), num(h.GetPass1Low()), num(h.GetPass1High()), strconv.Itoa(int(h.GetTasks())))
			} else {
				row = append(row, "", "", "", "")
			}
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
