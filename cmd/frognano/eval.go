package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/evaluate"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// evalFlags are frognano eval's flags: the job's, and the command's own.
type evalFlags struct {
	job       evaluate.Job
	tasksFile string
	wall      time.Duration
	jsonOut   string
	detach    bool
}

func evalCmd(a *app) *cobra.Command {
	f := evalFlags{job: evaluate.DefaultJob()}
	cmd := &cobra.Command{
		Use:   "eval --model M (--env E[,E…] | --tasks FILE | --held-out) -k K",
		Short: "Measure a model's solve rate: pass@1 and pass@k with confidence intervals per difficulty bucket",
		Long: `eval runs k episodes of every task (in --mode agent: the tool loop; patch: one
answer of search/replace edits), each in a fresh sandbox owned by its own
SandboxWorker actor, grades them (the task's FAIL_TO_PASS and PASS_TO_PASS
tests after restoring the protected test files; reward 1 only if all
pass), stores every trajectory in the node's
store (frognano traj ls --run RUN) and prints pass@1 and pass@k per
difficulty bucket (mode and hint level), with 95% intervals from a bootstrap
over tasks. pass@k uses the unbiased estimator 1 − C(n−c,k)/C(n,k) over the n
episodes of a task that were not infrastructure failures (a sandbox that
died or a policy error, twice: such episodes are retried once, then left out).

--model is a model store name or a .gguf/Hugging Face path, run on the
node with frognano's engine with continuous batching across all episodes in flight,
or an OpenAI-compatible server's URL (http://HOST:PORT, with
--served-model and --tokenizer), driven with token-id prompts.

--env takes the tasks stored for one or more environments; --tasks reads SWE-bench or
SWE-smith style JSONL (as frognano tasks export writes) and runs the
instances whose environment is registered (by its name, or by an image
registered with frognano env add image:REF) and whose image exists locally;
the others are listed as skipped. --held-out runs the committed held-out set
(actors/evaluate: 48 tasks of four environments no run trains on, hint
levels 1, 3 and 4; --hint-level picks one), registering its environments the
first time.

The evaluation runs on the node (the embedded one, or --node's): its
sandboxes, its model store, its store, where its record and report stay
(frognano evals ls|show|logs|stop|resume). Progress goes to stderr, the table to
stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runEval(cmd, a, &f) },
	}
	j := &f.job
	fl := cmd.Flags()
	fl.StringVar(&j.Model, "model", j.Model, "model store name, .gguf or Hugging Face path (a node that serves others takes store names only), or an OpenAI-compatible server URL (OPENAI_API_KEY, when set, is sent as its bearer token)")
	fl.StringVar(&j.Models, "models", "", "model store directory (default: see frognano model ls; not with a node that serves others)")
	fl.StringVar(&j.ServedModel, "served-model", "", "with a URL --model: the model name the server serves")
	fl.StringVar(&j.Tokenizer, "tokenizer", j.Tokenizer, "with a URL --model: the model whose tokenizer renders prompts (store name, .gguf or Hugging Face directory)")
	fl.StringSliceVar(&j.Envs, "env", nil, "evaluate the tasks stored for this environment (repeat or comma-separate for several)")
	fl.StringVar(&f.tasksFile, "tasks", "", "evaluate the instances of this JSONL file (read here and sent to the node)")
	fl.BoolVar(&j.HeldOut, "held-out", false, "evaluate the held-out set (environments no run trains on; registered on the node when missing)")
	fl.IntVar(&j.Limit, "limit", 0, "evaluate at most this many tasks (0: all)")
	fl.IntVarP(&j.K, "k", "k", j.K, "episodes per task (and the k of pass@k)")
	fl.StringVar(&j.Mode, "mode", j.Mode, "agent (tool loop) or patch (one answer of search/replace edits)")
	fl.IntVar(&j.Hint, "hint-level", j.Hint, "only tasks whose statements are at this hint level (-1: all)")
	fl.StringVar(&f.jsonOut, "json", "", "also write the report as JSON to this file")
	fl.StringVar(&j.ID, "run", "", "the evaluation's id, and the run id its trajectories are stored under (default eval-<time>; an id the node has used is refused)")
	fl.Uint64Var(&j.Seed, "seed", 0, "seed of the episodes (0: from the clock; the report says which)")
	fl.Float32Var(&j.Temperature, "temperature", j.Temperature, "sampling temperature (0: greedy, which makes the k episodes alike)")
	fl.Float32Var(&j.TopP, "top-p", j.TopP, "nucleus sampling mass (0 or 1: all)")
	fl.IntVar(&j.TopK, "top-k", 0, "keep the K most likely tokens (0: all)")
	fl.IntVar(&j.Parallel, "parallel", j.Parallel, "episodes (sandboxes) running at once")
	fl.IntVar(&j.Batch, "batch", j.Batch, "sequences the engine decodes in one batch")
	fl.IntVar(&j.MaxTurns, "max-turns", j.MaxTurns, "agent mode: most assistant turns")
	fl.IntVar(&j.MaxTurnTokens, "max-turn-tokens", j.MaxTurnTokens, "most tokens per turn")
	fl.IntVar(&j.MaxContext, "max-context", j.MaxContext, "most tokens of a whole episode (capped by the model's context)")
	fl.DurationVar(&f.wall, "wall-time", time.Duration(j.WallSeconds*float64(time.Second)), "most time of one episode, grading excluded")
	fl.BoolVar(&f.detach, "detach", false, "with --node: submit the evaluation and return; frognano evals logs ID -f follows it, frognano evals show ID prints its report")
	return cmd
}

// evalJob is the job the flags describe: the instances of --tasks read
// here (the node may not see this machine's files), OPENAI_API_KEY taken
// from this process's environment.
func (f *evalFlags) evalJob() (evaluate.Job, error) {
	job := f.job
	job.WallSeconds = f.wall.Seconds()
	if f.tasksFile != "" {
		fh, err := os.Open(f.tasksFile)
		if err != nil {
			return job, err
		}
		defer fh.Close()
		if job.Instances, err = evaluate.ReadInstances(fh, f.tasksFile); err != nil {
			return job, err
		}
		job.InstancesFrom = f.tasksFile
	}
	if evaluate.IsURL(job.Model) {
		// As other OpenAI clients read it: the bearer token (a frognano
		// node's node.api_token off loopback).
		job.APIKey = os.Getenv("OPENAI_API_KEY")
	}
	return job, job.Check()
}

func runEval(cmd *cobra.Command, a *app, f *evalFlags) error {
	job, err := f.evalJob()
	if err != nil {
		return err
	}
	if f.detach && a.nodeAddr == "" {
		return errors.New("--detach needs --node: an embedded node stops with this command")
	}
	return a.withAPI(cmd, func(p *api) error {
		// The call itself must outlive an interrupt: the node owns the evaluation.
		var sub evaluate.Submitted
		if _, err := p.do(context.WithoutCancel(cmd.Context()), http.MethodPost, evaluate.EvalsPath, job, &sub); err != nil {
			return err
		}
		errw := cmd.ErrOrStderr()
		if f.detach {
			fmt.Fprintf(cmd.OutOrStdout(), "evaluation %s started on the node (frognano evals logs %s -f follows it; frognano evals show %s prints its report)\n", sub.ID, sub.ID, sub.ID)
			return nil
		}
		return followEval(cmd.Context(), p, sub, errw, cmd.OutOrStdout(), f.jsonOut)
	})
}

// followEval prints evaluation sub's log on errw until it ends, then its
// report on out (and as JSON to jsonOut). An interrupt stops the
// evaluation of an embedded node and only detaches from a remote node's.
func followEval(ctx context.Context, p *api, sub evaluate.Submitted, errw, out io.Writer, jsonOut string) error {
	bg := context.WithoutCancel(ctx)
	id := sub.ID
	off, err := p.followLog(ctx, evaluate.EvalsPath, id, sub.LogOffset, true, errw)
	if ctx.Err() != nil {
		if p.embedded == nil {
			fmt.Fprintf(errw, "\ndetached from evaluation %s, which goes on on the node: frognano --node %s evals logs %s -f follows it again, frognano evals stop %s stops it\n", id, p.base, id, id)
			return ctx.Err()
		}
		fmt.Fprintf(errw, "\ninterrupted: stopping evaluation %s\n", id)
		if _, err := p.do(bg, http.MethodPost, evaluate.EvalsPath+"/"+url.PathEscape(id)+"/stop", nil, nil); err != nil {
			fmt.Fprintln(errw, "warning:", err)
		}
		_, _ = p.followLog(bg, evaluate.EvalsPath, id, off, true, errw)
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	rec, active, err := p.evaluation(bg, id)
	if err != nil {
		return err
	}
	return printEval(rec, active, out, jsonOut)
}

// evaluation is evaluation id's record, and whether its actor is alive.
func (p *api) evaluation(ctx context.Context, id string) (*records.Evaluation, bool, error) {
	rec := &records.Evaluation{}
	resp, err := p.do(ctx, http.MethodGet, evaluate.EvalsPath+"/"+url.PathEscape(id), nil, rec)
	if err != nil {
		return nil, false, err
	}
	active, _ := strconv.ParseBool(resp.Header.Get(evaluate.ActiveHeader))
	return rec, active, nil
}

// printEval prints an evaluation's report (and writes it to jsonOut) and
// turns its status into the command's result.
func printEval(rec *records.Evaluation, active bool, out io.Writer, jsonOut string) error {
	if rec.GetReportJson() != "" {
		var rep evaluate.Report
		if err := json.Unmarshal([]byte(rec.GetReportJson()), &rep); err != nil {
			return fmt.Errorf("evaluation %s: its report: %w", rec.GetId(), err)
		}
		if err := rep.WriteSummary(out); err != nil {
			return err
		}
		if jsonOut != "" {
			b, err := json.MarshalIndent(&rep, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(jsonOut, append(b, '\n'), 0o644); err != nil {
				return err
			}
		}
	}
	switch {
	case rec.GetStatus() == evaluate.StatusDone:
		return nil
	case rec.GetStatus() == evaluate.StatusRunning && active:
		return fmt.Errorf("evaluation %s is still running on the node (%d/%d episodes): frognano evals logs %s -f follows it", rec.GetId(), rec.GetEpisodesDone(), rec.GetEpisodesTotal(), rec.GetId())
	case rec.GetStatus() == evaluate.StatusRunning:
		return fmt.Errorf("evaluation %s no longer runs: its node stopped", rec.GetId())
	}
	return fmt.Errorf("evaluation %s %s: %s", rec.GetId(), rec.GetStatus(), rec.GetError())
}

// evalsCmd lists, follows, stops and shows the evaluations a node ran.
func evalsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "evals",
		Short: "Evaluations the node ran or runs: list, follow, stop, resume, show (frognano eval starts one)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List the evaluations the node's store records",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withAPI(cmd, func(p *api) error {
				var list []evaluate.EvalInfo
				if _, err := p.do(cmd.Context(), http.MethodGet, evaluate.EvalsPath, nil, &list); err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSTATUS\tEPISODES\tSOLVED\tRUNNING NOW\tSTARTED\tUPDATED\tERROR")
				for _, e := range list {
					fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%t\t%s\t%s\t%s\n", e.ID, e.Status, e.EpisodesDone, e.EpisodesTotal, e.Solved, e.Active,
						e.Started.Local().Format(time.DateTime), e.Updated.Local().Format(time.DateTime), e.Error)
				}
				return tw.Flush()
			})
		},
	})
	var follow bool
	logs := &cobra.Command{
		Use:   "logs ID",
		Short: "Print an evaluation's log (-f: follow it while it runs)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAPI(cmd, func(p *api) error {
				_, err := p.followLog(cmd.Context(), evaluate.EvalsPath, args[0], 0, follow, cmd.OutOrStdout())
				return err
			})
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "follow the log until the evaluation ends")
	cmd.AddCommand(logs)
	cmd.AddCommand(&cobra.Command{
		Use:   "stop ID",
		Short: "Stop an evaluation (its finished episodes stay stored)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAPI(cmd, func(p *api) error {
				if _, err := p.do(cmd.Context(), http.MethodPost, evaluate.EvalsPath+"/"+url.PathEscape(args[0])+"/stop", nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "stopping evaluation %s\n", args[0])
				return nil
			})
		},
	})
	var (
		detachResume bool
		resumeJSON   string
	)
	resume := &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a stopped evaluation: the episodes it finished are read back, the others played",
		Long: `resume restarts a stopped evaluation (stopped by a client, or by its node:
a frognano-node resumes the evaluation it was running by itself when it starts
again; the CLI's embedded node records it stopped) with the job it was
submitted with. The episodes it finished, stored as trajectories, are read
back rather than played again, and the report counts both. An evaluation of
a served model (URL) takes its key from OPENAI_API_KEY again, since the key is
never stored. Like frognano eval, it follows the log and prints the table.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if detachResume && a.nodeAddr == "" {
				return errors.New("--detach needs --node: an embedded node stops with this command")
			}
			return a.withAPI(cmd, func(p *api) error {
				var body evaluate.ResumeRequest
				if rec, _, err := p.evaluation(cmd.Context(), args[0]); err != nil {
					return err
				} else if job := (evaluate.Job{}); json.Unmarshal([]byte(rec.GetJobJson()), &job) == nil && evaluate.IsURL(job.Model) {
					body.APIKey = os.Getenv("OPENAI_API_KEY")
				}
				var sub evaluate.Submitted
				if _, err := p.do(context.WithoutCancel(cmd.Context()), http.MethodPost, evaluate.EvalsPath+"/"+url.PathEscape(args[0])+"/resume", body, &sub); err != nil {
					return err
				}
				if detachResume {
					fmt.Fprintf(cmd.OutOrStdout(), "evaluation %s resumed on the node (frognano evals logs %s -f follows it)\n", sub.ID, sub.ID)
					return nil
				}
				return followEval(cmd.Context(), p, sub, cmd.ErrOrStderr(), cmd.OutOrStdout(), resumeJSON)
			})
		},
	}
	resume.Flags().BoolVar(&detachResume, "detach", false, "with --node: resume it and return")
	resume.Flags().StringVar(&resumeJSON, "json", "", "also write the report as JSON to this file")
	cmd.AddCommand(resume)
	var jsonOut string
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Print an evaluation's state and, once done, its report",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withAPI(cmd, func(p *api) error {
				rec, active, err := p.evaluation(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "evaluation %s: %s, %d/%d episodes, %d solved, started %s\n", rec.GetId(), rec.GetStatus(), rec.GetEpisodesDone(), rec.GetEpisodesTotal(), rec.GetSolved(),
					time.Unix(0, rec.GetStartedUnixNano()).Local().Format(time.DateTime))
				if rec.GetStatus() == evaluate.StatusRunning && active {
					return nil
				}
				return printEval(rec, active, out, jsonOut)
			})
		},
	}
	show.Flags().StringVar(&jsonOut, "json", "", "also write the report as JSON to this file")
	cmd.AddCommand(show)
	return cmd
}
