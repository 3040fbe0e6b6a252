package persistence

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Badger writes its memtable WALs, its value log and every new table
// through memory-mapped files that it creates sparse (truncated to their
// final size, no blocks allocated) and then fills by copying into the
// mapping. Where the file system has no free block for a page, the kernel
// cannot fail that copy with ENOSPC: it kills the process with SIGBUS
// ("fatal error: fault" in Go), and none of Badger's options (v4) writes
// these files any other way. A full disk therefore has to be refused before
// Badger touches a mapping: every commit first checks the free space of the
// store's file system (one fstatfs on the pinned directory) and fails with
// ErrDiskFull when less than the reserve is left. The reserve covers what
// Badger may still write on its own after the last accepted commit.
//
// DefaultDiskReserve is that reserve for the options Open uses: one
// checkpoint transaction (64 MiB of value log), flushing all three 16 MiB
// memtables into tables (48 MiB), the current memtable's WAL (16 MiB) and
// an L0→L1 compaction rewriting five L0 tables and the 10 MiB base level
// (~90 MiB), rounded up.
const DefaultDiskReserve = 256 << 20

// WithDiskReserve sets how many bytes of the store's file system must stay
// free for a write to be accepted (default DefaultDiskReserve). Tests on a
// small file system lower it; a value below what Badger can write by itself
// brings back the risk of SIGBUS.
func WithDiskReserve(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.diskReserve = n
		}
	}
}

// diskGuard refuses writes when the store's file system is nearly full.
type diskGuard struct {
	pin     *dirPin
	dir     string // as the caller named it, for messages
	log     *slog.Logger
	reserve int64
	// full is set while writes are refused, so the change is logged once
	// each way.
	full atomic.Bool
	// lastWarn rate-limits the log line of refused writes.
	lastWarn atomic.Int64
}

// free is the space an unprivileged writer may still use on the store's
// file system (Bavail: the blocks ext4 keeps for root are not counted, so
// a node running as root refuses before the last of them, too).
func (g *diskGuard) free() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(g.pin.f.Fd()), &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// checkDiskSpace returns ErrDiskFull when a write of need more bytes would leave
// less than the reserve free. A file system that cannot be asked does not
// block writes: Badger then reports its own errors.
func (db *DB) checkDiskSpace(need int64) error { return db.disk.check(need) }

func (g *diskGuard) check(need int64) error {
	if g == nil {
		return nil
	}
	free, err := g.free()
	if err != nil {
		return nil
	}
	if free-need >= g.reserve {
		if g.full.Swap(false) {
			g.log.Info("persistence: disk space is back; writes accepted again", "dir", g.dir, "free_mib", free>>20)
		}
		return nil
	}
	now := time.Now().UnixNano()
	if !g.full.Swap(true) || now-g.lastWarn.Load() > int64(time.Minute) {
		g.lastWarn.Store(now)
		g.log.Error("persistence: refusing writes, the disk is (nearly) full", "dir", g.dir,
			"free_mib", free>>20, "reserve_mib", g.reserve>>20)
	}
	return fmt.Errorf("database %q: its file system has %d MiB free and the store keeps %d MiB in reserve, "+
		"so that Badger never writes a memory-mapped file on a full disk (the process would die of SIGBUS); "+
		"free some space on that file system: %w", g.dir, free>>20, g.reserve>>20, ErrDiskFull)
}
