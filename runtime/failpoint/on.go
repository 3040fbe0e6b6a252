//go:build failpoints

package failpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether this build has failpoints compiled in.
const Enabled = true

// term is one armed point.
type term struct {
	action  string // error, panic, sleep, kill, off
	sleep   time.Duration
	percent float64 // 0 < percent <= 100
	times   int     // at most this many firings; 0: unlimited
	from    int     // first hit that may fire (1-based)

	hits, fired int
}

var (
	mu     sync.Mutex
	points map[string]*term
	// setupErr is a malformed FROGNANO_FAILPOINTS: every Inject reports it,
	// so a mistyped fault is never silently a run without faults.
	setupErr error
)

func init() {
	points, setupErr = Parse(os.Getenv(Env))
	if setupErr != nil {
		fmt.Fprintf(os.Stderr, "failpoint: %s: %v\n", Env, setupErr)
	} else if len(points) > 0 {
		fmt.Fprintf(os.Stderr, "failpoint: armed %s\n", os.Getenv(Env))
	}
}

// Parse reads a FROGNANO_FAILPOINTS value.
func Parse(s string) (map[string]*term, error) {
	out := map[string]*term{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, spec, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want name=term", item)
		}
		t, err := parseTerm(spec)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

func parseTerm(s string) (*term, error) {
	t := &term{percent: 100, from: 1}
	orig := s
	if i := strings.Index(s, "%"); i >= 0 {
		p, err := strconv.ParseFloat(s[:i], 64)
		if err != nil || p <= 0 || p > 100 {
			return nil, fmt.Errorf("%q: bad percentage", orig)
		}
		t.percent, s = p, s[i+1:]
	}
	if i := strings.Index(s, "*"); i >= 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: bad count", orig)
		}
		t.times, s = n, s[i+1:]
	}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		k, err := strconv.Atoi(s[i+1:])
		if err != nil || k < 1 {
			return nil, fmt.Errorf("%q: bad first hit", orig)
		}
		t.from, s = k, s[:i]
	}
	switch {
	case s == "error" || s == "panic" || s == "kill" || s == "off":
		t.action = s
	case strings.HasPrefix(s, "sleep(") && strings.HasSuffix(s, ")"):
		ms, err := strconv.Atoi(s[len("sleep(") : len(s)-1])
		if err != nil || ms < 0 {
			return nil, fmt.Errorf("%q: bad sleep", orig)
		}
		t.action, t.sleep = "sleep", time.Duration(ms)*time.Millisecond
	default:
		return nil, fmt.Errorf("%q: unknown action (error, panic, sleep(MS), kill, off)", orig)
	}
	return t, nil
}

// Inject runs the action armed for name, if any.
func Inject(name string) error {
	if setupErr != nil {
		return fmt.Errorf("failpoint %s: %s: %w", name, Env, setupErr)
	}
	mu.Lock()
	t := points[name]
	if t == nil {
		mu.Unlock()
		return nil
	}
	t.hits++
	hit := t.hits
	fire := t.action != "off" && hit >= t.from && (t.times == 0 || t.fired < t.times) &&
		(t.percent >= 100 || rand.Float64()*100 < t.percent)
	if fire {
		t.fired++
	}
	mu.Unlock()
	if !fire {
		return nil
	}
	what := t.action
	if what == "sleep" {
		what = fmt.Sprintf("sleep(%d)", t.sleep.Milliseconds())
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: %s (hit %d)\n", name, what, hit)
	switch t.action {
	case "error":
		return fmt.Errorf("failpoint %s (hit %d): %w", name, hit, ErrInjected)
	case "panic":
		panic(fmt.Sprintf("failpoint %s (hit %d)", name, hit))
	case "sleep":
		time.Sleep(t.sleep)
	case "kill":
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	return nil
}
