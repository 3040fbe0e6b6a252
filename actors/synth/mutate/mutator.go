package mutate

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
)

// Reasons a file, site or mutant is skipped. They are counted in Stats and
// are stable strings: the Synthesizer exports them as metrics.
const (
	ReasonUnknownLanguage = "unknown_language" // no frontend registered for the file
	ReasonParseError      = "parse_error"      // the original file does not parse
	ReasonNoSite          = "no_site"          // an enabled operator has no site in the file
	ReasonLineFilter      = "line_filter"      // a site lies wholly outside the line filter
	ReasonApplyError      = "apply_error"      // Apply failed (a stale or malformed site)
	ReasonUnchanged       = "unchanged"        // the mutant equals the original
	ReasonMutantParse     = "mutant_parse"     // the mutant no longer parses
	ReasonMutantType      = "mutant_type"      // the mutant no longer type-checks as well as the original
	ReasonDuplicate       = "duplicate"        // same PatchKey as an earlier candidate
	ReasonOverlap         = "overlap"          // multi-bug: the picked edits share a line
	ReasonTooFew          = "too_few"          // multi-bug: not enough single-bug candidates to combine
	ReasonMixedLanguage   = "mixed_language"   // multi-bug: the picked mutations are in different languages
)

// Mutation is one applied operator: the bug a candidate plants at one site.
type Mutation struct {
	File     *File
	Operator string
	SiteIdx  int // index of Site in Operator.Sites(File), for replay
	Site     Site
	Edit     Edit
	Seed     uint64 // the run seed the draw was derived from (see Rand)
}

// Features describe a candidate for the difficulty model.
type Features struct {
	Operators    []string // one per mutation, in mutation order
	Files        []string // distinct paths, sorted
	Edits        int      // replacements over all mutations
	LinesTouched int      // per hunk, the larger of lines removed and added, summed
	Functions    []string // enclosing function per mutation ("" at module level)
}

// Candidate is a proposed bug: Patch plants it, Gold (the reverse diff)
// fixes it. Both are git-apply-able unified diffs over every touched file.
type Candidate struct {
	Key      string // PatchKey(Patch)
	Language Language
	// Checked is true when the language check vouched for every file
	// (Frontend.Check's complete); the Synthesizer may validate checked
	// candidates first, since unchecked Go ones can still fail to build.
	Checked   bool
	Patch     string
	Gold      string
	Mutations []Mutation
	Features  Features
}

// Stats counts what Mutate or Combine did and, by reason, what it skipped.
type Stats struct {
	Files      int
	Sites      int
	Tried      int // mutants built and checked
	Candidates int
	Skipped    map[string]int
}

func (s *Stats) skip(reason string, n int) {
	if n == 0 {
		return
	}
	if s.Skipped == nil {
		s.Skipped = map[string]int{}
	}
	s.Skipped[reason] += n
}

// Add folds o into s.
func (s *Stats) Add(o Stats) {
	s.Files += o.Files
	s.Sites += o.Sites
	s.Tried += o.Tried
	s.Candidates += o.Candidates
	for k, v := range o.Skipped {
		s.skip(k, v)
	}
}

// String is a compact one-line summary for logs.
func (s Stats) String() string {
	keys := make([]string, 0, len(s.Skipped))
	for k := range s.Skipped {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "files=%d sites=%d tried=%d candidates=%d", s.Files, s.Sites, s.Tried, s.Candidates)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, s.Skipped[k])
	}
	return b.String()
}

// LineSet is a coverage map for one file: the 1-based lines the test suite
// executes. A nil LineSet means "no filter"; an empty one excludes all.
type LineSet map[int]bool

// Config selects and bounds what a Mutator produces.
type Config struct {
	// Operators are the enabled operators, by name; empty enables all of
	// the file's language.
	Operators []string
	// Draws is how many variants to draw per site (default 1). Duplicate
	// draws are dropped.
	Draws int
	// MaxPerFile caps the candidates from one file (0: no cap). Sites are
	// visited in a seeded random order, so the cap keeps a fair sample.
	MaxPerFile int
}

// Mutator turns files into single-bug candidates and combines those into
// multi-bug ones. It holds no per-file state and is safe for concurrent use.
type Mutator struct {
	cfg Config
}

