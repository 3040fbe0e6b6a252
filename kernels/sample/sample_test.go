package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// logSoftmax is the reference: log softmax(logits/temperature) in float64.
func logSoftmax(logits []float32, temperature float64) []float64 {
	m := math.Inf(-1)
	for _, v := range logits {
		m = max(m, float64(v)/temperature)
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v)/temperature - m)
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = float64(v)/temperature - m - math.Log(sum)
	}
	return out
}

func logs(ps ...float64) []float32 {
	out := make([]float32, len(ps))
	for i, p := range ps {
		out[i] = float32(math.Log(p))
	}
	return out
}

func TestGreedyIsArgmax(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		name   string
		logits []float32
		want   int32
	}{
		{"single", []float32{-3}, 0},
		{"max last", []float32{1, 2, 3}, 2},
		{"tie goes to the first", []float32{1, 3, 3, 2}, 1},
		{"negative", []float32{-5, -1, -2}, 1},
		{"masked", []float32{-inf, 0.5, -inf}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Params{}, rand.New(rand.NewPCG(1, 1)))
			tok, lp := s.Sample(tt.logits)
			if tok != tt.want {
				t.Fatalf("token %d, want %d", tok, tt.want)
			}
			if want := logSoftmax(tt.logits, 1)[tok]; math.Abs(float64(lp)-want) > 1e-6 {
				t.Fatalf("log-prob %v, want %v", lp, want)
			}
		})
	}
}

func TestTopK1IsGreedy(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	greedy := New(Params{}, rand.New(rand.NewPCG(3, 3)))
	top1 := New(Params{Temperature: 0.8, TopK: 1}, rand.New(rand.NewPCG(3, 3)))
	logits := make([]float32, 100)
	for trial := range 200 {
		for i := range logits {
			logits[i] = float32(r.NormFloat64() * 3)
		}
		if trial%10 == 0 {
			logits[7] = logits[argmax(logits)] // a tie
		}
		g, _ := greedy.Sample(logits)
		k, lp := top1.Sample(logits)
		if g != k {
			t.Fatalf("trial %d: top-k 1 picked %d, greedy %d", trial, k, g)
		}
		if want := logSoftmax(logits, 0.8)[k]; math.Abs(float64(lp)-want) > 1e-6 {
			t.Fatalf("trial %d: log-prob %v, want %v under softmax(logits/T)", trial, lp, want)
		}
	}
}

func TestSeedReproduces(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	rows := make([][]float32, 300)
	for i := range rows {
		rows[i] = make([]float32, 500)
		for j := range rows[i] {
			rows[i][j] = float32(r.NormFloat64() * 2)
		}
	}
	run := func(seed uint64) (toks []int32, lps []float32) {
		s := New(Params{Temperature: 1.1, TopK: 50, TopP: 0.9}, rand.New(rand.NewPCG(seed, 99)))
		for _, row := range rows {
			tok, lp := s.Sample(row)
			toks, lps = append(toks, tok), append(lps, lp)
		}
		return toks, lps
	}
	t1, l1 := run(10)
	t2, l2 := run(10)
	t3, _ := run(11)
	same := 0
	for i := range t1 {
		if t1[i] != t2[i] || l1[i] != l2[i] {
			t.Fatalf("step %d: same seed gave (%d, %v) then (%d, %v)", i, t1[i], l1[i], t2[i], l2[i])
		}
		if t1[i] == t3[i] {
			same++
		}
	}
	if same == len(t1) {
		t.Fatal("a different seed gave the same tokens")
	}
}

