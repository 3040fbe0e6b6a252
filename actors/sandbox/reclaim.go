package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/leases"
	"github.com/containerd/errdefs"

	"github.com/frognano/frognano/persistence"
)

// Destroys that fail are not forgotten. A destroy issued while containerd
// restarts fails (its socket does not answer); before, its container, lease
// and snapshot then stayed until some later process's Sweep found their
// owner dead, which never happens while the process that made them lives.
// With Config.Destroys (the node's Badger store), every failed Destroy is
// recorded there and retried in the background with backoff (1 s doubling
// to a minute) until it succeeds, when its record is deleted; a process that
// dies first leaves the record to the next one, whose Sweep (at node start)
// and background retries pick it up. Any failure is retried: whatever its
// cause, the sandbox's objects are still there and still to be removed,
// and everything destroyByID does tolerates objects already gone.

const (
	retryMin = time.Second
	retryMax = time.Minute
	// retryTimeout bounds one attempt at one sandbox.
	retryTimeout = time.Minute
)

// closeDrain bounds how long Close keeps retrying the destroys still
// failing (containerd restarting while the process shuts down): a clean
// exit should not leave sandboxes behind for a later start to find.
var closeDrain = time.Minute

// reclaimer is a Runtime's part that retries failed destroys.
type reclaimer struct {
	store persistence.SandboxDestroyStore // nil: nothing is retried
	// mu serialises passes over the pending destroys (the background loop's
	// and Sweep's).
	mu sync.Mutex
	// live are sandboxes of this process whose Destroy failed: a retry goes
	// through their Destroy, which also frees their uid range. It also
	// carries a sandbox whose record could not be written (the store
	// refused), so this process still retries it.
	liveMu sync.Mutex
	live   map[string]*Sandbox
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// startReclaimer starts the background retries when the runtime has a
// store. They wait for work: a failed destroy, or records an earlier
// process left that Sweep could not finish.
func (r *Runtime) startReclaimer() {
	r.reclaim.live = map[string]*Sandbox{}
	if r.reclaim.store == nil {
		return
	}
	r.reclaim.wake = make(chan struct{}, 1)
	r.reclaim.stop = make(chan struct{})
	r.reclaim.done = make(chan struct{})
	go r.retryLoop()
}

// stopReclaimer ends the background retries; pending records stay in the
// store for the next process.
func (r *Runtime) stopReclaimer() {
	if r.reclaim.stop == nil {
		return
	}
	select {
	case <-r.reclaim.stop:
		return // already stopped
	default:
	}
	close(r.reclaim.stop)
	<-r.reclaim.done
}

// drainDestroys retries the pending destroys, with backoff, until none is
// left or closeDrain has passed. The store may already be closed (a node
// closes it before its containerd connection): this process's own failed
// destroys are still retried, and a record it cannot delete any more is
// found with nothing left by the next start's Sweep.
func (r *Runtime) drainDestroys() {
	deadline := time.Now().Add(closeDrain)
	for backoff := 250 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		left, _ := r.RetryDestroys(ctx)
		cancel()
		if left == 0 {
			return
		}
		if time.Until(deadline) < backoff {
			r.cfg.Logger.Warn("closing with sandbox destroys still failing; the next start's sweep takes what is left", "pending", left)
			return
		}
		time.Sleep(backoff)
	}
}

func (r *Runtime) retryLoop() {
	defer close(r.reclaim.done)
	for {
		select {
		case <-r.reclaim.stop:
			return
		case <-r.reclaim.wake:
		}
		// Something is pending: a destroy just failed, or Sweep left one.
		// Give containerd a moment first, then back off while it fails.
		for backoff := retryMin; ; backoff = min(2*backoff, retryMax) {
			select {
			case <-r.reclaim.stop:
				return
			case <-time.After(backoff):
			}
			left, err := r.RetryDestroys(context.Background())
			if errors.Is(err, persistence.ErrClosed) {
				return // the node's store is closed: the process is ending
			}
			if err != nil {
				r.cfg.Logger.Warn("retrying failed sandbox destroys", "err", err)
			}
			if left == 0 && err == nil {
				break
			}
		}
	}
}

// wakeReclaimer has the background loop retry the pending destroys.
func (r *Runtime) wakeReclaimer() {
	if r.reclaim.wake == nil {
		return
	}
	select {
	case r.reclaim.wake <- struct{}{}:
	default:
	}
}

// destroyFailed records a failed Destroy of s so that it is retried; a
// failed retry only updates the record.
func (r *Runtime) destroyFailed(s *Sandbox, cause error, retry bool) {
	rc := &r.reclaim
	rc.liveMu.Lock()
	rc.live[s.id] = s
	rc.liveMu.Unlock()
	if rc.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.notePending(ctx, s.id, cause); err != nil {
		r.cfg.Logger.Warn("could not record a failed sandbox destroy; this process still retries it, a later one's Sweep finds it only if this one dies",
			"sandbox", s.id, "err", err)
	} else if !retry {
		r.cfg.Logger.Warn("sandbox destroy failed; recorded, retrying in the background", "sandbox", s.id, "err", cause)
	}
	if !retry {
		r.wakeReclaimer()
	}
}

