package scheduler

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/once-run/once/slot"
)

// tick is the longest the dispatcher sleeps: it looks at the clock at least this often, so that
// a jump of the wall clock (a suspended machine) is seen within a tick.
const tick = time.Second

// late is how long after its fire time a slot is still fired as usual; a slot found later than
// that (the node was suspended, or stopped) goes through account: caught up or missed.
const late = 5 * time.Second

// dispatch fires each job's slots when they are due, until ctx is cancelled.
func (s *Scheduler) dispatch(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.wake:
		}
		now := s.clock.now()
		wait := tick
		for _, js := range s.snapshot() {
			if d := s.due(ctx, js, now); d < wait {
				wait = d
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(wait, time.Millisecond))
	}
}

// due fires js's next slot when its time has come, and returns how long until the one after.
func (s *Scheduler) due(ctx context.Context, js *jobState, now time.Time) time.Duration {
	js.mu.Lock()
	nx, jb := js.next, js.job
	js.mu.Unlock()
	if nx.Value == "" {
		return tick
	}
	at := fireTime(jb.Name, nx, jb.Jitter)
	if wait := at.Sub(now); wait > 0 {
		return wait
	}
	lateBy := now.Sub(at)
	js.mu.Lock()
	js.lastFire, js.lastLag = at, lateBy
	if lateBy > late {
		js.next = nextFire(jb.Name, js.spec, jb.Jitter, now)
	} else {
		js.next = js.spec.Next(nx.Start)
	}
	js.mu.Unlock()
	if _, ok := s.clock.state(); !ok {
		s.refuse(js, jb, nx)
		return 0
	}
	if lateBy > late || js.takeAccount() {
		js.standIn(nx, now)
		go s.account(ctx, js, now)
		return 0
	}
	s.fire(ctx, js, nx)
	return 0
}

// fireTime is when slot sl of job name fires: its start, plus a jitter in [0, jitter) that every
// node computes alike (a hash of the job and the slot), so that jitter spreads a fleet's load
// without letting the nodes disagree on the moment.
func fireTime(name string, sl slot.Slot, jitter time.Duration) time.Time {
	if jitter <= 0 {
		return sl.Start
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(sl.Value))
	return sl.Start.Add(time.Duration(h.Sum64() % uint64(jitter)))
}

// refuse logs a slot this node does not fire because its clock is off, and has the job's slots
// accounted once the clock is right again, so that none is lost silently.
func (s *Scheduler) refuse(js *jobState, jb Job, sl slot.Slot) {
	off, _ := s.clock.state()
	s.stats.refused.Add(1)
	js.mu.Lock()
	js.needAccount = true
	js.mu.Unlock()
	s.log.Error("not firing: this node's clock is off from the store's by more than the limit; fix its time (NTP)",
		"task", jb.Name, "slot", sl.Value, "offset", off.String(), "max", s.c.MaxClockOffset.String())
}

// nextFire is the first slot of spec that fires after now: the slot containing now when its
// jitter delays its fire past now, else the next one.
func nextFire(name string, spec slot.Spec, jitter time.Duration, now time.Time) slot.Slot {
	if cur := spec.Prev(now); cur.Value != "" && fireTime(name, cur, jitter).After(now) {
		return cur
	}
	return spec.Next(now)
}
