package sampler

import (
	"github.com/frognano/frognano/kernels/model"
)

// Prefix caching: an agent episode sends turn after turn whose prompt is
// the previous turn's prompt, its continuation and a tool observation, so
// most of each prompt was already computed by the sequence before it. The
// engine keeps the KV caches of sequences that ended, each with the token
// ids it holds, in a bounded LRU (Config.PrefixCaches and
// PrefixCacheBytes). A request whose prompt shares a prefix with a kept
// cache takes that cache over: the cache is truncated to the common prefix
// (at least one prompt token is left to run, for the logits of the first
// sampled token) and only the rest of the prompt is prefilled.
//
// A kept cache leaves the pool when a request takes it, so no two running
// sequences ever share one, and the pool is emptied by every weight swap:
// its keys and values were computed with the old weights. Requests read
// the same tokens with and without reuse; the reused positions were
// computed in another batch layout (decoded one at a time rather than
// prefilled in chunks), which changes only the float32 summation order, as
// batching does.
//
// Buffers are reused too: once the pool is at its limits, a request that
// shares nothing worth keeping recycles the least recently used cache large
// enough for it instead of allocating one (whose arrival in the pool would
// evict that cache anyway). Caches are allocated with headroom, room for
// the prompt once more beyond what the request may generate, so that the
// conversation's next turns fit in them until its prompt has doubled (a
// kept cache too small for a request is not taken: the request gets a new,
// larger cache and prefills its whole prompt).

// Sharing with running sequences: the G episodes of a group start at once
// with one prompt, before any of them has ended and left a cache in the
// pool. A request whose prompt shares at least ShareRunning tokens with a
// running sequence's follows it: it takes that sequence's keys and values
// for the shared prompt positions as they are computed (it waits, out of
// the prefill, while its lead reads them), and computes only the rest.
// Where the backend attends over a prefix held by another cache
// (kernels.PrefixAttention: the CPU backend), the follower's cache reads
// the lead's positions in place (model.Cache.SharePrefix): no copy, no
// memory of its own for the prompt, and the group's decoding steps read
// one prompt's keys and values, one after another, from the core's cache
// rather than G copies from memory. Elsewhere it copies them, a few
// kilobytes of memory traffic per position and layer; computing them
// would be a pass through the whole model. Stats.CopiedTokens counts the
// positions taken, SharedTokens those read in place. If the lead ends
// first, the follower computes what it had not taken.
//
// A cache others read from is pinned (model.Cache.Pinned): kept in the
// pool, it is taken over only by a request that keeps at least the pinned
// positions, and never recycled, until its followers let go of it: every
// cache the engine or the pool drops is Released.

// DefaultShareRunning is the default fewest shared prompt tokens worth
// following a running sequence for.
const DefaultShareRunning = 32

// Default limits of the prefix cache pool.
const (
	// DefaultPrefixCaches is the default most caches kept: enough for the
	// pauses of a few batches' worth of agent episodes between turns.
	DefaultPrefixCaches = 64
	// DefaultPrefixCacheBytes is the default most bytes kept, counted by
	// the caches' capacities (KV buffers are float32; SmolLM2-135M holds
	// 45 KiB per position, so 4 GiB is about 93k positions).
	DefaultPrefixCacheBytes = 4 << 30
)

// keptCache is a cache that no sequence uses, and the tokens it holds.
type keptCache struct {
	cache  *model.Cache
	tokens []int32 // len(tokens) == cache.Len()
}

// prefixPool is the LRU of kept caches. It is owned by the scheduler
// goroutine; only its totals are read elsewhere, through the engine's
// counters.
type prefixPool struct {
	maxCount int
	maxBytes int64
	perPos   int64 // bytes of one position of a cache (keys and values, every layer)

	entries []keptCache // least recently used first
	bytes   int64
}

func newPrefixPool(m *model.Model, maxCount int, maxBytes int64) *prefixPool {
	c := m.Config
	return &prefixPool{maxCount: maxCount, maxBytes: maxBytes, perPos: int64(2 * c.Layers * c.KVDim() * 4)}
}

// enabled says whether caches are kept at all.
func (p *prefixPool) enabled() bool { return p.maxCount > 0 && p.maxBytes > 0 }

// size is the memory of a cache, by its capacity.
func (p *prefixPool) size(c *model.Cache) int64 { return int64(c.Cap()) * p.perPos }

// put keeps c, which holds tokens (the pool owns both from now on), as the
// most recently used cache, evicting the least recently used ones beyond
// the limits.
func (p *prefixPool) put(c *model.Cache, tokens []int32) {
	if !p.enabled() || c.Len() == 0 || c.Len() != len(tokens) || p.size(c) > p.maxBytes {
		c.Release()
		return
	}
	p.entries = append(p.entries, keptCache{cache: c, tokens: tokens})
	p.bytes += p.size(c)
	for len(p.entries) > p.maxCount || p.bytes > p.maxBytes {
		p.remove(0).cache.Release()
	}
}

// remove drops entry i from the pool and returns it.
func (p *prefixPool) remove(i int) keptCache {
	k := p.entries[i]
	p.bytes -= p.size(k.cache)
	copy(p.entries[i:], p.entries[i+1:])
	p.entries[len(p.entries)-1] = keptCache{}
	p.entries = p.entries[:len(p.entries)-1]
	return k
}

// full says whether keeping one more cache of alloc positions would
// overflow the limits, evicting the least recently used cache.
func (p *prefixPool) full(alloc int) bool {
	return len(p.entries) >= p.maxCount || p.bytes+int64(alloc)*p.perPos > p.maxBytes
}

// take finds a cache for a prompt whose sequence needs need positions, and
// that would otherwise be given a new cache of alloc positions. It returns
// a kept cache and the number of prompt tokens it already holds (the cache
// truncated to them), a recycled empty cache and 0, or nil when a new one
// should be allocated. The cache and its token buffer (emptied, to record
// the sequence's tokens into) leave the pool.
//
// The kept cache sharing the longest prefix with the prompt wins, the least
// recently used among equals. It is taken over when the shared prefix is at
// least half of what it holds (the same conversation's next turn, or a
// sibling sample of the same prompt), or when the pool is full: then a new
// cache would evict the least recently used one anyway.
func (p *prefixPool) take(prompt []int32, need, alloc int) (*model.Cache, []int32, int) {
	if !p.enabled() {
		return nil, nil, 0
	}
	best, shared := -1, 0
	for i, k := range p.entries {
		if k.cache.Cap() < need {
			continue
		}
		n := commonPrefix(k.tokens, prompt)
		n = min(n, len(prompt)-1) // at least one token runs, to give logits
		if n < k.cache.Pinned() {
			continue // running sequences read its positions beyond n
		}
		if n > shared {
			best, shared = i, n
		}
	}
	full := p.full(alloc)
	if best >= 0 && (full || 2*shared >= len(p.entries[best].tokens)) {
		k := p.remove(best)
		k.cache.Truncate(shared)
		return k.cache, k.tokens[:0], shared
	}
	if full {
		for i, k := range p.entries {
			if k.cache.Cap() >= need && k.cache.Pinned() == 0 {
				p.remove(i)
				k.cache.Reset()
				return k.cache, k.tokens[:0], 0
			}
		}
	}
	return nil, nil, 0
}

// clear drops every kept cache.
func (p *prefixPool) clear() {
	for _, k := range p.entries {
		k.cache.Release()
	}
	clear(p.entries)
	p.entries = p.entries[:0]
	p.bytes = 0
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
