package sandbox

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/frognano/frognano/actors/sandbox/testreport"
)

// TestPytestServerOutlivesTheNextCommand starts a validation server and at
// once runs a command that kills what it leaves behind (KillOrphans), as
// the Synthesizer's first validation run and an agent's first tool call
// do. The server, adopted by the sandbox's init, must not be taken for that
// command's orphan: the orphan rule compares start times in clock ticks
// (10 ms), and a server started in the tick before the command was killed
// with it (CI, 2026-12-02: "intact: fork server: the server is gone").
func TestPytestServerOutlivesTheNextCommand(t *testing.T) {
	abs, err := filepath.Abs(filepath.Join("testreport", "testdata", "pysuite"))
	if err != nil {
		t.Fatal(err)
	}
	ref := deriveRepoImage(t, "pysuite", abs)
	sb := createFrom(t, ref, Options{})
	ctx := context.Background()
	spec := TestSpec{Framework: testreport.Pytest}
	picked := []string{"tests/sub/test_more.py::test_sub_pass"}
	for i := range 8 {
		p, err := sb.StartPytestServer(ctx, spec, PytestValidation)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Exec(ctx, ExecRequest{Argv: []string{"true"}, KillOrphans: true}); err != nil {
			t.Fatal(err)
		}
		r, err := p.Run(ctx, spec, picked, 0)
		if err != nil {
			t.Fatalf("start %d: the server did not outlive the next command: %v", i, err)
		}
		if !r.Valid || r.ExitCode != 0 || len(r.Results) != 1 {
			t.Fatalf("start %d: %+v", i, r)
		}
		p.Close(ctx)
	}
}
