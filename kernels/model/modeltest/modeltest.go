// Package modeltest writes tiny random models, as GGUF files (laid out the
// way llama.cpp's converter lays them out) and as Hugging Face checkpoint
// directories, and computes their logits with a float64 reference written
// from the Hugging Face modelling code's equations. Tests of anything that
// runs a model (the decoder, a sampler, the CLI) use them instead of a real
// checkpoint.
package modeltest

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/frognano/frognano/kernels/gguf"
	"github.com/frognano/frognano/kernels/safetensors"
	"github.com/frognano/frognano/kernels/tokenizer"
)

// Tiny specs of each architecture, a few kilobytes of weights each.
var (
	Llama       = Spec{Arch: "llama", Dim: 32, Heads: 4, KV: 2, HD: 8, FFN: 64, Layers: 2}
	LlamaUntied = Spec{Arch: "llama", Dim: 32, Heads: 4, KV: 4, HD: 8, FFN: 64, Layers: 2, Untied: true}
	Qwen2       = Spec{Arch: "qwen2", Dim: 32, Heads: 4, KV: 2, HD: 8, FFN: 64, Layers: 2}
	Qwen3       = Spec{Arch: "qwen3", Dim: 32, Heads: 4, KV: 2, HD: 16, FFN: 64, Layers: 2, Untied: true}
)

// Spec is a tiny model's shape.
type Spec struct {
	Arch                    string // "llama", "qwen2" (q/k/v biases) or "qwen3" (q/k norms)
	Dim, Heads, KV, HD, FFN int
	Layers                  int
	Untied                  bool // a separate output projection instead of the tied embedding
	ExtraVocab              int  // embedding rows beyond the tokenizer's
}

func (s Spec) bias() bool   { return s.Arch == "qwen2" }
func (s Spec) qkNorm() bool { return s.Arch == "qwen3" }

// Tokens is a byte-level vocabulary: the 256 bytes, a few merges and
// the ChatML specials.
func Tokens() (tokens []string, types []int32, merges []string) {
	for b := range 256 {
		tokens = append(tokens, byteToken(byte(b)))
		types = append(types, int32(tokenizer.TypeNormal))
	}
	merges = []string{"h e", "l l", "he ll", "hell o"}
	for _, m := range merges {
		tokens = append(tokens, strings.ReplaceAll(m, " ", ""))
		types = append(types, int32(tokenizer.TypeNormal))
	}
	for _, s := range []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>"} {
		tokens = append(tokens, s)
		types = append(types, int32(tokenizer.TypeControl))
	}
	return
}

// byteToken is GPT-2's printable stand-in for a byte.
func byteToken(b byte) string {
	switch {
	case b >= '!' && b <= '~', b >= 0xA1 && b <= 0xAC, b >= 0xAE:
		return string(rune(b))
	}
	n := 0
	for c := range int(b) {
		if !(c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE) {
			n++
		}
	}
	return string(rune(256 + n))
}

// Weights are a model's tensors by Hugging Face name, in HF layout.
type Weights map[string]Tensor

// Tensor is one weight: its shape, outermost first, and its values.
type Tensor struct {
	Shape []int
	Data  []float32
}

// Vocab is the number of embedding rows: the tokenizer's vocabulary plus
// ExtraVocab.
func (s Spec) Vocab() int {
	tokens, _, _ := Tokens()
	return len(tokens) + s.ExtraVocab
}

