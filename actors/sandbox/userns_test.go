package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hostIDs returns the real, effective, saved and file-system uids and gids
// of a host process, as /proc/<pid>/status lists them.
func hostIDs(t *testing.T, pid int) (uids, gids []string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			uids = strings.Fields(rest)
		}
		if rest, ok := strings.CutPrefix(line, "Gid:"); ok {
			gids = strings.Fields(rest)
		}
	}
	return uids, gids
}

// backgroundProcess starts a sleep in the sandbox that outlives the command
// and returns its host pid.
func backgroundProcess(t *testing.T, sb *Sandbox) int {
	t.Helper()
	res := run(t, sb, "setsid sleep 120 >/dev/null 2>&1 </dev/null & echo $!")
	nspid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("pid of the background sleep: %q %q", res.Stdout, res.Stderr)
	}
	var hostPid int
	for range 50 {
		if hostPid, _, err = sb.hostProcess(context.Background(), nspid); err == nil {
			return hostPid
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("host pid of sandbox pid %d: %v", nspid, err)
	return 0
}

// TestRootIsNotHostRoot shows, from inside and from the host, that root in
// an episode sandbox is the first host uid of its range: its processes run as that uid,
// what it writes is owned by that uid, the image's root-owned files are
// its own, and a file owned by host root is closed to it whatever its
// capabilities. Both exec paths (agent and runc exec) are checked.
func TestRootIsNotHostRoot(t *testing.T) {
	rt, _ := needRuntime(t)
	if !rt.UserNS() {
		t.Fatal("user namespaces are off in the test runtime; they are the default")
	}
	eachExecPath(t, Options{}, func(t *testing.T, sb *Sandbox) {
		base, ok := sb.HostUID()
		if !ok || base < DefaultUIDBase || base >= DefaultUIDBase+DefaultUIDSlots*userNSSize || (base-DefaultUIDBase)%userNSSize != 0 {
			t.Fatalf("HostUID() = %d, %v; want the start of one of frognano's ranges", base, ok)
		}
		b := strconv.FormatUint(uint64(base), 10)
		res := run(t, sb, "id -u; id -g; cat /proc/self/uid_map /proc/self/gid_map")
		f := strings.Fields(string(res.Stdout))
		if len(f) != 8 || f[0] != "0" || f[1] != "0" ||
			strings.Join(f[2:5], " ") != "0 "+b+" 65536" || strings.Join(f[5:8], " ") != "0 "+b+" 65536" {
			t.Fatalf("inside: id and maps = %q (stderr %q), want root mapped to %s", res.Stdout, res.Stderr, b)
		}

		// The host sees init and every command as uid and gid base.
		pids := map[string]int{"init": int(sb.task.Pid()), "command": backgroundProcess(t, sb)}
		for name, pid := range pids {
			uids, gids := hostIDs(t, pid)
			for _, id := range append(uids, gids...) {
				if id != b {
					t.Fatalf("host view of the sandbox's %s (pid %d): uids %v gids %v, want all %s", name, pid, uids, gids, b)
				}
			}
		}

		// What the sandbox writes is the base uid's on the host, in the
		// writable layer (a tmpfs on the host) and in its /tmp; a chown to
		// uid 1234 inside is base+1234 outside.
		res = run(t, sb, "echo a > /repo/mine && echo b > /tmp/mine && chown 1234:1234 /repo/mine && stat -c %u:%g /repo/mine /usr/bin/python3 /repo")
		if got := strings.Fields(string(res.Stdout)); len(got) != 3 || got[0] != "1234:1234" || got[1] != "0:0" || got[2] != "0:0" {
			t.Fatalf("inside: owners of /repo/mine, /usr/bin/python3, /repo = %q (stderr %q); want 1234:1234 0:0 0:0", res.Stdout, res.Stderr)
		}
		root := fmt.Sprintf("/proc/%d/root", pids["init"])
		for path, want := range map[string]uint32{
			filepath.Join(sb.upperDir, "upper", "repo", "mine"): base + 1234,
			filepath.Join(sb.upperDir, "upper", "repo"):         base,
			filepath.Join(root, "tmp", "mine"):                  base,
		} {
			var st syscall.Stat_t
			if err := syscall.Stat(path, &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != want || st.Gid != want {
				t.Fatalf("host: %s is owned by %d:%d, want %d:%d", path, st.Uid, st.Gid, want, want)
			}
		}

		// A file of host root's, mode 0600, put in the sandbox's writable
		// layer by the host: the sandbox's root has CAP_DAC_OVERRIDE,
		// CAP_FOWNER and CAP_CHOWN over its own uids only, so it can
		// neither read, change, chmod nor chown it; it shows as the
		// overflow uid 65534. (The sandbox's /tmp cannot take such a file:
		// it is mounted in the sandbox's namespace, which has no uid 0 of
		// the host's to give it.)
		secret := filepath.Join(sb.upperDir, "upper", "repo", "hostsecret")
		if err := os.WriteFile(secret, []byte("HOSTSECRET"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out := run(t, sb, "stat -c %u:%g /repo/hostsecret"); strings.TrimSpace(string(out.Stdout)) != "65534:65534" {
			t.Fatalf("inside: host root's file shows as %q, want 65534:65534", out.Stdout)
		}
		for _, script := range []string{
			"cat /repo/hostsecret",
			"echo x >> /repo/hostsecret",
			"chmod 666 /repo/hostsecret",
			"chown 0:0 /repo/hostsecret",
			"touch -d @0 /repo/hostsecret",
		} {
			res := run(t, sb, script+" && echo ALLOWED")
			if strings.Contains(string(res.Stdout), "ALLOWED") || strings.Contains(string(res.Stdout), "HOSTSECRET") {
				t.Fatalf("%q as the sandbox's root succeeded on a file of host root's: %q", script, res.Stdout)
			}
		}
		if b, err := os.ReadFile(secret); err != nil || string(b) != "HOSTSECRET" {
			t.Fatalf("host root's file changed: %q %v", b, err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(secret, &st); err != nil || st.Uid != 0 || st.Mode&0o777 != 0o600 {
			t.Fatalf("host root's file: uid %d mode %o, %v", st.Uid, st.Mode&0o777, err)
		}
	})
}

// TestUserNSOff checks the switch: with UserNS "off", root in a sandbox is
// host root again (the setting an operator falls back to on a host without
// idmapped mounts), and StorageSnapshot sandboxes, which commit their
// writes into images, always are.
func TestUserNSOff(t *testing.T) {
	rt, img := needRuntime(t)
	off, err := New(context.Background(), Config{Namespace: testNamespace, UserNS: "off", Agent: rt.agent, Address: os.Getenv("FROGNANO_CONTAINERD_ADDRESS")})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if off.UserNS() {
		t.Fatal("UserNS() reports on for a runtime with UserNS off")
	}
	for _, c := range []struct {
		name string
		rt   *Runtime
		opts Options
	}{
		{"off", off, Options{}},
		{"snapshot storage", rt, Options{Storage: StorageSnapshot}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb, err := c.rt.Create(context.Background(), img, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Destroy(context.Background())
			res := run(t, sb, "cat /proc/self/uid_map")
			if f := strings.Fields(string(res.Stdout)); len(f) != 3 || f[0] != "0" || f[1] != "0" {
				t.Fatalf("uid_map = %q, want the initial namespace's", res.Stdout)
			}
			if uids, _ := hostIDs(t, int(sb.task.Pid())); len(uids) == 0 || uids[0] != "0" {
				t.Fatalf("host uids of init: %v, want 0", uids)
			}
			if uid, ok := sb.HostUID(); ok {
				t.Fatalf("HostUID() = %d, true for a sandbox running as host root", uid)
			}
		})
	}
}

// TestUserNSConfigErrors checks the refusals: a mode that is neither on
// nor off, ranges outside 65536…2^31, ranges that a host user or a
// subordinate id range already has, and an exec agent a sandbox's root
// cannot reach.
func TestUserNSConfigErrors(t *testing.T) {
	if _, err := newUIDPool(1<<31-10*userNSSize, 11, t.TempDir()); !errors.Is(err, ErrUserNamespaces) || !strings.Contains(err.Error(), "FROGNANO_USERNS=off") {
		t.Fatalf("ranges past 2^31: %v", err)
	}
	etc := t.TempDir()
	if err := checkIDRangeFree(DefaultUIDBase, DefaultUIDSlots*userNSSize, etc); err != nil {
		t.Fatalf("empty etc: %v", err)
	}
	os.WriteFile(filepath.Join(etc, "passwd"), []byte("root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(etc, "subuid"), []byte("alice:100000:65536\n"), 0o644)
	if err := checkIDRangeFree(DefaultUIDBase, DefaultUIDSlots*userNSSize, etc); err != nil {
		t.Fatalf("no overlap: %v", err)
	}
	os.WriteFile(filepath.Join(etc, "subgid"), []byte("alice:100000:65536\nbob:5100000:65536\n"), 0o644)
	if err := checkIDRangeFree(DefaultUIDBase, DefaultUIDSlots*userNSSize, etc); err == nil || !strings.Contains(err.Error(), "bob") {
		t.Fatalf("subgid range of bob overlaps: %v", err)
	}
	os.WriteFile(filepath.Join(etc, "subgid"), nil, 0o644)
	os.WriteFile(filepath.Join(etc, "group"), []byte("big:x:5194303:\nabove:x:5194304:\n"), 0o644)
	if err := checkIDRangeFree(DefaultUIDBase, DefaultUIDSlots*userNSSize, etc); err == nil || !strings.Contains(err.Error(), "big") {
		t.Fatalf("group with id 5194303: %v", err)
	}
	// The exec agent must be reachable by a sandbox's root.
	// Not t.TempDir: its parent is 0700. /tmp is searchable by all.
	top, err := os.MkdirTemp("/tmp", "userns-reach-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(top)
	os.Chmod(top, 0o711)
	dir := filepath.Join(top, "cache")
	os.Mkdir(dir, 0o700)
	agent := filepath.Join(dir, "init")
	os.WriteFile(agent, nil, 0o755)
	if err := checkReachable(agent); !errors.Is(err, ErrUserNamespaces) || !strings.Contains(err.Error(), dir+" (mode 700) cannot be searched") {
		t.Fatalf("agent in a 0700 directory: %v", err)
	}
	os.Chmod(dir, 0o711)
	if err := checkReachable(agent); err != nil {
		t.Fatalf("agent in a 0711 directory: %v", err)
	}
	os.Chmod(agent, 0o750)
	if err := checkReachable(agent); !errors.Is(err, ErrUserNamespaces) || !strings.Contains(err.Error(), "not executable") {
		t.Fatalf("agent of mode 0750: %v", err)
	}
	if testing.Short() {
		return
	}
	_, err = New(context.Background(), Config{Namespace: testNamespace, UserNS: "maybe", Agent: "off", Address: os.Getenv("FROGNANO_CONTAINERD_ADDRESS")})
	if errors.Is(err, ErrContainerdNotRunning) {
		t.Skip(err)
	}
	if err == nil || !strings.Contains(err.Error(), `"maybe"`) {
		t.Fatalf("UserNS maybe: %v", err)
	}
}

// TestSandboxesGetDistinctRanges checks that live sandboxes never share
// host ids: on a runtime with two ranges (above the default ones, so that
// other test processes do not hold them), two sandboxes get both, a third
// is refused with ErrNoUIDRange, and a range is free again once its
// sandbox is destroyed.
func TestSandboxesGetDistinctRanges(t *testing.T) {
	rt, img := needRuntime(t)
	base := uint32(DefaultUIDBase + DefaultUIDSlots*userNSSize)
	two, err := New(context.Background(), Config{Namespace: testNamespace, UIDBase: base, UIDSlots: 2, Agent: rt.agent, Address: os.Getenv("FROGNANO_CONTAINERD_ADDRESS")})
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	ctx := context.Background()
	var sbs []*Sandbox
	defer func() {
		for _, sb := range sbs {
			sb.Destroy(ctx)
		}
	}()
	seen := map[uint32]bool{}
	for range 2 {
		sb, err := two.Create(ctx, img, Options{})
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
		uid, ok := sb.HostUID()
		if !ok || (uid != base && uid != base+userNSSize) || seen[uid] {
			t.Fatalf("HostUID() = %d, %v; already taken: %v", uid, ok, seen)
		}
		seen[uid] = true
		if uids, _ := hostIDs(t, int(sb.task.Pid())); len(uids) == 0 || uids[0] != strconv.FormatUint(uint64(uid), 10) {
			t.Fatalf("host uids of init: %v, want %d", uids, uid)
		}
	}
	if sb, err := two.Create(ctx, img, Options{}); !errors.Is(err, ErrNoUIDRange) {
		if sb != nil {
			sb.Destroy(ctx)
		}
		t.Fatalf("third sandbox with two ranges: %v, want ErrNoUIDRange", err)
	}
	freed, _ := sbs[0].HostUID()
	if err := sbs[0].Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := two.Create(ctx, img, Options{})
	if err != nil {
		t.Fatalf("after a destroy: %v", err)
	}
	sbs = append(sbs, sb)
	if uid, _ := sb.HostUID(); uid != freed {
		t.Fatalf("new sandbox got %d, want the freed range %d", uid, freed)
	}
}

// BenchmarkUserNSCreate times an episode's sandbox (Create, Exec true,
// Destroy) of the base image with and without a user namespace,
// interleaved so that the host's load falls on both alike:
//
//	go test ./actors/sandbox -run '^$' -bench BenchmarkUserNSCreate -benchtime 20x
func BenchmarkUserNSCreate(b *testing.B) {
	if testing.Short() || setupErr != nil {
		b.Skip("needs containerd:", setupErr)
	}
	off, err := New(context.Background(), Config{Namespace: testNamespace, UserNS: "off", Agent: testRT.agent, Address: os.Getenv("FROGNANO_CONTAINERD_ADDRESS")})
	if err != nil {
		b.Fatal(err)
	}
	defer off.Close()
	var total [2]time.Duration
	for b.Loop() {
		for i, rt := range []*Runtime{testRT, off} {
			start := time.Now()
			sb, err := rt.Create(context.Background(), testImage, Options{})
			if err != nil {
				b.Fatal(err)
			}
			if res, err := sb.Exec(context.Background(), ExecRequest{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %+v %v", res, err)
			}
			if err := sb.Destroy(context.Background()); err != nil {
				b.Fatal(err)
			}
			total[i] += time.Since(start)
		}
	}
	b.ReportMetric(float64(total[0].Milliseconds())/float64(b.N), "ms-userns/episode")
	b.ReportMetric(float64(total[1].Milliseconds())/float64(b.N), "ms-hostroot/episode")
}
