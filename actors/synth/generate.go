package synth

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/frognano/frognano/actors/synth/mutate"
)

// candidate is a mutate.Candidate with the tests that screen it.
type candidate struct {
	mutate.Candidate
	// tests are the baseline-passing tests that execute the mutated lines
	// (see Coverage.TestsFor), sorted.
	tests []string
}

// checkOperators splits the requested operator names into those lang
// offers and those it has no form of (counted, not an error). An unknown
// name is an error: it is a typo, and silently ignoring it would run every
// other operator instead. An empty request means every operator.
func checkOperators(lang mutate.Language, names []string) (usable []string, notApplicable int, err error) {
	fe, ok := mutate.Lookup(lang)
	if !ok {
		return nil, 0, fmt.Errorf("%w: no mutation operators for language %q", ErrBadRequest, lang)
	}
	if len(names) == 0 {
		for _, op := range fe.Operators() {
			usable = append(usable, op.Name())
		}
		return usable, 0, nil
	}
	na := fe.NotApplicable()
	for _, n := range names {
		switch {
		case !slices.Contains(mutate.OperatorNames, n):
			return nil, 0, fmt.Errorf("%w: unknown operator %q (known: %v)", ErrBadRequest, n, mutate.OperatorNames)
		case na[n] != "":
			notApplicable++
		default:
			usable = append(usable, n)
		}
	}
	return usable, notApplicable, nil
}

// generate proposes single-bug candidates for every covered source file of
// lang in files (path → content), keeps those some baseline-passing test
// can notice, and shuffles them with seed so that a run samples every file
// and operator instead of exhausting the first. Everything skipped is
// counted in rejected under mutate's or this package's reason names.
func generate(files map[string][]byte, cov *Coverage, lang mutate.Language, ops []string, seed uint64, rejected map[string]int) []candidate {
	m := mutate.New(mutate.Config{Operators: ops})
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out []candidate
	for _, p := range paths {
		f, err := mutate.NewFile(p, files[p], lang)
		if err != nil {
			rejected[mutate.ReasonUnknownLanguage]++
			continue
		}
		cands, st := m.Mutate(f, cov.Lines(p), seed)
		for reason, n := range st.Skipped {
			if reason == mutate.ReasonLineFilter {
				continue // sites on lines no test runs: the point of targeting, not a rejection
			}
			rejected[reason] += n
		}
		for _, c := range cands {
			tests := screeningTests(cov, c)
			if len(tests) == 0 {
				rejected[ReasonNotCovered]++
				continue
			}
			out = append(out, candidate{Candidate: c, tests: tests})
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x5f3759df))
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// screeningTests is the union, over a candidate's mutations, of the tests
// that can notice each.
func screeningTests(cov *Coverage, c mutate.Candidate) []string {
	var all []string
	for _, mu := range c.Mutations {
		s := mu.Site
		all = append(all, cov.TestsFor(mu.File.Path, s.Line, s.EndLine, s.Func.StartLine, s.Func.EndLine)...)
	}
	sort.Strings(all)
	return slices.Compact(all)
}

// combine makes multi-bug candidates from singles that screening showed to
// matter: each planted bug fails some test on its own, so a combined task
// has several real bugs, not one bug and an equivalent mutant.
func combine(pool []candidate, bugs, n int, seed uint64, cov *Coverage, rejected map[string]int) []candidate {
	singles := make([]mutate.Candidate, len(pool))
	for i, c := range pool {
		singles[i] = c.Candidate
	}
	cands, st := mutate.New(mutate.Config{}).Combine(singles, bugs, n, seed)
	for reason, k := range st.Skipped {
		rejected[reason] += k
	}
	out := make([]candidate, 0, len(cands))
	for _, c := range cands {
		out = append(out, candidate{Candidate: c, tests: screeningTests(cov, c)})
	}
	return out
}
