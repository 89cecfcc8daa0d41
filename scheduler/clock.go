package scheduler

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/once-run/once/store"
)

var errNoClock = errors.New("the store has no clock")

// clock is the fleet's time as this node sees it: its own clock corrected by the offset to the
// store's clock, measured every few seconds. Slots are due by it, so nodes agree on when a slot
// fires even when their clocks differ a little; a node off by more than max refuses to fire.
type clock struct {
	st    store.Clock // nil: the store has none, this node's clock is trusted
	local func() time.Time
	max   time.Duration

	mu      sync.Mutex
	offset  time.Duration // store − local
	checked time.Time     // local time of the last measurement; zero before the first
	err     error         // the last measurement's error
}

func newClock(s store.Store, local func() time.Time, max time.Duration) *clock {
	c := &clock{local: local, max: max}
	c.st, _ = s.(store.Clock)
	return c
}

// now is the fleet's time: this node's clock plus the measured offset.
func (c *clock) now() time.Time {
	c.mu.Lock()
	off := c.offset
	c.mu.Unlock()
	return c.local().Add(off)
}

// check measures the offset: the store's time against the middle of the round trip.
func (c *clock) check(ctx context.Context) error {
	if c.st == nil {
		return errNoClock
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t0 := c.local()
	ts, err := c.st.Now(ctx)
	t1 := c.local()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	if err != nil {
		return err
	}
	c.offset = ts.Sub(t0.Add(t1.Sub(t0) / 2)).Round(time.Millisecond)
	c.checked = t1
	return nil
}

// state is the last measured offset and whether this node may fire by it. ok is false when the
// offset is beyond max; a node whose store's clock cannot be read keeps the last offset.
func (c *clock) state() (offset time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	off := c.offset
	if off < 0 {
		off = -off
	}
	return c.offset, off <= c.max
}
