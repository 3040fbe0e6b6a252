package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/frognano/frognano/kernels/gguf"
)

// FromGGUF builds the tokenizer a GGUF file describes in its tokenizer.ggml.*
// metadata. Only byte-level BPE (tokenizer.ggml.model "gpt2") is supported.
func FromGGUF(m *gguf.Metadata) (*Tokenizer, error) {
	model, err := m.String("tokenizer.ggml.model")
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if model != "gpt2" {
		return nil, fmt.Errorf("tokenizer: unsupported tokenizer.ggml.model %q: only byte-level BPE (\"gpt2\") is implemented", model)
	}
	var c Config
	preName, err := m.String("tokenizer.ggml.pre")
	if err != nil && !errors.Is(err, gguf.ErrNotFound) {
		return nil, err
	}
	if c.Pre, err = preFromGGUF(preName); err != nil {
		return nil, err
	}
	// llama.cpp looks whole pieces up before merging for Llama 3.
	c.IgnoreMerges = c.Pre == PreLlama3
	// Qwen2's tokenizer.json normalises to NFC before splitting (llama.cpp
	// does not; frognano follows the reference, HF tokenizers).
	c.NFC = c.Pre == PreQwen2
	if c.Tokens, err = m.Strings("tokenizer.ggml.tokens"); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if _, ok := m.Lookup("tokenizer.ggml.token_type"); ok {
		types, err := m.Ints("tokenizer.ggml.token_type")
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		c.Types = make([]TokenType, len(types))
		for i, v := range types {
			c.Types[i] = TokenType(v)
		}
	}
	merges, err := m.Strings("tokenizer.ggml.merges")
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	c.Merges = make([][2]string, len(merges))
	for i, s := range merges {
		a, b, ok := strings.Cut(s, " ")
		if !ok {
			return nil, fmt.Errorf("tokenizer: merge #%d %q is not two tokens separated by a space", i, s)
		}
		c.Merges[i] = [2]string{a, b}
	}
	for _, x := range []struct {
		key string
		dst *int32
	}{
		{"tokenizer.ggml.bos_token_id", &c.BOS},
		{"tokenizer.ggml.eos_token_id", &c.EOS},
		{"tokenizer.ggml.padding_token_id", &c.PAD},
		{"tokenizer.ggml.unknown_token_id", &c.UNK},
	} {
		*x.dst = -1
		v, err := m.Uint(x.key)
		switch {
		case err == nil:
			*x.dst = int32(v)
		case !errors.Is(err, gguf.ErrNotFound):
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	if v, err := m.Bool("tokenizer.ggml.add_bos_token"); err == nil {
		c.AddBOS = v
	}
	if s, err := m.String("tokenizer.chat_template"); err == nil {
		c.ChatTemplate = s
	}
	return New(c)
}

// hfJSON is the part of an HF tokenizer.json this package understands.
type hfJSON struct {
	AddedTokens []struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type         string           `json:"type"`
		Vocab        map[string]int32 `json:"vocab"`
		Merges       json.RawMessage  `json:"merges"`
		IgnoreMerges bool             `json:"ignore_merges"`
		ByteFallback bool             `json:"byte_fallback"`
		UnkToken     *string          `json:"unk_token"`
	} `json:"model"`
}

type hfComponent struct {
	Type           string                         `json:"type"`
	AddPrefixSpace bool                           `json:"add_prefix_space"`
	UseRegex       *bool                          `json:"use_regex"`
	Individual     bool                           `json:"individual_digits"`
	Pattern        struct{ Regex, String string } `json:"pattern"`
	Behavior       string                         `json:"behavior"`
	Invert         bool                           `json:"invert"`
	Children       []hfComponent                  `json:"pretokenizers"`
	Normalizers    []hfComponent                  `json:"normalizers"`
	Single         []json.RawMessage              `json:"single"`
}

func isNull(m json.RawMessage) bool { return len(m) == 0 || string(m) == "null" }

func parsePre(raw json.RawMessage) (PreTokenizer, error) {
	if isNull(raw) {
		return "", errors.New("tokenizer: tokenizer.json has no pre_tokenizer; byte-level BPE needs ByteLevel")
	}
	var c hfComponent
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("tokenizer: pre_tokenizer: %w", err)
	}
	byteLevelOK := func(b hfComponent, regex bool) bool {
		useRegex := b.UseRegex == nil || *b.UseRegex
		return b.Type == "ByteLevel" && !b.AddPrefixSpace && useRegex == regex
	}
	switch {
	case byteLevelOK(c, true):
		return PreGPT2, nil
	case c.Type == "Sequence" && len(c.Children) == 2 && c.Children[0].Type == "Digits" && c.Children[0].Individual && byteLevelOK(c.Children[1], true):
		return PreSmolLM, nil
	case c.Type == "Sequence" && len(c.Children) == 2 && c.Children[0].Type == "Split" && byteLevelOK(c.Children[1], false):
		s := c.Children[0]
		if s.Behavior != "Isolated" || s.Invert {
			break
		}
		switch s.Pattern.Regex {
		case patternGPT2:
			return PreGPT2, nil
		case patternLlama3:
			return PreLlama3, nil
		case patternQwen2:
			return PreQwen2, nil
		}
		return "", fmt.Errorf("tokenizer: unsupported pre-tokenizer Split pattern %q", s.Pattern.Regex)
	}
	return "", fmt.Errorf("tokenizer: unsupported pre_tokenizer %s", raw)
}

