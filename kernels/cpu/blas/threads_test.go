package blas

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestThreads(t *testing.T) {
	n := Threads()
	if n < 1 || n > runtime.NumCPU() || n > runtime.GOMAXPROCS(0) {
		t.Fatalf("Threads() = %d with NumCPU %d, GOMAXPROCS %d", n, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if got := Threads(); got != 1 {
		t.Fatalf("Threads() = %d with GOMAXPROCS 1", got)
	}
}

// TestRunBounded runs many Run calls at once, each piece blocking a while,
// and counts the pieces running together: never more than the callers plus
// Threads()−1 helpers, every piece run exactly once, and the helpers all
// given back.
func TestRunBounded(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // Threads() = min(CPUs, 4)
	threads := Threads()
	const callers, pieces = 6, 20
	var running, peak atomic.Int64
	var done [callers][pieces]atomic.Int32
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			Run(pieces, func(i int) {
				n := running.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				time.Sleep(200 * time.Microsecond)
				running.Add(-1)
				done[c][i].Add(1)
			})
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > int64(callers+threads-1) {
		t.Fatalf("%d pieces ran at once: more than %d callers + %d helpers", p, callers, threads-1)
	}
	for c := range done {
		for i := range done[c] {
			if n := done[c][i].Load(); n != 1 {
				t.Fatalf("caller %d piece %d ran %d times", c, i, n)
			}
		}
	}
	if h := helpers.Load(); h != 0 {
		t.Fatalf("%d helpers not given back", h)
	}
	// One caller alone gets every helper there is.
	var seen sync.Map
	Run(64, func(int) {
		seen.Store(goid(), true)
		time.Sleep(100 * time.Microsecond)
	})
	n := 0
	seen.Range(func(any, any) bool { n++; return true })
	if n > threads {
		t.Fatalf("one Run used %d goroutines, Threads() is %d", n, threads)
	}
	Run(0, func(int) { t.Fatal("a piece of nothing ran") })
}

// goid is the current goroutine's id, from its stack header.
func goid() string {
	b := make([]byte, 32)
	b = b[:runtime.Stack(b, false)]
	for i := len("goroutine "); i < len(b); i++ {
		if b[i] == ' ' {
			return string(b[:i])
		}
	}
	return string(b)
}

// TestRunPanics: a piece that panics on the caller's goroutine still
// gives the helpers back.
func TestRunPanics(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		caller := goid()
		var panicking atomic.Bool
		Run(8, func(int) {
			if goid() == caller { // a panic on a helper would end the process
				panicking.Store(true)
				panic("bad argument")
			}
			for !panicking.Load() { // each helper holds its piece until then
				time.Sleep(50 * time.Microsecond)
			}
		})
	}()
	if h := helpers.Load(); h != 0 {
		t.Fatalf("%d helpers not given back after a panic", h)
	}
}
