// Package lease holds a store lease for as long as work runs: it renews the grant every ttl/3 and
// tells the work, through a channel, when the grant is lost or can no longer be vouched for.
//
// Time rules. The store's clock decides expiry; this package only uses the local monotonic clock to
// decide when to renew and when to give up. A renewal that succeeds proves the grant lasts at least
// ttl from the moment the request was *sent*, so the local deadline is sent+ttl (or sooner, when
// the acquire's grant says it is less: store.ShortGrant). When renewals keep failing, the lease is
// declared lost when a third of the TTL is left before that deadline, which leaves the holder time
// to stop its work before another holder can be granted the lease.
package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/once-run/once/store"
)

// ErrLost is the cause reported by Err after the lease was lost.
var ErrLost = errors.New("lease lost")

// Lease is a held grant that renews itself until Release.
type Lease struct {
	s   store.Leaser
	ttl time.Duration

	mu       sync.Mutex
	cur      store.Lease
	deadline time.Time // local monotonic instant until which the grant is certainly valid
	err      error

	lost     chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	released bool
	given    bool // the grant is given back: Released, or a Release the store confirmed
}

// MinTTL is the shortest lease Acquire and Take hold: renewals come every ttl/3, and below it they
// would come faster than a store answers (once.Options refuses shorter TTLs the same way).
const MinTTL = 300 * time.Millisecond

// Acquire takes the lease for req, retrying while it is busy for up to wait (0: fail at once with the
// store's *store.BusyError). On success a goroutine renews the grant until Release.
//
// While it waits it tries again on a growing backoff (50 ms doubling to 1 s: a holder may release
// early) and at the expiry the busy answer names: a holder that died is taken over within a round
// trip of its expiry, not up to a second later (see expiry).
func Acquire(ctx context.Context, s store.Leaser, req store.AcquireRequest, wait time.Duration) (*Lease, error) {
	return Take(ctx, s, req.TTL, wait, func(ctx context.Context) (store.Lease, error) { return s.Acquire(ctx, req) })
}