// RandomWeights draws a model; scales keep activations of order one.
func (s Spec) RandomWeights(seed uint64) Weights {
	r := rand.New(rand.NewPCG(seed, 99))
	w := Weights{}
	add := func(name string, scale float32, base float32, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = base + scale*float32(r.NormFloat64())
		}
		w[name] = Tensor{shape, v}
	}
	q, kv := s.Heads*s.HD, s.KV*s.HD
	add("model.embed_tokens.weight", 1, 0, s.Vocab(), s.Dim)
	add("model.norm.weight", 0.1, 1, s.Dim)
	if s.Untied {
		add("lm_head.weight", 0.3, 0, s.Vocab(), s.Dim)
	}
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", 0.1, 1, s.Dim)
		add(p+"post_attention_layernorm.weight", 0.1, 1, s.Dim)
		in := float32(1 / math.Sqrt(float64(s.Dim)))
		add(p+"self_attn.q_proj.weight", 2*in, 0, q, s.Dim)
		add(p+"self_attn.k_proj.weight", 2*in, 0, kv, s.Dim)
		add(p+"self_attn.v_proj.weight", in, 0, kv, s.Dim)
		add(p+"self_attn.o_proj.weight", float32(1/math.Sqrt(float64(q))), 0, s.Dim, q)
		if s.bias() {
			add(p+"self_attn.q_proj.bias", 0.5, 0, q)
			add(p+"self_attn.k_proj.bias", 0.5, 0, kv)
			add(p+"self_attn.v_proj.bias", 0.5, 0, kv)
		}
		if s.qkNorm() {
			add(p+"self_attn.q_norm.weight", 0.2, 1, s.HD)
			add(p+"self_attn.k_norm.weight", 0.2, 1, s.HD)
		}
		add(p+"mlp.gate_proj.weight", in, 0, s.FFN, s.Dim)
		add(p+"mlp.up_proj.weight", in, 0, s.FFN, s.Dim)
		add(p+"mlp.down_proj.weight", float32(1/math.Sqrt(float64(s.FFN))), 0, s.Dim, s.FFN)
	}
	return w
}

// ggufName maps a Hugging Face tensor name to llama.cpp's.
func ggufName(hf string) string {
	r := strings.NewReplacer(
		"model.embed_tokens", "token_embd", "model.norm", "output_norm", "lm_head", "output",
		"model.layers.", "blk.", "input_layernorm", "attn_norm", "post_attention_layernorm", "ffn_norm",
		"self_attn.q_proj", "attn_q", "self_attn.k_proj", "attn_k", "self_attn.v_proj", "attn_v",
		"self_attn.o_proj", "attn_output", "self_attn.q_norm", "attn_q_norm", "self_attn.k_norm", "attn_k_norm",
		"mlp.gate_proj", "ffn_gate", "mlp.up_proj", "ffn_up", "mlp.down_proj", "ffn_down")
	return r.Replace(hf)
}