// FromHFJSON builds a tokenizer from the contents of an HF tokenizer.json and,
// optionally (nil), of its tokenizer_config.json, which names the BOS/EOS/PAD
// tokens and carries the chat template.
func FromHFJSON(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	var h hfJSON
	if err := json.Unmarshal(tokenizerJSON, &h); err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	if h.Model.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer: unsupported model type %q: only byte-level BPE is implemented", h.Model.Type)
	}
	if h.Model.ByteFallback {
		return nil, errors.New("tokenizer: byte_fallback BPE (SentencePiece style) is not supported, only byte-level BPE")
	}
	var c Config
	var err error
	if c.Pre, err = parsePre(h.PreTokenizer); err != nil {
		return nil, err
	}
	c.IgnoreMerges = h.Model.IgnoreMerges
	if !isNull(h.Normalizer) {
		var n hfComponent
		if err := json.Unmarshal(h.Normalizer, &n); err != nil {
			return nil, fmt.Errorf("tokenizer: normalizer: %w", err)
		}
		if n.Type == "Sequence" && len(n.Normalizers) == 0 {
			n.Type = ""
		}
		switch n.Type {
		case "NFC":
			c.NFC = true
		case "":
		default:
			return nil, fmt.Errorf("tokenizer: unsupported normalizer %s", h.Normalizer)
		}
	}
	if !isNull(h.Decoder) {
		var d hfComponent
		json.Unmarshal(h.Decoder, &d)
		if d.Type != "ByteLevel" {
			return nil, fmt.Errorf("tokenizer: unsupported decoder %s: byte-level BPE needs ByteLevel", h.Decoder)
		}
	}
	size := int32(0)
	for _, id := range h.Model.Vocab {
		size = max(size, id+1)
	}
	for _, a := range h.AddedTokens {
		size = max(size, a.ID+1)
	}
	c.Tokens = make([]string, size)
	c.Types = make([]TokenType, size)
	for s, id := range h.Model.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("tokenizer: negative id for %q", s)
		}
		c.Tokens[id], c.Types[id] = s, TypeNormal
	}
	for _, a := range h.AddedTokens {
		c.Tokens[a.ID] = a.Content
		c.Types[a.ID] = TypeUserDefined
		if a.Special {
			c.Types[a.ID] = TypeControl
		}
	}
	for i := range c.Types {
		if c.Types[i] == TypeUndefined {
			c.Types[i] = TypeUnused // a hole in the id space
		}
	}
	if c.Merges, err = parseMerges(h.Model.Merges); err != nil {
		return nil, err
	}
	c.BOS, c.EOS, c.PAD, c.UNK = -1, -1, -1, -1
	lookup := func(s string) int32 {
		if id, ok := h.Model.Vocab[s]; ok {
			return id
		}
		for _, a := range h.AddedTokens {
			if a.Content == s {
				return a.ID
			}
		}
		return -1
	}
	if h.Model.UnkToken != nil {
		c.UNK = lookup(*h.Model.UnkToken)
	}
	// A TemplateProcessing post-processor that starts with a special token
	// means the model wants BOS (Llama 3).
	if !isNull(h.PostProcessor) {
		var pp hfComponent
		json.Unmarshal(h.PostProcessor, &pp)
		if pp.Type == "TemplateProcessing" && len(pp.Single) > 0 {
			var st struct {
				SpecialToken *struct{ ID string } `json:"SpecialToken"`
			}
			if json.Unmarshal(pp.Single[0], &st) == nil && st.SpecialToken != nil {
				c.BOS, c.AddBOS = lookup(st.SpecialToken.ID), true
			}
		}
	}
	if configJSON != nil {
		if err := applyHFConfig(&c, configJSON, lookup); err != nil {
			return nil, err
		}
	}
	return New(c)
}

