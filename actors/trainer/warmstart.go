package trainer

// The warm start: supervised fine-tuning on the synthesizer's own gold
// fixes before the first GRPO step, for policies that (almost) never solve
// a task, where every GRPO group has equal rewards and carries no signal.
//
//  1. Demonstrations. Up to Settings.WarmStartTasks tasks of the training
//     environments (Settings.WarmStartEnvs; a seeded draw) are each played
//     once through the rollout path of the loop — harness, real sandbox,
//     real grader — by harness.ScriptedPolicy playing the task's own gold
//     fix (harness.SolveScript) in the run's mode and limits. Only
//     episodes graded reward 1 are kept (verified demonstrations); the rest
//     are counted by ending. Their token ids and policy masks are exactly
//     what the policy would have written in an episode, since they were
//     made by the same code. They are stored as trajectories of run
//     RUN/warm-start, so a resumed stage replays no episode twice.
//     Settings.WarmStartHoldout of them are kept out of training and only
//     evaluated.
//  2. SFT. Settings.WarmStartEpochs epochs over the demonstrations in
//     shuffled mini-batches of Settings.WarmStartBatch, one Learner SFT
//     step each (LearnerSFTBatch: mean NLL over the answer tokens, AdamW at
//     WarmStartLR with a short warm-up and a cosine decay over the stage).
//     Every step bumps the policy version and publishes like a GRPO step.
//  3. The demonstrations' NLL before and after (training and held-out),
//     a full checkpoint, the Sampler moved to the newest version, and the
//     record marked: warm_start_done = 1.
//
// Durability. The record carries the stage's progress after every SFT step
// (warm_start_steps, and warm_start_learner_step, the Learner's step after
// it). A run killed mid-stage resumes it: stored demonstrations are
// reused, and the steps continue after the last one recorded — or after
// the Learner's checkpoint when that is newer than the record. A finished
// stage (warm_start_done) is never run again.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/actors/harness"
	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/actors/rollout"
	"github.com/frognano/frognano/actors/synth"
	"github.com/frognano/frognano/kernels/sample"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Keys of the run record's metrics kept by the warm start.
const (
	MetricWarmStartDone        = "warm_start_done" // 1 once the stage is over
	MetricWarmStartTasks       = "warm_start_tasks"
	MetricWarmStartDemos       = "warm_start_demos" // verified demonstrations (reward 1)
	MetricWarmStartRejected    = "warm_start_rejected"
	MetricWarmStartHeldOut     = "warm_start_held_out"
	MetricWarmStartSteps       = "warm_start_steps" // SFT steps done
	MetricWarmStartLearnerStep = "warm_start_learner_step"
	MetricWarmStartTokens      = "warm_start_tokens" // policy tokens trained on, over all epochs
	MetricWarmStartNLLBefore   = "warm_start_nll_before"
	MetricWarmStartNLLAfter    = "warm_start_nll_after"
	MetricWarmStartHeldBefore  = "warm_start_held_out_nll_before"
	MetricWarmStartHeldAfter   = "warm_start_held_out_nll_after"
	MetricWarmStartLoss        = "warm_start_loss" // mean SFT loss of the last epoch
	// The current epoch's sums so far, kept in the record so that an epoch a
	// resume splits is still reported whole.
	metricEpochLoss    = "warm_start_epoch_loss_sum"
	metricEpochTokens  = "warm_start_epoch_tokens"
	metricEpochSteps   = "warm_start_epoch_steps"
	metricEpochSeconds = "warm_start_epoch_seconds"
	MetricSecondsDemos = "seconds_warm_start_demos"
	MetricSecondsSFT   = "seconds_warm_start_sft"
)

// DefaultWarmStartBatch is the demonstrations per SFT step when
// Settings.WarmStartBatch is 0.
const DefaultWarmStartBatch = 4

// NLLSample is how many training demonstrations the warm start's before
// and after NLL is measured on.
const NLLSample = 16

// DemoRunID is the run id of a run's demonstration trajectories.
func DemoRunID(runID string) string { return runID + "/warm-start" }

