package environment

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestUnknownPackageShowsPipsReason: pip's own words reach the error, not
// "see the log above" (the log goes to io.Discard in embedded mode).
func TestUnknownPackageShowsPipsReason(t *testing.T) {
	if testing.Short() {
		t.Skip("asks the package index; skipped with -short")
	}
	err := fetchSdist(context.Background(), "frognano-no-such-package-x9==1.0", t.TempDir(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "ERROR:") || !strings.Contains(err.Error(), "frognano-no-such-package-x9") || strings.Contains(err.Error(), "log above") {
		t.Fatalf("unknown package: %v; want pip's ERROR line in the error", err)
	}
}

func TestTailBufferReason(t *testing.T) {
	var tb tailBuffer
	io.WriteString(&tb, strings.Repeat("noise line\n", 5000))
	io.WriteString(&tb, "ERROR: first reason\nmore\nERROR: second reason\n")
	if len(tb.b) > tailMax {
		t.Fatalf("tail kept %d bytes, more than %d", len(tb.b), tailMax)
	}
	if got := tb.reason(); got != "ERROR: first reason; ERROR: second reason" {
		t.Fatalf("reason %q", got)
	}
	var plain tailBuffer
	io.WriteString(&plain, "a\n\nb\nc\nd\n")
	if got := plain.reason(); got != "b; c; d" {
		t.Fatalf("reason without ERROR lines %q, want the last three lines", got)
	}
	var huge tailBuffer
	io.WriteString(&huge, "ERROR: "+strings.Repeat("x", 5000))
	if got := huge.reason(); len(got) > 610 {
		t.Fatalf("a huge reason kept %d bytes", len(got))
	}
	if got := (&tailBuffer{}).reason(); got != "it printed nothing" {
		t.Fatalf("empty reason %q", got)
	}
}
