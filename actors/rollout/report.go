package rollout

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// Evaluation statistics: pass@1 and pass@k per difficulty bucket, with
// confidence intervals from a bootstrap over tasks.

// PassAtK is the unbiased estimator of pass@k from n samples of which c
// passed (Chen et al., 2021): 1 − C(n−c, k) / C(n, k). ok is false when n
// < k, where it is undefined.
func PassAtK(n, c, k int) (float64, bool) {
	if k < 1 || n < k || c < 0 || c > n {
		return 0, false
	}
	if n-c < k {
		return 1, true
	}
	// C(n-c, k)/C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i)
	p := 1.0
	for i := n - c + 1; i <= n; i++ {
		p *= 1 - float64(k)/float64(i)
	}
	return 1 - p, true
}

// TaskOutcome is one task's episodes in an evaluation.
type TaskOutcome struct {
	TaskID      string         `json:"task_id"`
	Environment string         `json:"environment"`
	HintLevel   int            `json:"hint_level"`
	Mode        string         `json:"mode"`
	Samples     int            `json:"samples"` // episodes that are not infrastructure failures
	Passed      int            `json:"passed"`
	Infra       int            `json:"infrastructure_failures"`
	PassAt1     float64        `json:"pass_at_1"`
	PassAtK     *float64       `json:"pass_at_k"` // null when fewer than k samples
	Endings     map[string]int `json:"endings"`
}

// Add counts one episode.
func (t *TaskOutcome) Add(ep *Episode) {
	if t.Endings == nil {
		t.Endings = map[string]int{}
	}
	t.Endings[string(ep.Result.Ending)]++
	if ep.Infra {
		t.Infra++
		return
	}
	t.Samples++
	if ep.Result.Reward >= 1 {
		t.Passed++
	}
}

// Finish computes the task's estimates for k.
func (t *TaskOutcome) Finish(k int) {
	t.PassAt1, t.PassAtK = 0, nil
	if p, ok := PassAtK(t.Samples, t.Passed, 1); ok {
		t.PassAt1 = p
	}
	if p, ok := PassAtK(t.Samples, t.Passed, k); ok {
		t.PassAtK = &p
	}
}

// Estimate is a mean over tasks with a 95% bootstrap interval.
type Estimate struct {
	Mean  float64 `json:"mean"`
	Low   float64 `json:"ci95_low"`
	High  float64 `json:"ci95_high"`
	Tasks int     `json:"tasks"` // tasks that have the estimate
}

func (e Estimate) String() string {
	if e.Tasks == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%5.1f%% [%4.1f, %4.1f]", 100*e.Mean, 100*e.Low, 100*e.High)
}

// Bucket is the tasks of one difficulty bucket: a mode and a hint level.
type Bucket struct {
	Mode      string   `json:"mode"`
	HintLevel *int     `json:"hint_level"` // null for the row of all tasks
	Tasks     int      `json:"tasks"`
	Episodes  int      `json:"episodes"`
	Infra     int      `json:"infrastructure_failures"`
	PassAt1   Estimate `json:"pass_at_1"`
	PassAtK   Estimate `json:"pass_at_k"`
}

// Bootstrap is the mean of values and the 2.5th and 97.5th percentiles of
// the means of resamples drawn with replacement, seeded.
func Bootstrap(values []float64, resamples int, seed uint64) Estimate {
	if len(values) == 0 {
		return Estimate{}
	}
	mean := func(v []float64) float64 {
		s := 0.0
		for _, x := range v {
			s += x
		}
		return s / float64(len(v))
	}
	e := Estimate{Mean: mean(values), Tasks: len(values)}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	means := make([]float64, resamples)
	draw := make([]float64, len(values))
	for r := range means {
		for i := range draw {
			draw[i] = values[rng.IntN(len(values))]
		}
		means[r] = mean(draw)
	}
	slices.Sort(means)
	q := func(p float64) float64 { return means[min(len(means)-1, int(math.Floor(p*float64(len(means)))))] }
	e.Low, e.High = q(0.025), q(0.975)
	return e
}

// Buckets groups task outcomes by (mode, hint level), and adds one row per
// mode for all its tasks.
func Buckets(tasks []*TaskOutcome, k int, seed uint64) []Bucket {
	type key struct {
		mode string
		hint int
	}
	groups := map[key][]*TaskOutcome{}
	modes := map[string][]*TaskOutcome{}
	for _, t := range tasks {
		groups[key{t.Mode, t.HintLevel}] = append(groups[key{t.Mode, t.HintLevel}], t)
		modes[t.Mode] = append(modes[t.Mode], t)
	}
	bucket := func(mode string, hint *int, ts []*TaskOutcome) Bucket {
		b := Bucket{Mode: mode, HintLevel: hint, Tasks: len(ts)}
		var p1, pk []float64
		for _, t := range ts {
			b.Episodes += t.Samples + t.Infra
			b.Infra += t.Infra
			if t.Samples > 0 {
				p1 = append(p1, t.PassAt1)
			}
			if t.PassAtK != nil {
				pk = append(pk, *t.PassAtK)
			}
		}
		b.PassAt1 = Bootstrap(p1, 2000, seed)
		b.PassAtK = Bootstrap(pk, 2000, seed+1)
		return b
	}
	var keys []key
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].mode != keys[j].mode {
			return keys[i].mode < keys[j].mode
		}
		return keys[i].hint < keys[j].hint
	})
	var out []Bucket
	for i, kk := range keys {
		h := kk.hint
		out = append(out, bucket(kk.mode, &h, groups[kk]))
		if i == len(keys)-1 || keys[i+1].mode != kk.mode {
			out = append(out, bucket(kk.mode, nil, modes[kk.mode]))
		}
	}
	return out
}

// WriteTable prints buckets as a table.
func WriteTable(w io.Writer, buckets []Bucket, k int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "MODE\tHINT\tTASKS\tEPISODES\tINFRA\tPASS@1 [95%% CI]\tPASS@%d [95%% CI]\n", k)
	for _, b := range buckets {
		hint := "all"
		if b.HintLevel != nil {
			hint = fmt.Sprint(*b.HintLevel)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", b.Mode, hint, b.Tasks, b.Episodes, b.Infra, b.PassAt1, b.PassAtK)
	}
	return tw.Flush()
}

// FormatEndings prints an endings histogram, most frequent first.
func FormatEndings(m map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range m {
		all = append(all, kv{k, v})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].v != all[j].v {
			return all[i].v > all[j].v
		}
		return all[i].k < all[j].k
	})
	var parts []string
	for _, e := range all {
		parts = append(parts, fmt.Sprintf("%s %d", e.k, e.v))
	}
	return strings.Join(parts, ", ")
}
