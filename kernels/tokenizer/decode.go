package tokenizer

import (
	"fmt"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func nfc(s string) string { return norm.NFC.String(s) }

// DecodeBytes returns the exact bytes the ids stand for; special tokens
// decode to their literal text. Ids outside the vocabulary are an error.
func (t *Tokenizer) DecodeBytes(ids []int32) ([]byte, error) {
	var out []byte
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.vocab) {
			return out, fmt.Errorf("tokenizer: token id %d outside the vocabulary of %d tokens", id, len(t.vocab))
		}
		out = append(out, t.tokenBytes[id]...)
	}
	return out, nil
}

// Decode returns DecodeBytes as a string. Unlike HF tokenizers, which replace
// invalid UTF-8 with U+FFFD, the bytes are kept as they are, so
// Decode(Encode(s)) == s for every s.
func (t *Tokenizer) Decode(ids []int32) (string, error) {
	b, err := t.DecodeBytes(ids)
	return string(b), err
}

// StreamDecoder turns tokens into text one at a time, holding back the bytes
// of a UTF-8 sequence split across tokens until it is complete. The
// concatenation of everything Next and Flush return equals DecodeBytes of all
// the ids, and each chunk is valid UTF-8 whenever the whole text is.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
}

// NewStreamDecoder starts a stream.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// Next adds one token and returns the text that is now complete (possibly "").
func (d *StreamDecoder) Next(id int32) (string, error) {
	if id < 0 || int(id) >= len(d.t.vocab) {
		return "", fmt.Errorf("tokenizer: token id %d outside the vocabulary of %d tokens", id, len(d.t.vocab))
	}
	d.pending = append(d.pending, d.t.tokenBytes[id]...)
	cut := completePrefix(d.pending)
	s := string(d.pending[:cut])
	d.pending = append(d.pending[:0], d.pending[cut:]...)
	return s, nil
}

// Flush returns whatever is held back (an incomplete UTF-8 sequence at the
// end of the stream) and resets the decoder.
func (d *StreamDecoder) Flush() string {
	s := string(d.pending)
	d.pending = d.pending[:0]
	return s
}

// completePrefix returns the length of b without a trailing incomplete (but
// so far valid) UTF-8 sequence. Invalid bytes are not held: they can never
// become valid, so they are passed through.
func completePrefix(b []byte) int {
	// A sequence is at most 4 bytes, so only the last 3 can be incomplete.
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return len(b)
		}
		if c >= 0xC0 { // the lead byte of the last sequence
			// FullRune is false only for a valid but unfinished prefix.
			if !utf8.FullRune(b[len(b)-k:]) {
				return len(b) - k
			}
			return len(b)
		}
	}
	return len(b)
}
