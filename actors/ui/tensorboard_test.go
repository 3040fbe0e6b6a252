package ui

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// TestTensorBoardMatchesTensorBoardsWriter encodes the events of
// testdata/tensorboard.golden, which TensorBoard's own protos and record
// writer produced (testdata/gen/tensorboard_golden.py), and wants the same
// bytes.
func TestTensorBoardMatchesTensorBoardsWriter(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "tensorboard.golden"))
	if err != nil {
		t.Fatal(err)
	}
	got := appendRecord(nil, eventBytes(1700000000.5, 0, "brain.Event:2", nil))
	got = appendRecord(got, eventBytes(1700000100.25, 3, "", []scalar{{"train/loss", 0.125}, {"held_out/pass1_hint_3", 0.3}}))
	if !bytes.Equal(got, golden) {
		t.Fatalf("event records differ from TensorBoard's:\n got %x\nwant %x", got, golden)
	}
}

// readEvents parses an event file, checking each record's CRCs, into the
// step and scalars of each event.
func readEvents(t *testing.T, b []byte) (steps []int64, values []map[string]float32, version string) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("truncated record header")
		}
		n := binary.LittleEndian.Uint64(b)
		if maskedCRC(b[:8]) != binary.LittleEndian.Uint32(b[8:]) {
			t.Fatal("length CRC mismatch")
		}
		data := b[12 : 12+n]
		if maskedCRC(data) != binary.LittleEndian.Uint32(b[12+n:]) {
			t.Fatal("data CRC mismatch")
		}
		b = b[16+n:]
		var step int64
		vals := map[string]float32{}
		for len(data) > 0 {
			num, typ, l := protowire.ConsumeTag(data)
			data = data[l:]
			switch {
			case num == 2 && typ == protowire.VarintType:
				v, l := protowire.ConsumeVarint(data)
				step, data = int64(v), data[l:]
			case num == 3 && typ == protowire.BytesType:
				v, l := protowire.ConsumeString(data)
				version, data = v, data[l:]
			case num == 5 && typ == protowire.BytesType:
				summary, l := protowire.ConsumeBytes(data)
				data = data[l:]
				for len(summary) > 0 {
					_, _, l := protowire.ConsumeTag(summary)
					v, l2 := protowire.ConsumeBytes(summary[l:])
					summary = summary[l+l2:]
					var tag string
					var val float32
					for len(v) > 0 {
						num, _, l := protowire.ConsumeTag(v)
						v = v[l:]
						if num == 1 {
							s, l := protowire.ConsumeString(v)
							tag, v = s, v[l:]
						} else {
							f, l := protowire.ConsumeFixed32(v)
							val, v = math.Float32frombits(f), v[l:]
						}
					}
					vals[tag] = val
				}
			default:
				l := protowire.ConsumeFieldValue(num, typ, data)
				if l < 0 {
					t.Fatalf("bad field %d", num)
				}
				data = data[l:]
			}
		}
		steps = append(steps, step)
		values = append(values, vals)
	}
	return steps, values, version
}

