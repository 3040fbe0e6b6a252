package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/frognano/frognano/kernels/gguf"
)

// tinyVocab is the 256 byte tokens, a few merges, and special tokens.
func tinyVocab() (tokens []string, types []int32, merges []string) {
	for b := range 256 {
		tokens = append(tokens, string(byteToRune[b]))
		types = append(types, int32(TypeNormal))
	}
	merges = []string{"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "a a"}
	for _, m := range merges {
		tokens = append(tokens, strings.ReplaceAll(m, " ", ""))
		types = append(types, int32(TypeNormal))
	}
	for _, s := range []string{"<|im_start|>", "<|im_end|>"} {
		tokens = append(tokens, s)
		types = append(types, int32(TypeControl))
	}
	tokens = append(tokens, "<tool_call>")
	types = append(types, int32(TypeUserDefined))
	return
}

// tinyGGUF writes a GGUF whose only content is tokenizer metadata.
func tinyGGUF(t *testing.T, edit func(w *gguf.Writer)) *gguf.File {
	t.Helper()
	tokens, types, merges := tinyVocab()
	w := &gguf.Writer{}
	w.Set("tokenizer.ggml.model", "gpt2")
	w.Set("tokenizer.ggml.pre", "smollm")
	w.Set("tokenizer.ggml.tokens", tokens)
	w.Set("tokenizer.ggml.token_type", types)
	w.Set("tokenizer.ggml.merges", merges)
	w.Set("tokenizer.ggml.bos_token_id", uint32(len(tokens)-3))
	w.Set("tokenizer.ggml.eos_token_id", uint32(len(tokens)-2))
	w.Set("tokenizer.chat_template", "{{ 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' }}")
	if edit != nil {
		edit(w)
	}
	p := filepath.Join(t.TempDir(), "tok.gguf")
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(fh); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func tiny(t *testing.T) *Tokenizer {
	tok, err := FromGGUF(&tinyGGUF(t, nil).Meta)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTinyEncode(t *testing.T) {
	tok := tiny(t)
	id := func(s string) int32 {
		i, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	cases := []struct {
		text string
		want []int32
	}{
		{"hello world", []int32{id("hello"), id("Ġworld")}},
		{"hello", []int32{id("hello")}},
		{"hell", []int32{id("hell")}},
		// merges are by rank, leftmost first: "aaa" -> "aa" + "a"
		{"aaa", []int32{id("aa"), id("a")}},
		{"aaaa", []int32{id("aa"), id("aa")}},
		// digits are isolated by the smollm pre-tokenizer
		{"12", []int32{id("1"), id("2")}},
		{"<|im_start|>hello<|im_end|>", []int32{id("<|im_start|>"), id("hello"), id("<|im_end|>")}},
		{"x<tool_call>y", []int32{id("x"), id("<tool_call>"), id("y")}},
		{"<|im_start", []int32{id("<"), id("|"), id("im"[0:1]), id("m"), id("_"), id("s"), id("t"), id("a"), id("r"), id("t")}},
		{"", nil},
	}
	for _, c := range cases {
		if got := tok.Encode(c.text); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
	// EncodeOrdinary never produces special tokens.
	for _, id := range tok.EncodeOrdinary("<|im_start|>hi<tool_call>") {
		if tok.IsSpecial(id) {
			t.Errorf("EncodeOrdinary produced special token %q", tok.Token(id))
		}
	}
	if s, _ := tok.Decode(tok.EncodeOrdinary("<|im_start|>hi")); s != "<|im_start|>hi" {
		t.Errorf("ordinary round trip %q", s)
	}
	if tok.BOS() != id("<|im_start|>") || tok.EOS() != id("<|im_end|>") || tok.PAD() != -1 {
		t.Errorf("bos %d eos %d pad %d", tok.BOS(), tok.EOS(), tok.PAD())
	}
	if _, err := tok.Decode([]int32{int32(tok.VocabSize())}); err == nil {
		t.Error("Decode accepted an out-of-range id")
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := tiny(t)
	want := tok.withoutCache().Encode("hello world aaa hello")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if got := tok.Encode("hello world aaa hello"); !reflect.DeepEqual(got, want) {
					t.Errorf("got %v", got)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestFromGGUFErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(w *gguf.Writer)
		msg  string
	}{
		{"sentencepiece", func(w *gguf.Writer) { w.Set("tokenizer.ggml.model", "llama") }, `"llama"`},
		{"unknown pre", func(w *gguf.Writer) { w.Set("tokenizer.ggml.pre", "mystery") }, `"mystery"`},
		{"bad merge", func(w *gguf.Writer) { w.Set("tokenizer.ggml.merges", []string{"q z"}) }, `"q" + "z"`},
		{"merge without space", func(w *gguf.Writer) { w.Set("tokenizer.ggml.merges", []string{"ab"}) }, `"ab"`},
		{"bos out of range", func(w *gguf.Writer) { w.Set("tokenizer.ggml.bos_token_id", uint32(1<<20)) }, "bos"},
		{"types length", func(w *gguf.Writer) { w.Set("tokenizer.ggml.token_type", []int32{1}) }, "token types"},
		{"tokens wrong type", func(w *gguf.Writer) { w.Set("tokenizer.ggml.tokens", int32(3)) }, "tokenizer.ggml.tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromGGUF(&tinyGGUF(t, c.edit).Meta)
			if err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err = %v, want mention of %s", err, c.msg)
			}
		})
	}
}

func TestCheckModel(t *testing.T) {
	tok := tiny(t) // 269 tokens
	n := tok.VocabSize()
	for _, c := range []struct {
		rows int
		ok   bool
	}{{n, true}, {n + 100, true}, {n + 1024, true}, {n - 1, false}, {n + 5000, false}} {
		err := tok.CheckModel(c.rows)
		if (err == nil) != c.ok {
			t.Errorf("CheckModel(%d) = %v", c.rows, err)
		}
		if err != nil && !errors.Is(err, ErrMismatch) {
			t.Errorf("CheckModel(%d) error %v is not ErrMismatch", c.rows, err)
		}
	}
}

func TestStreamDecoderSplitsUTF8(t *testing.T) {
	tok := tiny(t)
	text := "é😀x\xff中"
	ids := tok.EncodeOrdinary(text) // byte tokens only: no merges apply
	if len(ids) != len(text) {
		t.Fatalf("expected one token per byte, got %v", ids)
	}
	d := tok.NewStreamDecoder()
	var chunks []string
	for _, id := range ids {
		s, err := d.Next(id)
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, s)
	}
	chunks = append(chunks, d.Flush())
	want := []string{"", "é", "", "", "", "😀", "x", "\xff", "", "", "中", ""}
	if !reflect.DeepEqual(chunks, want) {
		t.Errorf("chunks %q, want %q", chunks, want)
	}
	// Truncated at the end: Flush hands back the partial bytes.
	d = tok.NewStreamDecoder()
	s1, _ := d.Next(ids[2]) // first byte of 😀
	if s1 != "" || d.Flush() != "\xf0" {
		t.Error("partial sequence not held then flushed")
	}
}

func TestStreamDecoderProperty(t *testing.T) {
	tok := tiny(t)
	rng := rand.New(rand.NewSource(1))
	pool := []string{"é", "😀", "中", "a", "hello", " world", "\xff", "\xe4\xb8", "<|im_end|>", "\xf0\x9f"}
	for range 500 {
		var sb strings.Builder
		for range rng.Intn(12) {
			sb.WriteString(pool[rng.Intn(len(pool))])
		}
		text := sb.String()
		ids := tok.Encode(text)
		d := tok.NewStreamDecoder()
		var out strings.Builder
		for _, id := range ids {
			s, _ := d.Next(id)
			if utf8.ValidString(text) && !utf8.ValidString(s) {
				t.Fatalf("chunk %q of valid text %q is not valid UTF-8", s, text)
			}
			out.WriteString(s)
		}
		out.WriteString(d.Flush())
		if out.String() != text {
			t.Fatalf("stream %q != %q", out.String(), text)
		}
	}
}

func TestPythonJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"b":1,"a":[1,2.5,"x"]}`, `{"b": 1, "a": [1, 2.5, "x"]}`},
		{`{}`, `{}`},
		{`[]`, `[]`},
		{`{"x": {"y": []}}`, `{"x": {"y": []}}`},
		{`"é 中 😀 <>&"`, `"é 中 😀 <>&"`},
		{`"\u00e9\n\t\"\\\u0001\u007f"`, "\"é\\n\\t\\\"\\\\\\u0001\x7f\""},
		{`[1e-5, 1E+20, 100.0, 0.0001, 1e16, 1e15, 3.0, -0.5, 2.5e-7, 123456789.125]`,
			`[1e-05, 1e+20, 100.0, 0.0001, 1e+16, 1000000000000000.0, 3.0, -0.5, 2.5e-07, 123456789.125]`},
		{`[12345678901234567890, -0, 0, -7]`, `[12345678901234567890, 0, 0, -7]`},
		{`[true, false, null]`, `[true, false, null]`},
	}
	for _, c := range cases {
		got, err := PythonJSON(json.RawMessage(c.in))
		if err != nil || got != c.want {
			t.Errorf("PythonJSON(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{`{`, `{"a":}`, `1 2`} {
		if _, err := PythonJSON(json.RawMessage(bad)); err == nil {
			t.Errorf("PythonJSON(%s) succeeded", bad)
		}
	}
}

func TestRenderChatExtras(t *testing.T) {
	cases := []struct {
		name string
		msgs []Message
		opts ChatOptions
		want string
	}{
		{"no default system", []Message{{Role: "user", Content: "hi"}}, ChatOptions{},
			"<|im_start|>user\nhi<|im_end|>\n"},
		{"empty conversation", nil, ChatOptions{DefaultSystem: "S", AddGenerationPrompt: true},
			"<|im_start|>assistant\n"},
		{"other role and later system", []Message{{Role: "user", Content: "a"}, {Role: "system", Content: "b"}, {Role: "observation", Content: "c"}},
			ChatOptions{DefaultSystem: "S"},
			"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n<|im_start|>observation\nc<|im_end|>\n"},
		{"tool call with empty arguments, SmolLM2 system", []Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "ls"}}}, {Role: "tool", Content: "a.go"}},
			ChatOptions{DefaultSystem: SmolLM2DefaultSystem, Tools: []json.RawMessage{json.RawMessage(`{"name":"ls"}`)}, AddGenerationPrompt: true},
			"<|im_start|>system\n" + SmolLM2DefaultSystem + "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"name\": \"ls\"}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" +
				"<|im_start|>assistant\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\na.go\n</tool_response><|im_end|>\n<|im_start|>assistant\n"},
	}
	for _, c := range cases {
		got, err := RenderChat(c.msgs, c.opts)
		if err != nil || got != c.want {
			t.Errorf("%s:\n got %q, %v\nwant %q", c.name, got, err, c.want)
		}
	}
	_, err := RenderChat([]Message{{Role: "assistant", ToolCalls: []ToolCall{{Name: "x", Arguments: json.RawMessage(`{bad`)}}}}, ChatOptions{})
	if err == nil {
		t.Error("bad arguments accepted")
	}
}

func TestFromHFJSON(t *testing.T) {
	tokens, types, merges := tinyVocab()
	vocab := map[string]int{}
	var added []map[string]any
	for i, s := range tokens {
		if types[i] == int32(TypeNormal) {
			vocab[s] = i
		} else {
			added = append(added, map[string]any{"id": i, "content": s, "special": types[i] == int32(TypeControl)})
		}
	}
	build := func(edit func(m map[string]any)) []byte {
		m := map[string]any{
			"added_tokens": added,
			"normalizer":   map[string]any{"type": "NFC"},
			"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternQwen2}, "behavior": "Isolated", "invert": false},
				map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
			}},
			"decoder": map[string]any{"type": "ByteLevel"},
			"post_processor": map[string]any{"type": "TemplateProcessing", "single": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "<|im_start|>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
			}},
			"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": false},
		}
		if edit != nil {
			edit(m)
		}
		b, _ := json.Marshal(m)
		return b
	}
	tok, err := FromHFJSON(build(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.PreTokenizer() != PreQwen2 || !tok.AddBOS() || tok.Token(tok.BOS()) != "<|im_start|>" {
		t.Errorf("pre %s addBOS %v bos %d", tok.PreTokenizer(), tok.AddBOS(), tok.BOS())
	}
	// NFC: e + combining acute encodes like é.
	if a, b := tok.Encode("e\u0301"), tok.Encode("é"); !reflect.DeepEqual(a, b) {
		t.Errorf("NFC not applied: %v vs %v", a, b)
	}
	if !tok.IsSpecial(tok.Encode("<tool_call>")[0]) || tok.TokenType(tok.Encode("<tool_call>")[0]) != TypeUserDefined {
		t.Error("non-special added token not matched whole")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), build(nil), 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": "<|im_end|>", "add_bos_token": false, "chat_template": [{"name": "default", "template": "T"}, {"name": "tool_use", "template": "U"}]}`), 0o644)
	tok, err = LoadHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tok.AddBOS() || tok.Token(tok.EOS()) != "<|im_end|>" || tok.ChatTemplate() != "T" {
		t.Errorf("config not applied: addBOS %v eos %d template %q", tok.AddBOS(), tok.EOS(), tok.ChatTemplate())
	}

	errCases := []struct {
		name string
		edit func(m map[string]any)
		msg  string
	}{
		{"wordpiece", func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" }, "WordPiece"},
		{"byte fallback", func(m map[string]any) { m["model"].(map[string]any)["byte_fallback"] = true }, "byte_fallback"},
		{"unknown split", func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\w+`}
		}, `\\w+`},
		{"metaspace", func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }, "Metaspace"},
		{"normalizer", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} }, "Lowercase"},
	}
	for _, c := range errCases {
		_, err := FromHFJSON(build(c.edit), nil)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: err = %v", c.name, err)
		}
	}
	if _, err := FromHFJSON(build(nil), []byte(`{"eos_token": "<nope>"}`)); err == nil || !strings.Contains(err.Error(), "<nope>") {
		t.Errorf("unknown eos err = %v", err)
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := range 256 {
		r := byteToRune[b]
		if seen[r] {
			t.Fatalf("rune %U used twice", r)
		}
		seen[r] = true
	}
	if byteToRune[' '] != 'Ġ' || byteToRune['\n'] != 'Ċ' || byteToRune['a'] != 'a' {
		t.Error("GPT-2 alphabet mismatch")
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	if got := unByteLevel(byteLevel(all), nil); !bytes.Equal(got, all) {
		t.Error("byte-level round trip failed")
	}
}
