package learner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	messages "github.com/frognano/frognano/actors/messages/v1"
	"github.com/frognano/frognano/persistence"
	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
	"github.com/frognano/frognano/runtime/supervise"
)

// ActorName is the well-known name of a node's learner actor.
const ActorName = "learner"

// ActorConfig is what the learner actor needs.
type ActorConfig struct {
	// Open makes the Learner, resuming from the newest checkpoint; it is
	// called when the actor starts and again after every restart, so a
	// crashed Learner resumes from its last checkpoint.
	Open   func(ctx context.Context) (*Learner, error)
	Logger *slog.Logger
}

// Props builds the learner actor. It answers LearnerTrainBatch and
// LearnerSFTBatch with LearnerStep (steps run one at a time, off the
// actor's goroutine, in the order they arrived), LearnerSFTEvaluate with
// LearnerSFTLoss (in the same queue), LearnerCheckpointRequest with
// LearnerCheckpointed and LearnerStatusRequest with LearnerStatus; errors
// are Failures. It sends nothing unasked: a step that published answers
// once the weights are stored, and whoever asked (the Trainer) hands them
// to its Sampler. On stop it finishes the running step and writes a final
// checkpoint.
func Props(cfg ActorConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		log := cfg.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		return &learnerActor{cfg: cfg, log: log}
	})
}

type learnerActor struct {
	cfg ActorConfig
	log *slog.Logger
	l   *Learner
	err error // why the Learner could not be opened

	jobs   chan job
	wg     sync.WaitGroup
	queued int
	status *messages.LearnerStatus // refreshed after every job, read on the actor goroutine
}

// job is one request for the worker goroutine, which owns the Learner
// while the actor runs: a GRPO batch, an SFT batch, an SFT evaluation, or
// (none of them) a checkpoint request.
type job struct {
	to    *actor.PID
	batch *messages.LearnerTrainBatch
	sft   *messages.LearnerSFTBatch
	eval  *messages.LearnerSFTEvaluate
}

// jobDone carries a job's outcome back to the actor goroutine.
type jobDone struct {
	to     *actor.PID
	reply  any
	status *messages.LearnerStatus
}

func code(err error) rtmsg.FailureCode {
	switch {
	case errors.Is(err, ErrBadBatch):
		return rtmsg.FailureCode_FAILURE_CODE_BAD_REQUEST
	case errors.Is(err, ErrModelMismatch):
		return rtmsg.FailureCode_FAILURE_CODE_MODEL_MISMATCH
	case errors.Is(err, ErrCorrupt), errors.Is(err, persistence.ErrCorrupt):
		return rtmsg.FailureCode_FAILURE_CODE_CORRUPT
	}
	return rtmsg.FailureCode_FAILURE_CODE_ERROR
}

func (a *learnerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *actor.Stopping:
		a.stop(true)
	case *actor.Restarting:
		// The restarted actor reopens from the store; state in memory
		// after a failure is not trusted enough to checkpoint.
		a.stop(false)
	case *messages.LearnerTrainBatch:
		a.enqueue(ctx, job{to: ctx.Sender(), batch: m})
	case *messages.LearnerSFTBatch:
		a.enqueue(ctx, job{to: ctx.Sender(), sft: m})
	case *messages.LearnerSFTEvaluate:
		a.enqueue(ctx, job{to: ctx.Sender(), eval: m})
	case *messages.LearnerCheckpointRequest:
		a.enqueue(ctx, job{to: ctx.Sender()})
	case *jobDone:
		a.queued--
		a.status = m.status
		if m.to != nil {
			ctx.Send(m.to, m.reply)
		}
	case *messages.LearnerStatusRequest:
		if a.err != nil {
			ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_UNAVAILABLE, a.err))
			return
		}
		st := proto.Clone(a.status).(*messages.LearnerStatus)
		st.Queued = int32(a.queued)
		ctx.Respond(st)
	}
}

