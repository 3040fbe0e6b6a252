// Package kbench compares frognano's matrix products with NumPy's on the
// shapes SmolLM2-135M's prefill, decode and training use, side by side in
// one run: `frognano bench kernels`. NumPy is installed in a throwaway
// virtual environment, for the comparison only.
package kbench

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/frognano/frognano/kernels/cpu/blas"
)

//go:embed numpy_bench.py
var numpyScript []byte

// Shape is one product: NT is c[m,n] = a[m,k]·b[n,k]ᵀ (blas.MatMulT, the
// forward of a Linear layer), NN is c[m,n] = a[m,k]·b[k,n] (MatMulNN, the
// gradient of its input), TN is c[n,k] = a[m,n]ᵀ·b[m,k] (MatMulTN, the
// gradient of its weight). Each is 2·m·n·k floating-point operations.
type Shape struct {
	Op      string
	M, N, K int
	Use     string `json:"-"` // what in SmolLM2-135M runs it
}

// MarshalJSON writes the lower-case keys the NumPy script reads.
func (s Shape) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"op": s.Op, "m": s.M, "n": s.N, "k": s.K})
}

// Shapes are SmolLM2-135M's products (hidden 576, MLP 1536, vocabulary
// 49152, K/V 192): one decoding row, 16 sequences decoding together,
// prefill of 128 and 512 tokens, and training on 4×256 tokens.
func Shapes() []Shape {
	var s []Shape
	for _, m := range []int{1, 16, 128, 512, 1024} {
		for _, nk := range []struct {
			n, k int
			use  string
		}{{576, 576, "q/o proj"}, {192, 576, "k/v proj"}, {1536, 576, "gate/up"}, {576, 1536, "down"}, {49152, 576, "logits"}} {
			if m == 1024 && nk.n == 192 {
				continue
			}
			s = append(s, Shape{"NT", m, nk.n, nk.k, nk.use})
		}
	}
	for _, m := range []int{128, 1024} {
		for _, nk := range []struct {
			n, k int
			use  string
		}{{576, 1536, "dx gate/up"}, {1536, 576, "dx down"}, {576, 576, "dx q/o"}, {576, 49152, "dx logits"}} {
			s = append(s, Shape{"NN", m, nk.n, nk.k, nk.use})
		}
		for _, nk := range []struct {
			n, k int
			use  string
		}{{1536, 576, "dW gate/up"}, {576, 1536, "dW down"}, {576, 576, "dW q/o"}, {49152, 576, "dW embedding"}} {
			s = append(s, Shape{"TN", m, nk.n, nk.k, nk.use})
		}
	}
	return s
}

// Options configure Run.
type Options struct {
	Rounds  int           // passes over the shapes, each timing NumPy then frognano; each shape's best round counts
	Seconds time.Duration // timed per shape and implementation in a round
	Go      bool          // also time the Go loops (slow)
	Python  string        // the Python that makes the venv (default python3)
	Venv    string        // an existing venv with numpy and threadpoolctl; else a throwaway one
	Log     io.Writer     // progress
	// ISA "avx2" makes both sides run OpenBLAS's AVX2 (Haswell) kernels on a
	// machine that has AVX-512, the nearest this benchmark comes to an
	// AVX2-only machine: NumPy's OpenBLAS gets OPENBLAS_CORETYPE=Haswell,
	// and frognano must have been started with FROGNANO_BLAS_CORETYPE=Haswell
	// (`frognano bench kernels --isa avx2` re-executes itself so). "" lets
	// each library pick the CPU's widest kernels.
	ISA string
}

// ISACoreType is the OpenBLAS core type an ISA option asks for ("" for the
// CPU's own), or an error for an ISA the benchmark does not know.
func ISACoreType(isa string) (string, error) {
	switch isa {
	case "", "native":
		return "", nil
	case "avx2":
		return "Haswell", nil
	}
	return "", fmt.Errorf("unknown --isa %q: want native or avx2", isa)
}