// Take is Acquire with the grant taken by take, a call that acquires the lease with TTL ttl as
// s.Acquire would, and may do more in the same step (store.Starter). s renews and releases it.
func Take(ctx context.Context, s store.Leaser, ttl, wait time.Duration, take func(ctx context.Context) (store.Lease, error)) (*Lease, error) {
	if ttl < MinTTL {
		return nil, fmt.Errorf("%w: lease: ttl %s is too short: use at least %s (renewals happen every ttl/3)", store.ErrInvalid, ttl, MinTTL)
	}
	giveUp := time.Now().Add(wait)
	backoff := 50 * time.Millisecond
	var ex expiry
	for {
		sent := time.Now()
		g, err := takeWithin(ctx, take, wait, giveUp)
		if err == nil {
			l := &Lease{s: s, ttl: ttl, cur: g, deadline: lasts(sent, ttl, g),
				lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
			var notify <-chan struct{}
			if n, ok := s.(store.LossNotifier); ok {
				notify = n.Lost(g)
			}
			go l.keep(notify)
			return l, nil
		}
		if !errors.Is(err, store.ErrBusy) || wait <= 0 {
			return nil, err
		}
		left := time.Until(giveUp)
		if left <= 0 {
			return nil, err
		}
		d := min(backoff+rand.N(backoff/2+1), left)
		if at, ok := ex.next(ctx, s, err, giveUp); ok {
			d = min(d, max(time.Until(at), 0))
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(err, ctx.Err())
		case <-t.C:
		}
		backoff = min(backoff*2, time.Second)
	}
}

// takeWithin calls take. When the caller waits (wait > 0) the call is bounded by the wait as well,
// so that --wait bounds a store that does not answer as it bounds a busy lease (a SQLite writer
// frozen inside a write would otherwise hold every waiter for busy_timeout, 10 s by default) — but
// never below store.ConnectTimeout, which leaves a last try near the deadline the time a store
// that answers needs. Without a wait the store's own bounds apply.
func takeWithin(ctx context.Context, take func(ctx context.Context) (store.Lease, error), wait time.Duration, giveUp time.Time) (store.Lease, error) {
	if wait <= 0 {
		return take(ctx)
	}
	start := time.Now()
	end := max(giveUp.Sub(start), store.ConnectTimeout)
	cctx, cancel := context.WithTimeout(ctx, end)
	defer cancel()
	g, err := take(cctx)
	if err != nil && cctx.Err() != nil && ctx.Err() == nil {
		return g, fmt.Errorf("%w; the store did not answer within %s while waiting for the lease", err, end.Round(time.Millisecond))
	}
	return g, err
}

// expiry turns the expiry that a busy answer names, by the store's clock, into the local instant
// at which to try again. The offset between the clocks is read once (store.Clock) and biased early
// by the round trip: the store's time was read somewhere within it. Waking early costs one more
// busy answer and waking late only latency: whether the lease is free is the store's decision,
// never this estimate's. Stores that cannot tell their time name expiries by a host's clock (etcd:
// the holder's), taken as this host's.
type expiry struct {
	skew     time.Duration // the store's clock minus this host's, less up to a round trip
	measured bool
	told     time.Time // the expiry named by the last busy answer
	late     int       // busy answers since told passed
}

// next is when to try again after the busy answer err, or false when it names no expiry.
func (e *expiry) next(ctx context.Context, s store.Leaser, err error, giveUp time.Time) (time.Time, bool) {
	var be *store.BusyError
	if !errors.As(err, &be) || be.Lease.Expires.IsZero() {
		return time.Time{}, false
	}
	if !e.measured {
		e.measured = true
		if c, ok := s.(store.Clock); ok {
			cctx, cancel := context.WithDeadline(ctx, giveUp)
			t0 := time.Now()
			if st, err := c.Now(cctx); err == nil {
				e.skew = st.Sub(t0)
			}
			cancel()
		}
	}
	if told := be.Lease.Expires; !told.Equal(e.told) {
		e.told, e.late = told, 0
	}
	now := time.Now()
	at := now.Add(e.told.Add(-e.skew).Sub(now))
	if at.After(now) {
		return at, true
	}
	// Past the expiry and still busy: the store has not seen it pass yet (its clock is a little
	// behind the estimate, or it revokes expired leases on a timer of its own, as etcd does):
	// again, briskly, for a second; after that the estimate is off (a clock stepped) and the
	// backoff alone paces the tries.
	if now.Sub(at) > time.Second {
		return time.Time{}, false
	}
	e.late++
	return now.Add(min(time.Millisecond<<min(e.late, 6), 50*time.Millisecond)), true
}

// Info returns the grant as last renewed.
func (l *Lease) Info() store.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cur
}

// Token is the grant's fencing token.
func (l *Lease) Token() int64 { return l.Info().Token }

// TTL is the time-to-live the lease is renewed with.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Deadline is the local instant (with a monotonic reading) until which the grant is certainly valid
// by the store's clock, given the last successful renewal.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Lost is closed when the lease is lost: the store refused a renewal, the store told us it is gone,
// or renewals kept failing until only a third of the TTL was left.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err says why the lease was lost (wrapping ErrLost), or nil while it is held.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// lasts is the local deadline of grant g, acquired for ttl by a request sent at sent: sent+ttl, or
// sooner when the store granted less and g's Expires - Acquired says so, never by more than
// store.ShortGrant (the most a store may grant less). Only an acquire may grant less; a renewal's
// times say nothing of the kind (its Acquired is the first grant's, and a store whose clock stepped
// back between the two must not shorten the deadline).
func lasts(sent time.Time, ttl time.Duration, g store.Lease) time.Time {
	if d := g.Expires.Sub(g.Acquired); d < ttl {
		return sent.Add(max(d, ttl-store.ShortGrant))
	}
	return sent.Add(ttl)
}