// permuteRows is llama.cpp's permute(w, n_head) (convert_hf_to_gguf.py):
// w.reshape(heads, 2, hd/2, cols).swapaxes(1, 2), written out here so the
// loader's inverse is checked against the converter's forward direction.
func permuteRows(w []float32, heads, hd, cols int) []float32 {
	out := make([]float32, len(w))
	half := hd / 2
	for h := range heads {
		for t := range 2 {
			for j := range half {
				src := (h*hd + t*half + j) * cols // [h, t, j]
				dst := (h*hd + j*2 + t) * cols    // [h, j, t]
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}

// GGUFOptions vary what WriteGGUF writes, to make damaged files for error
// tests. The zero value writes a well-formed F32 file.
type GGUFOptions struct {
	Quant    gguf.TensorType            // type of the 2-D weights (F32 when zero)
	Arch     string                     // general.architecture, overriding Spec.Arch
	Override map[string]gguf.TensorType // type of single tensors, by GGUF name (zero bytes for a type frognano cannot dequantise)
	Drop     string                     // a tensor, by GGUF name, to leave out
	// NoChatTemplate leaves tokenizer.chat_template out; otherwise the file
	// carries ChatMLTemplate, as instruct models do.
	NoChatTemplate bool
}

// ChatMLTemplate is the plain ChatML chat template test models carry.
const ChatMLTemplate = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// WriteRandomGGUF writes a model of random weights drawn from seed and
// returns its path: the one-line fixture for tests that need any model.
func (s Spec) WriteRandomGGUF(t testing.TB, seed uint64) string {
	t.Helper()
	p, _ := s.WriteGGUF(t, s.RandomWeights(seed), GGUFOptions{})
	return p
}

// WriteGGUF writes w as llama.cpp would: llama's q/k rows permuted, 2-D
// weights optionally quantised. It returns the path and the weights as the
// file holds them after quantisation, back in HF layout.
func (s Spec) WriteGGUF(t testing.TB, w Weights, o GGUFOptions) (string, Weights) {
	t.Helper()
	tokens, types, merges := Tokens()
	gw := &gguf.Writer{}
	arch := s.Arch
	if o.Arch != "" {
		arch = o.Arch
	}
	set := func(k string, v any) {
		if err := gw.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	set("general.architecture", arch)
	set(arch+".embedding_length", uint32(s.Dim))
	set(arch+".block_count", uint32(s.Layers))
	set(arch+".attention.head_count", uint32(s.Heads))
	set(arch+".attention.head_count_kv", uint32(s.KV))
	set(arch+".attention.key_length", uint32(s.HD))
	set(arch+".attention.value_length", uint32(s.HD))
	set(arch+".rope.dimension_count", uint32(s.HD))
	set(arch+".feed_forward_length", uint32(s.FFN))
	set(arch+".context_length", uint32(512))
	set(arch+".rope.freq_base", float32(10000))
	set(arch+".attention.layer_norm_rms_epsilon", float32(1e-5))
	set("tokenizer.ggml.model", "gpt2")
	set("tokenizer.ggml.pre", "smollm")
	set("tokenizer.ggml.tokens", tokens)
	set("tokenizer.ggml.token_type", types)
	set("tokenizer.ggml.merges", merges)
	set("tokenizer.ggml.bos_token_id", uint32(len(tokens)-3))
	set("tokenizer.ggml.eos_token_id", uint32(len(tokens)-2))
	if !o.NoChatTemplate {
		set("tokenizer.chat_template", ChatMLTemplate)
	}
	held := Weights{}
	for _, name := range sortedNames(w) {
		x := w[name]
		gname := ggufName(name)
		if gname == o.Drop {
			continue
		}
		data := x.Data
		if s.Arch == "llama" && (strings.Contains(gname, "attn_q.") || strings.Contains(gname, "attn_k.")) {
			heads := s.Heads
			if strings.Contains(gname, "attn_k.") {
				heads = s.KV
			}
			data = permuteRows(data, heads, s.HD, len(data)/(heads*s.HD))
		}
		typ := gguf.F32
		if len(x.Shape) == 2 && o.Quant != 0 {
			typ = o.Quant
		}
		if ot, ok := o.Override[gname]; ok {
			typ = ot
		}
		var raw []byte
		var err error
		switch {
		case !typ.CanDequantize(): // any bytes of the right size
			raw = make([]byte, typ.RowBytes(len(data)))
		default:
			raw, err = gguf.Quantize(typ, data)
			if err != nil {
				t.Fatal(err)
			}
			back := make([]float32, len(data))
			if err := gguf.Dequantize(typ, raw, back); err != nil {
				t.Fatal(err)
			}
			if s.Arch == "llama" && (strings.Contains(gname, "attn_q.") || strings.Contains(gname, "attn_k.")) {
				heads := s.Heads
				if strings.Contains(gname, "attn_k.") {
					heads = s.KV
				}
				back = unpermuteRows(back, heads, s.HD, len(back)/(heads*s.HD))
			}
			held[name] = Tensor{x.Shape, back}
		}
		dims := make([]uint64, len(x.Shape))
		for i, d := range x.Shape {
			dims[len(dims)-1-i] = uint64(d)
		}
		if err := gw.AddTensor(gname, typ, dims, raw); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.WriteTo(fh); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	return path, held
}

// WriteHF writes w as a Hugging Face checkpoint directory: config.json
// (edit may change it), tokenizer.json and safetensors weights.
func (s Spec) WriteHF(t testing.TB, w Weights, edit func(cfg map[string]any)) string {
	t.Helper()
	dir := t.TempDir()
	hfArch := map[string]string{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[s.Arch]
	cfg := map[string]any{
		"architectures": []string{hfArch}, "vocab_size": s.Vocab(), "hidden_size": s.Dim,
		"num_hidden_layers": s.Layers, "num_attention_heads": s.Heads, "num_key_value_heads": s.KV,
		"head_dim": s.HD, "intermediate_size": s.FFN, "max_position_embeddings": 512,
		"rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": !s.Untied, "hidden_act": "silu",
	}
	if edit != nil {
		edit(cfg)
	}
	writeJSON(t, filepath.Join(dir, "config.json"), cfg)
	tokens, types, merges := Tokens()
	vocab := map[string]int{}
	var added []map[string]any
	for i, tok := range tokens {
		if types[i] == int32(tokenizer.TypeNormal) {
			vocab[tok] = i
		} else {
			added = append(added, map[string]any{"id": i, "content": tok, "special": true})
		}
	}
	writeJSON(t, filepath.Join(dir, "tokenizer.json"), map[string]any{
		"added_tokens":  added,
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": merges},
	})
	// Weights go to model.safetensors, or, when the config says
	// "frognano_shards": n, round-robin into n shards named by
	// model.safetensors.index.json, as large checkpoints are.
	shards, _ := cfg["frognano_shards"].(int)
	files := []string{"model.safetensors"}
	if shards > 1 {
		files = files[:0]
		for i := range shards {
			files = append(files, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, shards))
		}
	}
	writers := make([]safetensors.Writer, len(files))
	weightMap := map[string]string{}
	for i, name := range sortedNames(w) {
		f := i % len(files)
		weightMap[name] = files[f]
		if err := writers[f].AddFloat32s(name, safetensors.F32, w[name].Shape, w[name].Data); err != nil {
			t.Fatal(err)
		}
	}
	for i := range writers {
		if err := writers[i].WriteFile(filepath.Join(dir, files[i])); err != nil {
			t.Fatal(err)
		}
	}
	if len(files) > 1 {
		writeJSON(t, filepath.Join(dir, "model.safetensors.index.json"), map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	}
	return dir
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sortedNames(w Weights) []string {
	var names []string
	for n := range w {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// unpermuteRows inverts permuteRows.
func unpermuteRows(w []float32, heads, hd, cols int) []float32 {
	out := make([]float32, len(w))
	half := hd / 2
	for h := range heads {
		for t := range 2 {
			for j := range half {
				copy(out[(h*hd+t*half+j)*cols:(h*hd+t*half+j+1)*cols], w[(h*hd+j*2+t)*cols:(h*hd+j*2+t+1)*cols])
			}
		}
	}
	return out
}

// Reference computes every position's logits in float64, following the
// equations of transformers' LlamaForCausalLM, Qwen2ForCausalLM and
// Qwen3ForCausalLM (eager attention).
func (s Spec) Reference(w Weights, ids []int32) [][]float64 {
	get := func(name string) []float32 { return w[name].Data }
	T, D := len(ids), s.Dim
	x := make([][]float64, T)
	emb := get("model.embed_tokens.weight")
	for t, id := range ids {
		x[t] = make([]float64, D)
		for d := range D {
			x[t][d] = float64(emb[int(id)*D+d])
		}
	}
	rms := func(v []float64, wt []float32) []float64 {
		var ss float64
		for _, a := range v {
			ss += a * a
		}
		sc := 1 / math.Sqrt(ss/float64(len(v))+1e-5)
		out := make([]float64, len(v))
		for i, a := range v {
			out[i] = a * sc * float64(wt[i])
		}
		return out
	}
	lin := func(v []float64, wt []float32, bias []float32, out int) []float64 {
		in := len(v)
		y := make([]float64, out)
		for o := range out {
			var acc float64
			for i := range in {
				acc += float64(wt[o*in+i]) * v[i]
			}
			if bias != nil {
				acc += float64(bias[o])
			}
			y[o] = acc
		}
		return y
	}
	rope := func(v []float64, heads, pos int) {
		half := s.HD / 2
		for h := range heads {
			for j := range half {
				ang := float64(pos) * math.Pow(10000, -2*float64(j)/float64(s.HD))
				a, b := v[h*s.HD+j], v[h*s.HD+j+half]
				v[h*s.HD+j] = a*math.Cos(ang) - b*math.Sin(ang)
				v[h*s.HD+j+half] = b*math.Cos(ang) + a*math.Sin(ang)
			}
		}
	}
	headNorm := func(v []float64, heads int, wt []float32) {
		for h := range heads {
			copy(v[h*s.HD:(h+1)*s.HD], rms(v[h*s.HD:(h+1)*s.HD], wt))
		}
	}
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		var bq, bk, bv []float32
		if s.bias() {
			bq, bk, bv = get(p+"self_attn.q_proj.bias"), get(p+"self_attn.k_proj.bias"), get(p+"self_attn.v_proj.bias")
		}
		qs, ks, vs := make([][]float64, T), make([][]float64, T), make([][]float64, T)
		for t := range T {
			h := rms(x[t], get(p+"input_layernorm.weight"))
			qs[t] = lin(h, get(p+"self_attn.q_proj.weight"), bq, s.Heads*s.HD)
			ks[t] = lin(h, get(p+"self_attn.k_proj.weight"), bk, s.KV*s.HD)
			vs[t] = lin(h, get(p+"self_attn.v_proj.weight"), bv, s.KV*s.HD)
			if s.qkNorm() {
				headNorm(qs[t], s.Heads, get(p+"self_attn.q_norm.weight"))
				headNorm(ks[t], s.KV, get(p+"self_attn.k_norm.weight"))
			}
			rope(qs[t], s.Heads, t)
			rope(ks[t], s.KV, t)
		}
		for t := range T {
			att := make([]float64, s.Heads*s.HD)
			for h := range s.Heads {
				g := h / (s.Heads / s.KV)
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for u := range t + 1 {
					var d float64
					for i := range s.HD {
						d += qs[t][h*s.HD+i] * ks[u][g*s.HD+i]
					}
					sc[u] = d / math.Sqrt(float64(s.HD))
					mx = math.Max(mx, sc[u])
				}
				var sum float64
				for u := range sc {
					sc[u] = math.Exp(sc[u] - mx)
					sum += sc[u]
				}
				for u := range sc {
					for i := range s.HD {
						att[h*s.HD+i] += sc[u] / sum * vs[u][g*s.HD+i]
					}
				}
			}
			o := lin(att, get(p+"self_attn.o_proj.weight"), nil, D)
			for d := range D {
				x[t][d] += o[d]
			}
			h := rms(x[t], get(p+"post_attention_layernorm.weight"))
			gate := lin(h, get(p+"mlp.gate_proj.weight"), nil, s.FFN)
			up := lin(h, get(p+"mlp.up_proj.weight"), nil, s.FFN)
			for i := range gate {
				gate[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
			}
			dn := lin(gate, get(p+"mlp.down_proj.weight"), nil, D)
			for d := range D {
				x[t][d] += dn[d]
			}
		}
	}
	out := get("model.embed_tokens.weight")
	if s.Untied {
		out = get("lm_head.weight")
	}
	logits := make([][]float64, T)
	for t := range T {
		logits[t] = lin(rms(x[t], get("model.norm.weight")), out, nil, s.Vocab())
	}
	return logits
}
