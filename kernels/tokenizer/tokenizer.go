// Package tokenizer is a byte-level BPE tokenizer (the GPT-2 scheme used by
// SmolLM, Llama 3 and Qwen), built from GGUF metadata or an HF
// tokenizer.json, with a streaming decoder and the ChatML chat format.
//
// Encoding runs in three stages, as in HF tokenizers: special tokens (control
// and user-defined vocabulary entries such as <|im_start|>) are matched as
// whole tokens; the text between them is split into pieces by the
// pre-tokenizer; each piece's bytes are merged by BPE rank.
package tokenizer

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// TokenType classifies vocabulary entries, numbered as GGUF's
// tokenizer.ggml.token_type (llama.cpp's llama_token_type).
type TokenType int32

const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

// ErrMismatch reports a tokenizer that does not fit a model.
var ErrMismatch = errors.New("tokenizer: tokenizer does not match model")

// Tokenizer is immutable after construction and safe for concurrent use.
type Tokenizer struct {
	vocab []string // id -> token in the byte-level alphabet (specials: literal text)
	ids   map[string]int32
	types []TokenType

	merges       map[uint64]merge // (left id, right id) -> rank and result
	byteIDs      [256]int32       // id of each single byte, -1 if absent
	pre          PreTokenizer
	ignoreMerges bool // look the whole piece up before merging (Llama 3)
	nfc          bool // normalise input to NFC first (Qwen2 tokenizer.json)

	specials      []string      // matched whole, before BPE
	specialByByte [256][]string // candidates by first byte, longest first
	tokenBytes    [][]byte      // id -> the bytes it decodes to

	bos, eos, pad, unk int32
	addBOS             bool
	chatTemplate       string

	cacheMu sync.Mutex
	cache   map[string][]int32
	noCache bool
}

type merge struct{ rank, id int32 }

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// Config is what a tokenizer is built from, whatever the file format.
type Config struct {
	Tokens       []string    // id -> token, byte-level alphabet for normal tokens
	Types        []TokenType // optional; defaults to Normal
	Merges       [][2]string // in rank order
	Pre          PreTokenizer
	IgnoreMerges bool
	NFC          bool
	BOS, EOS     int32 // -1 when absent
	PAD, UNK     int32 // -1 when absent
	AddBOS       bool
	ChatTemplate string
}

// New builds a tokenizer from a Config.
func New(c Config) (*Tokenizer, error) {
	n := len(c.Tokens)
	if n == 0 {
		return nil, errors.New("tokenizer: empty vocabulary")
	}
	t := &Tokenizer{
		vocab: c.Tokens, ids: make(map[string]int32, n), types: c.Types,
		merges: make(map[uint64]merge, len(c.Merges)), pre: c.Pre,
		ignoreMerges: c.IgnoreMerges, nfc: c.NFC,
		bos: c.BOS, eos: c.EOS, pad: c.PAD, unk: c.UNK, addBOS: c.AddBOS,
		chatTemplate: c.ChatTemplate, cache: map[string][]int32{},
	}
	if t.pre == "" {
		t.pre = PreGPT2
	}
	if t.types == nil {
		t.types = make([]TokenType, n)
		for i := range t.types {
			t.types[i] = TypeNormal
		}
	}
	if len(t.types) != n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(t.types), n)
	}
	for i, s := range c.Tokens {
		if _, dup := t.ids[s]; !dup && s != "" { // the first of duplicate entries wins
			t.ids[s] = int32(i)
		}
	}
	for name, id := range map[string]int32{"bos": t.bos, "eos": t.eos, "padding": t.pad, "unknown": t.unk} {
		if id < -1 || int(id) >= n {
			return nil, fmt.Errorf("tokenizer: %s token id %d outside the vocabulary of %d tokens", name, id, n)
		}
	}
	for b := range 256 {
		id, ok := t.ids[string(byteToRune[b])]
		if !ok {
			id = -1
		}
		t.byteIDs[b] = id
	}
	for rank, m := range c.Merges {
		l, ok1 := t.ids[m[0]]
		r, ok2 := t.ids[m[1]]
		res, ok3 := t.ids[m[0]+m[1]]
		if !ok1 || !ok2 || !ok3 {
			return nil, fmt.Errorf("tokenizer: merge #%d %q + %q uses a token missing from the vocabulary", rank, m[0], m[1])
		}
		if _, dup := t.merges[pairKey(l, r)]; !dup {
			t.merges[pairKey(l, r)] = merge{rank: int32(rank), id: res}
		}
	}
	t.tokenBytes = make([][]byte, n)
	for i, s := range c.Tokens {
		switch t.types[i] {
		case TypeControl, TypeUserDefined:
			t.tokenBytes[i] = []byte(s)
			if s != "" {
				t.specials = append(t.specials, s)
			}
		default:
			t.tokenBytes[i] = unByteLevel(s, nil)
		}
	}
	sort.Slice(t.specials, func(i, j int) bool { return len(t.specials[i]) > len(t.specials[j]) })
	for _, s := range t.specials {
		t.specialByByte[s[0]] = append(t.specialByByte[s[0]], s)
	}
	return t, nil
}

