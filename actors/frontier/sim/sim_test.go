package sim

import (
	"context"
	"encoding/json"
	"testing"
)

// small is a budget the test suite can afford; the full table is
// `frognano bench frontier`.
func small() Config {
	c := DefaultConfig()
	c.Budget = 40_000
	c.EvalTasks = 300
	return c
}

func TestDeterministic(t *testing.T) {
	ctx := context.Background()
	a, err := Run(ctx, small())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(ctx, small())
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("same seed, different reports:\n%s\n%s", ja, jb)
	}
	c := small()
	c.Seed = 2
	other, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if jo, _ := json.Marshal(other); string(jo) == string(ja) {
		t.Errorf("seeds 1 and 2 gave the same report")
	}
}

// TestFrontierArm checks, at a small budget, what the benchmark claims:
// equal budgets, the frontier arm's effective-batch fraction at least 0.8,
// and the frontier arm reaching the uniform arm's final skill with clearly
// fewer rollouts (the goal of at most half is reported by the
// benchmark, not asserted: see README).
func TestFrontierArm(t *testing.T) {
	rep, err := Run(context.Background(), small())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Arms) != 3 {
		t.Fatalf("%d arms", len(rep.Arms))
	}
	uniform, dapo, fr := rep.Arms[0], rep.Arms[1], rep.Arms[2]
	for _, a := range rep.Arms {
		if a.Rollouts > rep.Budget || a.Rollouts < rep.Budget-int64(rep.Group) {
			t.Errorf("%s spent %d rollouts of %d", a.Name, a.Rollouts, rep.Budget)
		}
		if a.SkillFinal <= a.SkillStart {
			t.Errorf("%s learned nothing", a.Name)
		}
	}
	if !rep.GoalEffectiveFraction || fr.EffectiveBatchFraction < 0.8 {
		t.Errorf("frontier effective-batch fraction %.3f, want ≥ 0.8", fr.EffectiveBatchFraction)
	}
	if fr.EffectiveBatchFraction <= uniform.EffectiveBatchFraction || fr.EffectiveBatchFraction <= dapo.EffectiveBatchFraction {
		t.Errorf("effective fractions: uniform %.3f dapo %.3f frontier %.3f", uniform.EffectiveBatchFraction, dapo.EffectiveBatchFraction, fr.EffectiveBatchFraction)
	}
	if fr.RolloutsToUniformFinal < 0 || float64(fr.RolloutsToUniformFinal) > 0.75*float64(uniform.Rollouts) {
		t.Errorf("frontier reached uniform's final skill after %d of %d rollouts, want ≤ 0.75×", fr.RolloutsToUniformFinal, uniform.Rollouts)
	}
	if fr.TasksSynthesized == 0 || fr.SynthesisRequests == 0 {
		t.Errorf("frontier arm synthesized nothing")
	}
	if dapo.Steps >= uniform.Steps {
		t.Errorf("dapo took %d steps, uniform %d: discarded groups should cost steps", dapo.Steps, uniform.Steps)
	}
}

func TestBadConfig(t *testing.T) {
	for _, c := range []Config{{Budget: 10}, {PoolSize: 4}, {Group: 1}, {SynthYield: 2}} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("Run(%+v) succeeded", c)
		}
	}
}

// TestBound checks the bound against every arm: no curve point lies above
// the skill that half a unit of signal per rollout (the most a group can
// carry on any draw) could buy, and no arm reaches uniform's final skill
// in fewer rollouts than the expected bound allows.
func TestBound(t *testing.T) {
	cfg := small()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.RolloutsBound <= 0 || rep.RolloutsBound > rep.Budget {
		t.Fatalf("bound %d rollouts with a budget of %d", rep.RolloutsBound, rep.Budget)
	}
	for _, a := range rep.Arms {
		for _, p := range a.Curve {
			if best := cfg.BestSkill(0.5 * float64(p.Rollouts)); p.Skill > best+1e-9 {
				t.Errorf("%s: skill %.4f after %d rollouts, above the bound %.4f", a.Name, p.Skill, p.Rollouts, best)
			}
		}
		// The tight form: the skill bought by the signal the arm got.
		if signal := a.SignalPerRollout * float64(a.Rollouts); a.SkillFinal > cfg.BestSkill(signal)+1e-9 {
			t.Errorf("%s: skill %.4f from a signal of %.1f, above the bound %.4f", a.Name, a.SkillFinal, signal, cfg.BestSkill(signal))
		}
		if a.SignalPerRollout > cfg.MaxSignalPerRollout() {
			t.Errorf("%s: %.4f signal per rollout, above the expected most %.4f", a.Name, a.SignalPerRollout, cfg.MaxSignalPerRollout())
		}
		if a.RolloutsToUniformFinal >= 0 && a.RolloutsToUniformFinal < rep.RolloutsBound {
			t.Errorf("%s reached uniform's final skill in %d rollouts, under the bound %d", a.Name, a.RolloutsToUniformFinal, rep.RolloutsBound)
		}
	}
	// The bound inverts BestSkill: just below it the target is out of reach.
	target := rep.Arms[0].SkillFinal
	per := cfg.MaxSignalPerRollout()
	if cfg.BestSkill(float64(rep.RolloutsBound)*per) < target || cfg.BestSkill(float64(rep.RolloutsBound-1)*per) >= target {
		t.Errorf("bound %d does not invert BestSkill at %.4f", rep.RolloutsBound, target)
	}
	if cfg.RolloutsBound(0) != -1 {
		t.Errorf("a target of 0 needs no rollouts")
	}
}