// notePending writes (or updates) the record of a failed destroy.
func (r *Runtime) notePending(ctx context.Context, id string, cause error) error {
	d := persistence.PendingDestroy{Namespace: r.cfg.Namespace, ID: id, Since: time.Now().UTC()}
	if old, err := r.pendingRecord(ctx, id); err == nil && old != nil {
		d.Since, d.Attempts = old.Since, old.Attempts
	}
	d.Attempts++
	d.LastError = clipErr(cause.Error(), 500)
	return r.reclaim.store.Put(ctx, d)
}

func (r *Runtime) pendingRecord(ctx context.Context, id string) (*persistence.PendingDestroy, error) {
	all, err := r.reclaim.store.List(ctx, r.cfg.Namespace)
	if err != nil {
		return nil, err
	}
	for _, d := range all {
		if d.ID == id {
			return &d, nil
		}
	}
	return nil, nil
}

// destroyDone forgets a sandbox whose destroy finally succeeded.
func (r *Runtime) destroyDone(id string) {
	rc := &r.reclaim
	rc.liveMu.Lock()
	_, was := rc.live[id]
	delete(rc.live, id)
	rc.liveMu.Unlock()
	if !was || rc.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rc.store.Delete(ctx, r.cfg.Namespace, id); err != nil {
		r.cfg.Logger.Warn("sandbox destroyed but its pending record stays (the next retry finds nothing left and deletes it)", "sandbox", id, "err", err)
	}
}

// RetryDestroys makes one attempt at every pending destroy of this runtime's
// namespace: those in the store (this process's and earlier ones') and this
// process's own failed destroys. It returns how many are still pending.
func (r *Runtime) RetryDestroys(ctx context.Context) (left int, err error) {
	_, left, err = r.retryDestroys(ctx)
	return left, err
}

// retryDestroys is RetryDestroys, also counting the destroys done.
func (r *Runtime) retryDestroys(ctx context.Context) (done, left int, err error) {
	rc := &r.reclaim
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ids := map[string]bool{}
	var listErr error
	if rc.store != nil {
		recs, err := rc.store.List(ctx, r.cfg.Namespace)
		if err != nil {
			listErr = err
		}
		for _, d := range recs {
			ids[d.ID] = true
		}
	}
	rc.liveMu.Lock()
	for id := range rc.live {
		ids[id] = true
	}
	rc.liveMu.Unlock()
	var errs []error
	for id := range ids {
		if err := ctx.Err(); err != nil {
			return done, len(ids) - done, err
		}
		actx, cancel := context.WithTimeout(ctx, retryTimeout)
		err := r.retryOne(actx, id)
		cancel()
		if err != nil {
			left++
			errs = append(errs, err)
		} else {
			done++
		}
	}
	if left > 0 {
		r.cfg.Logger.Warn("sandbox destroys still failing; retrying with backoff", "pending", left, "err", errors.Join(errs...))
	}
	return done, left, listErr
}

// retryOne destroys one pending sandbox: through its Sandbox when this
// process made it, by id otherwise.
func (r *Runtime) retryOne(ctx context.Context, id string) error {
	rc := &r.reclaim
	rc.liveMu.Lock()
	s := rc.live[id]
	rc.liveMu.Unlock()
	if s != nil {
		return s.destroyNoting(ctx, true) // records or forgets it itself
	}
	if err := r.destroyByID(ctx, id); err != nil {
		if rc.store != nil {
			if perr := r.notePending(ctx, id, err); perr != nil {
				err = errors.Join(err, perr)
			}
		}
		return err
	}
	r.cfg.Logger.Info("destroyed a sandbox whose earlier destroy had failed", "sandbox", id)
	if rc.store != nil {
		return rc.store.Delete(ctx, r.cfg.Namespace, id)
	}
	return nil
}

// destroyByID removes everything of sandbox id in this runtime's namespace,
// as Sweep does for a dead owner's: container and task, tmpfs upper
// directory, snapshot (the tmpfs view, or the container's own), lease. Each
// step tolerates the object being gone already.
func (r *Runtime) destroyByID(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	var errs []error
	c, err := r.client.LoadContainer(ctx, id)
	switch {
	case err == nil:
		if err := deleteContainer(ctx, c); err != nil {
			errs = append(errs, err)
		}
	case !errdefs.IsNotFound(err):
		errs = append(errs, fmt.Errorf("load container %s: %w", id, err))
	}
	upper := filepath.Join(r.cfg.StateDir, r.cfg.Namespace, id)
	if _, err := os.Lstat(upper); err == nil {
		if err := removeUpper(upper); err != nil {
			errs = append(errs, err)
		}
	} else if err := os.Remove(upper + ".owner"); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := r.client.SnapshotService(r.cfg.Snapshotter).Remove(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("remove snapshot %s: %w", id, err))
	}
	if err := r.client.LeasesService().Delete(ctx, leases.Lease{ID: id}, leases.SynchronousDelete); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete lease %s: %w", id, err))
	}
	return errors.Join(errs...)
}

func clipErr(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
