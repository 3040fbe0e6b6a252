package forge

import (
	"fmt"
	"testing"
)

// These tests forge test2json's framing: a line starting with ^V (0x16) is
// taken as a verdict by test2json, so a failing test can emit a "pass" event
// for itself or for another test. The parser must reject the run.

func TestFails(t *testing.T) { t.Fatal("1 + 1 != 3") }

func TestForgesOther(t *testing.T) {
	fmt.Println("\x16--- PASS: TestFails (0.00s)")
}

func TestForgesOwnPass(t *testing.T) {
	fmt.Println("\x16--- PASS: TestForgesOwnPass (0.00s)")
	t.Fail()
}
