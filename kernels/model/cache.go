package model

import (
	"fmt"
	"slices"
	"weak"

	"github.com/frognano/frognano/kernels"
)

// Cache is one sequence's KV cache: the keys and values of every position
// so far, per layer, and so the sequence's length. A sequence's next tokens
// sit at positions Len(), Len()+1, …
//
// Memory is allocated for the capacity up front (the CPU backend's zeroed
// pages are only committed as positions are written). A Cache belongs to the
// Model that made it and is used by one Runner call at a time.
//
// A cache may share a prefix with another (SharePrefix): positions before
// Shared() are then read from that cache's tensors, never copied, and that
// cache keeps them unchanged while it is shared from (Pinned).
type Cache struct {
	m    *Model
	k, v []kernels.Tensor // per layer, [capacity, kvDim]
	n    int

	base *Cache // positions [0, nb) are base's; base has no base itself
	nb   int
	// followers are the caches that read a prefix of this one; weak, so
	// that a follower dropped without Release neither stays alive through
	// this cache nor pins it once collected.
	followers []weak.Pointer[Cache]
}

// NewCache makes an empty cache for sequences of up to capacity tokens.
func (m *Model) NewCache(capacity int) *Cache {
	if capacity <= 0 {
		panic(fmt.Sprintf("model: cache capacity %d", capacity))
	}
	c := &Cache{m: m, k: make([]kernels.Tensor, m.Config.Layers), v: make([]kernels.Tensor, m.Config.Layers)}
	for l := range c.k {
		c.k[l] = m.b.New(capacity, m.Config.KVDim())
		c.v[l] = m.b.New(capacity, m.Config.KVDim())
	}
	return c
}

// Len is the number of positions cached.
func (c *Cache) Len() int { return c.n }

// Cap is the most positions the cache holds.
func (c *Cache) Cap() int { return c.k[0].Shape()[0] }

// Truncate forgets every position from n on, so that a sequence can be
// continued differently (a chat whose last turn is regenerated). It must
// not go below Pinned(): other caches read those positions.
func (c *Cache) Truncate(n int) {
	if n < 0 || n > c.n {
		panic(fmt.Sprintf("model: Truncate(%d) of a cache holding %d positions", n, c.n))
	}
	if p := c.Pinned(); n < p {
		panic(fmt.Sprintf("model: Truncate(%d) of a cache whose first %d positions other caches share", n, p))
	}
	c.n = n
	if n <= c.nb {
		c.unshare(n)
	}
}

// Reset empties the cache for a new sequence. It must not be pinned.
func (c *Cache) Reset() { c.Truncate(0) }

// Release lets go of the cache, which its owner is about to drop: it stops
// sharing another cache's prefix (which that cache may then change) and is
// emptied, unless other caches still read its own first positions (it is
// pinned): then it keeps them, and only positions after them could ever
// be written again.
func (c *Cache) Release() {
	if c.base != nil {
		c.unshare(0)
		c.n = 0
		return
	}
	if c.Pinned() == 0 {
		c.n = 0
	}
}

// Own copies the prefix the cache reads from another cache into its own
// memory and stops sharing it, so that the other cache is no longer kept
// alive or pinned by this one (a cache put aside for later reuse does
// this). It does nothing to a cache that shares no prefix.
func (c *Cache) Own() {
	if c.base == nil {
		return
	}
	root, nb := c.base, c.nb
	c.copyRows(root, 0, nb)
	c.unshare(0)
}

// Shared is how many of the cache's positions are read from the cache it
// shares a prefix with (0 when it shares none).
func (c *Cache) Shared() int { return c.nb }

// Pinned is the most positions of this cache that other caches read as
// their shared prefix: Truncate may not go below it (nor Reset, unless it
// is 0), and positions below it never change.
func (c *Cache) Pinned() int {
	p := 0
	c.followers = slices.DeleteFunc(c.followers, func(w weak.Pointer[Cache]) bool {
		f := w.Value()
		if f == nil || f.base != c {
			return true
		}
		p = max(p, f.nb)
		return false
	})
	return p
}

// unshare keeps only the first n ≤ nb positions of the shared prefix.
func (c *Cache) unshare(n int) {
	if c.base == nil {
		return
	}
	c.nb = n
	if n == 0 {
		c.base = nil // base drops c from its followers when it next looks
	}
}

// CanShare says whether the model's backend lets caches share a prefix
// (kernels.PrefixAttention); where it does not, SharePrefix copies.
func (m *Model) CanShare() bool {
	_, ok := m.b.(kernels.PrefixAttention)
	return ok
}

// SharePrefix makes positions Len() to n read src's keys and values at the
// same positions without copying them: the cache shares src's prefix of n
// positions, which src then keeps unchanged (src.Pinned() ≥ n) until this
// cache lets go of it (Truncate below n, Reset or Release). A cache shares
// with one other at most, and sharing does not chain: where it cannot
// share — the backend has no kernels.PrefixAttention, this cache holds
// positions of its own, it shares with another cache already, or src's
// own positions start before n — it copies, as CopyPrefix. It reports
// whether it shared. The conditions on n are CopyPrefix's.
func (c *Cache) SharePrefix(src *Cache, n int) bool {
	c.checkPrefix(src, n)
	root, limit := src, src.n
	if src.base != nil {
		root, limit = src.base, src.nb
	}
	if n == c.n {
		return c.base != nil && c.base == root
	}
	if !c.m.CanShare() || n > limit || c.n != c.nb || (c.base != nil && c.base != root) || root == c {
		c.CopyPrefix(src, n)
		return false
	}
	if c.base == nil {
		root.followers = append(root.followers, weak.Make(c))
	}
	c.base, c.nb, c.n = root, n, n
	return true
}

// CopyPrefix fills positions Len() to n with src's keys and values at the
// same positions, so a sequence whose tokens up to n are src's need not
// compute them again (a group of episodes sharing one prompt). src must be
// a cache of the same model holding at least n positions; n must fit c.
func (c *Cache) CopyPrefix(src *Cache, n int) {
	c.checkPrefix(src, n)
	if n == c.n {
		return
	}
	if src.base != nil && c.n < src.nb {
		// The part src reads from its own base.
		c.copyRows(src.base, c.n, min(n, src.nb))
	}
	if lo := max(c.n, src.nb); lo < n {
		c.copyRows(src, lo, n)
	}
	c.n = n
}

// copyRows copies positions [lo, hi) of src's own tensors into c's.
func (c *Cache) copyRows(src *Cache, lo, hi int) {
	b := c.m.b
	for l := range c.k {
		b.Copy(b.Slice(c.k[l], lo, hi), b.Slice(src.k[l], lo, hi))
		b.Copy(b.Slice(c.v[l], lo, hi), b.Slice(src.v[l], lo, hi))
	}
}

func (c *Cache) checkPrefix(src *Cache, n int) {
	switch {
	case src.m != c.m:
		panic("model: a prefix from another model's cache")
	case src == c:
		panic("model: a cache's prefix from itself")
	case n < c.n || n > src.n || n > c.Cap():
		panic(fmt.Sprintf("model: a prefix of %d positions: this cache holds %d of %d, the source %d", n, c.n, c.Cap(), src.n))
	}
}