// Report is a run's figures.
type Report struct {
	CPU, Flags  string
	ISA         string // "" (each library's choice for this CPU) or "avx2"
	Threads     int
	LoadBefore  string
	LoadAfter   string
	NumPy       string
	NumPyBLAS   []map[string]any // threadpoolctl's view of NumPy's BLAS
	Impls       []string         // frognano's implementations timed, the one in use first
	Shapes      []Shape
	NumPyGFLOPs []float64
	GFLOPs      [][]float64 // [impl][shape]
	// Plans says, per shape, how the implementation in use computed it
	// after its trials: "whole" (one sgemm of OpenBLAS's parallel
	// instance), "split" (one single-threaded call per core, split in Go)
	// or "" (not planned: few rows, small, or one core).
	Plans            []string
	Environment      []string // OPENBLAS_* variables in force
	OpenBLASSkipped  []string
	InUse            string
	NumPyBLASSummary string
}

// Run times every shape on NumPy and on frognano's implementations, taking
// turns, and returns the best of Rounds for each.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if opt.Rounds < 1 {
		opt.Rounds = 3
	}
	if opt.Seconds <= 0 {
		opt.Seconds = 200 * time.Millisecond
	}
	if opt.Log == nil {
		opt.Log = io.Discard
	}
	core, err := ISACoreType(opt.ISA)
	if err != nil {
		return nil, err
	}
	if core != "" && os.Getenv("FROGNANO_BLAS_CORETYPE") != core {
		return nil, fmt.Errorf("--isa %s: frognano's OpenBLAS was loaded with kernels for this CPU; start the process with FROGNANO_BLAS_CORETYPE=%s", opt.ISA, core)
	}
	r := &Report{ISA: opt.ISA, Threads: blas.Threads(), Shapes: Shapes(), InUse: blas.Impl(), OpenBLASSkipped: blas.Skipped()}
	r.CPU, r.Flags = cpuInfo()
	r.LoadBefore = loadAvg()
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OPENBLAS_") || strings.HasPrefix(kv, "OMP_") || strings.HasPrefix(kv, "GOMAXPROCS=") {
			r.Environment = append(r.Environment, kv)
		}
	}
	python, cleanup, err := numpyVenv(ctx, opt)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	impls := blas.Implementations()
	active := blas.Active()
	slices.SortStableFunc(impls, func(a, b blas.Implementation) int {
		switch {
		case a.Name == active.Name && b.Name != active.Name:
			return -1
		case b.Name == active.Name && a.Name != active.Name:
			return 1
		}
		return 0
	})
	if !opt.Go {
		impls = slices.DeleteFunc(impls, func(i blas.Implementation) bool { return i.Path == "" && i.Name != active.Name })
	}
	for _, impl := range impls {
		r.Impls = append(r.Impls, impl.Name)
	}
	r.NumPyGFLOPs = make([]float64, len(r.Shapes))
	r.GFLOPs = make([][]float64, len(impls))
	for i := range r.GFLOPs {
		r.GFLOPs[i] = make([]float64, len(r.Shapes))
	}
	np, err := startNumPy(ctx, python, core)
	if err != nil {
		return nil, err
	}
	defer np.close()
	r.NumPy, r.NumPyBLAS = np.info.NumPy, np.info.Threadpools
	// Each shape in turn, NumPy first and then each of frognano's
	// implementations right after it, so that a slow spell of the machine
	// weighs on both sides of a ratio alike.
	for round := range opt.Rounds {
		fmt.Fprintf(opt.Log, "round %d/%d\n", round+1, opt.Rounds)
		for si, s := range r.Shapes {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			g, err := np.time(s, opt.Seconds)
			if err != nil {
				return nil, err
			}
			r.NumPyGFLOPs[si] = max(r.NumPyGFLOPs[si], g)
			// The implementations' order turns with the rounds, so that
			// none is always the first to run after NumPy.
			for j := range impls {
				ii := (j + round) % len(impls)
				impl := impls[ii]
				restore := blas.Use(impl)
				r.GFLOPs[ii][si] = max(r.GFLOPs[ii][si], timeShape(s, opt.Seconds))
				restore()
			}
		}
	}
	r.LoadAfter = loadAvg()
	r.Plans = make([]string, len(r.Shapes))
	for _, p := range blas.Plans() {
		for si, s := range r.Shapes {
			if p.Decided && p.M == s.M && p.N == s.N && p.K == s.K && !p.Accumulate && opName[s.Op] == p.Op {
				r.Plans[si] = "split"
				if p.Whole {
					r.Plans[si] = "whole"
				}
			}
		}
	}
	var parts []string
	for _, p := range r.NumPyBLAS {
		parts = append(parts, fmt.Sprintf("%v %v %v, %v threads", p["internal_api"], p["version"], p["architecture"], p["num_threads"]))
	}
	r.NumPyBLASSummary = strings.Join(parts, "; ")
	return r, nil
}

