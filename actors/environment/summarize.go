package environment

import (
	"fmt"
	"sort"
	"strings"

	messages "github.com/frognano/frognano/actors/messages/v1"
)

// Summarize counts a report's results by status ("3 fail, 197 pass").
func Summarize(r *messages.TestReport) string {
	counts := map[string]int{}
	for _, res := range r.GetResults() {
		counts[strings.ToLower(strings.TrimPrefix(res.Status.String(), "TEST_STATUS_"))]++
	}
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
