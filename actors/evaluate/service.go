package evaluate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/joblog"
	"github.com/frognano/frognano/runtime/node"
)

// ServiceName is the well-known name of a node's evaluation service actor.
const ServiceName = "evals"

// EvalsPath is the root of the evaluation service's HTTP API.
const EvalsPath = "/v1/evals"

// ActiveHeader says, on GET /v1/evals/{id}, whether the evaluation's actor
// is alive.
const ActiveHeader = "X-Frognano-Eval-Active"

// Errors an evaluation's context is cancelled with.
var (
	ErrStopped      = errors.New("stopped by a client")
	ErrNodeStopping = errors.New("the node stopped while it ran")
)

// Statuses of an evaluation's record.
const (
	StatusRunning = "running"
	StatusDone    = "done"
	StatusFailed  = "failed"
	StatusStopped = "stopped"
)

// Service owns the evaluations of its node. Its actor (ServiceName) starts
// a child actor per evaluation, which runs the job (Execute) on the node
// whoever asked for it, keeping its record (status, progress, report) in
// the node's store; a client follows it through the HTTP API (Handlers)
// and may leave and come back. A node runs one evaluation at a time (each
// loads its own model). An evaluation survives its node: one the node was
// running when it stopped or died is resumed when the node starts again
// (Deps.AutoResume; else it is recorded stopped), and a stopped one when a
// client asks (POST /v1/evals/{id}/resume). A resumed evaluation reads back
// the episodes it finished, stored as trajectories, and plays only the
// others (rollout.Request.Reuse).
type Service struct {
	deps Deps
	jobs joblog.Registry
	// reading bounds the submitted bodies read at once: each may be
	// MaxJobBytes, several times that once decoded.
	reading chan struct{}
}

// maxReading is how many submissions a node reads at once (it runs one);
// another waits readingWait for its turn, then is refused.
const maxReading = 2

var readingWait = 2 * time.Second

// NewService is the evaluation service of a node; d.Node is set when the
// node spawns the service's actor.
func NewService(d Deps) *Service { return &Service{deps: d, reading: make(chan struct{}, maxReading)} }

// Actor is the service's actor, for node.Options.Actors.
func (s *Service) Actor() node.NamedActor {
	return node.NamedActor{Name: ServiceName, Props: func(n *node.Node) *actor.Props {
		s.deps.Node = n
		if s.deps.Logger == nil {
			s.deps.Logger = slog.New(slog.DiscardHandler)
		}
		// An evaluation's actor that fails is not restarted: its record
		// says failed and why.
		return actor.PropsFromProducer(func() actor.Actor { return &serviceActor{s: s} },
			actor.WithSupervisor(actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })))
	}, Ready: true}
}

// Active says whether evaluation id's actor is alive on this node.
func (s *Service) Active(id string) bool { return s.jobs.Active(id) }

func (s *Service) store() persistence.EvaluationStore { return s.deps.Node.DB().Evaluations() }

type (
	submitEval struct{ job Job }
	stopEval   struct{ id string }
	resumeEval struct{ id, apiKey string }
	evalReply  struct {
		id        string
		logOffset int64
		code      int
		err       error
	}
	stopNow   struct{}
	evalEnded struct{}
)

type serviceActor struct {
	s        *Service
	children map[string]*actor.PID
}

func (a *serviceActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		a.children = map[string]*actor.PID{}
		a.resumeUnfinished(c)
	case *submitEval:
		c.Respond(a.start(c, m.job))
	case *resumeEval:
		c.Respond(a.resume(c, m.id, m.apiKey))
	case *stopEval:
		pid, ok := a.children[m.id]
		if !ok {
			c.Respond(&evalReply{code: http.StatusConflict, err: fmt.Errorf("evaluation %s is not running on this node", m.id)})
			return
		}
		c.Send(pid, &stopNow{})
		c.Respond(&evalReply{id: m.id, logOffset: joblog.Size(logPath(a.s.deps.DataDir, m.id))})
	case *actor.Terminated:
		for id, pid := range a.children {
			if pid.Equal(m.Who) {
				delete(a.children, id)
				a.s.jobs.SetActive(id, false)
			}
		}
	}
}