// opName is each op's name in blas.Plan.
var opName = map[string]string{"NT": "a·bᵀ", "NN": "a·b", "TN": "aᵀ·b"}

// timeShape runs one product repeatedly for about d and returns GFLOP/s.
func timeShape(s Shape, d time.Duration) float64 {
	rng := rand.New(rand.NewPCG(uint64(s.M), uint64(s.N*s.K)))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	var f func()
	switch s.Op {
	case "NT":
		a, b, c := fill(s.M*s.K), fill(s.N*s.K), make([]float32, s.M*s.N)
		f = func() { blas.MatMulT(c, a, b, s.M, s.N, s.K) }
	case "NN":
		a, b, c := fill(s.M*s.K), fill(s.K*s.N), make([]float32, s.M*s.N)
		f = func() { blas.MatMulNN(c, a, b, s.M, s.N, s.K) }
	default:
		a, b, c := fill(s.M*s.N), fill(s.M*s.K), make([]float32, s.N*s.K)
		f = func() { blas.MatMulTN(c, a, b, s.M, s.N, s.K, false) }
	}
	f()
	reps, t0 := 0, time.Now()
	for {
		f()
		reps++
		if t := time.Since(t0); t >= d && reps >= 3 {
			return 2 * float64(s.M) * float64(s.N) * float64(s.K) * float64(reps) / t.Seconds() / 1e9
		}
	}
}

// numpyInfo is the NumPy side's first line: its version and BLAS.
type numpyInfo struct {
	NumPy       string           `json:"numpy"`
	Threadpools []map[string]any `json:"threadpools"`
}

// numpyProc is the NumPy side, running: it times one shape per request.
type numpyProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	info  numpyInfo
	errs  *bytes.Buffer
	close func()
}

// CleanEnv is the environment without the OpenBLAS settings that a machine
// may set for older builds (OPENBLAS_CORETYPE, OPENBLAS_L2_SIZE), so that
// NumPy and frognano each run as their libraries choose.
func CleanEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		return strings.HasPrefix(kv, "OPENBLAS_CORETYPE=") || strings.HasPrefix(kv, "OPENBLAS_L2_SIZE=")
	})
}