// TestWriteTensorBoard writes a run's curve and reads every point back.
func TestWriteTensorBoard(t *testing.T) {
	run := &records.Run{Id: "tb/run", StartedUnixNano: 1700000000e9, Curve: []*records.RunPoint{
		{Step: 0, Phase: "start", WallSeconds: 5, HeldOut: []*records.HeldOutScore{{HintLevel: 3, Pass1: 0.25, Pass1Low: 0.125, Pass1High: 0.5}}},
		{Step: 1, Phase: "step", PolicyVersion: 1, WallSeconds: 60, Metrics: map[string]float64{"loss": 0.5, "solve_rate": 0.75, "bad": math.NaN()}},
	}}
	dir := t.TempDir()
	path, err := WriteTensorBoard(dir, run)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "events.out.tfevents.1700000000.frognano-tb_run" {
		t.Errorf("file %s", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	steps, values, version := readEvents(t, b)
	if version != "brain.Event:2" || len(steps) != 3 || steps[1] != 0 || steps[2] != 1 {
		t.Fatalf("version %q, steps %v", version, steps)
	}
	if v := values[1]; v["held_out/pass1_hint_3"] != 0.25 || v["held_out_low/pass1_hint_3"] != 0.125 || v["held_out_high/pass1_hint_3"] != 0.5 {
		t.Errorf("start point %v", v)
	}
	if v := values[2]; v["train/loss"] != 0.5 || v["train/solve_rate"] != 0.75 || v["run/policy_version"] != 1 || v["run/wall_seconds"] != 60 {
		t.Errorf("step point %v", v)
	}
	if _, ok := values[2]["train/bad"]; ok {
		t.Error("a NaN metric was written")
	}
	// Exporting again replaces the file.
	if _, err := WriteTensorBoard(dir, run); err != nil {
		t.Fatal(err)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Errorf("files after a second export: %v", names)
	}
}

// tagCounts counts the (step, tag) pairs of an event file's scalars.
func tagCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	steps, values, version := readEvents(t, b)
	if version != "brain.Event:2" {
		t.Errorf("%s: file version %q", path, version)
	}
	out := map[string]int{}
	for i, v := range values {
		for tag := range v {
			out[fmt.Sprintf("%d %s", steps[i], tag)]++
		}
	}
	return out
}

// TestTensorBoardLogAppendsAndResumes appends a run's points to its event
// file as a training run records them: each new point's event, a point's
// held-out scores when they fill in, nothing twice; a second log on the
// same file (a resumed run) appends only what is missing, past a torn last
// record; in the end the file holds the scalars a whole export writes.
func TestTensorBoardLogAppendsAndResumes(t *testing.T) {
	dir := t.TempDir()
	run := &records.Run{Id: "tb/live", StartedUnixNano: 1700000000e9, Curve: []*records.RunPoint{
		{Step: 0, Phase: "start", WallSeconds: 5, Metrics: map[string]float64{"rollouts": 0},
			HeldOut: []*records.HeldOutScore{{HintLevel: -1, Pass1: 0.25, Pass1Low: 0.125, Pass1High: 0.5}}},
	}}
	log, err := OpenTensorBoardLog(dir, run)
	if err != nil {
		t.Fatal(err)
	}
	appendWant := func(l *TensorBoardLog, want int) {
		t.Helper()
		n, err := l.Append(run)
		if err != nil || n != want {
			t.Fatalf("append: %d events, %v; want %d", n, err, want)
		}
	}
	appendWant(log, 1)
	appendWant(log, 0) // the record written again unchanged
	// A warm-start point at the same step, then a step.
	run.Curve = append(run.Curve,
		&records.RunPoint{Step: 0, Phase: "warm_start", PolicyVersion: 2, WallSeconds: 50, Metrics: map[string]float64{"rollouts": 0},
			HeldOut: []*records.HeldOutScore{{HintLevel: -1, Pass1: 0.5, Pass1Low: 0.25, Pass1High: 0.75}}},
		&records.RunPoint{Step: 1, Phase: "step", PolicyVersion: 3, WallSeconds: 80,
			Metrics: map[string]float64{"rollouts": 8, "clip_fraction": 0.125, "pool_frontier": 4, "pool_hint_3_frontier": 3}})
	appendWant(log, 2)
	// The step's held-out scores fill in: one event with only those.
	step := run.Curve[2]
	step.WallSeconds = 95
	step.HeldOut = []*records.HeldOutScore{{HintLevel: 3, Pass1: 0.375, Pass1Low: 0.25, Pass1High: 0.5}}
	appendWant(log, 1)
	b, err := os.ReadFile(log.Path())
	if err != nil {
		t.Fatal(err)
	}
	steps, values, _ := readEvents(t, b)
	if len(steps) != 5 || steps[3] != 1 || steps[4] != 1 || len(values[4]) != 3 || values[4]["held_out/pass1_hint_3"] != 0.375 ||
		values[3]["train/clip_fraction"] != 0.125 || values[3]["train/pool_hint_3_frontier"] != 3 || values[2]["held_out/pass1_all"] != 0.5 {
		t.Fatalf("events: steps %v, values %v", steps, values)
	}

	// The process dies in the middle of a record; the run resumes, adds
	// its last step and its end point (at the same step), and a new log
	// appends them after cutting the torn record off.
	f, err := os.OpenFile(log.Path(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := appendRecord(nil, eventBytes(1700000200, 9, "", []scalar{{"train/loss", 1}}))
	if _, err := f.Write(torn[:len(torn)-7]); err != nil {
		t.Fatal(err)
	}
	f.Close()
	resumed, err := OpenTensorBoardLog(dir, run)
	if err != nil {
		t.Fatal(err)
	}
	appendWant(resumed, 0)
	run.Curve = append(run.Curve,
		&records.RunPoint{Step: 2, Phase: "step", PolicyVersion: 4, WallSeconds: 130, Metrics: map[string]float64{"rollouts": 16, "clip_fraction": 0.25}},
		&records.RunPoint{Step: 2, Phase: "end", PolicyVersion: 4, WallSeconds: 160, Metrics: map[string]float64{"rollouts": 16},
			HeldOut: []*records.HeldOutScore{{HintLevel: -1, Pass1: 0.625, Pass1Low: 0.5, Pass1High: 0.75}}})
	appendWant(resumed, 2)
	appendWant(resumed, 0)

	got := tagCounts(t, resumed.Path())
	whole := filepath.Join(t.TempDir(), "whole")
	path, err := WriteTensorBoard(whole, run)
	if err != nil {
		t.Fatal(err)
	}
	want := tagCounts(t, path)
	if len(got) != len(want) {
		t.Errorf("appended file has %d (step, tag) pairs, the export %d", len(got), len(want))
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d in the appended file, %d in the export", k, got[k], n)
		}
	}
	if got["2 train/rollouts"] != 2 || got["0 held_out/pass1_all"] != 2 {
		t.Errorf("points sharing a step: %v", got)
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Errorf("files in the log directory: %v", names)
	}
}
