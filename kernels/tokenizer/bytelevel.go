package tokenizer

// GPT-2's byte-level alphabet: every byte maps to a printable rune so that
// BPE vocabularies can be stored as text. Printable Latin-1 bytes map to
// themselves; the rest (controls, space, 0x7f-0xa0, 0xad) map to U+0100 on,
// in byte order. Space becomes 'Ġ' (U+0120), newline 'Ċ' (U+010A).
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xa1 <= b && b <= 0xac) || (0xae <= b && b <= 0xff) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevel renders raw bytes in the byte-level alphabet (the form vocab
// entries are stored in).
func byteLevel(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = byteToRune[c]
	}
	return string(r)
}

// unByteLevel turns a vocab entry back into the bytes it stands for. Runes
// outside the alphabet (which a well-formed byte-level vocab never has) are
// kept as their UTF-8 encoding.
func unByteLevel(s string, dst []byte) []byte {
	for _, r := range s {
		if b, ok := runeToByte[r]; ok {
			dst = append(dst, b)
		} else {
			dst = append(dst, string(r)...)
		}
	}
	return dst
}
