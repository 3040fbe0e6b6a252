package tokenizer

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// PreTokenizer names the rule that splits text into pieces before BPE; merges
// never cross a piece boundary. Each is a hand-written scanner equivalent to
// the regular expression the reference tokenizers use (Go's regexp has no
// lookahead, which these patterns need).
type PreTokenizer string

const (
	// PreGPT2 is GPT-2's pattern:
	//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	PreGPT2 PreTokenizer = "gpt2"
	// PreSmolLM isolates every digit (\p{N}) first, then applies PreGPT2 to
	// the rest: HF's Sequence[Digits(individual_digits), ByteLevel], which
	// SmolLM/StarCoder tokenizers use (GGUF tokenizer.ggml.pre "smollm",
	// "starcoder", "refact", ...).
	PreSmolLM PreTokenizer = "smollm"
	// PreLlama3 is Llama 3's pattern:
	//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	PreLlama3 PreTokenizer = "llama3"
	// PreQwen2 is PreLlama3 with single digits (\p{N} instead of \p{N}{1,3}).
	PreQwen2 PreTokenizer = "qwen2"
)

// Regex patterns as they appear in HF tokenizer.json Split pre-tokenizers.
const (
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// preFromGGUF maps tokenizer.ggml.pre values (llama.cpp's names) to scanners.
func preFromGGUF(name string) (PreTokenizer, error) {
	switch name {
	case "", "default", "gpt2", "gpt-2", "olmo", "jais", "poro-chat", "viking", "bloom":
		return PreGPT2, nil
	case "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b":
		return PreSmolLM, nil
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral":
		return PreLlama3, nil
	case "qwen2", "qwen35", "deepseek-r1-qwen", "megrez", "hunyuan":
		return PreQwen2, nil
	}
	return "", fmt.Errorf("tokenizer: unsupported pre-tokenizer tokenizer.ggml.pre=%q (supported: gpt2, smollm/starcoder, llama-bpe/llama3, qwen2)", name)
}

// Split appends the pieces of text to dst.
func (p PreTokenizer) Split(text string, dst []string) []string {
	p.each(text, func(piece string) { dst = append(dst, piece) })
	return dst
}

// each calls yield with every piece of text, in order.
func (p PreTokenizer) each(text string, yield func(string)) {
	switch p {
	case PreSmolLM:
		start := 0
		for i := 0; i < len(text); {
			c, n := at(text, i)
			if c == clsNumber {
				eachGPT2(text[start:i], yield)
				yield(text[i : i+n])
				start = i + n
			}
			i += n
		}
		eachGPT2(text[start:], yield)
	case PreLlama3:
		eachLlama3(text, 3, yield)
	case PreQwen2:
		eachLlama3(text, 1, yield)
	default:
		eachGPT2(text, yield)
	}
}

type class uint8

const (
	clsEnd class = iota
	clsLetter
	clsNumber
	clsSpace
	clsOther
)

func classOf(r rune) class {
	switch {
	case r < utf8.RuneSelf:
		return asciiClass[r]
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

var asciiClass = func() (t [utf8.RuneSelf]class) {
	for r := range rune(utf8.RuneSelf) {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
			t[r] = clsLetter
		case '0' <= r && r <= '9':
			t[r] = clsNumber
		case unicode.IsSpace(r):
			t[r] = clsSpace
		default:
			t[r] = clsOther
		}
	}
	return t
}()

// at returns the class and width of the rune at i (clsEnd past the end).
func at(s string, i int) (class, int) {
	if i >= len(s) {
		return clsEnd, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return classOf(r), n
}

// run returns the end of the run of class c starting at i.
func run(s string, i int, c class) int {
	for {
		k, n := at(s, i)
		if k != c {
			return i
		}
		i += n
	}
}

// contraction reports the length of 's 't 're 've 'm 'll 'd at s[i:] (which
// starts with '\”), 0 if none; fold allows upper case.
func contraction(s string, i int, fold bool) int {
	rest := s[i+1:]
	lower := func(b byte) byte {
		if fold && 'A' <= b && b <= 'Z' {
			return b + 32
		}
		return b
	}
	if len(rest) >= 1 {
		switch lower(rest[0]) {
		case 's', 't', 'm', 'd':
			return 2
		}
	}
	if len(rest) >= 2 {
		a, b := lower(rest[0]), lower(rest[1])
		if (a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l') {
			return 3
		}
	}
	return 0
}

// spaceRun handles \s+(?!\S)|\s+ at i (a whitespace rune): the whole run if
// it ends the text or is a single rune, otherwise all but its last rune, which
// is left to prefix the next piece.
func spaceRun(s string, i int) int {
	end := run(s, i, clsSpace)
	if end == len(s) {
		return end
	}
	_, last := utf8.DecodeLastRuneInString(s[:end])
	if end-last > i {
		return end - last
	}
	return end
}

func eachGPT2(s string, yield func(string)) {
	for i := 0; i < len(s); {
		j := gpt2Next(s, i)
		yield(s[i:j])
		i = j
	}
}

func gpt2Next(s string, i int) int {
	c, n := at(s, i)
	if s[i] == '\'' {
		if k := contraction(s, i, false); k > 0 {
			return i + k
		}
	}
	if s[i] == ' ' {
		if c2, _ := at(s, i+1); c2 == clsLetter || c2 == clsNumber || c2 == clsOther {
			return run(s, i+1, c2)
		}
	}
	switch c {
	case clsLetter, clsNumber, clsOther:
		return run(s, i+n, c)
	}
	return spaceRun(s, i)
}

func eachLlama3(s string, maxDigits int, yield func(string)) {
	for i := 0; i < len(s); {
		j := llama3Next(s, i, maxDigits)
		yield(s[i:j])
		i = j
	}
}

func llama3Next(s string, i int, maxDigits int) int {
	c, n := at(s, i)
	if s[i] == '\'' {
		if k := contraction(s, i, true); k > 0 {
			return i + k
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c != clsLetter && c != clsNumber && s[i] != '\r' && s[i] != '\n' {
		if c2, _ := at(s, i+n); c2 == clsLetter {
			return run(s, i+n, clsLetter)
		}
	}
	switch c {
	case clsLetter:
		return run(s, i+n, clsLetter)
	case clsNumber:
		j := i + n
		for d := 1; d < maxDigits; d++ {
			c2, n2 := at(s, j)
			if c2 != clsNumber {
				break
			}
			j += n2
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	start := i
	if s[i] == ' ' {
		if c2, _ := at(s, i+1); c2 == clsOther {
			start = i + 1
		}
	}
	if c2, _ := at(s, start); c2 == clsOther {
		j := run(s, start, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// \s*[\r\n]+ : the whitespace run up to and including its last newline.
	end := run(s, i, clsSpace)
	for j := end - 1; j >= i; j-- {
		if s[j] == '\r' || s[j] == '\n' {
			return j + 1
		}
	}
	return spaceRun(s, i)
}
