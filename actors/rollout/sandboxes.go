package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/frognano/frognano/actors/environment"
	"github.com/frognano/frognano/actors/harness"
	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/persistence"
	records "github.com/frognano/frognano/persistence/records/v1"
)

// Errors that make a task unusable: the request fails with them, no
// episode runs.
var (
	// ErrImageGone is a task whose environment image is not in containerd
	// any more (the environment was removed, or the image pruned).
	ErrImageGone = errors.New("the task's image is gone")
	// ErrNoEnvironment is a task whose environment is not registered.
	ErrNoEnvironment = errors.New("the task's environment is not registered")
)

// Workspace is an episode's sandbox; Close destroys it.
type Workspace interface {
	harness.Workspace
	Close()
}

// Sandboxes makes a fresh workspace for every episode.
type Sandboxes interface {
	// Check fails with ErrImageGone or ErrNoEnvironment (wrapped, naming the
	// task) when task cannot run at all.
	Check(ctx context.Context, task *records.Task) error
	// Workspace starts a fresh sandbox of the task's image and prepares it
	// (harness.NewWorkspace). An error is an infrastructure failure, or one
	// of Check's.
	Workspace(ctx context.Context, task *records.Task) (Workspace, error)
}

// Containerd makes workspaces from containerd sandboxes, kept ready in one
// sandbox.Pool per image so that an episode does not wait for a container
// to start (nor for one to be torn down). It drives containerd in this
// process, so it serves only episodes on the machine that runs them; see
// Workers, the default, for why both exist.
type Containerd struct {
	Runtime      func(ctx context.Context) (*sandbox.Runtime, error)
	Environments persistence.EnvironmentStore
	// PoolSize is the number of sandboxes kept ready per image (default 2).
	PoolSize int
	// Options are the sandbox limits; RepoDir comes from the environment.
	Options sandbox.Options
	// TestPatches maps task ids to patches applied for grading only
	// (SWE-bench instances' test_patch).
	TestPatches map[string]string

	mu    sync.Mutex
	pools map[string]*sandbox.Pool
}

var _ Sandboxes = (*Containerd)(nil)

// lookupEnvironment finds the task's environment, or fails with
// ErrNoEnvironment.
func lookupEnvironment(ctx context.Context, envs persistence.EnvironmentStore, task *records.Task) (*records.Environment, error) {
	env, err := envs.Get(ctx, task.GetEnvironment())
	if errors.Is(err, persistence.ErrNotFound) {
		return nil, fmt.Errorf("task %s: %w: %q (register it with frognano env add)", task.GetId(), ErrNoEnvironment, task.GetEnvironment())
	}
	if err != nil {
		return nil, fmt.Errorf("task %s: environment %q: %w", task.GetId(), task.GetEnvironment(), err)
	}
	return env, nil
}

// taskImage is the image an episode of task starts from.
func taskImage(env *records.Environment, task *records.Task) string {
	if task.GetImage() != "" {
		return task.GetImage()
	}
	return env.GetImage()
}

// checkImage fails with ErrImageGone when the task's image is not in rt.
func checkImage(ctx context.Context, rt *sandbox.Runtime, env *records.Environment, task *records.Task) error {
	image := taskImage(env, task)
	ok, err := rt.Images().Exists(ctx, image)
	if err != nil {
		return fmt.Errorf("task %s: image %s: %w", task.GetId(), image, err)
	}
	if !ok {
		return fmt.Errorf("task %s: %w: %s is not in containerd namespace %s (rebuild the environment %q with frognano env add %s)",
			task.GetId(), ErrImageGone, image, rt.Namespace(), env.GetName(), env.GetSource())
	}
	return nil
}

func (c *Containerd) resolve(ctx context.Context, task *records.Task) (*records.Environment, string, *sandbox.Runtime, error) {
	env, err := lookupEnvironment(ctx, c.Environments, task)
	if err != nil {
		return nil, "", nil, err
	}
	rt, err := c.Runtime(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	if err := checkImage(ctx, rt, env, task); err != nil {
		return nil, "", nil, err
	}
	return env, taskImage(env, task), rt, nil
}

// Check implements Sandboxes.
func (c *Containerd) Check(ctx context.Context, task *records.Task) error {
	_, _, _, err := c.resolve(ctx, task)
	return err
}

// Workspace implements Sandboxes.
func (c *Containerd) Workspace(ctx context.Context, task *records.Task) (Workspace, error) {
	env, image, rt, err := c.resolve(ctx, task)
	if err != nil {
		return nil, err
	}
	pool, err := c.pool(ctx, rt, image, env)
	if err != nil {
		return nil, err
	}
	sb, err := pool.Get(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox for task %s: %w", task.GetId(), err)
	}
	ws, err := harness.NewWorkspace(ctx, sb, environment.Spec(env), task, harness.WorkspaceOptions{TestPatch: c.TestPatches[task.GetId()]})
	if err != nil {
		pool.Put(sb)
		return nil, err
	}
	return &pooled{SandboxWorkspace: ws, pool: pool}, nil
}

func (c *Containerd) pool(ctx context.Context, rt *sandbox.Runtime, image string, env *records.Environment) (*sandbox.Pool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.pools[image]; ok {
		return p, nil
	}
	opts := c.Options
	opts.RepoDir = env.GetRepoDir()
	size := c.PoolSize
	if size <= 0 {
		size = 2
	}
	p, err := rt.NewPool(ctx, image, opts, size)
	if err != nil {
		return nil, err
	}
	if c.pools == nil {
		c.pools = map[string]*sandbox.Pool{}
	}
	c.pools[image] = p
	return p, nil
}

// Close destroys the ready sandboxes and waits for the teardowns.
func (c *Containerd) Close() {
	c.mu.Lock()
	pools := c.pools
	c.pools = nil
	c.mu.Unlock()
	for _, p := range pools {
		p.Close()
	}
}

// pooled hands its sandbox back to the pool, which destroys it.
type pooled struct {
	*harness.SandboxWorkspace
	pool *sandbox.Pool
	once sync.Once
}

func (p *pooled) Close() { p.once.Do(func() { p.pool.Put(p.Sandbox()) }) }

// sinceSeconds is a helper for timings.
func sinceSeconds(t time.Time) float64 { return time.Since(t).Seconds() }
