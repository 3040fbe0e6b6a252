package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The attack suite: what an agent (or the code it writes) might do to get
// out of its sandbox or take the host down. Each attack must be contained;
// where a reward applies (TestGradingCannotBeGamed) it must be 0.

// pyConnect is a Python one-liner that tries a TCP connection and prints
// CONNECTED or BLOCKED.
const pyConnect = `import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("CONNECTED")
except Exception as e:
    print("BLOCKED", type(e).__name__, e)
`

func TestAttackNetworkEgress(t *testing.T) {
	sb := newSandbox(t, Options{})
	ctx := context.Background()

	// Services on the host: one on loopback, one on the host's own address.
	var accepted atomic.Int32
	listen := func(addr string) int {
		l, err := net.Listen("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Close()
			}
		}()
		return l.Addr().(*net.TCPAddr).Port
	}
	loPort := listen("127.0.0.1:0")
	targets := [][2]string{
		{"1.1.1.1", "80"},
		{"8.8.8.8", "53"},
		{"127.0.0.1", strconv.Itoa(loPort)},
	}
	if ip := hostIP(); ip != "" {
		targets = append(targets, [2]string{ip, strconv.Itoa(listen(ip + ":0"))})
	}
	for _, tg := range targets {
		t.Run(tg[0], func(t *testing.T) {
			res, err := sb.Exec(ctx, ExecRequest{Argv: []string{"python3", "-c", pyConnect, tg[0], tg[1]}, Timeout: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(res.Stdout), "BLOCKED") {
				t.Fatalf("connect %s:%s from the sandbox: %q %q", tg[0], tg[1], res.Stdout, res.Stderr)
			}
		})
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("host services accepted %d connections from the sandbox", n)
	}

	t.Run("dns", func(t *testing.T) {
		res := run(t, sb, `python3 -c "import socket; socket.getaddrinfo('example.com', 80)" && echo RESOLVED || echo BLOCKED`)
		if !strings.Contains(string(res.Stdout), "BLOCKED") {
			t.Fatalf("%q", res.Stdout)
		}
	})
	t.Run("only loopback, and it is up", func(t *testing.T) {
		res := run(t, sb, `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`)
		if strings.TrimSpace(string(res.Stdout)) != "lo" {
			t.Fatalf("interfaces: %q", res.Stdout)
		}
		// A test suite may run a server on localhost: that must work.
		res = run(t, sb, `python3 -c "
import socket, threading
srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen(1)
threading.Thread(target=lambda: srv.accept()[0].sendall(b'pong'), daemon=True).start()
c = socket.create_connection(srv.getsockname(), timeout=3); print(c.recv(4).decode())"`)
		if strings.TrimSpace(string(res.Stdout)) != "pong" {
			t.Fatalf("loopback inside the sandbox: %q %q", res.Stdout, res.Stderr)
		}
	})
}

// hostIP is the host's first non-loopback IPv4 address, or "".
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

func TestAttackWritesOutsideRepo(t *testing.T) {
	sb := newSandbox(t, Options{})
	tests := []struct {
		path     string
		writable bool
	}{
		{"/etc/passwd", false},
		{"/etc/newfile", false},
		{"/usr/bin/python3", false},
		{"/usr/local/go/bin/go", false},
		{"/newfile", false},
		{"/root/newfile", false},
		{"/var/newfile", false},
		{"/repo/newfile", true},
		{"/tmp/newfile", true},
		{"/root/.cache/newfile", true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			res := run(t, sb, fmt.Sprintf("echo x >> %s && echo WROTE", tt.path))
			if wrote := strings.Contains(string(res.Stdout), "WROTE"); wrote != tt.writable {
				t.Fatalf("write %s: wrote=%v, want %v (%q)", tt.path, wrote, tt.writable, res.Stderr)
			}
		})
	}
	t.Run("remount the root read-write", func(t *testing.T) {
		res := run(t, sb, "mount -o remount,rw / && echo REMOUNTED")
		if strings.Contains(string(res.Stdout), "REMOUNTED") {
			t.Fatal("remounted /")
		}
	})
}

