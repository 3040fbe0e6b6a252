package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/frognano/frognano/actors/trainer"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// maxListed bounds the rows of a list page; the page says how many more
// there are.
const maxListed = 500

type trajRow struct {
	ID            string
	RunID         string
	TaskID        string
	PolicyVersion int64
	Termination   string
	Reward        float64
	Turns         int
	Tokens        int
	PolicyTokens  int
	Generation    float64
	Sandbox       float64
	Created       int64
}

func trajRowOf(t *records.Trajectory) trajRow {
	return trajRow{ID: t.GetId(), RunID: t.GetRunId(), TaskID: t.GetTaskId(), PolicyVersion: t.GetPolicyVersion(),
		Termination: t.GetTermination(), Reward: t.GetReward(), Turns: len(t.GetTurns()), Tokens: len(t.GetTokenIds()),
		PolicyTokens: policyTokens(t), Generation: t.GetGenerationSeconds(), Sandbox: t.GetSandboxSeconds(), Created: t.GetCreatedUnixNano()}
}

func policyTokens(t *records.Trajectory) int {
	n := 0
	for _, m := range t.GetPolicyMask() {
		if m {
			n++
		}
	}
	return n
}

// trajectoriesPage lists episodes: a run's (?run=, narrowed to a policy
// version with ?version=, or to versions min_version to version), a held-out evaluation point's (?run=&eval=PHASE-STEP,
// every attempt at it) or a task's (?task=).
func (s *Server) trajectoriesPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx := r.Context()
	store := s.cfg.Stores.Trajectories()
	var (
		trajs []*records.Trajectory
		title string
		err   error
	)
	switch runID, task, eval := q.Get("run"), q.Get("task"), q.Get("eval"); {
	case task != "":
		title = "Episodes of task " + task
		trajs, err = store.ListByTask(ctx, task)
	case runID != "" && eval != "":
		title = fmt.Sprintf("Held-out episodes of run %s at %s", runID, eval)
		run, gerr := s.cfg.Stores.Runs().Get(ctx, runID)
		if gerr != nil {
			s.fail(w, r, gerr)
			return
		}
		// Each attempt at an evaluation point stores its episodes under
		// RUN/eval/PHASE-STEP.ATTEMPT (trainer.evaluate).
		attempts := int(run.GetMetrics()[trainer.MetricEvalAttempts])
		for a := 1; a <= attempts && err == nil; a++ {
			var ts []*records.Trajectory
			ts, err = store.ListByRun(ctx, fmt.Sprintf("%s/%s.%d", trainer.EvalRunID(runID), eval, a))
			trajs = append(trajs, ts...)
		}
	case runID != "":
		title = "Episodes of run " + runID
		trajs, err = store.ListByRun(ctx, runID)
		if v := q.Get("version"); v != "" && err == nil {
			version, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil {
				s.renderStatus(w, r, http.StatusBadRequest, "version: "+perr.Error())
				return
			}
			low := version
			if m := q.Get("min_version"); m != "" {
				low, perr = strconv.ParseInt(m, 10, 64)
				if perr != nil || low > version {
					s.renderStatus(w, r, http.StatusBadRequest, fmt.Sprintf("min_version %q: want a version at most %d", m, version))
					return
				}
			}
			if low == version {
				title += fmt.Sprintf(", played at policy v%d", version)
			} else {
				title += fmt.Sprintf(", played at policy v%d to v%d", low, version)
			}
			trajs = slices.DeleteFunc(trajs, func(t *records.Trajectory) bool {
				return t.GetPolicyVersion() < low || t.GetPolicyVersion() > version
			})
		}
	default:
		s.renderStatus(w, r, http.StatusBadRequest, "say which episodes: ?run=ID, ?run=ID&version=V, ?run=ID&eval=PHASE-STEP or ?task=ID")
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	slices.SortStableFunc(trajs, func(a, b *records.Trajectory) int {
		if c := a.GetCreatedUnixNano() - b.GetCreatedUnixNano(); c != 0 {
			if c < 0 {
				return -1
			}
			return 1
		}
		return strings.Compare(a.GetId(), b.GetId())
	})
	total := len(trajs)
	var rows []trajRow
	var solved int
	for i, t := range trajs {
		if t.GetReward() > 0 {
			solved++
		}
		if i < maxListed {
			rows = append(rows, trajRowOf(t))
		}
	}
	s.render(w, r, "trajectories", title, "runs", struct {
		Title  string
		Rows   []trajRow
		Total  int
		Solved int
	}{title, rows, total, solved})
}

type toolCallView struct {
	ID        string
	Name      string
	Arguments string
	Patch     string
}

type turnView struct {
	Index      int
	Role       string
	Content    string
	Patch      bool // content is a diff
	ToolCalls  []toolCallView
	ToolCallID string
	Seconds    float64
}

type trajView struct {
	trajRow
	Seed      uint64
	Turns     []turnView
	Report    *records.TestReport
	Tally     []statusCount
	NotPassed []*records.TestResult
	Patch     string // the last patch the model wrote
}

type statusCount struct {
	Status string
	Count  int
}

func roleName(r records.Role) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "ROLE_"))
}

// prettyJSON indents a tool call's arguments; text that is not JSON is
// shown as it is.
func prettyJSON(s string) string {
	var b bytes.Buffer
	if json.Indent(&b, []byte(s), "", "  ") != nil {
		return s
	}
	return b.String()
}

