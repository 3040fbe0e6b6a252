// Package mutate proposes bugs by procedural mutation of real source files.
//
// An Operator is one small, named kind of bug (a flipped comparison, a
// removed guard, …). It lists every Site where it applies in a File and turns
// a site into an Edit: byte-range replacements on the original source, so
// formatting and comments outside the edit survive byte for byte and the
// bug and its fix are small, reviewable diffs. The Mutator runs operators
// over a file, keeps the mutants that still parse (and, for Go, still
// type-check as well as the original did), and emits candidates as unified
// diffs with their gold (reverse) patch and difficulty features.
//
// Languages plug in through Register: the python and golang subpackages
// register a Frontend (parser, checker, operators) from init, the way
// database/sql drivers do, so this package has no cgo and no grammar in it.
// Import them for their side effect where candidates are generated.
package mutate

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
)

// Language names a source language. The value is stored in task records
// (Task.language), so it never changes once released.
type Language string

// The languages frognano synthesizes tasks for.
const (
	Python Language = "python"
	Go     Language = "go"
)

// Operator names. They are stable: task provenance, difficulty features and
// the FrontierEstimator's statistics key on them.
const (
	FlipComparison = "flip_comparison"
	SwapArithmetic = "swap_arithmetic"
	SwapBoolean    = "swap_boolean"
	OffByOne       = "off_by_one"
	NegateCond     = "negate_condition"
	RemoveStmt     = "remove_statement"
	RemoveBranch   = "remove_branch"
	RemoveReturn   = "remove_return"
	SwapArgs       = "swap_arguments"
	ChangeConst    = "change_constant"
	SwapVariable   = "swap_variable"
	RemoveGuard    = "remove_guard"
	UnwrapTry      = "unwrap_try"
	BreakLoopExit  = "break_loop_exit"
	ChangeDefault  = "change_default"
)

// OperatorNames lists every operator kind in a fixed order; a language that
// cannot support one says why in its Frontend's NotApplicable.
var OperatorNames = []string{
	FlipComparison, SwapArithmetic, SwapBoolean, OffByOne, NegateCond,
	RemoveStmt, RemoveBranch, RemoveReturn, SwapArgs, ChangeConst,
	SwapVariable, RemoveGuard, UnwrapTry, BreakLoopExit, ChangeDefault,
}

// Operator is one kind of procedural bug in one language.
//
// Sites must be deterministic (same file → same sites in the same order) and
// must not panic on any input; a file that does not parse has no sites.
// Apply must be a pure function of (file, site, rng), so a mutation can be
// replayed from its record.
type Operator interface {
	Name() string
	Language() Language
	Sites(f *File) []Site
	Apply(f *File, s Site, rng *rand.Rand) (Edit, error)
}

// Func is the function enclosing a site. Coverage targeting and the
// "distance from the failing test" feature work per function, so every site
// carries it. Name is "" at module/package level; methods are qualified
// ("Class.method" in Python, "(*T).M" or "T.M" in Go).
type Func struct {
	Name      string
	StartLine int // 1-based; 0 at module level
	EndLine   int
}

// Site is one place an operator applies.
//
// Variants are every edit the operator can make here, computed eagerly so a
// Site is self-contained: Apply only picks one with the seeded rng, and a
// record of (path, operator, site index, seed) replays exactly.
type Site struct {
	Operator string
	Start    int // byte range of the targeted syntax in the original source
	End      int
	Line     int // 1-based, inclusive line span of [Start, End)
	EndLine  int
	Func     Func
	Node     string // syntax node kind at the site, for features and debugging
	Variants []Edit
}

// Replacement swaps the bytes Src[Start:End] (which must equal Old) for New.
type Replacement struct {
	Start int
	End   int
	Old   string
	New   string
}

// Edit is one mutation: non-overlapping replacements on the original source,
// sorted by Start. Summary says what changed ("`<` → `>=`"); it is for logs
// and features, never for a problem statement (it would leak the fix).
type Edit struct {
	Replacements []Replacement
	Summary      string
}

// ErrStaleSite is returned by Apply when the site does not belong to the
// operator or no longer matches the file's bytes.
var ErrStaleSite = errors.New("mutate: site does not match file")

