package synth

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/frognano/frognano/actors/environment"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/synth/mutate"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// EnvBenchDefaultSources is the generalization suite: real packages that
// nothing else in the repository registers or tests, chosen for the
// variety of how their tests are written. Each line says why it is there.
var EnvBenchDefaultSources = []string{
	"cachetools==5.3.3",                       // src/ layout; unittest classes whose tests come from mixins in tests/__init__.py
	"toolz==0.12.1",                           // tests inside the package (toolz/tests); a test that runs the doctests
	"humanize==4.9.0",                         // src/ layout; pytest, heavily parametrized; freezegun from the tests extra
	"tabulate==0.9.0",                         // plain test functions in test/ with a helper module beside them; a CLI test
	"boltons==24.0.0",                         // a conftest.py collection hook; pytest.ini; plain pytest test classes
	"glom==23.5.0",                            // tests inside the package (glom/test); dependencies from PyPI
	"iso8601==2.1.0",                          // parametrized tests inside the package; hypothesis and pytz only in a Poetry dev group
	"parse==1.20.1",                           // a single-module package (parse.py); plain test functions
	"pathspec==0.12.1",                        // unittest.TestCase classes importing helpers from tests/util.py
	"click==8.1.7",                            // src/ layout; conftest.py fixtures; filterwarnings = error
	"funcy==2.0",                              // a test dependency named only in test_requirements.txt
	"github.com/pmezard/go-difflib@v1.0.0",    // published before modules: no go.mod
	"github.com/davecgh/go-spew@v1.1.1",       // no go.mod; unsafe and reflection-heavy; tests in an external _test package
	"github.com/Masterminds/semver/v3@v3.2.1", // a /vN module path
	"github.com/hashicorp/go-version@v1.6.0",  // table-driven tests
}

// EnvBenchCandidates is the candidates judged per package.
const EnvBenchCandidates = 60

// EnvBenchNode is what the suite needs of a node: the environment
// registrar and the synthesizer.
type EnvBenchNode interface {
	// Environment is the registered environment called name, or nil.
	Environment(ctx context.Context, name string) (*records.Environment, error)
	// Register adds source as `frognano env add` does with its defaults;
	// stage is called as stages start.
	Register(ctx context.Context, source string, stage func(string)) (*records.Environment, error)
	// Synthesize runs req; progress is called with each snapshot.
	Synthesize(ctx context.Context, req *messages.SynthesizeRequest, progress func(*messages.SynthesizeProgress)) (*messages.SynthesizeResult, error)
}

// EnvBenchResult is one package of the suite.
type EnvBenchResult struct {
	Source          string         `json:"source"`
	Kind            string         `json:"kind"`
	Env             string         `json:"env"`
	Registered      bool           `json:"registered"`
	Reused          bool           `json:"reused,omitempty"` // registered by an earlier run of the suite
	Refused         string         `json:"refused,omitempty"`
	SynthError      string         `json:"synth_error,omitempty"`
	BaselineTests   int            `json:"baseline_tests"`
	BaselinePassing int            `json:"baseline_passing"`
	CollectionError int            `json:"collection_errors,omitempty"` // test files that failed to collect
	SetupSeconds    float64        `json:"setup_seconds"`
	CoverageSeconds float64        `json:"coverage_seconds"`
	Tasks           int            `json:"tasks"`
	Candidates      int            `json:"candidates"`
	TestRuns        int            `json:"test_runs"`
	WallSeconds     float64        `json:"wall_seconds"`
	CPUSeconds      float64        `json:"cpu_seconds"`
	Rejected        map[string]int `json:"rejected"`
}

// Yield is validated tasks per candidate judged.
func (r EnvBenchResult) Yield() float64 { return r.mode().Yield() }

// TasksPerCPUMinute is validated tasks per minute of synthesis CPU time.
func (r EnvBenchResult) TasksPerCPUMinute() float64 { return r.mode().TasksPerCPUMinute() }

func (r EnvBenchResult) mode() BenchMode {
	return BenchMode{Tasks: r.Tasks, Candidates: r.Candidates, CPU: r.CPUSeconds}
}

// generationReasons count the mutator's proposals that never became
// candidates; the others are verdicts on judged candidates. duplicate is
// almost always the mutator's (a proposal equal to an earlier one); the
// rare validated duplicate is left out with them.
var generationReasons = map[string]bool{
	mutate.ReasonDuplicate: true, mutate.ReasonUnknownLanguage: true, mutate.ReasonParseError: true, mutate.ReasonNoSite: true,
	mutate.ReasonLineFilter: true, mutate.ReasonApplyError: true, mutate.ReasonUnchanged: true,
	mutate.ReasonMutantParse: true, mutate.ReasonMutantType: true, mutate.ReasonOverlap: true,
	mutate.ReasonTooFew: true, mutate.ReasonMixedLanguage: true,
	ReasonNotCovered: true, ReasonOperatorNotApplicable: true,
}