func parseMerges(raw json.RawMessage) ([][2]string, error) {
	var asStrings []string
	if err := json.Unmarshal(raw, &asStrings); err == nil {
		out := make([][2]string, len(asStrings))
		for i, s := range asStrings {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("tokenizer: merge #%d %q is not two tokens separated by a space", i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("tokenizer: model.merges is neither [\"a b\"] nor [[\"a\",\"b\"]]: %w", err)
	}
	return pairs, nil
}

// hfTokenName is a token in tokenizer_config.json: a string or {"content": ...}.
type hfTokenName string

func (n *hfTokenName) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*n = hfTokenName(s)
		return nil
	}
	var o struct{ Content string }
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*n = hfTokenName(o.Content)
	return nil
}

func applyHFConfig(c *Config, raw []byte, lookup func(string) int32) error {
	var cfg struct {
		BOS          *hfTokenName    `json:"bos_token"`
		EOS          *hfTokenName    `json:"eos_token"`
		PAD          *hfTokenName    `json:"pad_token"`
		UNK          *hfTokenName    `json:"unk_token"`
		AddBOS       *bool           `json:"add_bos_token"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("tokenizer: tokenizer_config.json: %w", err)
	}
	for _, x := range []struct {
		name *hfTokenName
		dst  *int32
		key  string
	}{{cfg.BOS, &c.BOS, "bos_token"}, {cfg.EOS, &c.EOS, "eos_token"}, {cfg.PAD, &c.PAD, "pad_token"}, {cfg.UNK, &c.UNK, "unk_token"}} {
		if x.name == nil {
			continue
		}
		id := lookup(string(*x.name))
		if id < 0 {
			return fmt.Errorf("tokenizer: tokenizer_config.json %s %q is not in the vocabulary", x.key, *x.name)
		}
		*x.dst = id
	}
	if cfg.AddBOS != nil {
		c.AddBOS = *cfg.AddBOS
	}
	if !isNull(cfg.ChatTemplate) {
		var s string
		if json.Unmarshal(cfg.ChatTemplate, &s) != nil {
			var named []struct{ Name, Template string }
			if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
				return fmt.Errorf("tokenizer: chat_template: %w", err)
			}
			for _, n := range named {
				if n.Name == "default" {
					s = n.Template
				}
			}
		}
		c.ChatTemplate = s
	}
	return nil
}

// LoadHF reads dir/tokenizer.json and, if present, dir/tokenizer_config.json.
func LoadHF(dir string) (*Tokenizer, error) {
	tj, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cj, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		cj = nil
	}
	return FromHFJSON(tj, cj)
}
