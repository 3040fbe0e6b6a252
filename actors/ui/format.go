package ui

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/frognano/frognano/persistence"
)

func queryEscape(s string) string { return url.QueryEscape(s) }

// httpError answers an API request's store error with a plain status.
func httpError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, persistence.ErrInvalid):
		code = http.StatusBadRequest
	}
	http.Error(w, err.Error(), code)
}

var funcs = template.FuncMap{
	"q":      queryEscape,
	"prefix": func() string { return Prefix },
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format("2006-01-02 15:04:05")
	},
	"ns": func(n int64) string {
		if n == 0 {
			return "-"
		}
		return time.Unix(0, n).Local().Format("2006-01-02 15:04:05")
	},
	"f3":   func(x float64) string { return fmt.Sprintf("%.3f", x) },
	"f1":   func(x float64) string { return fmt.Sprintf("%.1f", x) },
	"num":  func(x float64) string { return fmt.Sprintf("%.6g", x) },
	"pct":  func(x float64) string { return fmt.Sprintf("%.1f%%", 100*x) },
	"join": strings.Join,
	"diff": renderDiff,
	// barwidth is a share's bar in pixels (0-200).
	"barwidth": func(x float64) int { return int(200 * min(1, max(0, x))) },
	"bytes": func(n uint64) string {
		const gib = 1 << 30
		return fmt.Sprintf("%.1f GiB", float64(n)/gib)
	},
}

// renderDiff marks up a unified diff line by line: file headers, hunk
// headers, additions and deletions each get a class.
func renderDiff(d string) template.HTML {
	var b strings.Builder
	b.WriteString(`<pre class="diff">`)
	for _, line := range strings.SplitAfter(d, "\n") {
		if line == "" {
			continue
		}
		class := "ctx"
		switch {
		case strings.HasPrefix(line, "diff "), strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "+++ "),
			strings.HasPrefix(line, "index "):
			class = "file"
		case strings.HasPrefix(line, "@@"):
			class = "hunk"
		case strings.HasPrefix(line, "+"):
			class = "add"
		case strings.HasPrefix(line, "-"):
			class = "del"
		}
		fmt.Fprintf(&b, `<span class="%s">%s</span>`, class, template.HTMLEscapeString(line))
	}
	b.WriteString(`</pre>`)
	return template.HTML(b.String())
}

// looksLikeDiff says whether text holds a unified diff (a patch the model
// wrote, in its answer or a tool call).
func looksLikeDiff(s string) bool {
	return strings.Contains(s, "\n@@ ") || strings.HasPrefix(s, "@@ ") ||
		(strings.Contains(s, "--- ") && strings.Contains(s, "\n+++ "))
}
