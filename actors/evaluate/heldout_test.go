package evaluate

import (
	"slices"
	"strings"
	"testing"

	"github.com/frognano/frognano/actors/environment"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// The committed set is what issue "Learning that shows" asks for: at least
// 40 tasks from at least 4 held-out environments, a Go module among them,
// every one of them an environment of HeldOutEnvironments, ids unique.
func TestHeldOutSet(t *testing.T) {
	ins, err := HeldOutInstances()
	if err != nil {
		t.Fatal(err)
	}
	envs, langs, seen := map[string]int{}, map[string]bool{}, map[string]bool{}
	for _, in := range ins {
		if !slices.Contains(HeldOutEnvironments, in.Environment) {
			t.Errorf("%s: environment %s is not held out", in.InstanceID, in.Environment)
		}
		if seen[in.InstanceID] {
			t.Errorf("%s twice", in.InstanceID)
		}
		seen[in.InstanceID] = true
		envs[in.Environment]++
		langs[in.Language] = true
		if in.Patch == "" || in.BugPatch == "" {
			t.Errorf("%s: no gold or bug patch", in.InstanceID)
		}
	}
	if len(ins) < 40 || len(envs) < 4 || !langs["go"] || !langs["python"] {
		t.Fatalf("%d tasks from %v (languages %v)", len(ins), envs, langs)
	}
	if len(HeldOutSources) != len(HeldOutEnvironments) {
		t.Fatalf("%d sources for %d environments", len(HeldOutSources), len(HeldOutEnvironments))
	}
}

func TestHeldOutTasks(t *testing.T) {
	envs := map[string]*records.Environment{}
	for _, name := range HeldOutEnvironments {
		envs[name] = &records.Environment{Name: name, Image: "img/" + name, TestFiles: []string{"tests/x.py"}}
	}
	tasks, err := HeldOut(envs)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if task.GetImage() != "img/"+task.GetEnvironment() || len(task.GetProtectedFiles()) != 1 || task.GetDifficulty().GetHintLevel() == 0 {
			t.Fatalf("task %s: image %s, protected %v, difficulty %v", task.GetId(), task.GetImage(), task.GetProtectedFiles(), task.GetDifficulty())
		}
	}
	delete(envs, "uuid-v1.6.0")
	if _, err := HeldOut(envs); err == nil || !strings.Contains(err.Error(), "uuid-v1.6.0 of") {
		t.Fatalf("a missing environment: %v", err)
	}
}

// Held out means the repository, at any version and under any name.
func TestHeldOutRepositories(t *testing.T) {
	for src, held := range map[string]bool{
		"inflection==0.5.1": true, "inflection==0.5.0": true, "Inflection==0.3.1": true, "isodate==0.6.0": true,
		"wcwidth==0.2.5": true, "github.com/google/uuid@v1.5.0": true, "github.com/google/uuid/v2@v2.0.0": true,
		"six==1.16.0": false, "github.com/gofrs/uuid@v4.4.0": false, "isodate-extra==1.0": false,
	} {
		if got := HeldOutSource(src); got != held {
			t.Errorf("HeldOutSource(%q) = %v, want %v", src, got, held)
		}
	}
	// Each source registers under the name the list gives.
	for i, src := range HeldOutSources {
		s, err := environment.ParseSource(src)
		if err != nil || environment.DefaultName(s) != HeldOutEnvironments[i] {
			t.Errorf("%s registers as %s (%v), the list says %s", src, environment.DefaultName(s), err, HeldOutEnvironments[i])
		}
	}
	for _, c := range []struct {
		name string
		e    *records.Environment
		held bool
	}{
		{"six-1.16.0", &records.Environment{Name: "six-1.16.0", SourceKind: "pypi", Source: "six==1.16.0"}, false},
		{"six-1.16.0", nil, false},
		{"isodate-0.6.1", nil, true},
		{"my-inflection", &records.Environment{Name: "my-inflection", SourceKind: "pypi", Source: "inflection==0.5.0"}, true},
		{"u", &records.Environment{Name: "u", SourceKind: "gomod", Source: "github.com/google/uuid@v1.3.0"}, true},
	} {
		err := CheckTraining(c.name, c.e)
		if (err != nil) != c.held || c.held && !strings.Contains(err.Error(), "held-out repository") {
			t.Errorf("CheckTraining(%s, %v) = %v, want held out %v", c.name, c.e, err, c.held)
		}
	}
}

func TestReadInstancesRefusesBadLines(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "holds no instances"},
		{"{", "x:1"},
		{`{"instance_id":"a","problem_statement":"p"}`, "no FAIL_TO_PASS"},
		{`{"instance_id":"a","FAIL_TO_PASS":"[\"t\"]"}`, "no problem_statement"},
		{`{"FAIL_TO_PASS":["t"],"problem_statement":"p"}`, "no instance_id"},
	} {
		if _, err := ReadInstances(strings.NewReader(c.in), "x"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.in, err, c.want)
		}
	}
}
