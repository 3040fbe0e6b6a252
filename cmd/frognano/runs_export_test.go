package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
)

// TestRunsExport stores a run in a data directory's store and exports its
// curve through the embedded node, as csv and as jsonl.
func TestRunsExport(t *testing.T) {
	data := t.TempDir()
	db, err := persistence.Open(filepath.Join(data, "db"))
	if err != nil {
		t.Fatal(err)
	}
	run := &messages.Run{Id: "export-me", Status: "done", Step: 2, Curve: []*messages.RunPoint{
		{Step: 0, Phase: "start", WallSeconds: 10, CpuSeconds: 12,
			HeldOut: []*messages.HeldOutScore{{HintLevel: -1, Tasks: 4, Pass1: 0.25, Pass1Low: 0.1, Pass1High: 0.5}}},
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
