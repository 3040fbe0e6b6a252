package harness

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// TestValidUTF8 fixes strings everywhere in a message: fields, nested
// messages, lists, map values and keys; what was valid stays as it was.
func TestValidUTF8(t *testing.T) {
	tr := &records.Trajectory{
		Id: "ok-id",
		Turns: []*records.Turn{
			{Content: "caf\xe9 au lait"},
			{Content: "fine", ToolCalls: []*records.ToolCall{{Name: "bash", ArgumentsJson: "{\"cmd\": \"echo \xff\"}"}}},
		},
		Report: &records.TestReport{},
	}
	if _, err := proto.Marshal(tr); err == nil {
		t.Fatal("a trajectory with invalid UTF-8 encoded: the test checks nothing")
	}
	ValidUTF8(tr)
	if _, err := proto.Marshal(tr); err != nil {
		t.Fatalf("after ValidUTF8: %v", err)
	}
	if got := tr.Turns[0].Content; got != "caf\uFFFD au lait" {
		t.Errorf("content %q", got)
	}
	if got := tr.Turns[1].ToolCalls[0].ArgumentsJson; got != "{\"cmd\": \"echo \uFFFD\"}" {
		t.Errorf("arguments %q", got)
	}
	if tr.Id != "ok-id" || tr.Turns[1].Content != "fine" {
		t.Errorf("valid strings changed: %q %q", tr.Id, tr.Turns[1].Content)
	}
	st := &records.FrontierState{Counters: map[string]int64{"bad\xff": 3, "good": 1}}
	ValidUTF8(st)
	if _, err := proto.Marshal(st); err != nil || st.Counters["bad\uFFFD"] != 3 || st.Counters["good"] != 1 || len(st.Counters) != 2 {
		t.Errorf("map keys: %v, %v", st.Counters, err)
	}
	ValidUTF8(nil)
}

// TestEpisodeWithLatin1Source plays a patch episode on a repository whose
// file is not UTF-8 and an answer that is not either: the episode's record
// still encodes.
func TestEpisodeWithLatin1Source(t *testing.T) {
	r, _ := runner(t, "The bug is in add.\xff\xfe")
	ws := newMemWorkspace()
	ws.files["calc.py"] = buggyCalc + "# auteur: Ren\xe9\n"
	res, err := r.Run(context.Background(), memTask(1), ws, ModePatch, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Turns[1].Content, "Ren\uFFFD") {
		t.Fatalf("the prompt lost the file's text: %q", res.Turns[1].Content)
	}
	for i, turn := range res.Turns {
		if !utf8.ValidString(turn.Content) {
			t.Errorf("turn %d is not valid UTF-8: %q", i, turn.Content)
		}
	}
	if _, err := proto.Marshal(res.Trajectory("tr-1", "run-1", "calc.1")); err != nil {
		t.Fatalf("the episode's record does not encode: %v", err)
	}
}
