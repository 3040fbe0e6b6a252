package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/frognano/frognano/actors/sandbox/image"
)

// Commit makes image ref from a StorageSnapshot sandbox's current root file
// system: the sandbox's changes become one layer on top of its image. It is
// how environment images are built — a build sandbox (writable root, host
// network) installs dependencies and squashes the git history, then is
// committed. The sandbox is frozen while its layer is read so the image is
// one consistent picture, and keeps running afterwards.
func (r *Runtime) Commit(ctx context.Context, sb *Sandbox, ref, comment string, edit image.ConfigEdit) error {
	if sb.opts.Storage != StorageSnapshot {
		return errors.New("commit needs a sandbox created with StorageSnapshot")
	}
	if !sb.Alive() {
		return fmt.Errorf("commit %s: %w", sb.id, ErrSandboxDead)
	}
	ctx = r.ctx(ctx)
	if err := sb.task.Pause(ctx); err == nil {
		defer func() {
			if err := sb.task.Resume(context.WithoutCancel(ctx)); err != nil {
				r.cfg.Logger.Warn("thaw sandbox after commit", "sandbox", sb.id, "err", err)
			}
		}()
	}
	if comment == "" {
		comment = "frognano: commit of sandbox " + sb.id
	}
	err := r.images.CommitSnapshot(ctx, sb.image, sb.id, ref, comment, edit)
	r.forgetImage(ref)
	return err
}
