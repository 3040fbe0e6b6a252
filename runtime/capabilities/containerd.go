package capabilities

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/containerd/containerd"
)

// containerdVersion connects to containerd and asks its version, which is the
// cheapest call that proves the daemon answers.
//
// The caller bounds this by ctx but also runs it in its own goroutine: the
// v1.7 client ignores ctx while connecting (it uses WithTimeout instead) and
// its New makes a namespace lookup with context.Background().
func containerdVersion(ctx context.Context, address, namespace string) (string, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return "", errors.New("containerd probe needs a deadline")
	}
	timeout := time.Until(deadline)
	if timeout <= 0 {
		return "", context.DeadlineExceeded
	}
	// The client's dialer retries a missing socket until the timeout, waiting
	// for a daemon that is starting. For a probe a missing socket is an answer.
	if !strings.Contains(address, "://") {
		if _, err := os.Stat(address); errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("no socket at %s", address)
		}
	}
	client, err := containerd.New(address,
		containerd.WithTimeout(timeout),
		containerd.WithDefaultNamespace(namespace))
	if err != nil {
		return "", err
	}
	defer client.Close()
	v, err := client.Version(ctx)
	if err != nil {
		return "", fmt.Errorf("version: %w", err)
	}
	return v.Version, nil
}
