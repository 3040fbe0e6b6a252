package environment

import (
	"fmt"
	"sort"
	"strings"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// Summarize counts a report's results by status ("3 fail, 197 pass").
func Summarize(r *records.TestReport) string {
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