// New returns a Mutator for cfg.
func New(cfg Config) *Mutator {
	if cfg.Draws <= 0 {
		cfg.Draws = 1
	}
	return &Mutator{cfg: cfg}
}

func (m *Mutator) operators(fe Frontend) []Operator {
	ops := fe.Operators()
	if len(m.cfg.Operators) == 0 {
		return ops
	}
	var out []Operator
	for _, op := range ops {
		if slices.Contains(m.cfg.Operators, op.Name()) {
			out = append(out, op)
		}
	}
	return out
}

type siteRef struct {
	op  Operator
	idx int
	s   Site
}

// Mutate returns the single-bug candidates for f. lines, when non-nil,
// keeps only sites with at least one line in the set (the lines the test
// suite executes: a bug elsewhere cannot fail a test). Candidates are
// ordered by operator then site, deterministic for a given seed; ones that
// do not parse, do not change the file or duplicate an earlier one are
// dropped and counted.
func (m *Mutator) Mutate(f *File, lines LineSet, seed uint64) ([]Candidate, Stats) {
	var st Stats
	st.Files = 1
	fe, ok := Lookup(f.Lang)
	if !ok {
		st.skip(ReasonUnknownLanguage, 1)
		return nil, st
	}
	if err := fe.Parse(f); err != nil {
		st.skip(ReasonParseError, 1)
		return nil, st
	}
	var refs []siteRef
	for _, op := range m.operators(fe) {
		sites := op.Sites(f)
		if len(sites) == 0 {
			st.skip(ReasonNoSite, 1)
			continue
		}
		for i, s := range sites {
			st.Sites++
			if lines != nil && !covered(lines, s) {
				st.skip(ReasonLineFilter, 1)
				continue
			}
			refs = append(refs, siteRef{op, i, s})
		}
	}
	if m.cfg.MaxPerFile > 0 && len(refs) > m.cfg.MaxPerFile {
		// Visit in a seeded order so the cap samples every operator, not
		// just the first few.
		rng := rand.New(rand.NewPCG(seed, uint64(len(f.Src))))
		rng.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
	}
	seen := map[string]bool{}
	var out []Candidate
	for _, ref := range refs {
		if m.cfg.MaxPerFile > 0 && len(out) >= m.cfg.MaxPerFile {
			break
		}
		for d := 0; d < m.cfg.Draws; d++ {
			e, err := ref.op.Apply(f, ref.s, Rand(seed, f.Path, ref.s, d))
			if err != nil {
				st.skip(ReasonApplyError, 1)
				continue
			}
			mu := Mutation{File: f, Operator: ref.op.Name(), SiteIdx: ref.idx, Site: ref.s, Edit: e, Seed: seed}
			c, reason := build(fe, []Mutation{mu})
			st.Tried++
			if reason != "" {
				st.skip(reason, 1)
				continue
			}
			if seen[c.Key] {
				st.skip(ReasonDuplicate, 1)
				continue
			}
			seen[c.Key] = true
			out = append(out, c)
		}
	}
	st.Candidates = len(out)
	return out, st
}

func covered(lines LineSet, s Site) bool {
	for l := s.Line; l <= s.EndLine; l++ {
		if lines[l] {
			return true
		}
	}
	return false
}

