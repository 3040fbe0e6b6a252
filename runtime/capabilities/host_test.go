package capabilities

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestParseMeminfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    uint64
		wantErr bool
	}{
		{
			name: "typical",
			in:   "MemTotal:       24684092 kB\nMemFree:         1234567 kB\nMemAvailable:   20000000 kB\n",
			want: 24684092 * 1024,
		},
		{
			name: "not first line",
			in:   "MemFree:         1 kB\nMemTotal:       2048 kB\n",
			want: 2048 * 1024,
		},
		{
			// A key that merely starts with MemTotal must not match.
			name: "prefix key ignored",
			in:   "MemTotalX:  1 kB\nMemTotal:  4 kB\n",
			want: 4096,
		},
		{name: "no unit means bytes", in: "MemTotal: 1000\n", want: 1000},
		{name: "missing", in: "MemFree: 1 kB\n", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "no value", in: "MemTotal:\n", wantErr: true},
		{name: "not a number", in: "MemTotal: lots kB\n", wantErr: true},
		{name: "unknown unit", in: "MemTotal: 1 MB\n", wantErr: true},
		{name: "overflow", in: "MemTotal: 18446744073709551615 kB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMeminfo(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseMeminfo() = %d, %v; want error %v", got, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("parseMeminfo() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseCPUMax(t *testing.T) {
	tests := []struct {
		in     string
		want   int
		wantOK bool
	}{
		{"max 100000\n", 0, false},
		{"200000 100000\n", 2, true},
		{"150000 100000", 2, true}, // 1.5 CPUs rounds up
		{"50000 100000", 1, true},  // half a CPU is still one
		{"100000 100000", 1, true},
		{"", 0, false},
		{"garbage", 0, false},
		{"x 100000", 0, false},
		{"100000 0", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseCPUMax(tt.in)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseCPUMax(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

// writeFiles creates files under a fresh directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const meminfo16GiB = "MemTotal:       16777216 kB\nMemFree:  1 kB\n"

func TestMemoryBytes(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name    string
		cgroup  map[string]string
		want    uint64
		wantErr bool
	}{
		{name: "no cgroup files", want: 16 * gib},
		{name: "v2 unlimited", cgroup: map[string]string{"memory.max": "max\n"}, want: 16 * gib},
		{name: "v2 lower limit", cgroup: map[string]string{"memory.max": "4294967296\n"}, want: 4 * gib},
		{name: "v2 higher limit", cgroup: map[string]string{"memory.max": "68719476736\n"}, want: 16 * gib},
		{name: "v2 garbage ignored", cgroup: map[string]string{"memory.max": "lots\n"}, want: 16 * gib},
		{
			// v2 wins when both are present (a hybrid host).
			name: "v2 before v1",
			cgroup: map[string]string{
				"memory.max":                   "2147483648\n",
				"memory/memory.limit_in_bytes": "1073741824\n",
			},
			want: 2 * gib,
		},
		{name: "v1 lower limit", cgroup: map[string]string{"memory/memory.limit_in_bytes": "1073741824\n"}, want: 1 * gib},
		{name: "v1 unlimited", cgroup: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, want: 16 * gib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := writeFiles(t, map[string]string{"meminfo": meminfo16GiB})
			cg := writeFiles(t, tt.cgroup)
			got, err := memoryBytes(filepath.Join(proc, "meminfo"), cg)
			if (err != nil) != tt.wantErr {
				t.Fatalf("memoryBytes() error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("memoryBytes() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestMemoryBytesMissingMeminfo(t *testing.T) {
	got, err := memoryBytes(filepath.Join(t.TempDir(), "nope"), t.TempDir())
	if err == nil || got != 0 {
		t.Errorf("memoryBytes(missing) = %d, %v; want 0 and an error", got, err)
	}
}

func TestCores(t *testing.T) {
	n := int32(runtime.NumCPU())
	tests := []struct {
		name   string
		cgroup map[string]string
		want   int32
	}{
		{name: "no cgroup files", want: n},
		{name: "v2 unlimited", cgroup: map[string]string{"cpu.max": "max 100000\n"}, want: n},
		{name: "v2 one core", cgroup: map[string]string{"cpu.max": "100000 100000\n"}, want: 1},
		{name: "v2 above NumCPU", cgroup: map[string]string{"cpu.max": "100000000 100000\n"}, want: n},
		{
			name: "v1 one core",
			cgroup: map[string]string{
				"cpu/cpu.cfs_quota_us":  "100000\n",
				"cpu/cpu.cfs_period_us": "100000\n",
			},
			want: 1,
		},
		{
			name: "v1 unlimited",
			cgroup: map[string]string{
				"cpu/cpu.cfs_quota_us":  "-1\n",
				"cpu/cpu.cfs_period_us": "100000\n",
			},
			want: n,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cores(writeFiles(t, tt.cgroup)); got != tt.want {
				t.Errorf("cores() = %d, want %d", got, tt.want)
			}
		})
	}
}