// VocabSize is the number of token ids.
func (t *Tokenizer) VocabSize() int { return len(t.vocab) }

// Token returns the vocabulary entry of id as stored (byte-level alphabet for
// normal tokens).
func (t *Tokenizer) Token(id int32) string { return t.vocab[id] }

// TokenID looks a vocabulary entry up.
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	id, ok := t.ids[s]
	return id, ok
}

// TokenType returns the type of id.
func (t *Tokenizer) TokenType(id int32) TokenType { return t.types[id] }

// IsSpecial reports whether id is a control or user-defined token, matched
// whole by Encode and usually hidden from users.
func (t *Tokenizer) IsSpecial(id int32) bool {
	tt := t.types[id]
	return tt == TypeControl || tt == TypeUserDefined
}

// TokenBytes returns the bytes id decodes to. Do not modify the result.
func (t *Tokenizer) TokenBytes(id int32) []byte { return t.tokenBytes[id] }

// BOS, EOS, PAD and UNK return special token ids, -1 when the tokenizer has none.
func (t *Tokenizer) BOS() int32 { return t.bos }
func (t *Tokenizer) EOS() int32 { return t.eos }
func (t *Tokenizer) PAD() int32 { return t.pad }
func (t *Tokenizer) UNK() int32 { return t.unk }

// AddBOS reports whether the model expects BOS before a sequence; Encode
// never adds it.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// PreTokenizer returns the splitting rule in use.
func (t *Tokenizer) PreTokenizer() PreTokenizer { return t.pre }

// ChatTemplate returns the model's Jinja chat template, if its files carry one.
func (t *Tokenizer) ChatTemplate() string { return t.chatTemplate }

// CheckModel verifies that token ids fit a model's embedding table of
// embeddingRows rows. Models may pad the table past the vocabulary (Qwen
// does, by a few hundred rows), so up to max(1024, vocab/64) extra rows are
// accepted; anything else means tokenizer and model come from different
// families.
func (t *Tokenizer) CheckModel(embeddingRows int) error {
	n := t.VocabSize()
	if embeddingRows < n {
		return fmt.Errorf("%w: the tokenizer has %d tokens (ids up to %d) but the model's embedding has only %d rows", ErrMismatch, n, n-1, embeddingRows)
	}
	if slack := max(1024, n/64); embeddingRows > n+slack {
		return fmt.Errorf("%w: the model's embedding has %d rows but the tokenizer only %d tokens (more than %d rows of padding)", ErrMismatch, embeddingRows, n, slack)
	}
	return nil
}

// Encode tokenizes text, matching special tokens (e.g. <|im_start|>) as
// whole tokens wherever they occur. It adds no BOS/EOS.
func (t *Tokenizer) Encode(text string) []int32 {
	var out []int32
	for text != "" {
		i, s := t.nextSpecial(text)
		out = t.encodeOrdinary(text[:i], out)
		if s == "" {
			break
		}
		out = append(out, t.ids[s])
		text = text[i+len(s):]
	}
	return out
}

// EncodeOrdinary tokenizes text treating special-token text as plain text,
// for untrusted content that must not inject control tokens.
func (t *Tokenizer) EncodeOrdinary(text string) []int32 { return t.encodeOrdinary(text, nil) }

// nextSpecial finds the leftmost (then longest) special token in text.
func (t *Tokenizer) nextSpecial(text string) (int, string) {
	if len(t.specials) == 0 {
		return len(text), ""
	}
	for i := 0; i < len(text); i++ {
		for _, s := range t.specialByByte[text[i]] {
			if strings.HasPrefix(text[i:], s) {
				return i, s
			}
		}
	}
	return len(text), ""
}