// start checks job, records it and spawns its actor, unless an
// evaluation runs already.
func (a *serviceActor) start(c actor.Context, job Job) *evalReply {
	if err := job.Check(); err != nil {
		return &evalReply{code: http.StatusBadRequest, err: err}
	}
	if !a.s.deps.AnyPath {
		if err := job.checkNames(); err != nil {
			return &evalReply{code: http.StatusBadRequest, err: err}
		}
	}
	for id := range a.children {
		return busy(id)
	}
	now := time.Now()
	if job.ID == "" {
		job.ID = "eval-" + now.UTC().Format("20060102-150405.000")
	}
	if job.Seed == 0 {
		job.Seed = uint64(now.UnixNano())
	}
	ctx := context.Background()
	if _, err := a.s.store().Get(ctx, job.ID); err == nil {
		return &evalReply{code: http.StatusConflict, err: fmt.Errorf("evaluation %s exists already: give another id (--run)", job.ID)}
	} else if !errors.Is(err, persistence.ErrNotFound) {
		return &evalReply{code: joblog.StatusOf(err), err: err}
	}
	// Its trajectories are stored under its id: a training run's would
	// have an evaluation's mixed in.
	if _, err := a.s.deps.Node.DB().Runs().Get(ctx, job.ID); err == nil {
		return &evalReply{code: http.StatusConflict, err: fmt.Errorf("%s is a training run's id, which its trajectories are stored under: give the evaluation another id (--run)", job.ID)}
	} else if !errors.Is(err, persistence.ErrNotFound) {
		return &evalReply{code: joblog.StatusOf(err), err: err}
	}
	stored := job
	stored.APIKey = ""
	b, err := json.Marshal(stored)
	if err != nil {
		return &evalReply{code: http.StatusInternalServerError, err: err}
	}
	rec := &records.Evaluation{Id: job.ID, Status: StatusRunning, StartedUnixNano: now.UnixNano(), UpdatedUnixNano: now.UnixNano(), JobJson: string(b)}
	if err := a.s.store().Put(ctx, rec); err != nil {
		return &evalReply{code: joblog.StatusOf(err), err: err}
	}
	logOffset := joblog.Size(logPath(a.s.deps.DataDir, job.ID))
	if err := a.spawn(c, job, rec); err != nil {
		return &evalReply{code: http.StatusConflict, err: err}
	}
	return &evalReply{id: job.ID, logOffset: logOffset}
}

// spawn starts the actor of job, whose record rec is stored.
func (a *serviceActor) spawn(c actor.Context, job Job, rec *records.Evaluation) error {
	pid, err := c.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &evalActor{s: a.s, job: job, rec: rec} }), job.ID)
	if err != nil {
		rec.Status, rec.Error = StatusFailed, err.Error()
		_ = a.s.store().Put(context.Background(), rec)
		return fmt.Errorf("evaluation %s: %w", job.ID, err)
	}
	c.Watch(pid)
	a.children[job.ID] = pid
	a.s.jobs.SetActive(job.ID, true)
	return nil
}

// busy is the answer to a submission while evaluation id runs.
func busy(id string) *evalReply {
	return &evalReply{code: http.StatusConflict, err: fmt.Errorf("evaluation %s is running on this node, which runs one at a time: wait for it, or stop it (frognano evals stop %s)", id, id)}
}

// resumeUnfinished deals with the evaluations the store says are running
// (their node stopped or died while they ran): with Deps.AutoResume the
// newest that can run again is resumed; the others are recorded stopped,
// saying how to resume them.
func (a *serviceActor) resumeUnfinished(c actor.Context) {
	s := a.s
	ctx := context.Background()
	all, err := s.store().List(ctx)
	if err != nil {
		s.deps.Logger.Error("cannot list evaluations", "err", err)
		return
	}
	var running []*records.Evaluation
	for _, e := range all {
		if e.GetStatus() == StatusRunning {
			running = append(running, e)
		}
	}
	slices.SortFunc(running, func(x, y *records.Evaluation) int { return cmp.Compare(y.GetStartedUnixNano(), x.GetStartedUnixNano()) })
	for _, e := range running {
		why := "frognano evals resume " + e.GetId() + " plays the rest"
		if s.deps.AutoResume && len(a.children) == 0 {
			job, err := storedJob(e)
			switch {
			case err != nil:
				why = err.Error()
			case IsURL(job.Model):
				why = "an evaluation of a served model (URL) is resumed only when asked, since its API key is never stored: OPENAI_API_KEY=… frognano evals resume " + e.GetId()
			default:
				if rep := a.resumeJob(c, job, e); rep.err != nil {
					why = rep.err.Error()
					break
				}
				s.deps.Logger.Info("evaluation resumed after the node restarted", "eval", e.GetId(), "episodes_done", e.GetEpisodesDone())
				continue
			}
		} else if s.deps.AutoResume {
			why = "another evaluation was resumed in its place (a node runs one at a time): " + why
		}
		e.Status = StatusStopped
		e.Error = ErrNodeStopping.Error() + fmt.Sprintf(" (%d finished episodes stored): ", e.GetEpisodesDone()) + why
		e.UpdatedUnixNano = time.Now().UnixNano()
		if err := s.store().Put(ctx, e); err != nil {
			s.deps.Logger.Error("cannot record an evaluation stopped", "eval", e.GetId(), "err", err)
		}
	}
}

