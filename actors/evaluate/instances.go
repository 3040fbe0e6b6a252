// Package evaluate holds what evaluation needs beside the rollouts that
// play it: SWE-bench / SWE-smith style instances read from JSONL, and the
// fixed held-out set every training run is measured on.
package evaluate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/synth"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Instance is one line of SWE-bench / SWE-smith style JSONL: test lists as
// arrays (SWE-smith, frognano) or as JSON-encoded strings (SWE-bench).
type Instance struct {
	InstanceID       string           `json:"instance_id"`
	Environment      string           `json:"environment"`
	Patch            string           `json:"patch"`
	TestPatch        string           `json:"test_patch"`
	BugPatch         string           `json:"bug_patch"`
	ProblemStatement string           `json:"problem_statement"`
	FailToPass       StringList       `json:"FAIL_TO_PASS"`
	PassToPass       StringList       `json:"PASS_TO_PASS"`
	ImageName        string           `json:"image_name"`
	Language         string           `json:"language"`
	Difficulty       *json.RawMessage `json:"difficulty"`
}

// StringList reads a list of test ids or a JSON-encoded one.
type StringList []string

func (s *StringList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*s = list
		return nil
	}
	var enc string
	if err := json.Unmarshal(b, &enc); err != nil {
		return fmt.Errorf("want a list of test ids or a JSON-encoded list: %w", err)
	}
	return json.Unmarshal([]byte(enc), (*[]string)(s))
}

// ReadInstances reads JSONL instances; name labels errors (a file name).
func ReadInstances(r io.Reader, name string) ([]Instance, error) {
	var out []Instance
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var in Instance
		if err := json.Unmarshal([]byte(line), &in); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		switch {
		case in.InstanceID == "":
			return nil, fmt.Errorf("%s:%d: no instance_id", name, n)
		case len(in.FailToPass) == 0:
			return nil, fmt.Errorf("%s:%d: instance %s has no FAIL_TO_PASS tests", name, n, in.InstanceID)
		case strings.TrimSpace(in.ProblemStatement) == "":
			return nil, fmt.Errorf("%s:%d: instance %s has no problem_statement", name, n, in.InstanceID)
		}
		out = append(out, in)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no instances", name)
	}
	return out, nil
}

// Task turns an instance into a task of environment e, in e's image (an
// instance's image_name names the image of the machine that exported it;
// the environment registered here has its own).
func (in Instance) Task(e *records.Environment) *records.Task {
	t := &records.Task{
		Id: in.InstanceID, Environment: e.Name, Language: e.Language, BugPatch: in.BugPatch, GoldPatch: in.Patch,
		ProblemStatement: in.ProblemStatement, FailToPass: in.FailToPass, PassToPass: in.PassToPass,
		ProtectedFiles: environment.Protected(e), Image: e.Image, Difficulty: &records.DifficultyFeatures{},
	}
	if in.Difficulty != nil {
		var d synth.RecordDifficulty
		if json.Unmarshal(*in.Difficulty, &d) == nil {
			t.Difficulty = &records.DifficultyFeatures{Operators: d.Operators, Edits: d.Edits, Files: d.Files, LinesTouched: d.LinesTouched,
				FailingTests: d.FailingTests, HintLevel: d.HintLevel, TestDistance: d.TestDistance, Mode: d.Mode}
		}
	}
	if in.Language != "" {
		t.Language = in.Language
	}
	return proto.Clone(t).(*records.Task)
}
