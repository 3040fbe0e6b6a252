package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/frognano/frognano/actors/environment"
	messages "github.com/frognano/frognano/actors/messages/v1"
)

func envCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "env", Short: "Register and inspect environments: real repositories as containerd images"}

	var req messages.EnvAddRequest
	var suiteTimeout time.Duration
	var minTests int
	add := &cobra.Command{
		Use:   "add SOURCE",
		Short: "Build, check and register an environment from a PyPI sdist, a Go module, a directory or an image",
		Long: `add turns a repository into an environment: a containerd image with the
repository at /repo, its dependencies installed, its git history squashed to
one base commit, and a baseline of per-test results from running the whole
suite once in a sandbox without network.

SOURCE is one of:
  NAME==VERSION           a PyPI sdist that carries its tests (pip download --no-binary :all:)
  module/path@vX.Y.Z      a Go module (go mod download)
  ./some/dir              a local directory or git repository (working tree)
  image:REF               an image already in containerd, e.g. a SWE-bench image
                          (give --repo-dir, and --test-command if python is not on PATH)
Prefixes pypi:, go:, local: make the kind explicit.

The test command is detected (pytest for Python, go test for Go) and can be
overridden. An environment whose sdist has no tests, whose dependencies do not
install, or whose suite cannot run, hangs or passes nothing is rejected with
the reason, and nothing is left registered. So is one whose suite has test
files that fail to collect (an sdist that leaves out a module its tests
import; --allow-collection-errors registers it anyway, with a warning) or
fewer than --min-tests passing tests (default ` + fmt.Sprint(environment.DefaultMinTests) + `).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := environment.ParseSource(args[0]); err != nil {
				return err
			}
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			req.Source = args[0]
			req.SuiteTimeoutSeconds = suiteTimeout.Seconds()
			req.MinTests = int32(max(minTests, 1))
			res, err := c.askWithProgress(c.pid(environment.ActorName), &req, 2*time.Hour, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			env := res.(*messages.EnvAddReply).Environment
			fmt.Fprintf(cmd.OutOrStdout(), "registered %s: %s, %d tests at baseline (%s), image %s, in %.0fs\n",
				env.Name, env.Language, len(env.Baseline.GetResults()), environment.Summarize(env.Baseline), env.Image, env.SetupSeconds)
			if col := environment.CollectionErrors(env); col.Failed > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "\nWARNING: %s.\nTasks from %s use only the tests that ran.\n", col, env.Name)
			}
			return nil
		},
	}
	add.Flags().StringVar(&req.Name, "name", "", "environment name (default: derived from SOURCE)")
	add.Flags().StringVar(&req.Language, "language", "", "python or go (default: detected)")
	add.Flags().StringSliceVar(&req.TestCommand, "test-command", nil, "test runner command: the python interpreter for pytest, or go")
	add.Flags().StringSliceVar(&req.TestArgs, "test-args", nil, "runner options (default for pytest: --continue-on-collection-errors,-q)")
	add.Flags().StringVar(&req.RepoDir, "repo-dir", "", "repository directory inside an image source (default /repo)")
	add.Flags().DurationVar(&suiteTimeout, "suite-timeout", 10*time.Minute, "longest the baseline test run may take")
	add.Flags().IntVar(&minTests, "min-tests", environment.DefaultMinTests, "refuse a suite with fewer tests passing at baseline")
	add.Flags().BoolVar(&req.AllowCollectionErrors, "allow-collection-errors", false, "register a suite even though some of its test files fail to collect (import errors)")

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List registered environments",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.askActor(c.pid(environment.ActorName), &messages.EnvListRequest{}, time.Minute)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tLANGUAGE\tSOURCE\tTESTS\tBASELINE\tIMAGE")
			for _, e := range res.(*messages.EnvList).Environments {
				fmt.Fprintf(tw, "%s\t%s\t%s:%s\t%d\t%s\t%s\n", e.Name, e.Language, e.SourceKind, e.Source, len(e.Baseline.GetResults()), environment.Summarize(e.Baseline), e.Image)
			}
			return tw.Flush()
		},
	}
	show := &cobra.Command{
		Use:   "show NAME",
		Short: "Print an environment: source, image, test command, test files and baseline results",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.askActor(c.pid(environment.ActorName), &messages.EnvGetRequest{Name: args[0]}, time.Minute)
			if err != nil {
				return err
			}
			b, _ := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(res.(*messages.EnvAddReply).Environment)
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Unregister an environment and delete the image frognano built for it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			if _, err := c.askActor(c.pid(environment.ActorName), &messages.EnvRemoveRequest{Name: args[0]}, 5*time.Minute); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(add, ls, show, rm)
	return cmd
}

// askWithProgress sends req to an actor of the node and shows the
// EnvProgress messages that come before its reply as a spinner (a line per
// stage off a terminal), until the reply.
func (c *client) askWithProgress(to *actor.PID, req any, timeout time.Duration, w io.Writer) (any, error) {
	tty := isTerminal(w)
	bar := progressbar.NewOptions(-1, progressbar.OptionSetWriter(w), progressbar.OptionSpinnerType(14),
		progressbar.OptionSetDescription("starting"), progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetVisibility(tty))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				_ = bar.Add(1)
			}
		}
	}()
	res, err := c.call(context.Background(), to.Id, req, timeout, func(m any) {
		if p, ok := m.(*messages.EnvProgress); ok {
			bar.Describe(p.Stage)
			if !tty {
				fmt.Fprintln(w, "==>", p.Stage)
			}
		}
	})
	_ = bar.Finish()
	fmt.Fprintln(w)
	return res, err
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