// extractDiff returns the patch inside text as a unified diff: the diff
// itself (a fenced block, or the text from its first diff header on), or
// search/replace blocks (what patch mode asks the model for) rendered as
// one; "" when text holds neither.
func extractDiff(text string) string {
	if d := searchReplaceDiff(text); d != "" {
		return d
	}
	if i := strings.Index(text, "```diff\n"); i >= 0 {
		rest := text[i+len("```diff\n"):]
		if j := strings.Index(rest, "```"); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	if !looksLikeDiff(text) {
		return ""
	}
	lines := strings.SplitAfter(text, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "diff --git ") || strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "@@ ") {
			out := strings.Join(lines[i:], "")
			if j := strings.Index(out, "\n```"); j >= 0 {
				out = out[:j+1]
			}
			return out
		}
	}
	return ""
}

// argumentPatch returns a diff carried by one of a tool call's string
// arguments.
func argumentPatch(args string) string {
	var m map[string]any
	if json.Unmarshal([]byte(args), &m) != nil {
		return ""
	}
	for _, v := range m {
		if s, ok := v.(string); ok {
			if d := extractDiff(s); d != "" {
				return d
			}
		}
	}
	return ""
}

func (s *Server) trajectoryPage(w http.ResponseWriter, r *http.Request) {
	t, err := s.cfg.Stores.Trajectories().Get(r.Context(), r.URL.Query().Get("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := trajView{trajRow: trajRowOf(t), Seed: t.GetSeed(), Report: t.GetReport()}
	counts := map[records.TestStatus]int{}
	for _, res := range t.GetReport().GetResults() {
		counts[res.GetStatus()]++
		if res.GetStatus() != records.TestStatus_TEST_STATUS_PASS {
			v.NotPassed = append(v.NotPassed, res)
		}
	}
	for st := range records.TestStatus_name {
		if c := counts[records.TestStatus(st)]; c > 0 {
			v.Tally = append(v.Tally, statusCount{statusName(records.TestStatus(st)), c})
		}
	}
	slices.SortFunc(v.Tally, func(a, b statusCount) int { return strings.Compare(a.Status, b.Status) })
	for i, turn := range t.GetTurns() {
		tv := turnView{Index: i + 1, Role: roleName(turn.GetRole()), Content: turn.GetContent(),
			ToolCallID: turn.GetToolCallId(), Seconds: turn.GetSeconds()}
		if turn.GetRole() == records.Role_ROLE_ASSISTANT {
			if d := extractDiff(turn.GetContent()); d != "" {
				v.Patch = d
				tv.Patch = strings.TrimSpace(d) == strings.TrimSpace(turn.GetContent())
			}
		}
		for _, c := range turn.GetToolCalls() {
			cv := toolCallView{ID: c.GetId(), Name: c.GetName(), Arguments: prettyJSON(c.GetArgumentsJson()), Patch: argumentPatch(c.GetArgumentsJson())}
			if cv.Patch != "" {
				v.Patch = cv.Patch
			}
			tv.ToolCalls = append(tv.ToolCalls, cv)
		}
		v.Turns = append(v.Turns, tv)
	}
	s.render(w, r, "trajectory", "Episode "+t.GetId(), "runs", v)
}

// statusName is a test status without its enum prefix.
func statusName(st records.TestStatus) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "TEST_STATUS_"))
}

func init() {
	// A run's held-out and warm-start episodes are stored under RUN/eval/…
	// and RUN/warm-start: their run is the part before the first slash.
	funcs["baserun"] = func(id string) string { run, _, _ := strings.Cut(id, "/"); return run }
	funcs["status"] = statusName
	funcs["trunc"] = func(n int, s string) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	}
}

// searchReplaceDiff renders the search/replace blocks in text
//
//	path
//	<<<<<<< SEARCH
//	old lines
//	=======
//	new lines
//	>>>>>>> REPLACE
//
// as a unified diff, one hunk per block, lines the two sides share at
// their start and end shown as context.
func searchReplaceDiff(text string) string {
	const (
		search  = "<<<<<<< SEARCH"
		divider = "======="
		replace = ">>>>>>> REPLACE"
	)
	lines := strings.Split(text, "\n")
	var b strings.Builder
	path := ""
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != search {
			continue
		}
		if i > 0 {
			if p := strings.TrimSpace(lines[i-1]); p != "" && !strings.HasPrefix(p, "```") {
				path = p
			}
		}
		var old, new []string
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != divider; j++ {
			old = append(old, lines[j])
		}
		k := j + 1
		for ; k < len(lines) && strings.TrimSpace(lines[k]) != replace; k++ {
			new = append(new, lines[k])
		}
		if k >= len(lines) {
			break // an unfinished block
		}
		pre := 0
		for pre < len(old) && pre < len(new) && old[pre] == new[pre] {
			pre++
		}
		suf := 0
		for suf < len(old)-pre && suf < len(new)-pre && old[len(old)-1-suf] == new[len(new)-1-suf] {
			suf++
		}
		fmt.Fprintf(&b, "--- a/%s\n+++ b/%s\n@@ -%d +%d @@ search/replace\n", path, path, len(old), len(new))
		for _, l := range old[:pre] {
			b.WriteString(" " + l + "\n")
		}
		for _, l := range old[pre : len(old)-suf] {
			b.WriteString("-" + l + "\n")
		}
		for _, l := range new[pre : len(new)-suf] {
			b.WriteString("+" + l + "\n")
		}
		for _, l := range old[len(old)-suf:] {
			b.WriteString(" " + l + "\n")
		}
		i = k
	}
	return b.String()
}