// Pick is the Apply shared by every operator in this module: check that the
// site belongs to op and still matches the file, then choose one variant
// with rng.
func Pick(op Operator, f *File, s Site, rng *rand.Rand) (Edit, error) {
	if s.Operator != op.Name() || f.Lang != op.Language() {
		return Edit{}, fmt.Errorf("%w: operator %s/%s got site of %s in %s file", ErrStaleSite, op.Language(), op.Name(), s.Operator, f.Lang)
	}
	if len(s.Variants) == 0 {
		return Edit{}, fmt.Errorf("%w: site has no variants", ErrStaleSite)
	}
	e := s.Variants[0]
	if len(s.Variants) > 1 {
		e = s.Variants[rng.IntN(len(s.Variants))]
	}
	if err := f.validate(e); err != nil {
		return Edit{}, err
	}
	return e, nil
}

// validate checks that e's replacements are sorted, disjoint, inside the
// file, match its bytes and change something.
func (f *File) validate(e Edit) error {
	if len(e.Replacements) == 0 {
		return fmt.Errorf("%w: empty edit", ErrStaleSite)
	}
	prev := -1
	changed := false
	for _, r := range e.Replacements {
		if r.Start < 0 || r.End < r.Start || r.End > len(f.Src) || r.Start < prev {
			return fmt.Errorf("%w: replacement [%d,%d) out of order or range", ErrStaleSite, r.Start, r.End)
		}
		if string(f.Src[r.Start:r.End]) != r.Old {
			return fmt.Errorf("%w: bytes at [%d,%d) are not %q", ErrStaleSite, r.Start, r.End, r.Old)
		}
		if r.Old != r.New {
			changed = true
		}
		prev = r.End
	}
	if !changed {
		return fmt.Errorf("%w: edit changes nothing", ErrStaleSite)
	}
	return nil
}

// Frontend is what a language contributes: a parser for the original, a
// check for mutants, and its operators.
type Frontend interface {
	Language() Language
	// Extensions are the file-name suffixes (".py") the language claims.
	Extensions() []string
	// Parse reports whether the original file is usable at all.
	Parse(f *File) error
	// Check reports whether mutated still builds as well as orig does; a
	// *Rejection says why not. complete says the check saw everything the
	// edit touched: for Go, every expression in it had a known type, so the
	// mutant compiles wherever the original does; false when part of it
	// depends on what one file cannot show (an imported package's API), and
	// only the sandbox build will tell.
	Check(orig *File, mutated []byte) (complete bool, err error)
	Operators() []Operator
	// NotApplicable maps the OperatorNames this language does not offer to
	// the reason (Go has no default arguments).
	NotApplicable() map[string]string
}

// Rejection is a Check failure with the stats reason it counts under.
type Rejection struct {
	Reason string
	Err    error
}

func (r *Rejection) Error() string { return r.Reason + ": " + r.Err.Error() }
func (r *Rejection) Unwrap() error { return r.Err }

var (
	registryMu sync.RWMutex
	registry   = map[Language]Frontend{}
)

// Register makes a language available to NewFile and the Mutator. It panics
// on a duplicate, which is a wiring bug.
func Register(fe Frontend) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[fe.Language()]; dup {
		panic("mutate: language registered twice: " + string(fe.Language()))
	}
	registry[fe.Language()] = fe
}

// Lookup returns the registered frontend for lang.
func Lookup(lang Language) (Frontend, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	fe, ok := registry[lang]
	return fe, ok
}

// Languages lists the registered languages, sorted.
func Languages() []Language {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]Language, 0, len(registry))
	for l := range registry {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Detect returns the registered language claiming path's extension.
func Detect(path string) (Language, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	best, bestLen := Language(""), 0
	for l, fe := range registry {
		for _, ext := range fe.Extensions() {
			if len(ext) > bestLen && len(path) >= len(ext) && path[len(path)-len(ext):] == ext {
				best, bestLen = l, len(ext)
			}
		}
	}
	return best, bestLen > 0
}

// Rand returns the generator for one draw at one site. The seed is derived
// from (path, site, run seed, draw) so that any mutation can be replayed
// from its record and adding a file or an operator does not shift the
// randomness of the others.
func Rand(seed uint64, path string, s Site, draw int) *rand.Rand {
	h := sha256.New()
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], seed)
	h.Write(buf[:])
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write([]byte(s.Operator))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(s.Start) + ":" + strconv.Itoa(s.End) + ":" + strconv.Itoa(draw)))
	sum := h.Sum(nil)
	return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])))
}
