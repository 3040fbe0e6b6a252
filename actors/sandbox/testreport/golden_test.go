package testreport

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The inputs under testdata are real outputs, captured once:
//
//	pytest9-*.jsonl    frognano's pytest plugin under host pytest 9.2, from
//	                   testdata/pysuite and testdata/pycollect, with
//	                   testdata/capture-pytest.sh (see it) and -q:
//	                   mixed: pysuite; collection-error: pycollect;
//	                   collection-error-continue: pycollect with
//	                   --continue-on-collection-errors
//	pytest7-mixed.jsonl Debian bookworm's pytest 7.2 inside a sandbox, same
//	                   plugin, from pysuite (captured by TestRunPytest in
//	                   package sandbox with FROGNANO_CAPTURE_GOLDEN=1)
//	forged-report.jsonl written by hand: every test passing, as code under
//	                   test that overwrote the report would have it
//	gotest-*.jsonl     go 1.26, from testdata/gosuite:
//	                   go test -json -count=1 ./pass ./fail ./panics ./broken ./notests  (mixed)
//	                   go test -json -count=1 ./pass                                      (pass)
//	                   go test -json -count=1 ./forge                                     (forged)
//
// The *.golden.json files are what the parsers make of them; regenerate with
// go test ./actors/sandbox/testreport -run Golden -update.
var update = flag.Bool("update", false, "rewrite the golden files")

type goldenResult struct {
	ID         string  `json:"id"`
	Status     string  `json:"status"`
	Seconds    float64 `json:"seconds"`
	Collection bool    `json:"collection,omitempty"`
}

type golden struct {
	Valid   bool           `json:"valid"`
	Problem string         `json:"problem,omitempty"`
	Results []goldenResult `json:"results"`
}

func TestGolden(t *testing.T) {
	tests := []struct {
		name      string
		input     string
		framework Framework
		exitCode  int
	}{
		{"pytest9 mixed outcomes", "pytest9-mixed.jsonl", Pytest, 1},
		{"pytest9 report contradicts exit 0", "pytest9-mixed.jsonl", Pytest, 0},
		{"pytest9 collection error", "pytest9-collection-error.jsonl", Pytest, 2},
		{"pytest9 collection error continued", "pytest9-collection-error-continue.jsonl", Pytest, 1},
		{"pytest7 in the sandbox", "pytest7-mixed.jsonl", Pytest, 1},
		{"forged report all passing but exit 1", "forged-report.jsonl", Pytest, 1},
		{"go test mixed outcomes", "gotest-mixed.jsonl", GoTest, 1},
		{"go test all pass", "gotest-pass.jsonl", GoTest, 0},
		{"go test all pass but exit 1", "gotest-pass.jsonl", GoTest, 1},
		{"go test forged framing", "gotest-forged.jsonl", GoTest, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tt.input))
			if err != nil {
				t.Fatal(err)
			}
			var r *Report
			switch tt.framework {
			case Pytest:
				r = NewPytestReport(in, tt.exitCode, false, time.Second)
			case GoTest:
				r = NewGoTestReport(in, tt.exitCode, false, time.Second)
			}
			got := golden{Valid: r.Valid, Problem: r.Problem}
			for _, res := range r.Results {
				got.Results = append(got.Results, goldenResult{ID: res.ID, Status: res.Status.String(), Seconds: res.Duration.Seconds(), Collection: res.Collection})
			}
			b, err := json.MarshalIndent(got, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, '\n')
			path := filepath.Join("testdata", "golden", sanitize(tt.name)+".golden.json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(b, want) {
				t.Errorf("%s differs from the golden file:\n%s", path, b)
			}
		})
	}
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}
