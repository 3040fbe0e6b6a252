package model

import (
	"fmt"

	"github.com/frognano/frognano/kernels"
)

// Cache is one sequence's KV cache: the keys and values of every position
// so far, per layer, and so the sequence's length. A sequence's next tokens
// sit at positions Len(), Len()+1, …
//
// Memory is allocated for the capacity up front (the CPU backend's zeroed
// pages are only committed as positions are written). A Cache belongs to the
// Model that made it and is used by one Runner call at a time.
type Cache struct {
	m    *Model
	k, v []kernels.Tensor // per layer, [capacity, kvDim]
	n    int
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
// continued differently (a chat whose last turn is regenerated).
func (c *Cache) Truncate(n int) {
	if n < 0 || n > c.n {
		panic(fmt.Sprintf("model: Truncate(%d) of a cache holding %d positions", n, c.n))
	}
	c.n = n
}

// Reset empties the cache for a new sequence.
func (c *Cache) Reset() { c.n = 0 }

// CopyPrefix fills positions Len() to n with src's keys and values at the
// same positions, so a sequence whose tokens up to n are src's need not
// compute them again (a group of episodes sharing one prompt). src must be
// a cache of the same model holding at least n positions; n must fit c.
func (c *Cache) CopyPrefix(src *Cache, n int) {
	switch {
	case src.m != c.m:
		panic("model: CopyPrefix from another model's cache")
	case n < c.n || n > src.n || n > c.Cap():
		panic(fmt.Sprintf("model: CopyPrefix to %d positions: this cache holds %d of %d, the source %d", n, c.n, c.Cap(), src.n))
	case n == c.n:
		return
	}
	b := c.m.b
	for l := range c.k {
		b.Copy(b.Slice(c.k[l], c.n, n), b.Slice(src.k[l], c.n, n))
		b.Copy(b.Slice(c.v[l], c.n, n), b.Slice(src.v[l], c.n, n))
	}
	c.n = n
}
