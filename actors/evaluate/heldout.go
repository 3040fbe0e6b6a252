package evaluate

import (
	"bytes"
	_ "embed"
	"fmt"
	"slices"
	"strings"

	messages "github.com/frognano/frognano/actors/messages/v1"
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
func HeldOut(envs map[string]*messages.Environment) ([]*messages.Task, error) {
	ins, err := HeldOutInstances()
	if err != nil {
		return nil, err
	}
	out := make([]*messages.Task, 0, len(ins))
	for _, in := range ins {
		e := envs[in.Environment]
		if e == nil {
			return nil, fmt.Errorf("held-out set: environment %s of %s is not registered (frognano env add: one of %s)", in.Environment, in.InstanceID, strings.Join(HeldOutSources, ", "))
		}
		out = append(out, in.Task(e))
	}
	return out, nil
}

// CheckDisjoint refuses training environments that are held out: a run
// that trained on them would be measured on what it learned from.
func CheckDisjoint(training []string) error {
	for _, e := range training {
		if slices.Contains(HeldOutEnvironments, e) {
			return fmt.Errorf("environment %s is in the held-out set (%s): a run may not train on it", e, strings.Join(HeldOutEnvironments, ", "))
		}
	}
	return nil
}