// warmStartPending says whether the run still has a warm start to do.
func warmStartPending(run *records.Run, s Settings) bool {
	return s.WarmStartEpochs > 0 && run.GetMetrics()[MetricWarmStartDone] == 0 && run.GetStep() == 0
}

// warmStartEnvs lists the training environments' names.
func (s Settings) warmStartEnvs() []string {
	var out []string
	for _, e := range strings.Split(s.WarmStartEnvs, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// validateWarmStart reports warm-start settings that cannot work.
func (s Settings) validateWarmStart() error {
	switch {
	case s.WarmStartEpochs < 0 || s.WarmStartTasks < 0 || s.WarmStartBatch < 0 || s.WarmStartHoldout < 0:
		return fmt.Errorf("trainer: negative warm-start epochs, tasks, batch or held-out count")
	case s.WarmStartEpochs == 0:
		return nil
	case !(s.WarmStartLR > 0) || s.WarmStartLR > 1:
		return fmt.Errorf("trainer: warm-start learning rate %v: want in (0, 1]", s.WarmStartLR)
	case len(s.warmStartEnvs()) == 0:
		return fmt.Errorf("trainer: a warm start needs the training environments whose tasks it learns from")
	case s.WarmStartTasks > 0 && s.WarmStartHoldout >= s.WarmStartTasks:
		return fmt.Errorf("trainer: %d held-out demonstrations of %d tasks leave none to train on", s.WarmStartHoldout, s.WarmStartTasks)
	}
	return nil
}

// warmStart runs the stage when the run has one pending.
func (t *Trainer) warmStart(ctx context.Context, run *records.Run, s Settings, lim harness.Limits) error {
	if !warmStartPending(run, s) {
		return nil
	}
	m := run.Metrics
	mode, _ := harness.ParseMode(s.Mode)
	demos, err := t.demonstrations(ctx, run, s, mode, lim)
	if err != nil {
		return err
	}
	held := min(s.WarmStartHoldout, len(demos))
	train, heldOut := demos[:len(demos)-held], demos[len(demos)-held:]
	if len(train) == 0 {
		return fmt.Errorf("no verified demonstration to learn from (%g task(s) played, %g rejected): see the episodes above",
			m[MetricWarmStartTasks], m[MetricWarmStartRejected])
	}
	batch := s.WarmStartBatch
	if batch == 0 {
		batch = DefaultWarmStartBatch
	}
	perEpoch := (len(train) + batch - 1) / batch
	total := perEpoch * s.WarmStartEpochs
	warmup := min(total/10, 10)

	// Where to start: after the steps recorded, or after the Learner's
	// newer checkpoint (its step is the record's learner step since open).
	first := int(m[MetricWarmStartSteps])
	if ahead := int(m[MetricLearnerStep] - m[MetricWarmStartLearnerStep]); ahead > 0 {
		t.printf("warm start: the Learner is %d step(s) past the record; continuing after them", ahead)
		first += ahead
	}
	first = min(first, total)
	if first == 0 {
		if err := t.evaluateDemos(run, train, heldOut, MetricWarmStartNLLBefore, MetricWarmStartHeldBefore, "before"); err != nil {
			return err
		}
	} else {
		t.printf("warm start: resuming after SFT step %d of %d", first, total)
	}

	t.printf("warm start: %d epoch(s) of SFT on %d demonstration(s) (%d held out), %d a step, %d step(s) an epoch, lr %g (warm-up %d, cosine to lr/10)",
		s.WarmStartEpochs, len(train), len(heldOut), batch, perEpoch, s.WarmStartLR, warmup)
	var last *messages.LearnerStep
	for i := first; i < total; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		epoch, k := i/perEpoch, i%perEpoch
		order := epochOrder(s.Seed, epoch, len(train))
		var trajs []*records.Trajectory
		for _, j := range order[k*batch : min((k+1)*batch, len(train))] {
			trajs = append(trajs, train[j])
		}
		start := time.Now()
		res, err := t.ask(t.learner, &messages.LearnerSFTBatch{BatchId: fmt.Sprintf("%s/warm-start-%d", run.GetId(), i+1), Trajectories: trajs,
			Lr: s.WarmStartLR, WarmupSteps: int32(warmup), TotalSteps: int32(total)}, 2*time.Hour)
		if err != nil {
			return fmt.Errorf("SFT step %d: %w", i+1, err)
		}
		ls := res.(*messages.LearnerStep)
		last = ls
		if ls.GetSkipped() != "" {
			t.printf("warm start: SFT step %d/%d skipped (%s)", i+1, total, ls.GetSkipped())
		} else {
			m[metricEpochLoss] += ls.GetLoss()
			m[metricEpochTokens] += float64(ls.GetPolicyTokens())
			m[metricEpochSteps]++
			m[MetricWarmStartTokens] += float64(ls.GetPolicyTokens())
		}
		m[metricEpochSeconds] += time.Since(start).Seconds()
		t.printf("warm start: SFT step %d/%d (epoch %d) → policy v%d: NLL %.4f, %d demonstration(s), %d answer tokens, lr %.3g, grad norm %.3f, %.1fs",
			i+1, total, epoch+1, ls.GetPolicyVersion(), ls.GetLoss(), len(trajs), ls.GetPolicyTokens(), ls.GetLr(), ls.GetGradNorm(), ls.GetSeconds())
		m[MetricWarmStartSteps] = float64(i + 1)
		m[MetricWarmStartLearnerStep] = float64(ls.GetStep())
		m[MetricLearnerStep] = float64(ls.GetStep())
		m[MetricPolicyVersion] = float64(ls.GetPolicyVersion())
		m[MetricSecondsSFT] += time.Since(start).Seconds()
		ended := k == perEpoch-1 || i == total-1
		if ended {
			mean := 0.0
			if n := m[metricEpochSteps]; n > 0 {
				mean = m[metricEpochLoss] / n
			}
			m[MetricWarmStartLoss] = mean
			t.printf("warm start: epoch %d/%d: mean NLL %.4f over %g step(s), %.0f answer tokens, %.1fs of SFT steps",
				epoch+1, s.WarmStartEpochs, mean, m[metricEpochSteps], m[metricEpochTokens], m[metricEpochSeconds])
			for _, k := range []string{metricEpochLoss, metricEpochTokens, metricEpochSteps, metricEpochSeconds} {
				delete(m, k)
			}
		}
		run.UpdatedUnixNano = time.Now().UnixNano()
		if err := t.runs.Put(ctx, run); err != nil {
			return fmt.Errorf("recording SFT step %d: %w", i+1, err)
		}
	}
	if err := t.evaluateDemos(run, train, heldOut, MetricWarmStartNLLAfter, MetricWarmStartHeldAfter, "after"); err != nil {
		return err
	}

	// The stage's end: a full checkpoint, the Sampler on the newest
	// version, the record marked done.
	res, err := t.ask(t.learner, &messages.LearnerCheckpointRequest{}, 30*time.Minute)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	c := res.(*messages.LearnerCheckpointed)
	t.printf("warm start: full checkpoint of %s at step %d (policy v%d)", c.GetRunId(), c.GetStep(), c.GetPolicyVersion())
	if last != nil && last.GetPublishedStep() >= 0 {
		if err := t.swap(run.GetId(), last.GetPublishedStep(), last.GetPolicyVersion()); err != nil {
			return err
		}
	} else if err := t.swapNewest(run.GetId()); err != nil {
		return err
	}
	m[MetricWarmStartDone] = 1
	run.UpdatedUnixNano = time.Now().UnixNano()
	if err := t.runs.Put(ctx, run); err != nil {
		return fmt.Errorf("recording the warm start: %w", err)
	}
	t.printf("warm start: done: demonstrations' NLL %.4f → %.4f; held-out %s; policy v%g",
		m[MetricWarmStartNLLBefore], m[MetricWarmStartNLLAfter], heldLine(m, len(heldOut)), m[MetricPolicyVersion])
	return nil
}

func heldLine(m map[string]float64, n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("%.4f → %.4f (%d demonstration(s))", m[MetricWarmStartHeldBefore], m[MetricWarmStartHeldAfter], n)
}

// swapNewest moves the Sampler to the Learner's newest publication, if
// any.
func (t *Trainer) swapNewest(runID string) error {
	res, err := t.ask(t.learner, &messages.LearnerStatusRequest{}, 30*time.Minute)
	if err != nil {
		return err
	}
	if pub := res.(*messages.LearnerStatus).GetPublishedStep(); pub > 0 {
		return t.swap(runID, pub, pub)
	}
	return nil
}

// epochOrder is the seeded order of n demonstrations in an epoch.
func epochOrder(seed uint64, epoch, n int) []int {
	r := rand.New(rand.NewPCG(seed, 0x5f7ad1e5^uint64(epoch)))
	return r.Perm(n)
}

// evaluateDemos records the NLL of the training and held-out
// demonstrations at the current weights.
func (t *Trainer) evaluateDemos(run *records.Run, train, heldOut []*records.Trajectory, key, heldKey, when string) error {
	// The training demonstrations' NLL is a progress figure measured on
	// the first NLLSample of them (the same before and after): a forward
	// pass over hundreds of them would cost as much as an epoch.
	train = train[:min(len(train), NLLSample)]
	for _, set := range []struct {
		key   string
		trajs []*records.Trajectory
		name  string
	}{{key, train, "training"}, {heldKey, heldOut, "held-out"}} {
		if len(set.trajs) == 0 {
			continue
		}
		res, err := t.ask(t.learner, &messages.LearnerSFTEvaluate{BatchId: run.GetId() + "/warm-start-" + set.name + "-" + when, Trajectories: set.trajs}, 2*time.Hour)
		if err != nil {
			return fmt.Errorf("evaluating the demonstrations: %w", err)
		}
		l := res.(*messages.LearnerSFTLoss)
		run.Metrics[set.key] = l.GetNll()
		t.printf("warm start: %s demonstrations' NLL %s SFT: %.4f per answer token (%d tokens, %d demonstration(s), policy v%d, %.1fs)",
			set.name, when, l.GetNll(), l.GetPolicyTokens(), len(set.trajs), l.GetPolicyVersion(), l.GetSeconds())
	}
	return nil
}

// demonstrations returns the run's verified demonstrations (token ids and
// policy masks only), in a seeded order: the stored ones, after playing
// the gold fix of every chosen task that has none stored yet.
func (t *Trainer) demonstrations(ctx context.Context, run *records.Run, s Settings, mode harness.Mode, lim harness.Limits) ([]*records.Trajectory, error) {
	start := time.Now()
	var tasks []*records.Task
	for _, env := range s.warmStartEnvs() {
		res, err := t.ask(actor.NewPID(t.cfg.Node, synth.ActorName), &messages.TaskListRequest{Environment: env}, 5*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("listing the tasks of %s: %w", env, err)
		}
		tasks = append(tasks, res.(*messages.TaskList).GetTasks()...)
	}
	slices.SortFunc(tasks, func(a, b *records.Task) int { return strings.Compare(a.GetId(), b.GetId()) })
	r := rand.New(rand.NewPCG(s.Seed, 0xd3e0))
	r.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
	if s.WarmStartTasks > 0 && len(tasks) > s.WarmStartTasks {
		tasks = tasks[:s.WarmStartTasks]
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("the training environments (%s) have no tasks (frognano synth makes some)", s.WarmStartEnvs)
	}

	demoRun := DemoRunID(run.GetId())
	stored, err := t.store.ListByRun(ctx, demoRun)
	if err != nil {
		return nil, fmt.Errorf("reading stored demonstrations: %w", err)
	}
	byTask := map[string]*records.Trajectory{}
	for _, tr := range stored {
		byTask[tr.GetTaskId()] = tr
	}
	var todo []*records.Task
	for _, task := range tasks {
		if byTask[task.GetId()] == nil {
			todo = append(todo, task)
		}
	}
	t.printf("warm start: demonstrations of %d task(s) of %s, %s mode: %d stored, %d to play (gold fixes, graded)",
		len(tasks), s.WarmStartEnvs, mode, len(tasks)-len(todo), len(todo))
	if err := t.playDemos(ctx, demoRun, todo, s, mode, lim, byTask); err != nil {
		return nil, err
	}

	var (
		out     []*records.Trajectory
		endings = map[string]int{}
	)
	for _, task := range tasks {
		tr := byTask[task.GetId()]
		if tr.GetReward() != 1 {
			endings[tr.GetTermination()]++
			continue
		}
		if len(tr.GetTokenIds()) == 0 { // a stored one: the list holds summaries
			if tr, err = t.store.Get(ctx, tr.GetId()); err != nil {
				return nil, fmt.Errorf("reading demonstration %s: %w", byTask[task.GetId()].GetId(), err)
			}
		}
		out = append(out, &records.Trajectory{Id: tr.GetId(), TaskId: tr.GetTaskId(), TokenIds: tr.GetTokenIds(), PolicyMask: tr.GetPolicyMask()})
	}
	m := run.Metrics
	m[MetricWarmStartTasks] = float64(len(tasks))
	m[MetricWarmStartDemos] = float64(len(out))
	m[MetricWarmStartRejected] = float64(len(tasks) - len(out))
	m[MetricWarmStartHeldOut] = float64(min(s.WarmStartHoldout, len(out)))
	m[MetricSecondsDemos] += time.Since(start).Seconds()
	rejected := "none rejected"
	if len(out) < len(tasks) {
		var parts []string
		for e, n := range endings {
			parts = append(parts, fmt.Sprintf("%s %d", e, n))
		}
		slices.Sort(parts)
		rejected = fmt.Sprintf("%d rejected (not reward 1: %s)", len(tasks)-len(out), strings.Join(parts, ", "))
	}
	t.printf("warm start: %d verified demonstration(s) of %d task(s), %s, in %.1fs", len(out), len(tasks), rejected, time.Since(start).Seconds())
	run.UpdatedUnixNano = time.Now().UnixNano()
	if err := t.runs.Put(ctx, run); err != nil {
		return nil, err
	}
	return out, nil
}

// playDemos plays the gold fix of every task once, concurrently (within
// Config.Parallel), through the rollout path, storing the trajectories
// under demoRun and adding them to byTask.
func (t *Trainer) playDemos(ctx context.Context, demoRun string, tasks []*records.Task, s Settings, mode harness.Mode, lim harness.Limits, byTask map[string]*records.Trajectory) error {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make([]error, len(tasks))
		slot = make(chan struct{}, t.cfg.Parallel)
		done int
	)
	for i, task := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case slot <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-slot }()
			script, err := harness.SolveScript(task, mode)
			if err != nil {
				errs[i] = err
				return
			}
			runner, err := rollout.New(rollout.Config{Policy: &harness.ScriptedPolicy{Tokenizer: t.cfg.Tokenizer, Turns: script},
				Tokenizer: t.cfg.Tokenizer, Sandboxes: t.cfg.Sandboxes, Trajectories: t.store, MaxEpisodes: 1, Logger: t.cfg.Logger})
			if err != nil {
				errs[i] = err
				return
			}
			res, err := runner.Run(ctx, rollout.Request{Task: task, Group: 1, Mode: mode, Limits: lim, Sampling: sample.Params{Temperature: 1},
				Seed: s.Seed, RunID: demoRun}, nil)
			if err != nil {
				errs[i] = fmt.Errorf("demonstration of task %s: %w", task.GetId(), err)
				return
			}
			e := res.Episodes[0]
			tr := e.Result.Trajectory(e.TrajectoryID, demoRun, task.GetId())
			mu.Lock()
			byTask[task.GetId()] = tr
			done++
			n := done
			mu.Unlock()
			t.printf("warm start:   demonstration %d/%d %s: %s, reward %g, %d answer tokens of %d, %.1fs", n, len(tasks), task.GetId(),
				endingOf(e), e.Result.Reward, e.Result.PolicyTokens(), len(e.Result.TokenIDs), e.WallSeconds)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
