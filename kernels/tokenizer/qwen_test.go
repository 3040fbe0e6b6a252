package tokenizer

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/frognano/frognano/kernels/gguf"
	"github.com/frognano/frognano/kernels/kernelstest"
)

// The Qwen2.5 fixtures (testdata/qwen25_*.json) were made by
// testdata/gen/gen_qwen.py with HF tokenizers and transformers from the
// Qwen2.5-Coder GGUFs that `frognano model pull qwen2.5-coder-0.5b` and
// `qwen2.5-coder-1.5b` store. The ids need the model's vocabulary: those
// tests skip unless FROGNANO_TEST_QWEN05_GGUF names the 0.5B file or the
// model store holds it. The chat renderings need no model.

var (
	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenTmpl string
	qwenErr  error
)

func qwen05(t testing.TB) *Tokenizer {
	t.Helper()
	p := kernelstest.ModelFile(t, "FROGNANO_TEST_QWEN05_GGUF", "qwen2.5-coder-0.5b")
	qwenOnce.Do(func() {
		f, err := gguf.Open(p)
		if err != nil {
			qwenErr = err
			return
		}
		defer f.Close()
		qwenTok, qwenErr = FromGGUF(&f.Meta)
		qwenTmpl, _ = f.Meta.String("tokenizer.chat_template")
	})
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok
}

// TestQwenEncodeMatchesHF checks every fixture string's ids against HF
// tokenizers with Qwen2's tokenizer.json (NFC, Qwen2's split regex), and
// that decoding gives the NFC form of the string back.
func TestQwenEncodeMatchesHF(t *testing.T) {
	tok := qwen05(t)
	var tc tokenCases
	readJSON(t, "qwen25_tokens.json", &tc)
	if tc.GoldenVersion != 1 || len(tc.Cases) < 300 {
		t.Fatalf("qwen25_tokens.json: version %d, %d cases; regenerate with testdata/gen/gen_qwen.py", tc.GoldenVersion, len(tc.Cases))
	}
	if tok.PreTokenizer() != PreQwen2 || tok.VocabSize() != 151936 || tok.EOS() != 151645 || tok.AddBOS() {
		t.Fatalf("pre %s vocab %d eos %d addBOS %v", tok.PreTokenizer(), tok.VocabSize(), tok.EOS(), tok.AddBOS())
	}
	fails, nonASCII := 0, 0
	for _, c := range tc.Cases {
		want := c.IDs
		if want == nil {
			want = []int32{}
		}
		for _, r := range c.Text {
			if r > 127 {
				nonASCII++
				break
			}
		}
		got := append([]int32{}, tok.Encode(c.Text)...)
		if !reflect.DeepEqual(got, want) {
			if fails++; fails <= 5 {
				t.Errorf("%q:\n got %v\nwant %v", c.Text, got, want)
			}
		}
		if s, err := tok.Decode(got); err != nil || s != nfc(c.Text) {
			t.Errorf("Decode(Encode(%q)) = %q, %v", c.Text, s, err)
		}
	}
	if fails > 0 {
		t.Errorf("%d of %d strings encode differently from HF tokenizers", fails, len(tc.Cases))
	}
	if nonASCII < 20 {
		t.Errorf("only %d fixture strings are non-ASCII", nonASCII)
	}
}

type qwenChatFixture struct {
	GoldenVersion int               `json:"golden_version"`
	Templates     map[string]string `json:"templates"`
	Cases         []struct {
		Name                string            `json:"name"`
		Model               string            `json:"model"`
		AddGenerationPrompt bool              `json:"add_generation_prompt"`
		Messages            []json.RawMessage `json:"messages"`
		Tools               []json.RawMessage `json:"tools"`
		Rendered            string            `json:"rendered"`
		IDs                 []int32           `json:"ids"`
	} `json:"cases"`
}

// TestQwenChatTemplates renders each fixture conversation in the format
// ParseChatTemplate reads from each Qwen2.5-Coder GGUF's template, against
// transformers' apply_chat_template. The two templates differ: the 1.5B's
// prints its example tool call with doubled braces.
func TestQwenChatTemplates(t *testing.T) {
	var fx qwenChatFixture
	readJSON(t, "qwen25_chat.json", &fx)
	if fx.GoldenVersion != 1 || len(fx.Templates) != 2 || len(fx.Cases) == 0 {
		t.Fatal("qwen25_chat.json: bad version or no cases; regenerate with testdata/gen/gen_qwen.py")
	}
	formats := map[string]ChatFormat{}
	for name, tmpl := range fx.Templates {
		f, err := ParseChatTemplate(tmpl)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if f.DefaultSystem != QwenDefaultSystem {
			t.Errorf("%s: default system %q", name, f.DefaultSystem)
		}
		formats[name] = f
	}
	if got := formats["qwen2.5-coder-1.5b"].ToolCallExample; got != "{"+DefaultToolCallExample+"}" {
		t.Errorf("1.5B example call %q", got)
	}
	if got := formats["qwen2.5-coder-0.5b"].ToolCallExample; got != DefaultToolCallExample {
		t.Errorf("0.5B example call %q", got)
	}
	var tok *Tokenizer
	if _, err := kernelstest.FindModelFile("FROGNANO_TEST_QWEN05_GGUF", "qwen2.5-coder-0.5b"); err == nil {
		tok = qwen05(t)
		if qwenTmpl != fx.Templates["qwen2.5-coder-0.5b"] {
			t.Error("the 0.5B GGUF's chat template differs from the one the fixture was rendered with")
		}
	}
	tools := 0
	for _, c := range fx.Cases {
		var msgs []Message
		for _, m := range c.Messages {
			msgs = append(msgs, parseMessage(t, m))
		}
		if len(c.Tools) > 0 {
			tools++
		}
		got, err := RenderChat(msgs, formats[c.Model].Options(c.Tools, c.AddGenerationPrompt))
		if err != nil {
			t.Fatal(err)
		}
		if got != c.Rendered {
			t.Errorf("%s (%s, generation prompt %v):\n got %q\nwant %q", c.Name, c.Model, c.AddGenerationPrompt, got, c.Rendered)
		}
		if tok != nil {
			if ids := tok.Encode(got); !reflect.DeepEqual(ids, c.IDs) {
				t.Errorf("%s (%s): ids %v, want %v", c.Name, c.Model, ids, c.IDs)
			}
		}
	}
	if tools == 0 {
		t.Error("no fixture conversation offers tools")
	}
}

func TestParseChatTemplateErrors(t *testing.T) {
	for _, c := range []struct{ name, tmpl, msg string }{
		{"none", "", "has none"},
		{"blank", " \n", "has none"},
		{"not ChatML", "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}", "not ChatML"},
		{"tools in another form", "{%- if tools %}<tools>{{ tools }}</tools>{% endif %}<|im_start|>{{ m }}<|im_end|>", "not in Qwen2.5's form"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseChatTemplate(c.tmpl)
			if !errors.Is(err, ErrNoChatTemplate) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("err = %v, want ErrNoChatTemplate with %q", err, c.msg)
			}
		})
	}
	f, err := ParseChatTemplate("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}")
	if err != nil || f.DefaultSystem != "" || f.ToolCallExample != DefaultToolCallExample {
		t.Errorf("plain ChatML: %+v, %v", f, err)
	}
}
