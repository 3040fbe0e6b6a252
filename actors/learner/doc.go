// Package learner is the Learner: it owns the trainable weights and the
// optimizer state, turns groups of scored trajectories into GRPO updates
// (kernels/grpo, kernels/optim, model.Trainer), publishes every new policy
// version to the Samplers, checkpoints to Badger, and exports the trained
// model in Hugging Face layout. The plain-Go Learner (learner.go) does the
// work and is tested without an actor system; the actor (actor.go) only
// translates messages into calls and back.
//
// # One step
//
// Step(groups): a grpo.Plan fixes advantages and the loss normalisation
// from rewards and masks; the sequences that carry signal are shuffled
// (with the Learner's seeded RNG, part of every checkpoint) and packed into
// micro-batches of at most Config.MicroBatchTokens tokens; for each, the
// Trainer computes the policy's log-probabilities, the plan turns them into
// loss and dL/dlogp, and Backward accumulates gradients. Then AdamW steps
// (with clipping and the schedule). A NaN or Inf loss or gradient skips the
// update (gradients zeroed, nothing else changes), is logged and counted,
// and the Learner takes the next batch as usual. A batch whose every group
// has equal rewards changes nothing either. Otherwise the step count and
// the policy version go up by one.
//
// SFTStep(demonstrations) is the warm start's update (sft.go): the loss is
// the mean negative log-likelihood of the batch's policy tokens, and AdamW
// runs at the request's rate and schedule; micro-batches, the non-finite
// skip, numbering, publication and checkpoints are TrainStep's (the shared
// pass and apply).
//
// # Publication contract (Learner → Samplers)
//
// Every published version is stored before anyone hears of it:
//
//  1. After a step that is due for publication (every Config.PublishEvery
//     steps), the Learner saves the weights, and only the weights, as a
//     checkpoint of run RunID at checkpoint step = policy version, in the
//     persistence.CheckpointStore. Tensors are named by their Hugging Face
//     names (model.Model.Params), float32, in the model's shapes; the
//     manifest carries the model configuration and the policy version.
//  2. Only once Save has returned does the step answer: LearnerStep's
//     published_step names the version. The Learner sends nothing unasked;
//     the Trainer hands the version to its Sampler with WeightsPublished
//     {run_id: RunID, step, policy_version} and waits for WeightsApplied.
//  3. A Sampler loads the weights with CheckpointStore.ReadTensor for each
//     of its model's Params and model.Model.SetParams, between two forward
//     passes; it stamps every sequence with the oldest version that worked
//     on it and, when a swap came while it was in flight, the newest
//     (actors/sampler, "Policy versions"), and every token with the
//     log-prob of the version that sampled it.
//
// Versions only increase, and a version number names one set of weights
// for ever: after a crash the Learner resumes from its last full checkpoint
// and continues numbering after the newest published version, even if it
// replays steps whose earlier results were already published.
//
// # Checkpoints
//
// The full training state (weights, AdamW moments and step, the RNG state,
// the policy version, the model configuration) is a checkpoint of run
// RunID+"/train" at checkpoint step = Learner step, written every
// Config.CheckpointEvery steps and on Close. It is self-contained, so
// pruning old publications never breaks a resume point. Open resumes from
// the newest one: the next step's weights equal, bit for bit, those of an
// uninterrupted run. A checkpoint of another model is refused with
// ErrModelMismatch; a truncated or corrupt one with ErrCorrupt, leaving the
// Learner unchanged, so an earlier step can be loaded instead
// (LoadCheckpoint).
//
// # Device
//
// SelectBackend binds the Learner to the GPU with the most free memory
// (go-nvlib) when the binary has the CUDA backend (build tag cuda) and that
// backend can train (kernels.GradBackend); otherwise it runs on the CPU,
// and says which in the log.
package learner
