package synth

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	messages "github.com/frognano/frognano/actors/messages/v1"
	records "github.com/frognano/frognano/persistence/records/v1"
)

func TestEnvBenchSuspectAndSummary(t *testing.T) {
	results := []EnvBenchResult{
		// survived dominates: expected, no flag
		{Source: "a==1", Registered: true, Tasks: 20, Candidates: 60, Rejected: map[string]int{"survived": 38, "flaky": 2, "not_covered": 400, "duplicate": 45}},
		// tests_not_run takes 31 of 60: flagged
		{Source: "b==1", Registered: true, Tasks: 10, Candidates: 60, Rejected: map[string]int{"tests_not_run": 31, "survived": 19}},
		// exactly half is not more than half
		{Source: "c==1", Registered: true, Tasks: 30, Candidates: 60, Rejected: map[string]int{"timeout": 30}},
		{Source: "d==1", Refused: "rejected: 2 of 6 test files failed to collect"},
		{Source: "e==1", Registered: true, SynthError: "no coverage"},
	}
	for _, c := range []struct {
		i    int
		want string
	}{{0, ""}, {1, "tests_not_run"}, {2, ""}} {
		if got := results[c.i].Suspect(); got != c.want {
			t.Errorf("%s: Suspect() = %q, want %q", results[c.i].Source, got, c.want)
		}
	}
	if v := results[0].Verdicts(); v["not_covered"] != 0 || v["survived"] != 38 {
		t.Errorf("Verdicts() kept a generation reason or lost a verdict: %v", v)
	}
	s := SummarizeEnvBench(results)
	// yields 1/3, 1/6, 1/2: median 1/3; the failed synthesis has none
	if s.Packages != 5 || s.Registered != 4 || s.Refused != 1 || s.WithTasks != 3 || s.MedianYield < 0.333 || s.MedianYield > 0.334 {
		t.Errorf("summary %+v", s)
	}
	if len(s.Suspects) != 1 || !strings.HasPrefix(s.Suspects[0], "b==1 (tests_not_run=31 of 60)") {
		t.Errorf("suspects %v", s.Suspects)
	}
	for _, md := range []bool{false, true} {
		var b bytes.Buffer
		WriteEnvBench(&b, results, md)
		out := b.String()
		for _, want := range []string{"refused: rejected: 2 of 6 test files", "20 / 60", "33%", "survived=38 flaky=2", "tests_not_run > half", "synthesis failed: no coverage", "median yield 33%"} {
			if !strings.Contains(out, want) {
				t.Errorf("markdown=%v: output lacks %q:\n%s", md, want, out)
			}
		}
		if strings.Contains(out, "not_covered") || strings.Contains(out, "duplicate=") {
			t.Errorf("markdown=%v: a generation reason is shown among the verdicts:\n%s", md, out)
		}
	}
}

// benchNode answers the suite from maps: the registrar's and the
// synthesizer's replies, as the node's actors would send them.
type benchNode struct {
	registered map[string]*records.Environment
	refuse     map[string]error
	results    map[string]*messages.SynthesizeResult
	added      []string
}

func (n *benchNode) Environment(_ context.Context, name string) (*records.Environment, error) {
	return n.registered[name], nil
}

func (n *benchNode) Register(_ context.Context, source string, stage func(string)) (*records.Environment, error) {
	stage("fetching " + source)
	if err := n.refuse[source]; err != nil {
		return nil, err
	}
	n.added = append(n.added, source)
	return &records.Environment{Name: strings.ReplaceAll(source, "==", "-"), Baseline: &records.TestReport{Results: []*records.TestResult{
		{Name: "t::a", Status: records.TestStatus_TEST_STATUS_PASS},
		{Name: "t::b", Status: records.TestStatus_TEST_STATUS_FAIL},
	}}}, nil
}

func (n *benchNode) Synthesize(_ context.Context, req *messages.SynthesizeRequest, progress func(*messages.SynthesizeProgress)) (*messages.SynthesizeResult, error) {
	if !req.DryRun || req.MaxCandidates != 7 || req.Seed != 3 {
		return nil, errors.New("the suite must judge --candidates candidates with its seed, storing nothing")
	}
	progress(&messages.SynthesizeProgress{Stage: "judging"})
	return n.results[req.Environment], nil
}

func TestRunEnvBench(t *testing.T) {
	node := &benchNode{
		registered: map[string]*records.Environment{"old-1": {Name: "old-1", SetupSeconds: 9}},
		refuse:     map[string]error{"bad==1": errors.New("rejected: the suite passes nothing")},
		results: map[string]*messages.SynthesizeResult{
			"old-1":  {TaskIds: []string{"x"}, Progress: &messages.SynthesizeProgress{Candidates: 7, Rejected: map[string]int32{"survived": 6}}, CpuSeconds: 30},
			"good-2": {TaskIds: []string{"y", "z"}, Progress: &messages.SynthesizeProgress{Candidates: 7}, CpuSeconds: 60},
		},
	}
	var progress bytes.Buffer
	res, err := RunEnvBench(context.Background(), node, EnvBenchConfig{Sources: []string{"old==1", "bad==1", "good==2"}, Candidates: 7, Seed: 3, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if len(node.added) != 1 || node.added[0] != "good==2" {
		t.Errorf("registered %v, want only good==2 (old==1 is registered, bad==1 refused)", node.added)
	}
	if !res[0].Reused || res[0].Tasks != 1 || res[0].Rejected["survived"] != 6 || res[0].TasksPerCPUMinute() != 2 {
		t.Errorf("reused package: %+v", res[0])
	}
	if res[1].Registered || res[1].Refused != "rejected: the suite passes nothing" {
		t.Errorf("refused package: %+v", res[1])
	}
	if !res[2].Registered || res[2].BaselineTests != 2 || res[2].BaselinePassing != 1 || res[2].Tasks != 2 || res[2].Yield() != 2.0/7 {
		t.Errorf("new package: %+v", res[2])
	}
	for _, want := range []string{"[1/3 ", "old==1 already registered as old-1", "bad==1 refused: rejected", "good==2 fetching good==2", "judging: 0 candidates judged"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
}

// cancelNode is interrupted (the user's ^C) while it registers.
type cancelNode struct {
	benchNode
	cancel context.CancelFunc
}

func (n *cancelNode) Register(ctx context.Context, _ string, _ func(string)) (*records.Environment, error) {
	n.cancel()
	return nil, ctx.Err()
}

func TestRunEnvBenchInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := RunEnvBench(ctx, &cancelNode{cancel: cancel}, EnvBenchConfig{Sources: []string{"a==1", "b==1"}})
	if !errors.Is(err, context.Canceled) || len(res) != 0 {
		t.Errorf("an interrupted package became a result: %+v, %v", res, err)
	}
}
