package sandbox

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// TestHelperCreateAndHang is not a test: TestSweepAfterCrash runs the test
// binary with it to get a process that creates sandboxes and then dies by
// SIGKILL, leaving them behind.
func TestHelperCreateAndHang(t *testing.T) {
	if os.Getenv("FROGNANO_SWEEP_HELPER") == "" {
		t.Skip("helper for TestSweepAfterCrash")
	}
	rt, img := needRuntime(t)
	for _, st := range []Storage{StorageTmpfs, StorageSnapshot} {
		sb, err := rt.Create(context.Background(), img, Options{Storage: st})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("SANDBOX %s\n", sb.ID())
	}
	fmt.Println("READY")
	time.Sleep(time.Hour)
}

func TestSweepAfterCrash(t *testing.T) {
	rt, _ := needRuntime(t)
	ctx := context.Background()
	mine := newSandbox(t, Options{}) // a live owner's sandbox: must survive

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCreateAndHang$", "-test.v")
	cmd.Env = append(os.Environ(), "FROGNANO_SWEEP_HELPER=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "SANDBOX "); ok {
			ids = append(ids, id)
		}
		if line == "READY" {
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if len(ids) != 2 {
		t.Fatalf("helper made sandboxes %v", ids)
	}

	rep, err := rt.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("swept %+v", rep)
	if rep.Containers < 2 || rep.Leases < 2 {
		t.Fatalf("swept %+v, want the crashed process's 2 containers and leases", rep)
	}
	cctx := rt.ctx(ctx)
	for _, id := range ids {
		if _, err := rt.client.LoadContainer(cctx, id); !errdefs.IsNotFound(err) {
			t.Errorf("container %s survived the sweep: %v", id, err)
		}
		if ls, _ := rt.client.LeasesService().List(cctx, "id=="+id); len(ls) != 0 {
			t.Errorf("lease %s survived the sweep", id)
		}
		if _, err := rt.client.SnapshotService(rt.cfg.Snapshotter).Stat(cctx, id); !errdefs.IsNotFound(err) {
			t.Errorf("snapshot %s survived the sweep: %v", id, err)
		}
		if _, err := os.Stat(filepath.Join(rt.cfg.StateDir, rt.cfg.Namespace, id)); !os.IsNotExist(err) {
			t.Errorf("tmpfs dir of %s survived the sweep: %v", id, err)
		}
	}
	if out := run(t, mine, "echo alive"); string(out.Stdout) != "alive\n" {
		t.Fatalf("the sweep hurt a live process's sandbox: %+v", out)
	}
}

func TestOwnerAlive(t *testing.T) {
	me, err := ownerID(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(me, "/")
	tests := []struct {
		owner string
		alive bool
	}{
		{me, true},
		{parts[0] + "/" + parts[1] + "/1", false},          // same pid, other start time: pid reused
		{"other-boot/" + parts[1] + "/" + parts[2], false}, // before a reboot
		{parts[0] + "/999999999/1", false},
		{"garbage", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := ownerAlive(tt.owner); got != tt.alive {
			t.Errorf("ownerAlive(%q) = %v, want %v", tt.owner, got, tt.alive)
		}
	}
}
