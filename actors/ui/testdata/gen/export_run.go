//go:build ignore

// export_run reads one run out of a node's store into binary protobuf
// files the browser tests load into a fresh node (testdata/grpo): the run
// record with its whole curve, its frontier's state and posteriors, every
// environment, and for each policy version the first few training episodes
// and held-out episodes with the tasks they played. The store must not be
// open in another process (copy it first).
//
//	go run ./actors/ui/testdata/gen/export_run.go STORE_DIR RUN_ID OUT_DIR
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/frognano/frognano/persistence"
)

// perVersion is how many training episodes of each policy version, and
// how many episodes of each held-out point, are kept.
const perVersion = 4

func main() {
	if len(os.Args) != 4 {
		log.Fatal("usage: export_run STORE_DIR RUN_ID OUT_DIR")
	}
	dir, runID, out := os.Args[1], os.Args[2], os.Args[3]
	ctx := context.Background()
	db, err := persistence.Open(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := os.MkdirAll(out, 0o755); err != nil {
		log.Fatal(err)
	}
	write := func(name string, m proto.Message) {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			log.Fatal(err)
		}
	}

	run, err := db.Runs().Get(ctx, runID)
	if err != nil {
		log.Fatal(err)
	}
	write("run.binpb", run)

	envs, err := db.Environments().List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range envs {
		write("env-"+e.GetName()+".binpb", e)
	}

	// The run's estimator: the frontier store's state whose name holds the
	// run id.
	names, err := db.Frontier().Names(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range names {
		if !strings.Contains(name, runID) {
			continue
		}
		state, err := db.Frontier().Get(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		stats, err := db.Frontier().Stats(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, "frontier-name.txt"), []byte(name), 0o644); err != nil {
			log.Fatal(err)
		}
		write("frontier-state.binpb", state)
		for _, st := range stats {
			write("stats-"+st.GetTaskId()+".binpb", st)
		}
	}

	trajs, err := db.Trajectories().ListByRun(ctx, runID)
	if err != nil {
		log.Fatal(err)
	}
	// Held-out episodes are stored under RUN/eval/PHASE-STEP.ATTEMPT.
	for _, p := range run.GetCurve() {
		if len(p.GetHeldOut()) == 0 {
			continue
		}
		for a := 0; a < 4; a++ {
			ts, err := db.Trajectories().ListByRun(ctx, fmt.Sprintf("%s/eval/%s-%d.%d", runID, p.GetPhase(), p.GetStep(), a))
			if err != nil {
				log.Fatal(err)
			}
			trajs = append(trajs, ts...)
		}
	}
	sort.Slice(trajs, func(i, j int) bool { return trajs[i].GetId() < trajs[j].GetId() })
	kept := map[string]int{}
	tasks := map[string]bool{}
	n := 0
	for _, tr := range trajs {
		key := fmt.Sprintf("v%d", tr.GetPolicyVersion())
		if strings.Contains(tr.GetRunId(), "/eval/") {
			key = tr.GetRunId()
		}
		if kept[key] >= perVersion {
			continue
		}
		kept[key]++
		write(fmt.Sprintf("traj-%03d.binpb", n), tr)
		n++
		tasks[tr.GetTaskId()] = true
	}
	for id := range tasks {
		task, err := db.Tasks().Get(ctx, id)
		if err != nil {
			// A held-out task lives in the committed held-out set, not
			// in the store.
			continue
		}
		write("task-"+id+".binpb", task)
	}
	fmt.Printf("run %s: %d points, %d of %d episodes, %d tasks, %d environments\n",
		runID, len(run.GetCurve()), n, len(trajs), len(tasks), len(envs))
}
