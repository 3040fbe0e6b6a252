package evaluate

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/frognano/frognano/actors/environment"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// The held-out set: tasks synthesized once from environments that no run
// trains on, never used to fit the difficulty model or to tune synthesis,
// and committed here so that every machine measures the same tasks
// (scripts/heldout.sh made them; see docs/learning.md). Its environments
// are registered from HeldOutSources; their names are HeldOutEnvironments.
//
//go:embed heldout.jsonl
var heldOutJSONL []byte

// HeldOutSources are the held-out environments' sources, as frognano env
// add takes them.
var HeldOutSources = []string{"inflection==0.5.1", "github.com/google/uuid@v1.6.0", "isodate==0.6.1", "wcwidth==0.2.6"}

// HeldOutEnvironments are the names those sources register under.
var HeldOutEnvironments = []string{"inflection-0.5.1", "uuid-v1.6.0", "isodate-0.6.1", "wcwidth-0.2.6"}

// HeldOutInstances are the held-out set's instances.
func HeldOutInstances() ([]Instance, error) {
	return ReadInstances(bytes.NewReader(heldOutJSONL), "the held-out set")
}

// HeldOut is the held-out set as tasks of the registered environments
// envs (by name), each task taking its environment's image and protected
// files from there. An environment missing from envs is an error.
func HeldOut(envs map[string]*records.Environment) ([]*records.Task, error) {
	ins, err := HeldOutInstances()
	if err != nil {
		return nil, err
	}
	out := make([]*records.Task, 0, len(ins))
	for _, in := range ins {
		e := envs[in.Environment]
		if e == nil {
			return nil, fmt.Errorf("held-out set: environment %s of %s is not registered (frognano env add: one of %s)", in.Environment, in.InstanceID, strings.Join(HeldOutSources, ", "))
		}
		out = append(out, in.Task(e))
	}
	return out, nil
}

// repository is what a source names whatever its version: a PyPI
// project (normalised as PEP 503 does) or a Go module path without its
// major-version suffix. "" for sources of other kinds.
func repository(kind, ref string) string {
	switch environment.Kind(kind) {
	case environment.PyPI:
		name, _, _ := strings.Cut(ref, "==")
		return "pypi:" + strings.ToLower(pep503.ReplaceAllString(strings.TrimSpace(name), "-"))
	case environment.GoMod:
		mod, _, _ := strings.Cut(ref, "@")
		return "go:" + goMajor.ReplaceAllString(strings.TrimSpace(mod), "")
	}
	return ""
}

var (
	pep503  = regexp.MustCompile(`[-_.]+`)
	goMajor = regexp.MustCompile(`/v[0-9]+$`)
)

// heldOutRepositories are the repositories of HeldOutSources.
var heldOutRepositories = func() map[string]bool {
	m := map[string]bool{}
	for _, src := range HeldOutSources {
		s, err := environment.ParseSource(src)
		if err != nil {
			panic(err)
		}
		m[repository(string(s.Kind), s.Ref)] = true
	}
	return m
}()

// HeldOutSource says whether a source (as frognano env add takes it)
// names a held-out repository, at any version.
func HeldOutSource(src string) bool {
	s, err := environment.ParseSource(src)
	return err == nil && heldOutRepositories[repository(string(s.Kind), s.Ref)]
}

// HeldOutEnvironment says whether a registered environment is held out:
// one of HeldOutEnvironments, or any version of their repositories under
// any name.
func HeldOutEnvironment(e *records.Environment) bool {
	return slices.Contains(HeldOutEnvironments, e.GetName()) || heldOutRepositories[repository(e.GetSourceKind(), e.GetSource())]
}

// CheckTraining refuses a training environment that is held out: a run
// that trained on it would be measured on what it learned from. e is the
// environment's record, or nil when only its name is known.
func CheckTraining(name string, e *records.Environment) error {
	if (e != nil && HeldOutEnvironment(e)) || slices.Contains(HeldOutEnvironments, name) {
		return fmt.Errorf("environment %s is a held-out repository (%s): no run may train on any version of it", name, strings.Join(HeldOutSources, ", "))
	}
	return nil
}

// HeldOutTasks registers the held-out environments where needed and
// returns the held-out set as their tasks.
func HeldOutTasks(ctx context.Context, a environment.Asker, out io.Writer) ([]*records.Task, error) {
	envs := map[string]*records.Environment{}
	for _, src := range HeldOutSources {
		e, err := environment.Ensure(ctx, a, src, out)
		if err != nil {
			return nil, fmt.Errorf("held-out environment %s: %w", src, err)
		}
		envs[e.GetName()] = e
	}
	return HeldOut(envs)
}