func TestAttackPrivilegedOperations(t *testing.T) {
	sb := newSandbox(t, Options{})
	tests := []struct{ name, script string }{
		{"mount a file system", "mount -t tmpfs none /mnt"},
		{"new user namespace", "unshare -Ur true"},
		{"new mount namespace", "unshare -m true"},
		{"sysrq", "echo b > /proc/sysrq-trigger"},
		{"device node", "mknod /tmp/sda b 8 0"},
		{"chroot", "chroot / true"},
		{"kernel modules", "python3 -c \"import ctypes; l=ctypes.CDLL(None); import sys; sys.exit(0 if l.init_module(0,0,0)==0 else 1)\""},
		{"read kcore", "test -s /proc/kcore && head -c 1 /proc/kcore | wc -c | grep -q 1"},
		{"raise the pids limit", "echo max > /sys/fs/cgroup/pids/pids.max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, sb, tt.script+" 2>/dev/null && echo ALLOWED")
			if strings.Contains(string(res.Stdout), "ALLOWED") {
				t.Fatalf("%q was allowed", tt.script)
			}
		})
	}
}

func TestAttackForkBomb(t *testing.T) {
	sb := newSandbox(t, Options{Pids: 64})
	ctx := context.Background()

	// While the bomb runs, the host must keep starting processes promptly.
	stop := make(chan struct{})
	worst := make(chan time.Duration, 1)
	go func() {
		var max time.Duration
		for {
			select {
			case <-stop:
				worst <- max
				return
			case <-time.After(100 * time.Millisecond):
			}
			start := time.Now()
			if err := exec.Command("true").Run(); err != nil {
				max = time.Hour
			}
			if d := time.Since(start); d > max {
				max = d
			}
		}
	}()
	// The bomb's first shell returns at once; its progeny, reparented to
	// init, go on forking against the pids limit.
	if _, err := sb.Exec(ctx, ExecRequest{Argv: []string{"bash", "-c", ":(){ :|:& };:"}, Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	pidsDir := filepath.Join("/sys/fs/cgroup/pids", testNamespace, sb.ID())
	var peak int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(pidsDir, "pids.current")); err == nil {
			if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n > peak {
				peak = n
			}
		}
	}
	close(stop)
	if d := <-worst; d > 2*time.Second {
		t.Fatalf("the host took %v to start a process during the fork bomb", d)
	}
	if peak > 64 {
		t.Fatalf("%d processes in the sandbox, limit 64", peak)
	}
	t.Logf("peak %d processes (limit 64)", peak)

	// KillAll stops the bomb (frozen while killed, so it cannot outrun us)
	// and the sandbox is usable again.
	sb.KillAll(ctx)
	if out := run(t, sb, "echo alive"); string(out.Stdout) != "alive\n" {
		t.Fatalf("after the bomb: %+v", out)
	}
	if _, err := sb.Exec(ctx, ExecRequest{Argv: []string{"bash", "-c", ":(){ :|:& };:"}, Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	start := time.Now()
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("destroying a sandbox with a running fork bomb took %v", d)
	}
}

func TestAttackMemoryHog(t *testing.T) {
	const limit = 128 << 20
	sb := newSandbox(t, Options{MemoryBytes: limit})
	res, err := sb.Exec(context.Background(), ExecRequest{
		Argv:    []string{"python3", "-c", "a = []\nwhile True:\n    a.append(bytearray(16 << 20))"},
		Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 128+int(syscall.SIGKILL) || res.TimedOut {
		t.Fatalf("memory hog: %+v (want OOM kill, exit 137)", res)
	}
	if b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", testNamespace, sb.ID(), "memory.max_usage_in_bytes")); err == nil {
		if used, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); used > limit {
			t.Fatalf("memory use peaked at %d > limit %d", used, limit)
		}
	}
	// Only the hog died; init and the sandbox live on.
	if out := run(t, sb, "echo alive"); string(out.Stdout) != "alive\n" {
		t.Fatalf("after the OOM kill: %+v", out)
	}
}

func TestAttackFillDisk(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name   string
		opts   Options
		script string
		check  func(t *testing.T, sb *Sandbox, res ExecResult)
	}{
		{"repo on tmpfs", Options{DiskBytes: 32 * mib}, "dd if=/dev/zero of=/repo/big bs=1M count=200", func(t *testing.T, sb *Sandbox, res ExecResult) {
			used, err := sb.DiskUsage(context.Background())
			if res.ExitCode == 0 || err != nil || used > 33*mib {
				t.Fatalf("exit %d, usage %d (%v): %s", res.ExitCode, used, err, res.Stderr)
			}
		}},
		{"fallocate on tmpfs", Options{DiskBytes: 32 * mib}, "fallocate -l 10G /repo/huge", func(t *testing.T, sb *Sandbox, res ExecResult) {
			if used, _ := sb.DiskUsage(context.Background()); res.ExitCode == 0 || used > 33*mib {
				t.Fatalf("exit %d, usage %d", res.ExitCode, used)
			}
		}},
		{"tmp", Options{TmpBytes: 16 * mib}, "dd if=/dev/zero of=/tmp/big bs=1M count=200; du -sk /tmp | cut -f1", func(t *testing.T, sb *Sandbox, res ExecResult) {
			lines := strings.Fields(string(res.Stdout))
			kb, _ := strconv.Atoi(lines[len(lines)-1])
			if kb > 16*1024+64 {
				t.Fatalf("/tmp holds %d KiB", kb)
			}
		}},
		{"repo on a snapshot with a checked quota", Options{Storage: StorageSnapshot, DiskBytes: 32 * mib}, "while :; do head -c 1048576 /dev/zero >> /repo/big || exit 9; done", func(t *testing.T, sb *Sandbox, res ExecResult) {
			if !res.QuotaExceeded || res.TimedOut {
				t.Fatalf("%+v", res)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := newSandbox(t, tt.opts)
			res, err := sb.Exec(context.Background(), ExecRequest{Argv: []string{"/bin/sh", "-c", tt.script}, Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, sb, res)
			if out := run(t, sb, "rm -f /repo/big /repo/huge /tmp/big; echo alive"); string(out.Stdout) != "alive\n" {
				t.Fatalf("after filling the disk: %+v", out)
			}
		})
	}
}

func TestAttackKillHostProcesses(t *testing.T) {
	sb := newSandbox(t, Options{})
	sentinel := exec.Command("sleep", "300")
	if err := sentinel.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sentinel.Process.Kill()
		sentinel.Wait()
	}()
	pid := sentinel.Process.Pid
	script := fmt.Sprintf("kill -9 -1; pkill -9 sleep; pkill -9 containerd; pkill -9 -f frognano; kill -9 %d; kill -9 1; echo done", pid)
	res := run(t, sb, script)
	if string(res.Stdout) != "done\n" {
		t.Fatalf("%+v", res)
	}
	time.Sleep(200 * time.Millisecond)
	if err := sentinel.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("host sentinel %d was killed: %v", pid, err)
	}
	if f, err := procStat(pid); err != nil || f[0] == "Z" {
		t.Fatalf("host sentinel %d is gone or a zombie: %v %v", pid, f, err)
	}
	if _, err := testRT.client.Version(testRT.ctx(context.Background())); err != nil {
		t.Fatalf("containerd hurt: %v", err)
	}
	// kill -9 -1 spares init: the sandbox still works.
	if out := run(t, sb, "echo alive"); string(out.Stdout) != "alive\n" {
		t.Fatalf("after kill -9 -1: %+v", out)
	}
}

func TestAttackReadHostFiles(t *testing.T) {
	sb := newSandbox(t, Options{})
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(secret, []byte("TOPSECRET-"+randomHex(8)), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []string{
		"cat " + secret,
		"cat /proc/1/root" + secret,
		"cat /proc/self/root" + secret,
		"ls " + dir,
		"find / -xdev -name secret.txt 2>/dev/null",
		"cat /run/containerd/containerd.sock",
		"ls /var/lib/containerd",
	}
	for _, script := range tests {
		t.Run(script, func(t *testing.T) {
			res := run(t, sb, script)
			if strings.Contains(string(res.Stdout), "TOPSECRET") || strings.Contains(string(res.Stdout), "secret.txt") || (res.ExitCode == 0 && len(res.Stdout) > 0) {
				t.Fatalf("%q read host data: %q", script, res.Stdout)
			}
		})
	}
}