// TestFrequencies draws many tokens with a fixed seed and compares counts
// with the distribution each Params should sample from. The seed makes the
// test deterministic; the 5σ bound makes it meaningful (a wrong temperature
// or truncation moves some count by far more).
func TestFrequencies(t *testing.T) {
	p := []float64{0.4, 0.3, 0.15, 0.1, 0.05}
	logits := logs(p...)
	pow := func(e float64, keep int) []float64 {
		q := make([]float64, len(p))
		for i := range keep {
			q[i] = math.Pow(p[i], e)
		}
		return q
	}
	tests := []struct {
		name   string
		params Params
		want   []float64 // unnormalised
	}{
		{"T=1", Params{Temperature: 1}, p},
		{"T=0.5", Params{Temperature: 0.5}, pow(2, 5)},
		{"T=2", Params{Temperature: 2}, pow(0.5, 5)},
		{"top-k 2", Params{Temperature: 1, TopK: 2}, pow(1, 2)},
		{"top-k past vocab", Params{Temperature: 1, TopK: 9}, p},
		{"top-p 0.75", Params{Temperature: 1, TopP: 0.75}, pow(1, 3)}, // .4+.3 < .75 ≤ .85
		{"top-p 0.5", Params{Temperature: 1, TopP: 0.5}, pow(1, 2)},
		{"top-p 0.72 keeps the crossing token", Params{Temperature: 1, TopP: 0.72}, pow(1, 3)},
		{"top-p 0.9", Params{Temperature: 1, TopP: 0.9}, pow(1, 4)},
		{"top-p 1", Params{Temperature: 1, TopP: 1}, p},
		// Top-3 renormalised is .47, .35, .18; .47+.35 reaches 0.8.
		{"top-k 3 then top-p 0.8", Params{Temperature: 1, TopK: 3, TopP: 0.8}, pow(1, 2)},
		{"top-k 4 at T=0.5", Params{Temperature: 0.5, TopK: 4}, pow(2, 4)},
	}
	const n = 20000
	for ti, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.params, rand.New(rand.NewPCG(uint64(ti), 5)))
			temp := float64(tt.params.Temperature)
			ref := logSoftmax(logits, temp)
			counts := make([]int, len(p))
			for range n {
				tok, lp := s.Sample(logits)
				counts[tok]++
				if math.Abs(float64(lp)-ref[tok]) > 1e-6 {
					t.Fatalf("token %d: log-prob %v, want %v (untruncated softmax(logits/T))", tok, lp, ref[tok])
				}
			}
			var total float64
			for _, w := range tt.want {
				total += w
			}
			for i, w := range tt.want {
				q := w / total
				exp, sd := n*q, math.Sqrt(n*q*(1-q))
				if math.Abs(float64(counts[i])-exp) > 5*sd+1e-9 {
					t.Errorf("token %d drawn %d times, want %.0f ± %.0f (counts %v)", i, counts[i], exp, 5*sd, counts)
				}
			}
		})
	}
}

func TestMaskedNeverSampled(t *testing.T) {
	ninf := float32(math.Inf(-1))
	logits := []float32{0, ninf, 0.5, ninf, -1}
	for _, p := range []Params{{Temperature: 1}, {Temperature: 1, TopK: 5}, {Temperature: 3, TopP: 0.99}} {
		s := New(p, rand.New(rand.NewPCG(6, 6)))
		for range 5000 {
			if tok, _ := s.Sample(logits); tok == 1 || tok == 3 {
				t.Fatalf("%+v: sampled masked token %d", p, tok)
			}
		}
	}
}

func TestPanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
	}{
		{"negative temperature", func() { New(Params{Temperature: -1}, nil) }},
		{"negative top-k", func() { New(Params{TopK: -1}, nil) }},
		{"empty logits", func() { New(Params{}, nil).Sample(nil) }},
		{"all masked", func() {
			New(Params{Temperature: 1}, rand.New(rand.NewPCG(1, 1))).Sample([]float32{float32(math.Inf(-1))})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tt.f()
		})
	}
}

func BenchmarkSample(b *testing.B) {
	const vocab = 49152 // SmolLM2
	r := rand.New(rand.NewPCG(8, 8))
	logits := make([]float32, vocab)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 4)
	}
	for _, bc := range []struct {
		name string
		p    Params
	}{
		{"greedy", Params{}},
		{"T=1", Params{Temperature: 1}},
		{"top-k=50", Params{Temperature: 0.7, TopK: 50}},
		{"top-p=0.9", Params{Temperature: 0.7, TopP: 0.9}},
		{"top-k=50,top-p=0.9", Params{Temperature: 0.7, TopK: 50, TopP: 0.9}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := New(bc.p, rand.New(rand.NewPCG(9, 9)))
			b.SetBytes(4 * vocab)
			for b.Loop() {
				s.Sample(logits)
			}
		})
	}
}
