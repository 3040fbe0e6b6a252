package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
)

// HFJSON writes the tokenizer as a Hugging Face tokenizer.json (byte-level
// BPE: vocabulary, merges in rank order, added tokens, the pre-tokenizer in
// the form FromHFJSON and the tokenizers library both read), so that a
// model trained by frognano, whatever file it was loaded from, can be
// served by other tools. FromHFJSON(HFJSON(), HFConfigJSON()) encodes as
// the original does.
func (t *Tokenizer) HFJSON() ([]byte, error) {
	type added struct {
		ID         int32  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	var addedTokens []added
	vocab := map[string]int32{}
	for id, s := range t.vocab {
		switch t.types[id] {
		case TypeControl, TypeUserDefined:
			addedTokens = append(addedTokens, added{ID: int32(id), Content: s, Special: t.types[id] == TypeControl})
			// tokenizers keeps added tokens in the vocabulary too when the
			// model's own vocabulary has them; byte-level files do.
			vocab[s] = int32(id)
		case TypeUnused:
			// a hole in the id space: no entry
		default:
			if _, dup := vocab[s]; !dup {
				vocab[s] = int32(id)
			}
		}
	}
	type rankedMerge struct {
		rank int32
		pair [2]string
	}
	var ms []rankedMerge
	for key, m := range t.merges {
		l, r := int32(uint32(key>>32)), int32(uint32(key))
		ms = append(ms, rankedMerge{m.rank, [2]string{t.vocab[l], t.vocab[r]}})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].rank < ms[j].rank })
	merges := make([][2]string, len(ms))
	for i, m := range ms {
		merges[i] = m.pair
	}

	byteLevel := func(regex bool) map[string]any {
		return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": regex}
	}
	split := func(pattern string) map[string]any {
		return map[string]any{"type": "Split", "pattern": map[string]string{"Regex": pattern}, "behavior": "Isolated", "invert": false}
	}
	var pre any
	switch t.pre {
	case PreGPT2:
		pre = byteLevel(true)
	case PreSmolLM:
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Digits", "individual_digits": true}, byteLevel(true)}}
	case PreLlama3:
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{split(patternLlama3), byteLevel(false)}}
	case PreQwen2:
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{split(patternQwen2), byteLevel(false)}}
	default:
		return nil, fmt.Errorf("tokenizer: cannot export pre-tokenizer %q", t.pre)
	}
	var normalizer any
	if t.nfc {
		normalizer = map[string]string{"type": "NFC"}
	}
	var post any
	if t.addBOS && t.bos >= 0 {
		b := t.vocab[t.bos]
		post = map[string]any{
			"type":   "TemplateProcessing",
			"single": []any{map[string]any{"SpecialToken": map[string]any{"id": b, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair": []any{map[string]any{"SpecialToken": map[string]any{"id": b, "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
				map[string]any{"SpecialToken": map[string]any{"id": b, "type_id": 1}}, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}}},
			"special_tokens": map[string]any{b: map[string]any{"id": b, "ids": []int32{t.bos}, "tokens": []string{b}}},
		}
	}
	var unk any
	if t.unk >= 0 {
		unk = t.vocab[t.unk]
	}
	doc := map[string]any{
		"version":        "1.0",
		"truncation":     nil,
		"padding":        nil,
		"added_tokens":   addedTokens,
		"normalizer":     normalizer,
		"pre_tokenizer":  pre,
		"post_processor": post,
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": unk, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false,
			"ignore_merges": t.ignoreMerges, "vocab": vocab, "merges": merges,
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

// HFConfigJSON writes the tokenizer_config.json that goes with HFJSON: the
// special tokens by name, add_bos_token, the chat template, and the
// added-tokens decoder that transformers expects.
func (t *Tokenizer) HFConfigJSON() ([]byte, error) {
	name := func(id int32) any {
		if id < 0 {
			return nil
		}
		return t.vocab[id]
	}
	decoder := map[string]any{}
	var specials []string
	for id, s := range t.vocab {
		if tt := t.types[id]; tt == TypeControl || tt == TypeUserDefined {
			decoder[fmt.Sprint(id)] = map[string]any{"content": s, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": tt == TypeControl}
			if tt == TypeControl {
				specials = append(specials, s)
			}
		}
	}
	doc := map[string]any{
		"tokenizer_class":              "PreTrainedTokenizerFast",
		"model_max_length":             1 << 30,
		"clean_up_tokenization_spaces": false,
		"add_bos_token":                t.addBOS,
		"add_prefix_space":             false,
		"bos_token":                    name(t.bos),
		"eos_token":                    name(t.eos),
		"pad_token":                    name(t.pad),
		"unk_token":                    name(t.unk),
		"added_tokens_decoder":         decoder,
		"additional_special_tokens":    specials,
	}
	if t.chatTemplate != "" {
		doc["chat_template"] = t.chatTemplate
	}
	return json.MarshalIndent(doc, "", "  ")
}