// storedJob is the job an evaluation's record holds.
func storedJob(e *records.Evaluation) (Job, error) {
	var job Job
	if err := json.Unmarshal([]byte(e.GetJobJson()), &job); err != nil || job.ID != e.GetId() {
		return job, fmt.Errorf("its stored job cannot be read (%v), so it cannot be resumed", err)
	}
	return job, nil
}

// resume restarts stopped evaluation id (stopped by a client, or by its
// node) with its stored job, apiKey its URL model's key.
func (a *serviceActor) resume(c actor.Context, id, apiKey string) *evalReply {
	for running := range a.children {
		return busy(running)
	}
	e, err := a.s.store().Get(context.Background(), id)
	if err != nil {
		return &evalReply{code: joblog.StatusOf(err), err: fmt.Errorf("evaluation %s: %w", id, err)}
	}
	if e.GetStatus() != StatusStopped {
		return &evalReply{code: http.StatusConflict, err: fmt.Errorf("evaluation %s is %s: only a stopped evaluation is resumed", id, e.GetStatus())}
	}
	job, err := storedJob(e)
	if err != nil {
		return &evalReply{code: http.StatusConflict, err: fmt.Errorf("evaluation %s: %w", id, err)}
	}
	job.APIKey = apiKey
	return a.resumeJob(c, job, e)
}

// resumeJob spawns job again, its record e marked running, reading back
// the episodes it stored.
func (a *serviceActor) resumeJob(c actor.Context, job Job, e *records.Evaluation) *evalReply {
	err := job.Check()
	if err == nil && !a.s.deps.AnyPath {
		// The store may have been written by an embedded node that took
		// paths: a node serving others still takes names only.
		err = job.checkNames()
	}
	if err != nil {
		return &evalReply{code: http.StatusConflict, err: fmt.Errorf("evaluation %s: its stored job: %w", job.ID, err)}
	}
	job.resume = true
	e.Status, e.Error, e.ReportJson = StatusRunning, "", ""
	e.UpdatedUnixNano = time.Now().UnixNano()
	if err := a.s.store().Put(context.Background(), e); err != nil {
		return &evalReply{code: joblog.StatusOf(err), err: err}
	}
	logOffset := joblog.Size(logPath(a.s.deps.DataDir, job.ID))
	if err := a.spawn(c, job, e); err != nil {
		return &evalReply{code: http.StatusConflict, err: err}
	}
	return &evalReply{id: job.ID, logOffset: logOffset}
}

