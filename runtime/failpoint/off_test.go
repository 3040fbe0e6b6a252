//go:build !failpoints

package failpoint

import (
	"os"
	"os/exec"
	"testing"
)

// TestOffWithoutTag: a build without the tag ignores FROGNANO_FAILPOINTS,
// however it is set.
func TestOffWithoutTag(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled without the tag")
	}
	if os.Getenv(Env) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestOffWithoutTag$")
		cmd.Env = append(os.Environ(), Env+"=x=kill,y=panic")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("child with armed points: %v\n%s", err, out)
		}
		return
	}
	if Inject("x") != nil || Inject("y") != nil {
		t.Fatal("a point fired in a build without the tag")
	}
}
