package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/actors/frontier"
	messages "github.com/frognano/frognano/actors/messages/v1"
)

func frontierCmd(a *app) *cobra.Command {
	var (
		asJSON bool
		run    string
	)
	cmd := &cobra.Command{
		Use:   "frontier",
		Short: "Print the FrontierEstimator's state: pool by band and hint level, calibration, recent batches, synthesis requests",
		Long: `frontier asks the node's frontier actor for its state: the task pool by band
of posterior solve rate (too hard, frontier, too easy, retired as hopeless or
mastered), each band split by the tasks' hint level, the effective-batch
fraction of recent outcome reports (groups whose rewards are not all
equal), calibration of predicted against observed
solve rates, the synthesis requests it sent with their yield, the settings it
would ask for next, and its counters (rejected outcomes among them).

Each training run has its own estimator (posteriors and policy versions
belong to one policy's lineage). Without --run this prints the one that
handed out a batch or recorded outcomes most recently; --run default is the
node's default estimator, for requests that name no run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.connect(cmd)
			if err != nil {
				return err
			}
			defer c.close()
			res, err := c.askActor(c.pid(frontier.ActorName), &messages.FrontierStateRequest{Run: run, Latest: run == ""}, time.Minute)
			if err != nil {
				return err
			}
			reply := res.(*messages.FrontierStateReply)
			if asJSON {
				printJSON(cmd.OutOrStdout(), reply)
				return nil
			}
			return writeFrontier(cmd.OutOrStdout(), reply)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the state as JSON")
	cmd.Flags().StringVar(&run, "run", "", "the training run whose estimator to print (default: the most recently active one)")
	return cmd
}

func writeFrontier(w io.Writer, r *messages.FrontierStateReply) error {
	st := r.GetState()
	fmt.Fprintf(w, "estimator %s\n", r.GetEstimator())
	fmt.Fprintf(w, "policy version %d, %d batches, %d reports; pool %d tasks, %d in the band [%.2f, %.2f] (target %d)\n",
		st.GetPolicyVersion(), st.GetBatchSeq(), st.GetReports(), r.GetPoolTasks(), r.GetFrontierTasks(), r.GetBandLow(), r.GetBandHigh(), r.GetTargetFrontierTasks())
	if m := st.GetMode(); m != "" {
		fmt.Fprintf(w, "episodes played in %s mode\n", m)
	}
	fmt.Fprintf(w, "effective-batch fraction: %.3f over %d groups", frontier.EffectiveFraction(st), st.GetTotalGroups())
	var g, e int32
	for _, b := range st.GetRecent() {
		g += b.GetGroups()
		e += b.GetEffectiveGroups()
	}
	if g > 0 {
		fmt.Fprintf(w, "; %.3f over the last %d reports", float64(e)/float64(g), len(st.GetRecent()))
	}
	fmt.Fprintln(w)

	writePoolBands(w, r.GetPool())

	fmt.Fprintln(w, "\ncalibration (episodes by predicted solve rate):")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PREDICTED\tEPISODES\tMEAN PREDICTED\tOBSERVED\tMODEL ALONE (FIRST TRIES)\t")
	for i, b := range st.GetCalibration() {
		m := st.GetModelCalibration()[i]
		if b.GetEpisodes() == 0 && m.GetEpisodes() == 0 {
			continue
		}
		fmt.Fprintf(tw, "  %.1f–%.1f\t%.0f\t%s\t%s\t%s\t\n", float64(i)/10, float64(i+1)/10, b.GetEpisodes(),
			ratio(b.GetPredictedSum(), b.GetEpisodes()), ratio(b.GetObservedSum(), b.GetEpisodes()),
			fmt.Sprintf("%s of %.0f (predicted %s)", ratio(m.GetObservedSum(), m.GetEpisodes()), m.GetEpisodes(), ratio(m.GetPredictedSum(), m.GetEpisodes())))
	}
	tw.Flush()

	if n := len(st.GetRecent()); n > 0 {
		fmt.Fprintln(w, "\nrecent reports:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  REPORT\tVERSION\tGROUPS\tEFFECTIVE\tSOLVE RATE\tPREDICTED\t")
		for _, b := range st.GetRecent()[max(0, n-8):] {
			fmt.Fprintf(tw, "  %d\t%d\t%d\t%d\t%s\t%s\t\n", b.GetSeq(), b.GetPolicyVersion(), b.GetGroups(), b.GetEffectiveGroups(),
				ratio(b.GetRewardSum(), float64(b.GetEpisodes())), ratio(b.GetPredictedSum(), float64(b.GetEpisodes())))
		}
		tw.Flush()
	}

	fmt.Fprintln(w, "\nsynthesis requests:")
	var asked, delivered, graded, effective int
	for _, s := range st.GetSynthesis() {
		if s.GetStatus() != frontier.StatusPending {
			asked += int(s.GetAsked())
		}
		delivered += len(s.GetTaskIds())
		graded += int(s.GetGraded())
		effective += int(s.GetEffective())
	}
	fmt.Fprintf(w, "  %d sent, %d failed, %d timed out; yield %d of %d asked", st.GetCounters()[frontier.CountSynthRequests],
		st.GetCounters()[frontier.CountSynthFailed], st.GetCounters()[frontier.CountSynthTimeout], delivered, asked)
	if graded > 0 {
		fmt.Fprintf(w, "; %d of %d graded tasks had mixed rewards in their first group", effective, graded)
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ID\tSETTING\tPREDICTED\tSTATUS\tASKED\tDELIVERED\tGRADED\tMIXED\t")
	syn := st.GetSynthesis()
	for _, s := range syn[max(0, len(syn)-8):] {
		status := s.GetStatus()
		if s.GetError() != "" {
			status += ": " + s.GetError()
		}
		fmt.Fprintf(tw, "  %s\t%s\t%.2f\t%s\t%d\t%d\t%d\t%d\t\n", s.GetId(), frontier.SpecKey(s.GetSpec()), s.GetPredicted(), status,
			s.GetAsked(), len(s.GetTaskIds()), s.GetGraded(), s.GetEffective())
	}
	tw.Flush()
	if len(r.GetNextSpecs()) > 0 {
		fmt.Fprintln(w, "\nnext settings to ask for (predicted solve rate):")
		for _, s := range r.GetNextSpecs() {
			fmt.Fprintf(w, "  %-60s %.2f\n", frontier.SpecKey(s.GetSpec()), s.GetPredicted())
		}
	}
	if len(st.GetCounters()) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(st.GetCounters())) {
			parts = append(parts, fmt.Sprintf("%s=%d", k, st.GetCounters()[k]))
		}
		fmt.Fprintf(w, "\ncounters: %s\n", strings.Join(parts, " "))
	}
	return nil
}

// writePoolBands prints the pool by band, each band split by the tasks'
// hint level (difficulty level): a column per level any band has.
func writePoolBands(w io.Writer, pool []*messages.FrontierBand) {
	levels := map[int32]bool{}
	for _, b := range pool {
		for level := range b.GetHintTasks() {
			levels[level] = true
		}
	}
	sorted := slices.Sorted(maps.Keys(levels))
	fmt.Fprintln(w, "\npool by band and hint level:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "  BAND\tSOLVE RATE\tTASKS")
	for _, level := range sorted {
		fmt.Fprintf(tw, "\tHINT %d", level)
	}
	fmt.Fprintln(tw, "\t")
	for _, b := range pool {
		fmt.Fprintf(tw, "  %s\t%.2f–%.2f\t%d", b.GetName(), b.GetLow(), b.GetHigh(), b.GetTasks())
		for _, level := range sorted {
			fmt.Fprintf(tw, "\t%d", b.GetHintTasks()[level])
		}
		fmt.Fprintln(tw, "\t")
	}
	tw.Flush()
}

func ratio(x, n float64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", x/n)
}
