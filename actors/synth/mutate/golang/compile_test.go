package golang

import (
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
)

// The compile checks type-check mutants the way the compiler would: the
// whole package, with imports type-checked from GOROOT source. The importer
// caches what it loaded, so it is shared (and not safe for concurrent use).
var (
	srcMu       sync.Mutex
	srcFset     = token.NewFileSet()
	srcImporter = importer.ForCompiler(srcFset, "source", nil)
)

// compileErr type-checks one package made of files (name → source) and
// returns the first error, or nil when it compiles.
func compileErr(files map[string][]byte) error {
	srcMu.Lock()
	defer srcMu.Unlock()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var asts []*ast.File
	for _, n := range names {
		f, err := parser.ParseFile(srcFset, n, files[n], parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		asts = append(asts, f)
	}
	var first error
	conf := types.Config{Importer: srcImporter, Error: func(err error) {
		if first == nil {
			first = err
		}
	}}
	conf.Check(asts[0].Name.Name, srcFset, asts, nil)
	return first
}

// stdPackage reads the non-test Go files of a GOROOT package that build on
// this platform.
func stdPackage(t testing.TB, path string) map[string][]byte {
	t.Helper()
	dir := filepath.Join(build.Default.GOROOT, "src", filepath.FromSlash(path))
	pkg, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		t.Skipf("GOROOT package %s: %v", path, err)
	}
	files := map[string][]byte{}
	for _, n := range pkg.GoFiles {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		files[n] = b
	}
	if err := compileErr(files); err != nil {
		t.Skipf("GOROOT package %s does not type-check from source here: %v", path, err)
	}
	return files
}

func TestCompileHelper(t *testing.T) {
	if err := compileErr(map[string][]byte{"a.go": []byte("package a\nimport \"strings\"\nvar X = strings.Repeat(\"a\", 2)\n")}); err != nil {
		t.Fatal(err)
	}
	err := compileErr(map[string][]byte{"a.go": []byte("package a\nfunc f() { x := 1 }\n")})
	if err == nil {
		t.Fatal("unused variable compiled")
	}
}
