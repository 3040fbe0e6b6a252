package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime/debug"
	"sort"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
	"github.com/frognano/frognano/runtime/joblog"
	"github.com/frognano/frognano/runtime/node"
	"github.com/frognano/frognano/runtime/supervise"
)

// ServiceName is the well-known name of a node's run service actor.
const ServiceName = "runs"

// RunsPath is the root of the run service's HTTP API.
const RunsPath = "/v1/runs"

// RunRestarts is how the run service supervises its runs: a run whose
// actor panics is restarted (and resumes from its record) at most
// MaxRestarts times in Window, then recorded failed.
var RunRestarts = supervise.Policy{MaxRestarts: 3, Window: 30 * time.Minute, BackoffMin: time.Second, BackoffMax: 30 * time.Second}

// Service owns the training runs of its node. Its actor (ServiceName)
// starts a supervised child actor per run, which runs the job (execute)
// from start to end on the node, whoever asked for it; a client follows it
// through the HTTP API (Handlers) and may leave and come back. A node
// started with AutoResume resumes, by itself, the runs its store records
// as running (a node killed or stopped mid-run), unless a client stopped
// them. A node trains one run at a time: its learner host keeps one
// Learner open.
type Service struct {
	deps       Deps
	autoResume bool
	// jobs knows the runs whose actor is alive and their open logs.
	jobs joblog.Registry
}

// NewService is the run service of a node; d.Node is set when the node
// spawns the service's actor.
func NewService(d Deps, autoResume bool) *Service {
	return &Service{deps: d, autoResume: autoResume}
}

// Actor is the service's actor, for node.Options.Actors.
func (s *Service) Actor() node.NamedActor {
	return node.NamedActor{Name: ServiceName, Props: func(n *node.Node) *actor.Props {
		s.deps.Node = n
		if s.deps.Logger == nil {
			s.deps.Logger = slog.New(slog.DiscardHandler)
		}
		return actor.PropsFromProducer(func() actor.Actor { return &serviceActor{s: s} },
			actor.WithSupervisor(RunRestarts.Strategy()))
	}, Ready: true}
}

// Active says whether run id's actor is alive on this node.
func (s *Service) Active(id string) bool { return s.jobs.Active(id) }

// Messages of the service actor (local: the HTTP API is the remote face).
type (
	submitJob struct{ job Job }
	stopJob   struct{ id string }
	resumeJob struct{ id string }
	// jobReply answers the three: the run's id, or why not (code is an
	// HTTP status).
	jobReply struct {
		id        string
		resumed   bool
		logOffset int64 // the run's log's size before it started
		code      int
		err       error
	}
	runEnded struct {
		err   error
		panic any
		stack []byte
	}
	stopRun struct{}
)

type serviceActor struct {
	s        *Service
	children map[string]*actor.PID
	stopping bool
}

func (a *serviceActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		a.children = map[string]*actor.PID{}
		if a.s.autoResume {
			a.resumeUnfinished(c)
		}
	case *submitJob:
		c.Respond(a.start(c, m.job, false))
	case *resumeJob:
		run, err := a.s.deps.Node.DB().Runs().Get(context.Background(), m.id)
		if err != nil {
			c.Respond(&jobReply{code: joblog.StatusOf(err), err: fmt.Errorf("run %s: %w", m.id, err)})
			return
		}
		job, err := storedJob(run)
		if err != nil {
			c.Respond(&jobReply{code: http.StatusConflict, err: err})
			return
		}
		c.Respond(a.start(c, job, true))
	case *stopJob:
		pid, ok := a.children[m.id]
		if !ok {
			c.Respond(&jobReply{code: http.StatusConflict, err: fmt.Errorf("run %s is not running on this node", m.id)})
			return
		}
		c.Send(pid, &stopRun{})
		c.Respond(&jobReply{id: m.id, logOffset: joblog.Size(logPath(a.s.deps.DataDir, m.id))})
	case *actor.Terminated:
		for id, pid := range a.children {
			if pid.Equal(m.Who) {
				delete(a.children, id)
				a.s.jobs.SetActive(id, false)
				if !a.stopping {
					a.markGivenUp(id)
				}
			}
		}
	case *actor.Stopping:
		a.stopping = true
	}
}