// expectedReasons are the verdicts that say the candidate was not a bug
// (an equivalent or untested mutant, or one seen before), not that the
// pipeline failed.
var expectedReasons = map[string]bool{ReasonSurvived: true, mutate.ReasonDuplicate: true, ReasonDuplicateStored: true}

// Verdicts are the rejections of judged candidates, without the
// mutator's proposals that never became candidates.
func (r EnvBenchResult) Verdicts() map[string]int {
	out := map[string]int{}
	for k, v := range r.Rejected {
		if !generationReasons[k] {
			out[k] = v
		}
	}
	return out
}

// Suspect names a rejection reason other than survived or duplicate that
// took more than half the judged candidates (the goal is that none
// does without an explanation), or "".
func (r EnvBenchResult) Suspect() string {
	worst, n := "", 0
	for k, v := range r.Verdicts() {
		if !expectedReasons[k] && 2*v > r.Candidates && (v > n || v == n && k < worst) {
			worst, n = k, v
		}
	}
	return worst
}

// EnvBenchConfig is one run of the suite.
type EnvBenchConfig struct {
	Sources    []string
	Candidates int
	Seed       uint64
	Hint       int32
	// Progress receives a line per stage of every package.
	Progress io.Writer
}

// RunEnvBench registers each source (reusing an environment an earlier run
// registered under the same name) and judges cfg.Candidates candidates
// from it, nothing stored. A refused source or a failed synthesis is a
// result, not an error; only a cancelled ctx stops the suite early.
func RunEnvBench(ctx context.Context, node EnvBenchNode, cfg EnvBenchConfig) ([]EnvBenchResult, error) {
	if cfg.Candidates < 1 {
		cfg.Candidates = EnvBenchCandidates
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	var out []EnvBenchResult
	for i, source := range cfg.Sources {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		say := func(format string, args ...any) {
			fmt.Fprintf(progress, "[%d/%d %s] %s %s\n", i+1, len(cfg.Sources), time.Now().Format("15:04:05"), source, fmt.Sprintf(format, args...))
		}
		r := runEnvBenchOne(ctx, node, cfg, source, say)
		if err := ctx.Err(); err != nil {
			return out, err // an interrupted package is not a result
		}
		out = append(out, r)
	}
	return out, nil
}

func runEnvBenchOne(ctx context.Context, node EnvBenchNode, cfg EnvBenchConfig, source string, say func(string, ...any)) EnvBenchResult {
	r := EnvBenchResult{Source: source, Rejected: map[string]int{}}
	src, err := environment.ParseSource(source)
	if err != nil {
		r.Refused = err.Error()
		say("refused: %s", r.Refused)
		return r
	}
	r.Kind, r.Env = string(src.Kind), environment.DefaultName(src)
	env, err := node.Environment(ctx, r.Env)
	if err != nil {
		r.Refused = err.Error()
		say("cannot look up %s: %v", r.Env, err)
		return r
	}
	if env != nil {
		r.Reused = true
		say("already registered as %s; reusing it", r.Env)
	} else {
		say("registering")
		env, err = node.Register(ctx, source, func(stage string) { say("%s", stage) })
		if err != nil {
			r.Refused = err.Error()
			say("refused: %s", firstLine(r.Refused))
			return r
		}
	}
	r.Registered, r.Env, r.SetupSeconds = true, env.GetName(), env.GetSetupSeconds()
	for _, t := range env.GetBaseline().GetResults() {
		if t.GetCollection() {
			if t.GetStatus() == records.TestStatus_TEST_STATUS_ERROR {
				r.CollectionError++
			}
			continue
		}
		r.BaselineTests++
		if t.GetStatus() == records.TestStatus_TEST_STATUS_PASS {
			r.BaselinePassing++
		}
	}
	say("registered %s: %d of %d tests pass at baseline (setup %.0fs); judging %d candidates", r.Env, r.BaselinePassing, r.BaselineTests, r.SetupSeconds, cfg.Candidates)
	req := &messages.SynthesizeRequest{Environment: r.Env, Count: 1 << 30, Seed: cfg.Seed, DryRun: true,
		MaxCandidates: int32(cfg.Candidates), Target: &records.DifficultyFeatures{HintLevel: cfg.Hint}}
	stage, last := "", time.Time{}
	res, err := node.Synthesize(ctx, req, func(p *messages.SynthesizeProgress) {
		if p.GetStage() != stage || time.Since(last) > 30*time.Second {
			stage, last = p.GetStage(), time.Now()
			say("%s: %d candidates judged, %d tasks", stage, p.GetCandidates(), p.GetValidated())
		}
	})
	if err != nil {
		r.SynthError = err.Error()
		say("synthesis failed: %s", firstLine(r.SynthError))
		return r
	}
	m := BenchModeFromProto("", res)
	r.Tasks, r.Candidates, r.TestRuns, r.WallSeconds, r.CPUSeconds, r.Rejected = m.Tasks, m.Candidates, m.TestRuns, m.Wall, m.CPU, m.Rejected
	r.CoverageSeconds = res.GetCoverageSeconds()
	say("%d tasks from %d candidates (%.0f%%) in %.0fs, %.1f tasks per CPU-minute; rejected %s",
		r.Tasks, r.Candidates, 100*r.Yield(), r.WallSeconds, r.TasksPerCPUMinute(), FormatReasons(r.Verdicts()))
	return r
}

// EnvBenchSummary is the suite measured against the goals.
type EnvBenchSummary struct {
	Packages, Registered, Refused, WithTasks int
	// MedianYield is over the packages that registered and were judged.
	MedianYield float64
	// Suspects are packages where one reason other than survived or
	// duplicate took more than half the candidates.
	Suspects []string
}

// SummarizeEnvBench computes the summary of a run.
func SummarizeEnvBench(results []EnvBenchResult) EnvBenchSummary {
	s := EnvBenchSummary{Packages: len(results)}
	var yields []float64
	for _, r := range results {
		switch {
		case !r.Registered:
			s.Refused++
			continue
		case r.SynthError == "" && r.Candidates > 0:
			yields = append(yields, r.Yield())
		}
		s.Registered++
		if r.Tasks > 0 {
			s.WithTasks++
		}
		if why := r.Suspect(); why != "" {
			s.Suspects = append(s.Suspects, fmt.Sprintf("%s (%s=%d of %d)", r.Source, why, r.Verdicts()[why], r.Candidates))
		}
	}
	s.MedianYield = median(yields)
	return s
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// WriteEnvBench prints the table, then the summary against the goals.
// markdown writes a Markdown table (for the README) instead of aligned
// columns.
func WriteEnvBench(w io.Writer, results []EnvBenchResult, markdown bool) {
	header := []string{"package", "kind", "status", "baseline tests", "tasks / candidates", "yield", "tasks/CPU-min", "top rejections", "flag"}
	var rows [][]string
	for _, r := range results {
		row := []string{r.Source, r.Kind, "", "", "", "", "", "", ""}
		switch {
		case !r.Registered:
			row[2] = "refused: " + shorten(firstLine(r.Refused), 160)
		default:
			row[2] = "registered"
			if r.Reused {
				row[2] = "registered (earlier run)"
			}
			row[3] = fmt.Sprintf("%d/%d pass", r.BaselinePassing, r.BaselineTests)
			if r.CollectionError > 0 {
				row[3] += fmt.Sprintf(", %d files not collected", r.CollectionError)
			}
		}
		switch {
		case r.SynthError != "":
			row[4] = "synthesis failed: " + shorten(firstLine(r.SynthError), 120)
		case r.Registered:
			row[4] = fmt.Sprintf("%d / %d", r.Tasks, r.Candidates)
			row[5] = fmt.Sprintf("%.0f%%", 100*r.Yield())
			row[6] = fmt.Sprintf("%.1f", r.TasksPerCPUMinute())
			row[7] = topReasons(r.Verdicts(), 3)
			if why := r.Suspect(); why != "" {
				row[8] = why + " > half"
			}
		}
		rows = append(rows, row)
	}
	if markdown {
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
		for _, row := range rows {
			for i := range row {
				row[i] = strings.ReplaceAll(row[i], "|", `\|`)
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(header, "\t")))
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}
	s := SummarizeEnvBench(results)
	fmt.Fprintf(w, "\n%d packages: %d registered (%d yielding tasks), %d refused; median yield %.0f%% (goal >= 30%%)\n",
		s.Packages, s.Registered, s.WithTasks, s.Refused, 100*s.MedianYield)
	if len(s.Suspects) == 0 {
		fmt.Fprintln(w, "no package has a rejection reason other than survived or duplicate taking more than half its candidates")
	} else {
		fmt.Fprintf(w, "a reason other than survived or duplicate took more than half the candidates of: %s\n", strings.Join(s.Suspects, "; "))
	}
}

// topReasons is FormatReasons cut to the n largest.
func topReasons(m map[string]int, n int) string {
	parts := strings.Fields(FormatReasons(m))
	if len(parts) > n {
		parts = parts[:n]
	}
	return strings.Join(parts, " ")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
