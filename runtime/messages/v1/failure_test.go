package rtmsg

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestFailureCodeShort: the short names are the strings Failure.code held
// before FailureCode, which logs and error messages still show.
func TestFailureCodeShort(t *testing.T) {
	want := []string{"unspecified", "error", "bad_request", "not_found", "conflict", "exists", "busy", "unavailable",
		"closed", "cancelled", "store", "no_store", "containerd", "unknown_request", "unknown_kind", "spawn_failed",
		"bad_source", "rejected", "no_environment", "image_gone", "create_failed", "sandbox_broken", "patch_failed",
		"file_error", "no_policy", "stale_version", "model_mismatch", "corrupt", "no_passing_tests", "coverage"}
	if n := len(FailureCode_name); n != len(want) {
		t.Fatalf("%d codes, want %d: add the new one here", n, len(want))
	}
	for i, w := range want {
		if got := FailureCode(i).Short(); got != w {
			t.Errorf("FailureCode(%d).Short() = %q, want %q", i, got, w)
		}
	}
	if got := FailureCode(999).Short(); got != "999" {
		t.Errorf("an unknown code's short name is %q, want 999", got)
	}
}

func TestFailAndIsFailure(t *testing.T) {
	f := Fail(FailureCode_FAILURE_CODE_NOT_FOUND, errors.New("no environment x"))
	if f.GetCode() != FailureCode_FAILURE_CODE_NOT_FOUND || f.GetMessage() != "no environment x" {
		t.Fatalf("Fail = %v", f)
	}
	for _, c := range []struct {
		reply any
		code  FailureCode
		want  bool
	}{
		{f, FailureCode_FAILURE_CODE_NOT_FOUND, true},
		{f, FailureCode_FAILURE_CODE_BAD_REQUEST, false},
		{&Failure{}, FailureCode_FAILURE_CODE_UNSPECIFIED, true},
		{nil, FailureCode_FAILURE_CODE_UNSPECIFIED, false},
		{&Pong{}, FailureCode_FAILURE_CODE_UNSPECIFIED, false},
	} {
		if got := IsFailure(c.reply, c.code); got != c.want {
			t.Errorf("IsFailure(%T %v, %v) = %v, want %v", c.reply, c.reply, c.code, got, c.want)
		}
	}
}

// TestFailureWire: a Failure from a node of an older version (code as the
// string field 1) parses as an unspecified code with its message, and the
// JSON the gateway writes names the code.
func TestFailureWire(t *testing.T) {
	var old []byte
	old = protowire.AppendTag(old, 1, protowire.BytesType)
	old = protowire.AppendString(old, "not_found")
	old = protowire.AppendTag(old, 2, protowire.BytesType)
	old = protowire.AppendString(old, "no environment x")
	var f Failure
	if err := proto.Unmarshal(old, &f); err != nil {
		t.Fatal(err)
	}
	if f.GetCode() != FailureCode_FAILURE_CODE_UNSPECIFIED || f.GetMessage() != "no environment x" {
		t.Errorf("an old Failure parsed as %v", &f)
	}
	b, err := protojson.Marshal(Fail(FailureCode_FAILURE_CODE_NOT_FOUND, errors.New("no environment x")))
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.ReplaceAll(string(b), " ", ""); !strings.Contains(s, `"code":"FAILURE_CODE_NOT_FOUND"`) {
		t.Errorf("JSON %s", b)
	}
}