func (l *Lease) lose(cause error) {
	l.lostOnce.Do(func() {
		l.mu.Lock()
		l.err = fmt.Errorf("%w: %w", ErrLost, cause)
		l.mu.Unlock()
		close(l.lost)
	})
}

// renewFailed is why a lease is lost whose renewals failed for d, the last with err (nil: none
// answered in time).
func renewFailed(d time.Duration, err error) error {
	if err == nil {
		return fmt.Errorf("could not renew it for %s", d)
	}
	return fmt.Errorf("could not renew it for %s: %w", d, err)
}

// keep renews every ttl/3 until stopped or lost.
func (l *Lease) keep(notify <-chan struct{}) {
	defer close(l.done)
	every := l.ttl / 3
	retry := min(max(l.ttl/20, 20*time.Millisecond), time.Second)
	next := time.NewTimer(every)
	defer next.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-notify:
			l.lose(errors.New("the store ended the lease"))
			return
		case <-next.C:
		}
		// Renew, retrying until the grant can no longer be vouched for. The call runs in its own
		// goroutine so that a store which ignores its context cannot delay the verdict. The loss
		// names the last renewal's error: why the store could not be used (errors.Is matches it).
		var last error
		for {
			giveUp := l.Deadline().Add(-every)
			left := time.Until(giveUp)
			if left <= 0 {
				l.lose(renewFailed(l.ttl-every, last))
				return
			}
			type renewal struct {
				g    store.Lease
				err  error
				sent time.Time
			}
			ch := make(chan renewal, 1)
			ctx, cancel := context.WithTimeout(context.Background(), left)
			go func(cur store.Lease) {
				sent := time.Now()
				g, err := l.s.Renew(ctx, cur, l.ttl)
				ch <- renewal{g, err, sent}
			}(l.Info())
			var r renewal
			select {
			case r = <-ch:
			case <-time.After(left):
				cancel()
				l.lose(fmt.Errorf("could not renew it for %s (the store did not answer)", l.ttl-every))
				return
			case <-l.stop:
				cancel()
				<-ch // Release must not race a renewal in flight
				return
			case <-notify:
				cancel()
				l.lose(errors.New("the store ended the lease"))
				return
			}
			cancel()
			if r.err == nil {
				l.mu.Lock()
				l.cur, l.deadline = r.g, r.sent.Add(l.ttl)
				l.mu.Unlock()
				next.Reset(every)
				break
			}
			if errors.Is(r.err, store.ErrNotHeld) {
				l.lose(r.err)
				return
			}
			last = r.err
			select {
			case <-l.stop:
				return
			case <-notify:
				l.lose(errors.New("the store ended the lease"))
				return
			case <-time.After(min(retry, max(time.Until(giveUp), 0))):
			}
		}
	}
}

// Released stops renewing a grant that the caller released by other means (store.Finisher,
// which released it with the run's outcome); Release is then a no-op. It waits for a renewal in
// flight, which fails harmlessly (the grant is no longer current) and may mark the lease lost.
func (l *Lease) Released() {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return
	}
	l.released, l.given = true, true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
}

// IsReleased reports whether Release or Released was called: the grant is given back, or being
// given back.
func (l *Lease) IsReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// Release stops renewing and releases the grant. Releasing a lost lease returns nil when the store
// confirms it is no longer ours (ErrNotHeld). It is safe to call more than once: after one that
// failed (the store unavailable, ctx ended), the next asks the store again; renewals stay stopped,
// so the grant expires by itself meanwhile.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	first, given := !l.released, l.given
	l.released = true
	l.mu.Unlock()
	if given {
		return nil
	}
	if first {
		close(l.stop)
	}
	<-l.done // Release must not race a renewal in flight
	err := l.s.Release(ctx, l.Info())
	if err != nil && !errors.Is(err, store.ErrNotHeld) {
		return err
	}
	l.mu.Lock()
	l.given = true
	l.mu.Unlock()
	return nil
}
