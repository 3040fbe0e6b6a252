package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/frontier"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/trainer"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// TestRunsExport stores a run in a data directory's store and exports its
// curve through the embedded node, as csv and as jsonl.
func TestRunsExport(t *testing.T) {
	data := t.TempDir()
	db, err := persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	run := &records.Run{Id: "export-me", Status: "done", Step: 2, Curve: []*records.RunPoint{
		{Step: 0, Phase: "start", WallSeconds: 10, CpuSeconds: 12,
			HeldOut: []*records.HeldOutScore{{HintLevel: -1, Tasks: 4, Pass1: 0.25, Pass1Low: 0.1, Pass1High: 0.5}}},
		{Step: 1, Phase: "step", PolicyVersion: 1, WallSeconds: 20, CpuSeconds: 30, Metrics: map[string]float64{"solve_rate": 0.5, "loss": 0.125}},
		{Step: 2, Phase: "step", PolicyVersion: 2, WallSeconds: 30, CpuSeconds: 48, Metrics: map[string]float64{"solve_rate": 0.75}},
	}}
	if err := db.Runs().Put(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCLI(t, "", append(args, "--data-dir", data, "--log-level", "warn")...)
		if err != nil {
			t.Fatalf("frognano %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}

	rows, err := csv.NewReader(strings.NewReader(cli("runs", "export", "export-me", "--format", "csv"))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"run", "index", "phase", "step", "policy_version", "wall_seconds", "cpu_seconds", "loss", "solve_rate", "pass1_all", "pass1_all_low", "pass1_all_high", "pass1_all_tasks"},
		{"export-me", "0", "start", "0", "0", "10", "12", "", "", "0.25", "0.1", "0.5", "4"},
		{"export-me", "1", "step", "1", "1", "20", "30", "0.125", "0.5", "", "", "", ""},
		{"export-me", "2", "step", "2", "2", "30", "48", "", "0.75", "", "", "", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("csv rows %q", rows)
	}
	for i := range want {
		if strings.Join(rows[i], ",") != strings.Join(want[i], ",") {
			t.Errorf("csv row %d: %q, want %q", i, rows[i], want[i])
		}
	}

	lines := strings.Split(strings.TrimSpace(cli("runs", "export", "export-me", "--format", "jsonl")), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d jsonl lines", len(lines))
	}
	var p struct {
		Run     string             `json:"run"`
		Step    int64              `json:"step"`
		Metrics map[string]float64 `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &p); err != nil || p.Run != "export-me" || p.Step != 1 || p.Metrics["loss"] != 0.125 {
		t.Errorf("jsonl line %s: %+v %v", lines[1], p, err)
	}
	tb := filepath.Join(t.TempDir(), "tb")
	out := cli("runs", "export", "export-me", "--format", "tensorboard", "--dir", tb)
	files, _ := filepath.Glob(filepath.Join(tb, "events.out.tfevents.*"))
	if len(files) != 1 || !strings.Contains(out, "3 points written to "+files[0]) {
		t.Errorf("tensorboard export: %q, files %v", out, files)
	} else if st, err := os.Stat(files[0]); err != nil || st.Size() < 100 {
		t.Errorf("event file %s: %v", files[0], err)
	}
	if _, _, err := runCLI(t, "", "runs", "export", "export-me", "--format", "xml", "--data-dir", data); err == nil {
		t.Error("--format xml was accepted")
	}
}

// TestRunAppendsTensorBoardEvents resumes a stored run with --tensorboard
// (no environment: nothing to train, so the run only opens, records its
// status and ends): the event file gets the record's points at once;
// resumed again, it gets nothing twice; after a point is added to the
// record, one more event. runs show prints the steps' pool and share of
// tokens clipped or masked.
func TestRunAppendsTensorBoardEvents(t *testing.T) {
	data := t.TempDir()
	tb := filepath.Join(t.TempDir(), "tb")
	s := trainer.Settings{Steps: 2, TasksPerStep: 1, Group: 2, Mode: "patch", LR: 1e-5}
	point := func(step int64, clip float64) *records.RunPoint {
		m := map[string]float64{"solve_rate": 0.5}
		trainer.LearnerPointMetrics(m, &messages.LearnerStep{Step: step, PolicyVersion: step, Loss: 0.25, GradNorm: 1, PolicyTokens: 100, ClipFraction: clip})
		trainer.PoolPointMetrics(m, &messages.FrontierStateReply{Pool: []*messages.FrontierBand{
			{Name: frontier.BandTooHard, Tasks: 3, HintTasks: map[int32]int32{3: 2, 4: 1}},
			{Name: frontier.BandFrontier, Tasks: 2, HintTasks: map[int32]int32{3: 1, 4: 1}},
			{Name: frontier.BandTooEasy}, {Name: frontier.BandRetiredHopeless, Tasks: 1, HintTasks: map[int32]int32{3: 1}}, {Name: frontier.BandRetiredMastered},
		}})
		return &records.RunPoint{Step: step, Phase: trainer.PhaseStep, PolicyVersion: step, WallSeconds: 60 * float64(step), Metrics: m}
	}
	put := func(run *records.Run) {
		t.Helper()
		db, err := persistence.Open(filepath.Join(data, "db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Runs().Put(context.Background(), run); err != nil {
			t.Fatal(err)
		}
	}
	run := &records.Run{Id: "tb-run", Status: "stopped", Step: 1, StartedUnixNano: 1700000000e9, ConfigYaml: s.Encode(),
		Metrics: map[string]float64{}, Curve: []*records.RunPoint{
			{Step: 0, Phase: trainer.PhaseStart, WallSeconds: 10, HeldOut: []*records.HeldOutScore{{HintLevel: -1, Tasks: 4, Pass1: 0.25}}},
			point(1, 0.125)}}
	put(run)
	resume := func() string {
		t.Helper()
		out, errOut, err := runCLI(t, "", "run", "--data-dir", data, "--log-level", "warn", "--jobs", "2", "--rounds", "10", "--env", "",
			"--run", "tb-run", "--tensorboard", tb)
		if err != nil || strings.Contains(errOut, "warning") {
			t.Fatalf("frognano run: %v\n%s\n%s", err, out, errOut)
		}
		return out
	}
	events := func() int {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(tb, "events.out.tfevents.*"))
		if len(files) != 1 {
			t.Fatalf("event files %v", files)
		}
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		// Records: 8 bytes of length, 4 of its CRC, the event, 4 of its CRC.
		n := 0
		for len(b) >= 16 {
			l := int(binary.LittleEndian.Uint64(b))
			if l+16 > len(b) {
				t.Fatal("torn record")
			}
			if n > 0 && !bytes.Contains(b[12:12+l], []byte("run/policy_version")) {
				t.Errorf("event %d has no run/policy_version scalar", n)
			}
			b, n = b[16+l:], n+1
		}
		return n - 1 // the file-version event
	}
	if out := resume(); !strings.Contains(out, "tensorboard: appending the run's points to "+tb) {
		t.Errorf("output:\n%s", out)
	}
	if n := events(); n != 2 {
		t.Errorf("%d events after the first resume, want 2", n)
	}
	resume()
	if n := events(); n != 2 {
		t.Errorf("%d events after resuming again, want still 2", n)
	}
	run.Curve = append(run.Curve, point(2, 0.375))
	run.Step = 2
	put(run)
	resume()
	if n := events(); n != 3 {
		t.Errorf("%d events after a point was added, want 3", n)
	}

	out, errOut, err := runCLI(t, "", "runs", "show", "tb-run", "--data-dir", data, "--log-level", "warn", "--plot", filepath.Join(t.TempDir(), "c.png"))
	if err != nil {
		t.Fatalf("runs show: %v\n%s", err, errOut)
	}
	for _, want := range []string{"CLIPPED/MASKED", "POOL HARD/FRONTIER/EASY", "0.125", "0.375", "3/2/0", "h3:1 h4:1"} {
		if !strings.Contains(out, want) {
			t.Errorf("runs show lacks %q:\n%s", want, out)
		}
	}
}