// build applies mutations (at most one per line, possibly several per file)
// and renders the candidate, or returns the reason it is not one.
func build(fe Frontend, ms []Mutation) (Candidate, string) {
	byFile := map[*File][]Replacement{}
	var files []*File
	for _, mu := range ms {
		if _, ok := byFile[mu.File]; !ok {
			files = append(files, mu.File)
		}
		byFile[mu.File] = append(byFile[mu.File], mu.Edit.Replacements...)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	var patch, gold strings.Builder
	feats := Features{}
	checked := true
	for _, f := range files {
		rs := byFile[f]
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start < rs[j].Start })
		for i := 1; i < len(rs); i++ {
			if rs[i].Start < rs[i-1].End {
				return Candidate{}, ReasonOverlap
			}
		}
		mutated := ApplyReplacements(f.Src, rs)
		if string(mutated) == string(f.Src) {
			return Candidate{}, ReasonUnchanged
		}
		ffe := fe
		if ffe == nil || ffe.Language() != f.Lang {
			var ok bool
			if ffe, ok = Lookup(f.Lang); !ok {
				return Candidate{}, ReasonUnknownLanguage
			}
		}
		complete, err := ffe.Check(f, mutated)
		if err != nil {
			var rej *Rejection
			if errors.As(err, &rej) {
				return Candidate{}, rej.Reason
			}
			return Candidate{}, ReasonMutantParse
		}
		checked = checked && complete
		p := UnifiedDiff(f.Path, f.Src, rs)
		if p == "" {
			return Candidate{}, ReasonUnchanged
		}
		patch.WriteString(p)
		gold.WriteString(UnifiedDiff(f.Path, mutated, Invert(rs)))
		feats.Files = append(feats.Files, f.Path)
		feats.LinesTouched += linesTouched(p)
		feats.Edits += len(rs)
	}
	for _, mu := range ms {
		feats.Operators = append(feats.Operators, mu.Operator)
		feats.Functions = append(feats.Functions, mu.Site.Func.Name)
	}
	c := Candidate{
		Key:       PatchKey(patch.String()),
		Language:  ms[0].File.Lang,
		Checked:   checked,
		Patch:     patch.String(),
		Gold:      gold.String(),
		Mutations: ms,
		Features:  feats,
	}
	return c, ""
}

// linesTouched sums, per hunk, the larger of lines removed and added: a
// changed line counts once, a deleted block by its length.
func linesTouched(patch string) int {
	total, del, add := 0, 0, 0
	flush := func() { total += max(del, add); del, add = 0, 0 }
	for line := range strings.Lines(patch) {
		switch {
		case strings.HasPrefix(line, "@@"), strings.HasPrefix(line, "diff --git"):
			flush()
		case strings.HasPrefix(line, "---"), strings.HasPrefix(line, "+++"):
		case strings.HasPrefix(line, "-"):
			del++
		case strings.HasPrefix(line, "+"):
			add++
		case strings.HasPrefix(line, " "):
			flush()
		}
	}
	flush()
	return total
}

// Combine builds up to n multi-bug candidates, each planting k (≥2)
// single-bug candidates from pool at once, possibly in different files: a
// harder tier, since one failing test no longer points at one line. The
// picked mutations must not share a line; the combined files are checked
// again (two valid edits can make an invalid file together). Deterministic
// for a given pool order and seed.
func (m *Mutator) Combine(pool []Candidate, k, n int, seed uint64) ([]Candidate, Stats) {
	var st Stats
	var singles []Candidate
	for _, c := range pool {
		if len(c.Mutations) == 1 {
			singles = append(singles, c)
		}
	}
	if k < 2 || len(singles) < k || n <= 0 {
		st.skip(ReasonTooFew, 1)
		return nil, st
	}
	rng := rand.New(rand.NewPCG(seed, uint64(k)<<32|uint64(n)))
	seen := map[string]bool{}
	var out []Candidate
	for attempt := 0; attempt < 20*n && len(out) < n; attempt++ {
		idx := rng.Perm(len(singles))[:k]
		sort.Ints(idx)
		var ms []Mutation
		overlap, mixed := false, false
		for _, i := range idx {
			mu := singles[i].Mutations[0]
			if len(ms) > 0 && mu.File.Lang != ms[0].File.Lang {
				mixed = true
			}
			for _, prev := range ms {
				if prev.File == mu.File && shareLine(prev, mu) {
					overlap = true
				}
			}
			ms = append(ms, mu)
		}
		st.Tried++
		if mixed {
			st.skip(ReasonMixedLanguage, 1)
			continue
		}
		if overlap {
			st.skip(ReasonOverlap, 1)
			continue
		}
		c, reason := build(nil, ms)
		if reason != "" {
			st.skip(reason, 1)
			continue
		}
		if seen[c.Key] {
			st.skip(ReasonDuplicate, 1)
			continue
		}
		seen[c.Key] = true
		out = append(out, c)
	}
	st.Candidates = len(out)
	return out, st
}

func shareLine(a, b Mutation) bool {
	al0, al1 := editLines(a)
	bl0, bl1 := editLines(b)
	return al0 <= bl1 && bl0 <= al1
}

func editLines(mu Mutation) (int, int) {
	rs := mu.Edit.Replacements
	f := mu.File
	return f.Line(rs[0].Start), f.Line(max(rs[len(rs)-1].Start, rs[len(rs)-1].End-1))
}
