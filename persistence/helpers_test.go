package persistence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"

	records "github.com/frognano/frognano/persistence/records/v1"
)

// testLogger shows warnings and errors (Badger's included) in the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// smallFiles shrinks preallocated value-log files, so hashing a database
// directory reads megabytes, not half a gigabyte of zeros.
func smallFiles(c *config) { c.vlogFileSize = 4 << 20 }

// openTestDB opens a fresh database with tiny chunks and tiny checkpoint
// transactions, so small tests cover multi-chunk, multi-transaction saves.
func openTestDB(t testing.TB) *DB {
	t.Helper()
	db, err := Open(t.TempDir(), WithLogger(testLogger(t)), WithChunkSize(1<<10), smallFiles)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	db.ckptTxnBytes = 8 << 10
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// sameProto reports whether a and b encode to the same bytes.
func sameProto(t testing.TB, a, b proto.Message) bool {
	t.Helper()
	ra, err := marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ra, rb)
}

// hashTree maps every file under dir to the SHA-256 of its content, so a
// test can prove that a failed Open left the directory as it found it.
func hashTree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			out[rel+"/"] = "dir"
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatalf("hash %s: %v", dir, err)
	}
	return out
}

// seeded returns deterministic pseudo-random bytes for (seed, label), so a
// crash-test parent can regenerate what its child wrote.
func seeded(seed uint64, label string, n int) []byte {
	h := fnv.New64a()
	h.Write([]byte(label))
	r := rand.New(rand.NewPCG(seed, h.Sum64()))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sampleTask(id, env string) *records.Task {
	return &records.Task{
		Id:               id,
		Environment:      env,
		Language:         "python",
		BugPatch:         "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-return a\n+return b\n# " + id,
		GoldPatch:        "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-return b\n+return a\n",
		ProblemStatement: "calling f twice returns the wrong value for " + id,
		FailToPass:       []string{"tests/test_x.py::test_f", "tests/test_x.py::test_" + id},
		PassToPass:       []string{"tests/test_y.py::test_g"},
		TestCommand:      "pytest -q",
		Difficulty:       &records.DifficultyFeatures{Operators: []string{"swap_return"}, Edits: 1, Files: 1},
		Provenance:       &records.Provenance{Operator: "swap_return", Seed: 7, Generator: "procedural/v1"},
	}
}

func sampleTrajectory(id, runID, taskID string) *records.Trajectory {
	tokens := seeded(1, id, 64)
	t := &records.Trajectory{
		Id:          id,
		TaskId:      taskID,
		RunId:       runID,
		Termination: "submitted",
		Reward:      float64(len(id) % 2),
		Turns: []*records.Turn{
			{Role: records.Role_ROLE_USER, Content: "fix the bug in " + taskID},
			{Role: records.Role_ROLE_ASSISTANT, ToolCalls: []*records.ToolCall{{Id: "c1", Name: "bash", ArgumentsJson: `{"cmd":"ls"}`}}},
		},
	}
	for i, b := range tokens {
		t.TokenIds = append(t.TokenIds, int32(b))
		t.PolicyMask = append(t.PolicyMask, i%2 == 0)
		t.Logprobs = append(t.Logprobs, -float32(b)/256)
	}
	return t
}

// f32Tensor returns a deterministic float32 tensor of n elements.
func f32Tensor(name string, seed uint64, n int) Tensor {
	return Tensor{Name: name, DType: records.DType_DTYPE_F32, Shape: []int64{int64(n)}, Data: seeded(seed, name, 4*n)}
}