// start spawns the actor of job's run, unless a run is active already.
func (a *serviceActor) start(c actor.Context, job Job, resume bool) *jobReply {
	if err := job.Check(); err != nil {
		return &jobReply{code: http.StatusBadRequest, err: err}
	}
	if job.TensorBoard != "" && !a.s.deps.AnyPath && !filepath.IsLocal(job.TensorBoard) {
		return &jobReply{code: http.StatusBadRequest, err: fmt.Errorf("tensorboard %q: this node takes a relative name, kept under the run's directory on the node", job.TensorBoard)}
	}
	for id := range a.children {
		if id == job.RunID {
			return &jobReply{code: http.StatusConflict, err: fmt.Errorf("run %s is already running on this node (frognano runs logs %s follows it)", id, id)}
		}
		return &jobReply{code: http.StatusConflict, err: fmt.Errorf("run %s is running on this node, which trains one run at a time: stop it first (frognano runs stop %s)", id, id)}
	}
	resumed := resume
	if job.RunID == "" {
		job.RunID = fmt.Sprintf("run-%s", time.Now().UTC().Format("20060102-150405.000"))
	}
	if rec, err := a.s.deps.Node.DB().Runs().Get(context.Background(), job.RunID); err == nil {
		resumed = true
		// What a resumed run is given instead of its recorded settings is
		// checked now too (on a copy: the run's own execute writes it).
		if len(job.Override) > 0 {
			if _, err := resumeSettings(proto.Clone(rec).(*records.Run), &job); err != nil {
				return &jobReply{code: http.StatusBadRequest, err: err}
			}
		}
	} else if !errors.Is(err, persistence.ErrNotFound) {
		return &jobReply{code: http.StatusInternalServerError, err: err}
	}
	// An evaluation's trajectories are stored under its id: a run of the
	// same id would mix its episodes with them.
	if _, err := a.s.deps.Node.DB().Evaluations().Get(context.Background(), job.RunID); err == nil {
		return &jobReply{code: http.StatusConflict, err: fmt.Errorf("run %s: an evaluation has this id (frognano evals show %s): give the run another", job.RunID, job.RunID)}
	}
	if !resumed {
		// A new run's settings are checked now, so that the client hears
		// what is wrong with them rather than a run that failed at once.
		if err := job.prepareNew(time.Now()); err != nil {
			return &jobReply{code: http.StatusBadRequest, err: err}
		}
	}
	logOffset := joblog.Size(logPath(a.s.deps.DataDir, job.RunID))
	pid, err := c.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &runActor{s: a.s, job: job} }), job.RunID)
	if err != nil {
		return &jobReply{code: http.StatusConflict, err: fmt.Errorf("run %s: %w", job.RunID, err)}
	}
	c.Watch(pid)
	a.children[job.RunID] = pid
	a.s.jobs.SetActive(job.RunID, true)
	return &jobReply{id: job.RunID, resumed: resumed, logOffset: logOffset}
}

// resumeUnfinished restarts the newest run the store records as running;
// others (a node trains one at a time) are recorded stopped, to resume
// when asked.
func (a *serviceActor) resumeUnfinished(c actor.Context) {
	ctx := context.Background()
	runs, err := a.s.deps.Node.DB().Runs().List(ctx)
	if err != nil {
		a.s.deps.Logger.Error("cannot list runs to resume", "err", err)
		return
	}
	var unfinished []*records.Run
	for _, r := range runs {
		if r.GetStatus() == "running" && r.GetJobJson() != "" {
			unfinished = append(unfinished, r)
		}
	}
	sort.Slice(unfinished, func(i, j int) bool { return unfinished[i].GetUpdatedUnixNano() > unfinished[j].GetUpdatedUnixNano() })
	for i, r := range unfinished {
		if i == 0 {
			job, err := storedJob(r)
			if err == nil {
				if rep := a.start(c, job, true); rep.err == nil {
					a.s.deps.Logger.Info("resuming an unfinished run", "run", r.GetId(), "step", r.GetStep())
					continue
				} else {
					err = rep.err
				}
			}
			a.s.deps.Logger.Error("cannot resume an unfinished run", "run", r.GetId(), "err", err)
		}
		r.Status, r.Error = "stopped", "the node restarted while it ran and resumed another run: frognano runs resume "+r.GetId()
		r.UpdatedUnixNano = time.Now().UnixNano()
		if err := a.s.deps.Node.DB().Runs().Put(ctx, r); err != nil {
			a.s.deps.Logger.Error("cannot record a run stopped", "run", r.GetId(), "err", err)
		}
	}
}

