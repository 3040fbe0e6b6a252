package synth

import (
	"strings"
	"time"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// Record is a task as one line of SWE-smith / SWE-bench style JSONL: the
// field names those tools read (instance_id, repo, base_commit, patch = the
// gold fix, FAIL_TO_PASS, PASS_TO_PASS, problem_statement, image_name), with
// the test lists as JSON arrays (SWE-smith's form; SWE-bench's HF datasets
// store them as JSON-encoded strings), plus frognano's bug patch, difficulty
// and provenance.
type Record struct {
	InstanceID       string           `json:"instance_id"`
	Repo             string           `json:"repo"`
	Environment      string           `json:"environment"`
	BaseCommit       string           `json:"base_commit"`
	Patch            string           `json:"patch"`
	TestPatch        string           `json:"test_patch"`
	BugPatch         string           `json:"bug_patch"`
	ProblemStatement string           `json:"problem_statement"`
	HintsText        string           `json:"hints_text"`
	FailToPass       []string         `json:"FAIL_TO_PASS"`
	PassToPass       []string         `json:"PASS_TO_PASS"`
	ImageName        string           `json:"image_name"`
	Language         string           `json:"language"`
	TestCmd          string           `json:"test_cmd"`
	Version          string           `json:"version"`
	CreatedAt        string           `json:"created_at"`
	Difficulty       RecordDifficulty `json:"difficulty"`
	Provenance       RecordProvenance `json:"provenance"`
}

// RecordDifficulty is DifficultyFeatures with stable JSON names.
type RecordDifficulty struct {
	Operators    []string `json:"operators"`
	Edits        int32    `json:"edits"`
	Files        int32    `json:"files"`
	LinesTouched int32    `json:"lines_touched"`
	FailingTests int32    `json:"failing_tests"`
	HintLevel    int32    `json:"hint_level"`
	TestDistance int32    `json:"test_distance"`
	Mode         string   `json:"mode"`
}

// RecordProvenance is how the task was made and checked.
type RecordProvenance struct {
	Operator        string  `json:"operator"`
	Seed            uint64  `json:"seed"`
	Generator       string  `json:"generator"`
	ValidationRuns  int32   `json:"validation_runs"`
	ValidationSecs  float64 `json:"validation_seconds"`
	CandidatesTried int32   `json:"candidates_tried"`
}

// Export makes the JSONL record of t. env may be nil (removed since): the
// repository is then named by the task's environment and the base commit
// is left empty.
func Export(t *records.Task, env *records.Environment) Record {
	d, p, v := t.GetDifficulty(), t.GetProvenance(), t.GetValidation()
	r := Record{
		InstanceID:       t.GetId(),
		Repo:             t.GetEnvironment(),
		Environment:      t.GetEnvironment(),
		Patch:            t.GetGoldPatch(),
		BugPatch:         t.GetBugPatch(),
		ProblemStatement: t.GetProblemStatement(),
		FailToPass:       nonNil(t.GetFailToPass()),
		PassToPass:       nonNil(t.GetPassToPass()),
		ImageName:        t.GetImage(),
		Language:         t.GetLanguage(),
		TestCmd:          t.GetTestCommand(),
		CreatedAt:        time.Unix(0, t.GetCreatedUnixNano()).UTC().Format(time.RFC3339),
		Difficulty: RecordDifficulty{Operators: nonNil(d.GetOperators()), Edits: d.GetEdits(), Files: d.GetFiles(), LinesTouched: d.GetLinesTouched(),
			FailingTests: d.GetFailingTests(), HintLevel: d.GetHintLevel(), TestDistance: d.GetTestDistance(), Mode: d.GetMode()},
		Provenance: RecordProvenance{Operator: p.GetOperator(), Seed: p.GetSeed(), Generator: p.GetGenerator(),
			ValidationRuns: v.GetRuns(), ValidationSecs: v.GetSeconds(), CandidatesTried: v.GetCandidatesTried()},
	}
	if env != nil {
		r.Repo = repoName(env)
		r.BaseCommit = env.GetBaseCommit()
		if _, ver, ok := strings.Cut(env.GetSource(), "=="); ok {
			r.Version = ver
		} else if _, ver, ok := strings.Cut(env.GetSource(), "@"); ok {
			r.Version = ver
		}
	}
	return r
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
