package sandbox

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Pool keeps a few sandboxes of one image started ahead of need, so that an
// episode does not wait for a container to be created, and destroys
// returned sandboxes in the background, so that it does not wait for the
// teardown either. A sandbox is never reused: every Get is a fresh
// container from the image, and every Put destroys one.
type Pool struct {
	rt    *Runtime
	image string
	opts  Options

	ready  chan *Sandbox
	doomed chan *Sandbox
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	lastErr error
}

// NewPool starts filling a pool of size sandboxes of image. Creation errors
// are retried with backoff in the background; Get reports the latest one if
// it has to create a sandbox itself and fails.
func (r *Runtime) NewPool(ctx context.Context, image string, opts Options, size int) (*Pool, error) {
	if size < 1 {
		return nil, errors.New("pool size must be at least 1")
	}
	if _, err := opts.withDefaults(); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Pool{
		rt:     r,
		image:  image,
		opts:   opts,
		ready:  make(chan *Sandbox, size),
		doomed: make(chan *Sandbox, 1024),
		ctx:    pctx,
		cancel: cancel,
	}
	p.wg.Add(2)
	go p.fill()
	go p.reap()
	return p, nil
}

// fill keeps the ready channel full. It creates one sandbox at a time: on a
// small node, parallel creation only slows the episodes that are running.
func (p *Pool) fill() {
	defer p.wg.Done()
	backoff := 100 * time.Millisecond
	for p.ctx.Err() == nil {
		sb, err := p.rt.Create(p.ctx, p.image, p.opts)
		if err != nil {
			p.mu.Lock()
			p.lastErr = err
			p.mu.Unlock()
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		select {
		case p.ready <- sb:
		case <-p.ctx.Done():
			p.destroy(sb)
			return
		}
	}
}

// reap destroys returned sandboxes.
func (p *Pool) reap() {
	defer p.wg.Done()
	for {
		select {
		case sb := <-p.doomed:
			p.destroy(sb)
		case <-p.ctx.Done():
			for {
				select {
				case sb := <-p.doomed:
					p.destroy(sb)
				default:
					return
				}
			}
		}
	}
}

func (p *Pool) destroy(sb *Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil {
		p.rt.cfg.Logger.Warn("destroy pooled sandbox (Sweep will retry)", "sandbox", sb.ID(), "err", err)
	}
}

// Get returns a fresh, started sandbox: a ready one if there is one,
// otherwise one created now.
func (p *Pool) Get(ctx context.Context) (*Sandbox, error) {
	for {
		select {
		case sb := <-p.ready:
			if sb.Alive() {
				return sb, nil
			}
			p.Put(sb)
			continue
		default:
		}
		break
	}
	sb, err := p.rt.Create(ctx, p.image, p.opts)
	if err != nil {
		p.mu.Lock()
		last := p.lastErr
		p.mu.Unlock()
		if last != nil {
			return nil, errors.Join(err, last)
		}
		return nil, err
	}
	return sb, nil
}

// Ready is the number of sandboxes waiting to be taken.
func (p *Pool) Ready() int { return len(p.ready) }

// Put hands a sandbox back for destruction in the background.
func (p *Pool) Put(sb *Sandbox) {
	select {
	case p.doomed <- sb:
	default:
		p.destroy(sb) // the reaper is far behind: pay the teardown here
	}
}

// Close stops filling, destroys the ready sandboxes and waits for the
// background teardowns.
func (p *Pool) Close() {
	p.cancel()
	for {
		select {
		case sb := <-p.ready:
			p.destroy(sb)
			continue
		default:
		}
		break
	}
	p.wg.Wait()
	for {
		select {
		case sb := <-p.ready:
			p.destroy(sb)
		default:
			return
		}
	}
}