func (a *learnerActor) start(ctx actor.Context) {
	l, err := a.cfg.Open(context.Background())
	if err != nil {
		// A Learner that cannot open (a corrupt newest checkpoint, another
		// model in the store) will not open on a restart either: answer
		// every request with the reason instead of crash-looping.
		a.err = supervise.Permanent(err)
		a.log.Error("learner: cannot open", "err", err)
		return
	}
	a.l = l
	a.status = statusOf(l)
	a.jobs = make(chan job, 1024)
	self, system := ctx.Self(), ctx.ActorSystem()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for j := range a.jobs {
			system.Root.Send(self, a.run(j))
		}
	}()
}

func (a *learnerActor) enqueue(ctx actor.Context, j job) {
	if a.err != nil {
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_UNAVAILABLE, a.err))
		return
	}
	select {
	case a.jobs <- j:
		a.queued++
	default:
		ctx.Respond(rtmsg.Fail(rtmsg.FailureCode_FAILURE_CODE_BUSY, errors.New("learner: too many batches queued")))
	}
}

// run executes a job on the worker goroutine.
func (a *learnerActor) run(j job) *jobDone {
	bctx := context.Background()
	l := a.l
	done := &jobDone{to: j.to}
	switch {
	case j.sft != nil:
		return a.runSFT(j, done)
	case j.eval != nil:
		start := time.Now()
		seqs, err := SFTFromProto(j.eval.GetTrajectories())
		var (
			nll float64
			n   int
		)
		if err == nil {
			nll, n, err = l.SFTEvaluate(seqs)
		}
		if err != nil {
			done.reply = rtmsg.Fail(code(err), err)
		} else {
			done.reply = &messages.LearnerSFTLoss{BatchId: j.eval.GetBatchId(), Nll: nll, PolicyTokens: int64(n),
				PolicyVersion: l.PolicyVersion(), Seconds: time.Since(start).Seconds()}
		}
		done.status = statusOf(l)
		return done
	case j.batch == nil:
		if err := l.Checkpoint(bctx); err != nil {
			done.reply = rtmsg.Fail(code(err), err)
		} else {
			done.reply = &messages.LearnerCheckpointed{RunId: TrainRunID(l.RunID()), Step: l.Step(), PolicyVersion: l.PolicyVersion()}
		}
		done.status = statusOf(l)
		return done
	}
	groups, err := GroupsFromProto(j.batch.GetGroups())
	var res StepResult
	if err == nil {
		res, err = l.TrainStep(bctx, groups)
	}
	if err != nil {
		a.log.Warn("learner: step failed", "batch", j.batch.GetBatchId(), "err", err)
		done.reply = rtmsg.Fail(code(err), err)
	} else {
		done.reply = res.Proto(j.batch.GetBatchId())
	}
	done.status = statusOf(l)
	return done
}

// runSFT takes an SFT step on the worker goroutine.
func (a *learnerActor) runSFT(j job, done *jobDone) *jobDone {
	l := a.l
	seqs, err := SFTFromProto(j.sft.GetTrajectories())
	var res StepResult
	if err == nil {
		res, err = l.SFTStep(context.Background(), seqs, SFTOptions{LR: j.sft.GetLr(), WarmupSteps: int(j.sft.GetWarmupSteps()), TotalSteps: int(j.sft.GetTotalSteps())})
	}
	if err != nil {
		a.log.Warn("learner: SFT step failed", "batch", j.sft.GetBatchId(), "err", err)
		done.reply = rtmsg.Fail(code(err), err)
	} else {
		done.reply = res.Proto(j.sft.GetBatchId())
	}
	done.status = statusOf(l)
	return done
}

func statusOf(l *Learner) *messages.LearnerStatus {
	return &messages.LearnerStatus{
		RunId: l.RunID(), Step: l.Step(), PolicyVersion: l.PolicyVersion(), SkippedSteps: l.SkippedSteps(),
		LastCheckpointStep: l.LastCheckpoint(), Backend: l.Model().Backend().Name(), Model: ModelConfig(l.Model()),
		PublishedStep: l.LastPublished(),
	}
}

// stop lets the running and queued steps finish, then checkpoints if
// asked to.
func (a *learnerActor) stop(checkpoint bool) {
	if a.l == nil || a.jobs == nil {
		return
	}
	close(a.jobs)
	a.wg.Wait()
	a.jobs = nil
	if !checkpoint {
		return
	}
	if err := a.l.Close(context.Background()); err != nil {
		a.log.Error("learner: final checkpoint failed", "err", err)
	}
}