// markGivenUp records a run failed whose actor ended while its record
// still says running: the supervisor gave up on it.
func (a *serviceActor) markGivenUp(id string) {
	ctx := context.Background()
	r, err := a.s.deps.Node.DB().Runs().Get(ctx, id)
	if err != nil || r.GetStatus() != "running" {
		return
	}
	r.Status = "failed"
	r.Error = fmt.Sprintf("the run's actor failed %d times within %v and was given up on (the node's log says why): frognano runs resume %s", RunRestarts.MaxRestarts+1, RunRestarts.Window, id)
	r.UpdatedUnixNano = time.Now().UnixNano()
	if err := a.s.deps.Node.DB().Runs().Put(ctx, r); err != nil {
		a.s.deps.Logger.Error("cannot record a run failed", "run", id, "err", err)
	}
}

func storedJob(run *records.Run) (Job, error) {
	var job Job
	if run.GetJobJson() == "" {
		return job, fmt.Errorf("run %s was not started through a node's run service: resume it with frognano run --run %s and its flags", run.GetId(), run.GetId())
	}
	if err := json.Unmarshal([]byte(run.GetJobJson()), &job); err != nil {
		return job, fmt.Errorf("run %s: its stored job: %w", run.GetId(), err)
	}
	job.RunID, job.Override = run.GetId(), nil
	return job, nil
}

func jobJSON(job Job) (string, error) {
	job.Override = nil
	b, err := json.Marshal(job)
	return string(b), err
}

// runActor runs one job: a goroutine executes it while the actor answers
// stop requests; a panic in it is the actor's failure (the supervisor
// restarts the actor, which resumes the run from its record), and the end
// of the job is the end of the actor. A stopping actor (its node stops)
// cancels the job with ErrNodeStopping and waits for it: the record keeps
// "running", and the node's next start resumes it.
type runActor struct {
	s      *Service
	job    Job
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func (r *runActor) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		r.launch(c)
	case *stopRun:
		if r.cancel != nil {
			r.cancel(ErrStopped)
		}
	case *runEnded:
		if m.panic != nil {
			r.s.deps.Logger.Error("run panicked; its actor restarts and resumes it", "run", r.job.RunID, "panic", m.panic, "stack", string(m.stack))
			panic(fmt.Errorf("run %s: %v", r.job.RunID, m.panic))
		}
		c.Stop(c.Self())
	case *actor.Restarting:
		r.halt(ErrNodeStopping)
	case *actor.Stopping:
		r.halt(ErrNodeStopping)
	}
}

