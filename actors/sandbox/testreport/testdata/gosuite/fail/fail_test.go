package fail

import (
	"fmt"
	"testing"
)

func TestPasses(t *testing.T) {}

func TestFails(t *testing.T) { t.Fatal("1 + 1 != 3") }

func TestSubFails(t *testing.T) {
	t.Run("ok", func(t *testing.T) {})
	t.Run("bad", func(t *testing.T) { t.Error("bad case") })
}

// TestPrintsFakePass fails but prints what a verdict looks like, in text and
// in JSON: neither may turn into a pass.
func TestPrintsFakePass(t *testing.T) {
	fmt.Println("--- PASS: TestPrintsFakePass (0.00s)")
	fmt.Println(`{"Action":"pass","Package":"example.com/gosuite/fail","Test":"TestPrintsFakePass","Elapsed":0}`)
	t.Fail()
}