// startNumPy starts the NumPy side in the venv's Python, with OpenBLAS's
// kernels given by coreType ("" for its own choice for this CPU).
func startNumPy(ctx context.Context, python, coreType string) (*numpyProc, error) {
	script := filepath.Join(filepath.Dir(filepath.Dir(python)), "frognano_numpy_bench.py")
	if err := os.WriteFile(script, numpyScript, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, python, script)
	cmd.Env = CleanEnv(os.Environ())
	if coreType != "" {
		cmd.Env = append(cmd.Env, "OPENBLAS_CORETYPE="+coreType)
	}
	p := &numpyProc{cmd: cmd, errs: &bytes.Buffer{}}
	cmd.Stderr = p.errs
	var err error
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.close = func() {
		p.in.Close()
		cmd.Wait()
	}
	p.out = bufio.NewScanner(stdout)
	p.out.Buffer(make([]byte, 1<<16), 1<<22)
	if err := p.read(&p.info); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// read decodes the NumPy side's next line into v.
func (p *numpyProc) read(v any) error {
	if !p.out.Scan() {
		err := p.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("numpy benchmark: %v\n%s", err, p.errs.Bytes())
	}
	if err := json.Unmarshal(p.out.Bytes(), v); err != nil {
		return fmt.Errorf("numpy benchmark output: %v\n%s", err, p.out.Bytes())
	}
	return nil
}

// time has NumPy run one shape for about d and returns its GFLOP/s.
func (p *numpyProc) time(s Shape, d time.Duration) (float64, error) {
	req, err := json.Marshal(map[string]any{"op": s.Op, "m": s.M, "n": s.N, "k": s.K, "seconds": d.Seconds()})
	if err != nil {
		return 0, err
	}
	if _, err := p.in.Write(append(req, '\n')); err != nil {
		return 0, fmt.Errorf("numpy benchmark: %v\n%s", err, p.errs.Bytes())
	}
	var res struct {
		GFLOPs float64 `json:"gflops"`
	}
	if err := p.read(&res); err != nil {
		return 0, err
	}
	return res.GFLOPs, nil
}

// numpyVenv returns the Python of a venv with numpy and threadpoolctl: the
// one given, or a new one under the temporary directory, removed by cleanup.
func numpyVenv(ctx context.Context, opt Options) (python string, cleanup func(), err error) {
	if opt.Venv != "" {
		return filepath.Join(opt.Venv, "bin", "python"), func() {}, nil
	}
	base := opt.Python
	if base == "" {
		base = "python3"
	}
	dir, err := os.MkdirTemp("", "frognano-bench-numpy-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	fmt.Fprintf(opt.Log, "installing numpy and threadpoolctl in a throwaway venv, %s\n", dir)
	for _, args := range [][]string{
		{base, "-m", "venv", dir},
		{filepath.Join(dir, "bin", "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "numpy", "threadpoolctl"},
	} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = CleanEnv(os.Environ())
		if out, err := cmd.CombinedOutput(); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return filepath.Join(dir, "bin", "python"), cleanup, nil
}

// cpuInfo returns the CPU's model name and the flags that matter for
// matrix products.
func cpuInfo() (model, flags string) {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH, ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	var have []string
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(key) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(val)
			}
		case "flags":
			if have == nil {
				set := strings.Fields(val)
				for _, want := range []string{"avx", "avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512cd", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16"} {
					if slices.Contains(set, want) {
						have = append(have, want)
					}
				}
			}
		}
	}
	return model, strings.Join(have, " ")
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// WriteTable prints the report: per shape, NumPy's GFLOP/s, each of
// frognano's, and the ratio of the one in use to NumPy's, with the goal
// (≥ 0.9× NumPy for every shape with m ≥ 16) checked at the end.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "CPU: %s; flags: %s; %d cores used (affinity, GOMAXPROCS, cgroup)\n", r.CPU, r.Flags, r.Threads)
	fmt.Fprintf(w, "load average (1, 5, 15 min): %s before, %s after\n", r.LoadBefore, r.LoadAfter)
	if r.ISA == "avx2" {
		fmt.Fprintf(w, "environment: %s (both sides on OpenBLAS's AVX2 kernels: OPENBLAS_CORETYPE=Haswell for NumPy, FROGNANO_BLAS_CORETYPE=Haswell for frognano)\n", strings.Join(r.Environment, " "))
	} else {
		fmt.Fprintf(w, "environment: %s (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for NumPy; frognano picks its kernels from the CPU's features)\n", strings.Join(r.Environment, " "))
	}
	fmt.Fprintf(w, "NumPy %s: %s\n", r.NumPy, r.NumPyBLASSummary)
	fmt.Fprintf(w, "frognano: %s in use\n", r.InUse)
	for _, s := range r.OpenBLASSkipped {
		fmt.Fprintf(w, "  not loaded: %s\n", s)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "op\tm\tn\tk\tuse\tNumPy\t"
	for _, name := range r.Impls {
		header += name + "\t"
	}
	fmt.Fprintln(tw, header+"ratio\tplan\t")
	worst, worstAt := 0.0, -1
	for si, s := range r.Shapes {
		line := fmt.Sprintf("%s\t%d\t%d\t%d\t%s\t%.1f\t", s.Op, s.M, s.N, s.K, s.Use, r.NumPyGFLOPs[si])
		for ii := range r.Impls {
			line += fmt.Sprintf("%.1f\t", r.GFLOPs[ii][si])
		}
		ratio := r.GFLOPs[0][si] / r.NumPyGFLOPs[si]
		plan := ""
		if si < len(r.Plans) {
			plan = r.Plans[si]
		}
		line += fmt.Sprintf("%.2f\t%s\t", ratio, plan)
		fmt.Fprintln(tw, line)
		if s.M >= 16 && (worstAt < 0 || ratio < worst) {
			worst, worstAt = ratio, si
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nGFLOP/s, best of the rounds; ratio = frognano in use / NumPy; plan = how the one in use computes the shape after timing both ways in its first calls (whole: one sgemm of OpenBLAS's parallel instance, its jobs on frognano's goroutines; split: one single-threaded call per core, split in Go).")
	if worstAt >= 0 {
		s := r.Shapes[worstAt]
		verdict := "met"
		if worst < 0.9 {
			verdict = "NOT met"
		}
		fmt.Fprintf(w, "goal (frognano ≥ 0.9× NumPy on every shape with m ≥ 16): %s; lowest ratio %.2f at %s %dx%dx%d\n", verdict, worst, s.Op, s.M, s.N, s.K)
	}
	return nil
}