func (t *Tokenizer) encodeOrdinary(text string, out []int32) []int32 {
	if text == "" {
		return out
	}
	if t.nfc {
		text = nfc(text)
	}
	if out == nil {
		out = make([]int32, 0, len(text)/3+1)
	}
	t.pre.each(text, func(p string) { out = t.encodePiece(p, out) })
	return out
}

const maxCachedPiece = 128

func (t *Tokenizer) encodePiece(p string, out []int32) []int32 {
	if len(p) == 1 {
		if id := t.byteIDs[p[0]]; id >= 0 {
			return append(out, id)
		}
	}
	cacheable := len(p) <= maxCachedPiece && !t.noCache
	if cacheable {
		t.cacheMu.Lock()
		ids, ok := t.cache[p]
		t.cacheMu.Unlock()
		if ok {
			return append(out, ids...)
		}
	}
	start := len(out)
	out = t.bpe(p, out)
	if cacheable {
		ids := append([]int32(nil), out[start:]...)
		t.cacheMu.Lock()
		if len(t.cache) >= 1<<16 {
			clear(t.cache)
		}
		t.cache[p] = ids
		t.cacheMu.Unlock()
	}
	return out
}

// symbol is one node of the doubly linked list BPE merges over.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	dead       bool
}

// candidate is a possible merge of the symbol at pos with its successor.
type candidate struct {
	rank, pos, left, right, result int32
}

func (a candidate) less(b candidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// candidates is a binary min-heap ordered by (rank, pos), typed to avoid
// container/heap's interface boxing in the hot loop.
type candidates []candidate

func (h *candidates) push(c candidate) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].less(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *candidates) pop() candidate {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q[r].less(q[l]) {
			m = r
		}
		if !q[m].less(q[i]) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

type bpeScratch struct {
	syms []symbol
	heap candidates
}

var scratchPool = sync.Pool{New: func() any { return new(bpeScratch) }}

// bpe merges the bytes of one piece: repeatedly the adjacent pair of lowest
// merge rank, leftmost first, as HF tokenizers' BPE does.
func (t *Tokenizer) bpe(p string, out []int32) []int32 {
	if t.ignoreMerges {
		if id, ok := t.ids[byteLevel([]byte(p))]; ok {
			return append(out, id)
		}
	}
	sc := scratchPool.Get().(*bpeScratch)
	defer scratchPool.Put(sc)
	syms := sc.syms[:0]
	for i := 0; i < len(p); i++ {
		id := t.byteIDs[p[i]]
		if id < 0 {
			id = t.unk // a byte the vocabulary lacks
			if id < 0 {
				continue
			}
		}
		syms = append(syms, symbol{id: id, prev: int32(len(syms)) - 1, next: int32(len(syms)) + 1})
	}
	sc.syms = syms
	if len(syms) == 0 {
		return out
	}
	syms[len(syms)-1].next = -1
	h := sc.heap[:0]
	consider := func(l, r int32) {
		if m, ok := t.merges[pairKey(syms[l].id, syms[r].id)]; ok {
			h.push(candidate{rank: m.rank, pos: l, left: syms[l].id, right: syms[r].id, result: m.id})
		}
	}
	for i := 0; i+1 < len(syms); i++ {
		consider(int32(i), int32(i+1))
	}
	for len(h) > 0 {
		c := h.pop()
		l := &syms[c.pos]
		if l.dead || l.id != c.left || l.next < 0 {
			continue
		}
		r := &syms[l.next]
		if r.id != c.right {
			continue
		}
		l.id = c.result
		r.dead = true
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.pos
		}
		if l.prev >= 0 {
			consider(l.prev, c.pos)
		}
		if l.next >= 0 {
			consider(c.pos, l.next)
		}
	}
	sc.heap = h
	for i := int32(0); i >= 0; i = syms[i].next {
		out = append(out, syms[i].id)
	}
	return out
}

// withoutCache returns a copy sharing everything but the piece cache, which
// starts empty and stays disabled (for benchmarks).
func (t *Tokenizer) withoutCache() *Tokenizer {
	c := &Tokenizer{}
	*c = Tokenizer{
		vocab: t.vocab, ids: t.ids, types: t.types, merges: t.merges, byteIDs: t.byteIDs, pre: t.pre,
		ignoreMerges: t.ignoreMerges, nfc: t.nfc, specials: t.specials, specialByByte: t.specialByByte,
		tokenBytes: t.tokenBytes, bos: t.bos, eos: t.eos, pad: t.pad, unk: t.unk, addBOS: t.addBOS,
		chatTemplate: t.chatTemplate, noCache: true,
	}
	return c
}
