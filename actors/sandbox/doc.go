// Package sandbox runs untrusted code — an agent's commands and the tests
// that grade it — in containerd containers that cannot reach the network,
// the host's files or its processes, and that are bounded in memory,
// processes, CPU and disk.
//
// A Runtime is one connection to containerd (v1.7 client) in its own
// namespace; a Sandbox is one container whose PID 1 is the exec agent (see
// agent/main.go) into which commands are run. Everything a Runtime creates
// hangs off a lease and carries labels naming the process that created it,
// so Sweep can remove what a crashed process left behind without touching
// the sandboxes of processes still alive. The SandboxWorker actor wraps
// this package; nothing here knows about actors.
//
// # Isolation and limits
//
// How each limit is enforced (defaults in DefaultOptions):
//
//   - Processes: own PID namespace; PID 1 is the exec agent, which drops
//     every signal sent from inside and reaps orphans. Options.Pids is the
//     pids cgroup limit (fork bombs stop there). A timed-out command is
//     killed with its whole tree, including what it daemonised.
//   - Memory: Options.MemoryBytes is the memory cgroup limit, with the swap
//     limit set equal where the kernel accounts swap (no swapping). The
//     kernel OOM-kills inside the sandbox; commands get oom_score_adj 500
//     so they die before PID 1 and before the host's processes.
//   - CPU: Options.CPUs is a CFS quota (cores × 100 ms per 100 ms period).
//   - Network: a fresh network namespace with only loopback, which runc
//     brings up. No route out; the host's loopback is a different interface.
//     NetworkHost exists for trusted build steps only.
//   - Files: the root file system is read-only (runc remounts it), except
//     RepoDir and the directories the image lists in its
//     io.frognano.writable label (the base image: /root/.cache for the Go
//     build cache), each bind-mounted onto itself so it stays writable.
//     /tmp is a tmpfs of Options.TmpBytes. The host's file system is not
//     mounted at all.
//   - Disk: under StorageTmpfs (the default) the root file system is an
//     overlay whose upper layer lives in a tmpfs of Options.DiskBytes
//     mounted on the host for this sandbox alone, so every write —
//     fallocate included — ends in ENOSPC at the limit, and tmpfs pages also
//     count against the memory limit. Under StorageSnapshot (build
//     sandboxes, which Commit turns into images) the upper layer is an
//     ordinary containerd snapshot on disk and DiskBytes is a checked quota:
//     polled every 250 ms while a command runs, everything but PID 1 is
//     killed when it is exceeded, so the overshoot is what a process writes
//     in 250 ms.
//   - Users: an episode sandbox (StorageTmpfs) runs in its own user
//     namespace with a range of 65536 host uids and gids that no other live
//     sandbox and no host user has (Config.UIDSlots ranges from
//     Config.UIDBase, default 64 from 1_000_000); its root is the range's
//     first uid. The image's layers are idmapped bind mounts, so its
//     root-owned files are the sandbox root's without being copied or
//     chowned (userns.go). Config.UserNS "off" (or FROGNANO_USERNS=off)
//     turns this off; StorageSnapshot build sandboxes always run as host
//     root, because Commit turns their writes into image layers.
//   - Privileges: root inside, but with a reduced capability set (no
//     CAP_SYS_ADMIN, NET_ADMIN, NET_RAW, MKNOD, SYS_CHROOT, SYS_PTRACE),
//     no_new_privs, containerd's default seccomp profile (no mount, unshare,
//     keyctl, bpf, module loading…), and containerd's masked and read-only
//     /proc and /sys paths. The agent is not dumpable, so nothing in the
//     sandbox can ptrace it or read its file descriptors.
//
// Not enforced here: disk I/O bandwidth (no blkio weights; cgroup v1
// throttling needs device numbers), and the number of open files beyond
// RLIMIT_NOFILE 1024.
//
// # Commands
//
// With the exec agent, a command is a fork in the sandbox (about 1 ms);
// without it (no Go toolchain on the host to build it, or Config.Agent
// "off") every command is a runc exec (about 30 ms) and PID 1 is a shell
// loop. File operations are commands too: they run with the sandbox's
// rights, never with the host's.
//
// # Grading
//
// RunTests parses only machine-readable reports (package testreport) and
// cross-checks them with the runner's exit code; PrepareForGrading kills
// what the agent left running and restores protected files from the image;
// SquashGitHistory and VerifyGitHistory keep later commits out of
// environment images; testreport.Grade turns a report into the reward.
package sandbox
