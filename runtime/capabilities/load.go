package capabilities

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// DefaultLoadInterval is how long a load sample is reused: a node's facts
// are read at every heartbeat (to publish them in the cluster's gossip
// state) and by every local caller, and the machine's figures do not
// change faster than this anyway.
const DefaultLoadInterval = time.Second

// LoadOptions configures a LoadMeter. The zero value reads this machine.
type LoadOptions struct {
	// ProcDir is where loadavg, stat and meminfo are read (default /proc);
	// tests point it at fixtures.
	ProcDir string
	// Interval is how long a sample is reused (default DefaultLoadInterval).
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// LoadMeter samples the machine's load: load averages, the share of CPU
// time busy since the previous sample, and available memory. It is safe
// for concurrent use; samples younger than the interval are reused.
type LoadMeter struct {
	o LoadOptions

	mu     sync.Mutex
	last   *rtmsg.Load
	lastAt time.Time
	// prev is the /proc/stat reading of the previous sample (ok: one was
	// read), the baseline of the next cpu_busy.
	prev   cpuTimes
	prevOK bool
}

// NewLoadMeter returns a meter; its first sample has no cpu_busy (there is
// no earlier reading to measure from), every later one has.
func NewLoadMeter(o LoadOptions) *LoadMeter {
	if o.ProcDir == "" {
		o.ProcDir = "/proc"
	}
	if o.Interval <= 0 {
		o.Interval = DefaultLoadInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &LoadMeter{o: o}
}

// Sample returns the machine's load now (a copy), with the available
// memory at most memoryCap (a node's Capabilities.memory_bytes; 0: no
// cap). A figure that cannot be read is left absent.
func (m *LoadMeter) Sample(memoryCap uint64) *rtmsg.Load {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Now()
	if m.last != nil && now.Sub(m.lastAt) < m.o.Interval {
		return m.capped(memoryCap)
	}
	l := &rtmsg.Load{SampledUnixNano: now.UnixNano()}
	if l1, l5, err := readLoadavg(filepath.Join(m.o.ProcDir, "loadavg")); err == nil {
		l.Load1, l.Load5 = proto.Float64(l1), proto.Float64(l5)
	}
	if t, err := readCPUTimes(filepath.Join(m.o.ProcDir, "stat")); err == nil {
		if m.prevOK {
			if busy, ok := t.busySince(m.prev); ok {
				l.CpuBusy = proto.Float64(busy)
			} else if m.last.CpuBusy != nil {
				// No tick passed since the previous reading: keep its figure
				// and its baseline.
				l.CpuBusy = proto.Float64(m.last.GetCpuBusy())
				t = m.prev
			}
		}
		m.prev, m.prevOK = t, true
	}
	if avail, err := readMeminfoKey(filepath.Join(m.o.ProcDir, "meminfo"), "MemAvailable"); err == nil {
		l.MemoryAvailableBytes = proto.Uint64(avail)
	}
	m.last, m.lastAt = l, now
	return m.capped(memoryCap)
}

func (m *LoadMeter) capped(memoryCap uint64) *rtmsg.Load {
	l := proto.Clone(m.last).(*rtmsg.Load)
	if l.MemoryAvailableBytes != nil && memoryCap > 0 && l.GetMemoryAvailableBytes() > memoryCap {
		l.MemoryAvailableBytes = proto.Uint64(memoryCap)
	}
	return l
}

// readLoadavg reads the 1- and 5-minute load averages from /proc/loadavg
// ("0.52 0.58 0.59 1/467 12345").
func readLoadavg(path string) (l1, l5 float64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("%s: %q is not a load average line", path, strings.TrimSpace(string(b)))
	}
	if l1, err = strconv.ParseFloat(f[0], 64); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	if l5, err = strconv.ParseFloat(f[1], 64); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	return l1, l5, nil
}

// cpuTimes are /proc/stat's aggregate CPU counters, in clock ticks.
type cpuTimes struct{ total, idle uint64 }

// busySince is the share of the ticks since prev that were not idle;
// false when no tick passed (or the counters went back).
func (t cpuTimes) busySince(prev cpuTimes) (float64, bool) {
	if t.total <= prev.total || t.idle < prev.idle {
		return 0, false
	}
	dt, di := t.total-prev.total, t.idle-prev.idle
	if di > dt {
		return 0, false
	}
	return float64(dt-di) / float64(dt), true
}

// readCPUTimes reads the "cpu" line of /proc/stat: user nice system idle
// iowait irq softirq steal (guest time is already part of user). Idle is
// idle plus iowait.
func readCPUTimes(path string) (cpuTimes, error) {
	f, err := os.Open(path)
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	t, err := parseCPUTimes(f)
	if err != nil {
		return cpuTimes{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

func parseCPUTimes(r io.Reader) (cpuTimes, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "cpu" {
			continue
		}
		if len(f) < 5 {
			return cpuTimes{}, fmt.Errorf("short cpu line %q", sc.Text())
		}
		var t cpuTimes
		for i, s := range f[1:min(len(f), 9)] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("cpu line: %w", err)
			}
			t.total += v
			if i == 3 || i == 4 { // idle, iowait
				t.idle += v
			}
		}
		return t, nil
	}
	if err := sc.Err(); err != nil {
		return cpuTimes{}, err
	}
	return cpuTimes{}, errors.New("no cpu line")
}

func readMeminfoKey(path, key string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	v, err := meminfoValue(f, key)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
