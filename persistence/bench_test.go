package persistence

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// openBenchDB opens a database with production settings (1 MiB chunks,
// 256 MiB value-log files, synchronous writes).
func openBenchDB(b *testing.B) *DB {
	b.Helper()
	db, err := Open(b.TempDir(), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

func benchTask(i int) *records.Task {
	return sampleTask(fmt.Sprintf("task-%08d", i), fmt.Sprintf("env-%d", i%4))
}

func taskBytes(b *testing.B) int64 {
	raw, err := marshal(benchTask(0))
	if err != nil {
		b.Fatal(err)
	}
	return int64(len(raw))
}

func reportRecords(b *testing.B, records int) {
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
}

func preload(b *testing.B, db *DB, n int) {
	b.Helper()
	tasks := make([]*records.Task, n)
	for i := range tasks {
		tasks[i] = benchTask(i)
	}
	if err := db.Tasks().PutMany(context.Background(), tasks); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTaskPut measures one synchronous transaction per task: the cost
// of a Synthesizer persisting each task as soon as it is validated.
func BenchmarkTaskPut(b *testing.B) {
	ctx := context.Background()
	db := openBenchDB(b)
	b.SetBytes(taskBytes(b))
	n := 0
	for b.Loop() {
		if err := db.Tasks().Put(ctx, benchTask(n)); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportRecords(b, n)
}

// BenchmarkTaskPutBatch measures PutMany with 256 tasks per call, sharing
// one sync between them.
func BenchmarkTaskPutBatch(b *testing.B) {
	const batch = 256
	ctx := context.Background()
	db := openBenchDB(b)
	b.SetBytes(batch * taskBytes(b))
	n := 0
	tasks := make([]*records.Task, batch)
	for b.Loop() {
		for i := range tasks {
			tasks[i] = benchTask(n + i)
		}
		if err := db.Tasks().PutMany(ctx, tasks); err != nil {
			b.Fatal(err)
		}
		n += batch
	}
	reportRecords(b, n)
}

// BenchmarkTaskGet reads random tasks out of 10,000.
func BenchmarkTaskGet(b *testing.B) {
	const total = 10_000
	ctx := context.Background()
	db := openBenchDB(b)
	preload(b, db, total)
	b.SetBytes(taskBytes(b))
	rng := rand.New(rand.NewPCG(1, 2))
	n := 0
	for b.Loop() {
		if _, err := db.Tasks().Get(ctx, fmt.Sprintf("task-%08d", rng.IntN(total))); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportRecords(b, n)
}

// BenchmarkTaskList lists 10,000 tasks, all of them or one environment's
// quarter through the index.
func BenchmarkTaskList(b *testing.B) {
	const total = 10_000
	ctx := context.Background()
	db := openBenchDB(b)
	preload(b, db, total)
	for _, bc := range []struct {
		name   string
		filter TaskFilter
	}{
		{"all", TaskFilter{}},
		{"environment", TaskFilter{Environment: "env-1"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			records, calls := 0, 0
			for b.Loop() {
				tasks, err := db.Tasks().List(ctx, bc.filter)
				if err != nil {
					b.Fatal(err)
				}
				records += len(tasks)
				calls++
			}
			b.SetBytes(int64(records/max(1, calls)) * taskBytes(b))
			reportRecords(b, records)
		})
	}
}

// BenchmarkCheckpoint saves and reads back a 16 MiB tensor in 1 MiB chunks.
func BenchmarkCheckpoint(b *testing.B) {
	const elems = 4 << 20
	ctx := context.Background()
	tensor := f32Tensor("w", 1, elems)
	b.Run("Save", func(b *testing.B) {
		db := openBenchDB(b)
		b.SetBytes(int64(len(tensor.Data)))
		step := int64(0)
		for b.Loop() {
			if err := db.Checkpoints().Save(ctx, &records.Checkpoint{RunId: "r", Step: step}, []Tensor{tensor}, nil); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if _, err := db.Checkpoints().Prune(ctx, "r", 1); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			step++
		}
	})
	b.Run("ReadTensor", func(b *testing.B) {
		db := openBenchDB(b)
		if err := db.Checkpoints().Save(ctx, &records.Checkpoint{RunId: "r", Step: 1}, []Tensor{tensor}, nil); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(tensor.Data)))
		for b.Loop() {
			if _, err := db.Checkpoints().ReadTensor(ctx, "r", 1, "w"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