func (r *runActor) launch(c actor.Context) {
	ctx, cancel := context.WithCancelCause(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	self, root, job, d := c.Self(), r.s.deps.Node.System().Root, r.job, &r.s.deps
	go func() {
		defer close(r.done)
		ended := &runEnded{}
		func() {
			defer func() {
				if v := recover(); v != nil {
					ended.panic, ended.stack = v, debug.Stack()
				}
			}()
			log, err := joblog.Open(logPath(d.DataDir, job.RunID))
			if err != nil {
				ended.err = err
				d.Logger.Error("cannot open the run's log", "run", job.RunID, "err", err)
				return
			}
			r.s.jobs.SetLog(job.RunID, log)
			defer func() {
				r.s.jobs.SetLog(job.RunID, nil)
				log.Close()
			}()
			ended.err = execute(ctx, d, job, log)
			if ended.err != nil && !errors.Is(context.Cause(ctx), ErrNodeStopping) {
				fmt.Fprintf(log, "run %s: %v\n", job.RunID, ended.err)
			}
		}()
		root.Send(self, ended)
	}()
}

// halt cancels the job (if it still runs) and waits for its goroutine.
func (r *runActor) halt(cause error) {
	if r.cancel == nil {
		return
	}
	r.cancel(cause)
	<-r.done
}

// Handlers are the run service's HTTP API, mounted on the node:
//
//	POST /v1/runs              submit a Job (JSON); 202 {"id", "resumed"}
//	GET  /v1/runs              the runs the store records, with "active"
//	GET  /v1/runs/{id}         one run's record (JSON of records.Run)
//	GET  /v1/runs/{id}/logs    its log from ?offset=N; ?follow=true streams
//	                           until the run's actor ends
//	POST /v1/runs/{id}/stop    stop it (recorded "stopped"; resumable)
//	POST /v1/runs/{id}/resume  resume it with the job it was given
//
// Errors are JSON {"error": "..."} with a 4xx or 5xx status.
func (s *Service) Handlers() []node.Handler {
	ask := func(n *node.Node, msg any) *jobReply {
		res, err := n.System().Root.RequestFuture(actor.NewPID(n.Address(), ServiceName), msg, 30*time.Second).Result()
		if err != nil {
			return &jobReply{code: http.StatusServiceUnavailable, err: fmt.Errorf("the run service did not answer: %w", err)}
		}
		return res.(*jobReply)
	}
	reply := func(w http.ResponseWriter, rep *jobReply, ok int) {
		if rep.err != nil {
			joblog.WriteError(w, rep.code, rep.err)
			return
		}
		joblog.WriteJSON(w, ok, map[string]any{"id": rep.id, "resumed": rep.resumed, "log_offset": rep.logOffset})
	}
	return []node.Handler{
		{Pattern: "POST " + RunsPath, MaxBody: 1 << 16, Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var job Job
				if code, err := node.DecodeJSON(r.Body, &job); err != nil {
					joblog.WriteError(w, code, fmt.Errorf("the body is not a run job (JSON of trainer.Job): %w", err))
					return
				}
				reply(w, ask(n, &submitJob{job: job}), http.StatusAccepted)
			})
		}},
		{Pattern: "GET " + RunsPath, Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs, err := n.DB().Runs().List(r.Context())
				if err != nil {
					joblog.WriteError(w, http.StatusInternalServerError, err)
					return
				}
				out := []RunInfo{}
				for _, run := range runs {
					out = append(out, RunInfo{ID: run.GetId(), Status: run.GetStatus(), Step: run.GetStep(), Active: s.Active(run.GetId()),
						Started: time.Unix(0, run.GetStartedUnixNano()).UTC(), Updated: time.Unix(0, run.GetUpdatedUnixNano()).UTC(), Error: run.GetError()})
				}
				joblog.WriteJSON(w, http.StatusOK, out)
			})
		}},
		{Pattern: "GET " + RunsPath + "/{id}", Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				run, err := n.DB().Runs().Get(r.Context(), r.PathValue("id"))
				if err != nil {
					joblog.WriteError(w, joblog.StatusOf(err), fmt.Errorf("run %s: %w", r.PathValue("id"), err))
					return
				}
				joblog.WriteRecord(w, run, ActiveHeader, s.Active(run.GetId()))
			})
		}},
		{Pattern: "GET " + RunsPath + "/{id}/logs", Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.streamLog(n, w, r) })
		}},
		{Pattern: "POST " + RunsPath + "/{id}/stop", Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reply(w, ask(n, &stopJob{id: r.PathValue("id")}), http.StatusAccepted)
			})
		}},
		{Pattern: "POST " + RunsPath + "/{id}/resume", Handler: func(n *node.Node) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reply(w, ask(n, &resumeJob{id: r.PathValue("id")}), http.StatusAccepted)
			})
		}},
	}
}

// ActiveHeader says, on GET /v1/runs/{id}, whether the run's actor is alive.
const ActiveHeader = "X-Frognano-Run-Active"

// RunInfo is a line of GET /v1/runs.
type RunInfo struct {
	ID      string    `json:"id"`
	Status  string    `json:"status"`
	Step    int64     `json:"step"`
	Active  bool      `json:"active"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	Error   string    `json:"error,omitempty"`
}

// streamLog writes run id's log (joblog.Registry.Follow).
func (s *Service) streamLog(n *node.Node, w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := n.DB().Runs().Get(r.Context(), id); err != nil && !s.Active(id) {
		// (A run just submitted is active before its record is written.)
		joblog.WriteError(w, joblog.StatusOf(err), fmt.Errorf("run %s: %w", id, err))
		return
	}
	s.jobs.Follow(w, r, id, logPath(s.deps.DataDir, id))
}
