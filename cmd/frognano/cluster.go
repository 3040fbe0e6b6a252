package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	rtmsg "github.com/frognano/frognano/runtime/messages/v1"
)

// writeMembers prints the cluster's members: kinds, capabilities and the
// load each last published with its facts in the cluster's gossip state.
func writeMembers(w io.Writer, reply *rtmsg.MembersReply) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tREMOTE\tHTTP\tKINDS\tCORES\tMEMORY\tCONTAINERD\tGPUS\tLOAD 1M\tCPU BUSY\tMEM AVAILABLE\tACTORS BY KIND")
	for _, m := range reply.GetMembers() {
		caps := m.GetCapabilities()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%.1f GiB\t%v\t%d\t%s\n", m.GetId(), m.GetAddress(), m.GetHttpAddress(),
			strings.Join(m.GetKinds(), ","), caps.GetCores(), float64(caps.GetMemoryBytes())/(1<<30), caps.GetContainerd(), len(caps.GetGpus()),
			loadColumns(m.GetLoad()))
	}
	return tw.Flush()
}

// loadColumns are a member's load figures as tab-separated columns, "-"
// for a figure it did not publish.
func loadColumns(l *rtmsg.Load) string {
	cols := []string{"-", "-", "-", "-"}
	if l == nil {
		return strings.Join(cols, "\t")
	}
	if l.Load1 != nil {
		cols[0] = fmt.Sprintf("%.2f", l.GetLoad1())
	}
	if l.CpuBusy != nil {
		cols[1] = fmt.Sprintf("%.0f%%", 100*l.GetCpuBusy())
	}
	if l.MemoryAvailableBytes != nil {
		cols[2] = fmt.Sprintf("%.1f GiB", float64(l.GetMemoryAvailableBytes())/(1<<30))
	}
	if k := l.GetKindActors(); len(k) > 0 {
		var parts []string
		for _, kind := range slices.Sorted(maps.Keys(k)) {
			parts = append(parts, fmt.Sprintf("%s:%d", kind, k[kind]))
		}
		cols[3] = strings.Join(parts, ",")
	} else {
		cols[3] = "none"
	}
	return strings.Join(cols, "\t")
}