// evalActor runs one job: a goroutine executes it while the actor answers
// stop requests; its end (or a panic in it) is recorded, and is the end of
// the actor.
type evalActor struct {
	s      *Service
	job    Job
	rec    *records.Evaluation
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func (e *evalActor) Receive(c actor.Context) {
	switch c.Message().(type) {
	case *actor.Started:
		e.launch(c)
	case *stopNow:
		if e.cancel != nil {
			e.cancel(ErrStopped)
		}
	case *evalEnded:
		c.Stop(c.Self())
	case *actor.Stopping:
		if e.cancel != nil {
			e.cancel(ErrNodeStopping)
			<-e.done
		}
	}
}

func (e *evalActor) launch(c actor.Context) {
	ctx, cancel := context.WithCancelCause(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	self, root, s, job, rec := c.Self(), e.s.deps.Node.System().Root, e.s, e.job, e.rec
	go func() {
		defer close(e.done)
		bg := context.Background()
		put := func() {
			rec.UpdatedUnixNano = time.Now().UnixNano()
			if err := s.store().Put(bg, rec); err != nil {
				s.deps.Logger.Error("cannot record an evaluation", "eval", rec.GetId(), "err", err)
			}
		}
		var (
			rep *Report
			err error
		)
		log, lerr := joblog.Open(logPath(s.deps.DataDir, job.ID))
		if lerr != nil {
			err = lerr
		} else {
			s.jobs.SetLog(job.ID, log)
			func() {
				defer func() {
					if v := recover(); v != nil {
						s.deps.Logger.Error("evaluation panicked", "eval", job.ID, "panic", v, "stack", string(debug.Stack()))
						err = fmt.Errorf("the evaluation failed: %v (the node's log has the stack)", v)
					}
				}()
				// The record holds the job (up to MaxJobBytes): it is
				// rewritten at most once a second, not at every episode's end.
				var saved time.Time
				rep, err = Execute(ctx, &s.deps, job, log, func(done, total, solved int) {
					rec.EpisodesDone, rec.EpisodesTotal, rec.Solved = int64(done), int64(total), int64(solved)
					if time.Since(saved) >= progressEvery || done == total {
						put()
						saved = time.Now()
					}
				})
			}()
		}
		if rep != nil {
			if b, jerr := json.Marshal(rep); jerr == nil {
				rec.ReportJson = string(b)
			}
		}
		switch cause := context.Cause(ctx); {
		case err == nil:
			rec.Status = StatusDone
		case errors.Is(cause, ErrStopped):
			rec.Status, rec.Error = StatusStopped, ErrStopped.Error()
		case errors.Is(cause, ErrNodeStopping):
			// Still running: the node resumes it when it starts again.
		default:
			rec.Status, rec.Error = StatusFailed, err.Error()
		}
		if log != nil {
			if rec.Status == StatusRunning {
				fmt.Fprintf(log, "evaluation %s interrupted: the node is stopping, and resumes it when it starts again\n", job.ID)
			} else if err != nil {
				fmt.Fprintf(log, "evaluation %s %s: %v\n", job.ID, rec.Status, err)
			} else {
				fmt.Fprintf(log, "evaluation %s done: %d episodes, %d solved\n", job.ID, rec.GetEpisodesDone(), rec.GetSolved())
			}
		}
		put()
		if log != nil {
			s.jobs.SetLog(job.ID, nil)
			log.Close()
		}
		root.Send(self, &evalEnded{})
	}()
}

// progressEvery is how often a running evaluation's record is rewritten.
const progressEvery = time.Second

// EvalInfo is a line of GET /v1/evals.
type EvalInfo struct {
	ID            string    `json:"id"`
	Status        string    `json:"status"`
	Active        bool      `json:"active"`
	EpisodesDone  int64     `json:"episodes_done"`
	EpisodesTotal int64     `json:"episodes_total"`
	Solved        int64     `json:"solved"`
	Started       time.Time `json:"started"`
	Updated       time.Time `json:"updated"`
	Error         string    `json:"error,omitempty"`
}

// Submitted is the answer to a submitted or stopped evaluation.
type Submitted struct {
	ID        string `json:"id"`
	LogOffset int64  `json:"log_offset"`
}

// ResumeRequest is the body of POST /v1/evals/{id}/resume: the API key a
// URL model needs (never stored), or nothing.
type ResumeRequest struct {
	APIKey string `json:"api_key,omitempty"`
}

// maxResumeBytes bounds a resume request's body.
const maxResumeBytes = 64 << 10

// MaxJobBytes bounds a submitted job (instances from a file travel in it).
const MaxJobBytes = 32 << 20

// Handlers are the evaluation service's HTTP API, mounted on the node:
//
//	POST /v1/evals             submit a Job (JSON); 202 {"id", "log_offset"}
//	GET  /v1/evals             the evaluations the store records
//	GET  /v1/evals/{id}        one evaluation's record (JSON of
//	                           records.Evaluation; report_json once done)
//	GET  /v1/evals/{id}/logs   its log from ?offset=N; ?follow=true streams
//	                           until the evaluation's actor ends
//	POST /v1/evals/{id}/stop   stop it (recorded "stopped")
//	POST /v1/evals/{id}/resume resume a stopped one (body: nothing, or
//	                           {"api_key": …} for a URL model); 202 as a submission
//
// Errors are JSON {"error": "..."} with a 4xx or 5xx status: 400 for a
// job out of range (Check) or an id no evaluation can have (CheckID), 409
// for a job while one runs (answered before its body is read), 503 with
// Retry-After while maxReading other submissions are being read.
func (s *Service) Handlers() []node.Handler {
	ask := func(n *node.Node, msg any) *evalReply {
		res, err := n.System().Root.RequestFuture(actor.NewPID(n.Address(), ServiceName), msg, 30*time.Second).Result()
		if err != nil {
			return &evalReply{code: http.StatusServiceUnavailable, err: fmt.Errorf("the evaluation service did not answer: %w", err)}
		}
		return res.(*evalReply)
	}
	reply := func(w http.ResponseWriter, rep *evalReply) {
		if rep.err != nil {
			joblog.WriteError(w, rep.code, rep.err)
			return
		}
		joblog.WriteJSON(w, http.StatusAccepted, Submitted{ID: rep.id, LogOffset: rep.logOffset})
	}
	return []node.Handler{
		{Pattern: "POST " + EvalsPath, MaxBody: MaxJobBytes, Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// Refused before its body is read: a job while one runs,
				// or past the bodies this node reads at once.
				if id, ok := s.jobs.AnyActive(); ok {
					reply(w, busy(id))
					return
				}
				wait := time.NewTimer(readingWait)
				defer wait.Stop()
				select {
				case s.reading <- struct{}{}:
					defer func() { <-s.reading }()
				case <-r.Context().Done():
					return
				case <-wait.C:
					w.Header().Set("Retry-After", "1")
					joblog.WriteError(w, http.StatusServiceUnavailable, fmt.Errorf("the node is reading %d other submissions: retry", maxReading))
					return
				}
				var job Job
				if code, err := node.DecodeJSON(r.Body, &job); err != nil {
					joblog.WriteError(w, code, fmt.Errorf("the body is not an evaluation job (JSON of evaluate.Job): %w", err))
					return
				}
				reply(w, ask(n, &submitEval{job: job}))
			})
		}},
		{Pattern: "GET " + EvalsPath, Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				all, err := n.DB().Evaluations().List(r.Context())
				if err != nil {
					joblog.WriteError(w, http.StatusInternalServerError, err)
					return
				}
				out := []EvalInfo{}
				for _, e := range all {
					out = append(out, EvalInfo{ID: e.GetId(), Status: e.GetStatus(), Active: s.Active(e.GetId()),
						EpisodesDone: e.GetEpisodesDone(), EpisodesTotal: e.GetEpisodesTotal(), Solved: e.GetSolved(),
						Started: time.Unix(0, e.GetStartedUnixNano()).UTC(), Updated: time.Unix(0, e.GetUpdatedUnixNano()).UTC(), Error: e.GetError()})
				}
				joblog.WriteJSON(w, http.StatusOK, out)
			})
		}},
		{Pattern: "GET " + EvalsPath + "/{id}", Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := CheckID(r.PathValue("id")); err != nil {
					joblog.WriteError(w, http.StatusBadRequest, err)
					return
				}
				e, err := n.DB().Evaluations().Get(r.Context(), r.PathValue("id"))
				if err != nil {
					joblog.WriteError(w, joblog.StatusOf(err), fmt.Errorf("evaluation %s: %w", r.PathValue("id"), err))
					return
				}
				joblog.WriteRecord(w, e, ActiveHeader, s.Active(e.GetId()))
			})
		}},
		{Pattern: "GET " + EvalsPath + "/{id}/logs", Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				id := r.PathValue("id")
				// The id names a directory: none but a valid one is looked
				// up, whatever the store holds.
				if err := CheckID(id); err != nil {
					joblog.WriteError(w, http.StatusBadRequest, err)
					return
				}
				if _, err := n.DB().Evaluations().Get(r.Context(), id); err != nil {
					joblog.WriteError(w, joblog.StatusOf(err), fmt.Errorf("evaluation %s: %w", id, err))
					return
				}
				s.jobs.Follow(w, r, id, logPath(s.deps.DataDir, id))
			})
		}},
		{Pattern: "POST " + EvalsPath + "/{id}/resume", MaxBody: maxResumeBytes, Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := CheckID(r.PathValue("id")); err != nil {
					joblog.WriteError(w, http.StatusBadRequest, err)
					return
				}
				var body ResumeRequest
				if r.ContentLength != 0 {
					if code, err := node.DecodeJSON(r.Body, &body); err != nil && !errors.Is(err, io.EOF) {
						joblog.WriteError(w, code, fmt.Errorf("the body is not a resume request (JSON {\"api_key\": …} or nothing): %w", err))
						return
					}
				}
				reply(w, ask(n, &resumeEval{id: r.PathValue("id"), apiKey: body.APIKey}))
			})
		}},
		{Pattern: "POST " + EvalsPath + "/{id}/stop", Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := CheckID(r.PathValue("id")); err != nil {
					joblog.WriteError(w, http.StatusBadRequest, err)
					return
				}
				reply(w, ask(n, &stopEval{id: r.PathValue("id")}))
			})
		}},
	}
}
