package synth

import (
	"path"
	"regexp"
	"strings"
)

// Test distance: how far a FAIL_TO_PASS test is from a bug, statically
// estimated from source text, smaller is easier. For one test and one bug:
//
//	0  the test function names the buggy function (calls it directly; for a
//	   constructor or operator method, names its class), in a test module
//	   that imports the buggy module (Go: same package, or imports it)
//	1  the test module imports the buggy module (or its top-level package)
//	   but the test does not name the function: the bug is reached through
//	   other code; module-level bugs are at best 1
//	2  the test module does not import the buggy module at all
//
// A task's distance is the smallest over its FAIL_TO_PASS tests and bugs:
// the easiest path from a failing test to a bug.

// testSource is one test function's source and its module's imports.
type testSource struct {
	body    string
	imports string // the whole test file(s); import checks search it
	pkgDir  string // Go: the test's package directory
}

// bugSite is what distance needs of one planted bug.
type bugSite struct {
	path     string
	module   string // Python module / Go import path
	function string
}

func distance(t testSource, b bugSite, lang string) int {
	if t.body == "" && t.imports == "" {
		return 2
	}
	imports := false
	if lang == "go" {
		imports = t.pkgDir == path.Dir(b.path) || strings.Contains(t.imports, `"`+b.module+`"`)
	} else {
		top, _, _ := strings.Cut(b.module, ".")
		imports = top != "" && regexp.MustCompile(`(?m)^\s*(from|import)\s+`+regexp.QuoteMeta(top)+`\b`).MatchString(t.imports)
	}
	if !imports {
		return 2
	}
	name := callName(b.function, lang)
	if name != "" && regexp.MustCompile(`\b`+regexp.QuoteMeta(name)+`\b`).MatchString(t.body) {
		return 0
	}
	return 1
}

// callName is how a test would name a function: the method or function
// name, or the class for constructors and operator methods.
func callName(fn, lang string) string {
	if fn == "" {
		return ""
	}
	if lang == "go" {
		// "(*T).M", "T.M", "F"
		if i := strings.LastIndex(fn, "."); i >= 0 {
			return fn[i+1:]
		}
		if fn == "init" {
			return ""
		}
		return fn
	}
	parts := strings.Split(fn, ".")
	last := parts[len(parts)-1]
	if strings.HasPrefix(last, "__") && strings.HasSuffix(last, "__") {
		if len(parts) > 1 {
			return parts[len(parts)-2]
		}
		return ""
	}
	return last
}

// pythonModule is the dotted module of a repository file ("src/" layouts
// dropped, packages named by their __init__).
func pythonModule(p string) string {
	p = strings.TrimSuffix(strings.TrimPrefix(p, "src/"), ".py")
	p = strings.TrimSuffix(p, "/__init__")
	return strings.ReplaceAll(p, "/", ".")
}

// goPackage is the import path of a repository file's package.
func goPackage(module, p string) string {
	dir := path.Dir(p)
	if dir == "." {
		return module
	}
	return module + "/" + dir
}

var pyDef = regexp.MustCompile(`^(\s*)(async\s+)?def\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(`)

// pythonTestBody returns the source of every def named name in src (a test
// method name can repeat across classes; their union is used).
func pythonTestBody(src, name string) string {
	lines := strings.Split(src, "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		m := pyDef.FindStringSubmatch(lines[i])
		if m == nil || m[3] != name {
			continue
		}
		indent := len(m[1])
		out.WriteString(lines[i] + "\n")
		for j := i + 1; j < len(lines); j++ {
			l := lines[j]
			if strings.TrimSpace(l) != "" && len(l)-len(strings.TrimLeft(l, " \t")) <= indent {
				break
			}
			out.WriteString(l + "\n")
		}
	}
	return out.String()
}

// goTestBody returns the source of `func name(` in src up to its closing
// brace at column 0.
func goTestBody(src, name string) string {
	i := strings.Index(src, "\nfunc "+name+"(")
	if i < 0 {
		return ""
	}
	rest := src[i+1:]
	if j := strings.Index(rest, "\n}\n"); j >= 0 {
		return rest[:j+3]
	}
	return rest
}
