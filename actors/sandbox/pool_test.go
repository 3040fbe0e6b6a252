package sandbox

import (
	"context"
	"testing"
	"time"
)

func TestPool(t *testing.T) {
	rt, img := needRuntime(t)
	ctx := context.Background()
	tag := "pool-" + randomHex(4)
	pool, err := rt.NewPool(ctx, img, Options{Labels: map[string]string{"io.frognano.test": tag}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for pool.Ready() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if pool.Ready() != 2 {
		t.Fatalf("pool holds %d ready sandboxes, want 2", pool.Ready())
	}
	// More than the pool holds: the third is created on demand. Each is a
	// fresh container: a file written in one is not in the next.
	var got []*Sandbox
	seen := map[string]bool{}
	for i := range 3 {
		sb, err := pool.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[sb.ID()] {
			t.Fatalf("sandbox %s handed out twice", sb.ID())
		}
		seen[sb.ID()] = true
		if res := run(t, sb, "test -e /repo/mark && echo reused; touch /repo/mark"); len(res.Stdout) != 0 {
			t.Fatalf("get %d: %q", i, res.Stdout)
		}
		got = append(got, sb)
	}
	for _, sb := range got {
		pool.Put(sb)
	}
	pool.Close()
	cs, err := rt.client.Containers(rt.ctx(ctx), `labels."io.frognano.test"==`+tag)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Fatalf("%d pooled containers left after Close", len(cs))
	}
}
