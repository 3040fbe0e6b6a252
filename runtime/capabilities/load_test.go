package capabilities

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// The meter reads /proc's load average, CPU counters and MemAvailable;
// cpu_busy is measured between two samples, a sample is reused within the
// interval, and the available memory is capped at the node's memory.
func TestLoadMeterReadsProc(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"loadavg": "1.50 0.75 0.25 2/345 6789\n",
		// user nice system idle iowait irq softirq steal guest guest_nice
		"stat":    "cpu  100 0 100 700 100 0 0 0 50 0\ncpu0 100 0 100 700 100 0 0 0 50 0\n",
		"meminfo": "MemTotal: 16777216 kB\nMemFree: 1 kB\nMemAvailable: 4194304 kB\n",
	})
	now := time.Unix(1000, 0)
	m := NewLoadMeter(LoadOptions{ProcDir: dir, Now: func() time.Time { return now }})

	first := m.Sample(0)
	if first.Load1 == nil || first.GetLoad1() != 1.5 || first.GetLoad5() != 0.75 {
		t.Errorf("load average %v %v, want 1.5 0.75", first.Load1, first.Load5)
	}
	if first.CpuBusy != nil {
		t.Errorf("first sample has cpu_busy %v; there is nothing to measure it from", first.GetCpuBusy())
	}
	if first.GetMemoryAvailableBytes() != 4<<30 || first.GetSampledUnixNano() != now.UnixNano() {
		t.Errorf("first sample %v", first)
	}

	// 400 more ticks, 100 of them idle or iowait: 75% busy.
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte("cpu  250 0 250 780 120 0 0 0 60 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	now = now.Add(DefaultLoadInterval / 2)
	if again := m.Sample(0); again.CpuBusy != nil || again.GetSampledUnixNano() != first.GetSampledUnixNano() {
		t.Errorf("a sample within the interval was not reused: %v", again)
	}
	now = now.Add(DefaultLoadInterval)
	second := m.Sample(1 << 30)
	if second.CpuBusy == nil || second.GetCpuBusy() != 0.75 {
		t.Errorf("cpu_busy %v, want 0.75", second.CpuBusy)
	}
	if second.GetMemoryAvailableBytes() != 1<<30 {
		t.Errorf("available memory %d, want it capped at 1 GiB", second.GetMemoryAvailableBytes())
	}
	// No tick since: the figure stays.
	now = now.Add(2 * DefaultLoadInterval)
	if third := m.Sample(0); third.GetCpuBusy() != 0.75 || third.GetMemoryAvailableBytes() != 4<<30 {
		t.Errorf("third sample %v", third)
	}

	// Files that cannot be read leave their figures absent.
	empty := NewLoadMeter(LoadOptions{ProcDir: t.TempDir()}).Sample(0)
	if empty.Load1 != nil || empty.CpuBusy != nil || empty.MemoryAvailableBytes != nil || empty.GetSampledUnixNano() == 0 {
		t.Errorf("sample of an empty /proc: %v", empty)
	}
}

func TestLoadMeterThisMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	m := NewLoadMeter(LoadOptions{Interval: time.Millisecond})
	m.Sample(0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(20 * time.Millisecond)
		l := m.Sample(0)
		if l.Load1 == nil || l.MemoryAvailableBytes == nil || l.GetMemoryAvailableBytes() == 0 {
			t.Fatalf("sample of this machine lacks figures: %v", l)
		}
		if l.CpuBusy != nil {
			if b := l.GetCpuBusy(); b < 0 || b > 1 {
				t.Fatalf("cpu_busy %v", b)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no cpu_busy after 5 s of samples")
		}
	}
}
