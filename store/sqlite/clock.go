package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/once-run/once/store"
)

// The store's clock.
//
// SQLite has no server to ask the time, so the processes sharing a file must agree on "now" by
// themselves, and a lease is only as safe as that agreement. The wall clock will not do: it is
// stepped (NTP at boot, a VM resumed, a hand with date -s) and can be wrong in one process and
// not another; a holder whose clock read an hour ahead would take over a live lease, and one an
// hour behind would write a lease that others read as long expired (the chaos harness's clock
// faults showed both). CLOCK_BOOTTIME is one counter for every process of the machine, never
// steps, and keeps counting through suspend. So the first transaction of each boot fixes
// epoch = wall − boottime in the meta table (key clock_epoch:BOOT_ID), and every process's
// now is epoch + boottime: the wall clock as it read at that moment, then advancing by a clock
// nobody can set. After a reboot a new epoch is fixed, so rows of the previous boot are judged
// by the wall clock of the new boot's first transaction, as they were before. Where there is
// no boot clock (not Linux), now is the wall clock.
//
// Only lease and claim expiry use the store's clock. Times recorded for people (attempts, events,
// claims) are this host's wall clock, and a lease's Acquired and Expires are converted to it when
// they leave the package, so a wall clock stepped after the epoch was fixed (a board without a
// real-time clock synchronising after the first run, a VM restored from a snapshot) shows the
// right times and shifts no expiry.

// machineClock is how this process reads the machine's clocks; tests replace wall.
type machineClock struct {
	wall func() time.Time
	boot func() (id string, micros int64, ok bool)
}

var sysClock = machineClock{wall: time.Now, boot: bootClock}

// clockState caches this process's epoch once it is known (it cannot change within one boot).
type clockState struct {
	mu    sync.Mutex
	known bool
	boot  string
	epoch int64 // unix µs at boottime 0
}

// get returns the cached epoch of boot id, if known.
func (c *clockState) get(id string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch, c.known && c.boot == id
}

func (c *clockState) set(id string, epoch int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.known, c.boot, c.epoch = true, id, epoch
}

// nowTx returns the store's now in unix µs inside a transaction that holds the write lock,
// fixing this boot's epoch when it is the first to need it.
func (s *Store) nowTx(ctx context.Context, tx *sql.Tx) (int64, error) {
	id, bt, ok := s.clk.boot()
	if !ok {
		return s.wall(), nil
	}
	if epoch, ok := s.cs.get(id); ok {
		return epoch + bt, nil
	}
	key := epochKey(id)
	var epoch int64
	err := tx.QueryRowContext(ctx, "SELECT value FROM "+s.t.meta+" WHERE key = ?", key).Scan(&epoch)
	if errors.Is(err, sql.ErrNoRows) {
		epoch = s.wall() - bt
		if _, err = tx.ExecContext(ctx, "DELETE FROM "+s.t.meta+" WHERE key LIKE 'clock\\_epoch:%' ESCAPE '\\'"); err != nil {
			return 0, err
		}
		_, err = tx.ExecContext(ctx, "INSERT INTO "+s.t.meta+" (key, value) VALUES (?, ?)", key, epoch)
	}
	if err != nil {
		return 0, err
	}
	s.cs.set(id, epoch)
	return epoch + bt, nil
}

// now returns the store's now in unix µs outside a transaction, for reads: from the cached
// epoch or by reading it (a read works while another process writes). When this boot has no
// epoch yet, no row was written in this boot, and the epoch the next write fixes is the wall
// clock of that moment: the wall clock is the answer.
func (s *Store) now(ctx context.Context) (int64, error) {
	id, bt, ok := s.clk.boot()
	if !ok {
		return s.wall(), nil
	}
	if epoch, ok := s.cs.get(id); ok {
		return epoch + bt, nil
	}
	var epoch int64
	err := s.db.QueryRowContext(ctx, "SELECT value FROM "+s.t.meta+" WHERE key = ?", epochKey(id)).Scan(&epoch)
	switch {
	case err == nil:
		s.cs.set(id, epoch)
		return epoch + bt, nil
	case errors.Is(err, sql.ErrNoRows):
		return s.wall(), nil
	default:
		return 0, s.mapErr(err)
	}
}

func epochKey(bootID string) string { return "clock_epoch:" + bootID }

// wall is this host's wall clock in unix µs: the times recorded for people (attempts, events,
// key claims) use it, as every other store's times are a clock people can read.
func (s *Store) wall() int64 { return s.clk.wall().UnixMicro() }

// shown converts a lease's times from the store's clock to this host's wall clock (see
// wallOffset), so Acquired and Expires read as wall times and still differ by the TTL.
func (s *Store) shown(l store.Lease) store.Lease {
	if d := s.wallOffset(); d != 0 {
		l.Acquired, l.Expires = l.Acquired.Add(d).UTC(), l.Expires.Add(d).UTC()
	}
	return l
}

// wallOffset is this host's wall clock minus the store's clock, the two read back to back. It is
// 0 while they agree within a second — always, unless the wall clock was stepped after this
// boot's epoch was fixed or this process's clock is off — so a lease reads back exactly as it
// was returned.
func (s *Store) wallOffset() time.Duration {
	id, bt, ok := s.clk.boot()
	if !ok {
		return 0
	}
	epoch, known := s.cs.get(id)
	if !known {
		return 0
	}
	d := time.Duration(s.wall()-(epoch+bt)) * time.Microsecond
	if d > -time.Second && d < time.Second {
		return 0
	}
	return d
}
