package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/once-run/once/store"
)

// The bounds of one read of the store.
const (
	// bootstrapScan is how many of the newest entries the first read takes (to find the tasks
	// recently active and the attempts running), like doctor's --scan.
	bootstrapScan = 10000
	// tailPage and tailBudget: the tail reads pages of tailPage entries, at most tailBudget
	// entries per scrape; a larger burst is read on by the next scrapes.
	tailPage   = 1000
	tailBudget = 100000
	// defaultOverlap is how far behind the newest entry seen each tail reads again, for entries
	// that land late: a writer whose clock is behind, or whose commit came after a later-dated
	// one. Entries already counted are recognised and not counted twice.
	defaultOverlap = 10 * time.Second
	// maxAhead bounds how far ahead of the collector's clock the newest entry seen may be dated
	// and still be read past (see window).
	maxAhead = 5 * time.Minute
	// recheckEvery paces the reads of a running attempt whose lease is gone but which is still
	// running in the ledger (its holder vanished; the next holder will mark it unknown), and
	// maxChecks bounds such reads per scrape.
	recheckEvery = 30 * time.Second
	maxChecks    = 200
	// maxResolveChecks bounds the reads of slots for a person's decision per scrape (checkResolved).
	maxResolveChecks = 100
	// slotScan bounds the walk of a slot's history looking for an attempt a later one followed.
	slotScan = 100
)

// errStop ends a walk of history early.
var errStop = errors.New("stop")

// run is a running attempt seen in history: it is counted when it ends.
type run struct {
	task, slot string
	number     int
	token      int64
	started    time.Time
	checked    time.Time // when its slot was last read (zero: never)
}

// attemptID names an attempt (a slot's attempt numbers are unique); eventID an event, by its
// content, which never changes (its cursor's sequence may, on a key-value store's prune).
func attemptID(a store.Attempt) string {
	return a.Task + "\x00" + a.Slot + "\x00" + itoa(int64(a.Number))
}

func eventID(e store.Entry) string {
	return string(e.State) + "\x00" + e.Task + "\x00" + e.Slot + "\x00" + e.RunID + "\x00" + itoa(int64(e.Number)) +
		"\x00" + itoa(e.StartedAt.UnixMicro()) + "\x00" + e.Holder + "\x00" + itoa(e.Token)
}

// bootstrap is the first read: the newest bootstrapScan entries. Nothing in them is counted
// (counters start at zero); they name the tasks recently active, date their last attempts, and
// give the attempts running now, which are counted when they end. The newest is the mark the
// tail goes on from. A bootstrap cut short (the scrape's timeout on a slow store, an error) goes on
// from the last entry it read at the next scrape, instead of reading the same entries again: on a
// store slower than one scrape's timeout it still ends.
func (t *tracker) bootstrap(ctx context.Context, now time.Time) error {
	if t.booted >= bootstrapScan { // Limit 0 would read it all
		t.started, t.bootFrom = true, ""
		return nil
	}
	q := store.HistoryQuery{Limit: bootstrapScan - t.booted, Before: t.bootFrom}
	err := store.EachHistory(ctx, t.st, q, func(e store.Entry) error {
		c, err := store.ParseCursor(e.Cursor)
		if err != nil {
			return err
		}
		if t.mark == nil {
			t.mark = &c
		}
		t.bootFrom, t.booted = e.Cursor, t.booted+1
		tk := t.task(e.Task)
		if tk == nil {
			return nil
		}
		recent := !c.At.Before(t.window(now)) // the first tail reads it again
		if e.State.IsEvent() {
			if recent {
				t.seen[eventID(e)] = c.At
			}
			return nil
		}
		id := attemptID(e.Attempt)
		tk.see(id, e.Attempt)
		switch {
		case e.State == store.Running:
			t.track(id, e.Attempt)
		case recent:
			t.seen[id] = c.At
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.started, t.bootFrom = true, ""
	return nil
}

// window is where the tail starts reading again: the overlap before the newest entry seen, or
// before now when that entry is dated later — a writer whose clock is ahead must not make the
// tail skip what the others write meanwhile — but not more than maxAhead earlier than the entry,
// so that a collector whose own clock is behind re-reads a bounded window. 1970 when nothing
// was seen.
func (t *tracker) window(now time.Time) time.Time {
	if t.mark == nil {
		return time.UnixMicro(0)
	}
	at := t.mark.At
	if now.Before(at) {
		at = now
		if lo := t.mark.At.Add(-maxAhead); at.Before(lo) {
			at = lo
		}
	}
	return at.Add(-t.overlap)
}

// tail reads the entries newer than the window (or than where the last scrape stopped at its
// budget), oldest page first, and counts what it has not counted yet.
func (t *tracker) tail(ctx context.Context, now time.Time) error {
	from := t.resume
	t.resume = ""
	if from == "" { // the last place at the window's microsecond; from 1970 when nothing was seen
		from = store.CursorOf(t.window(now), false, "", 0).String()
	}
	for n := 0; ; {
		es, err := t.st.History(ctx, store.HistoryQuery{After: from, Limit: tailPage})
		if err != nil {
			return err
		}
		for i := len(es) - 1; i >= 0; i-- { // oldest first
			if err := t.observe(es[i]); err != nil {
				return err
			}
		}
		if n += len(es); len(es) < tailPage {
			return nil
		}
		from = es[0].Cursor
		if n >= tailBudget {
			t.resume = from
			return nil
		}
	}
}

// observe counts an entry the tail read, unless it was counted before: an event once, an attempt
// once it has ended (a running one is tracked until then).
func (t *tracker) observe(e store.Entry) error {
	c, err := store.ParseCursor(e.Cursor)
	if err != nil {
		return err
	}
	if t.mark == nil || c.Precedes(*t.mark) {
		t.mark = &c
	}
	tk := t.task(e.Task)
	if tk == nil {
		return nil
	}
	if e.State.IsEvent() {
		id := eventID(e)
		if _, ok := t.seen[id]; !ok {
			t.seen[id] = c.At
			tk.event(e.State)
		}
		return nil
	}
	id := attemptID(e.Attempt)
	tk.see(id, e.Attempt)
	if _, ok := t.seen[id]; ok {
		return nil
	}
	if e.State == store.Running {
		t.track(id, e.Attempt)
		return nil
	}
	t.ended(tk, id, e.Attempt)
	return nil
}

// track remembers a running attempt until it ends.
func (t *tracker) track(id string, a store.Attempt) {
	if _, ok := t.running[id]; !ok {
		t.running[id] = &run{task: a.Task, slot: a.Slot, number: a.Number, token: a.Token, started: a.StartedAt}
	}
}

// ended counts an attempt that ended, once.
func (t *tracker) ended(tk *task, id string, a store.Attempt) {
	tk.see(id, a)
	tk.count(a)
	t.seen[id] = a.StartedAt.Truncate(time.Microsecond)
	delete(t.running, id)
}

// checkRunning reads the slots of the running attempts that may have ended without the tail
// seeing it (they started before the window it reads again): those whose grant (the task's lease,
// or one of its seats) is no longer live, or whose holder has begun a later attempt under it. An
// attempt still running without its lease (its holder vanished) is read again every
// recheckEvery; at most maxChecks slots are read per scrape.
func (t *tracker) checkRunning(ctx context.Context, now time.Time) error {
	checks := 0
	for id, r := range t.running {
		tk := t.tasks[r.task]
		if tk != nil && t.live[r.task][r.token] && tk.newest[r.token].id == id {
			continue // its holder's newest attempt, under the grant it began with (a lease or any seat)
		}
		if !r.checked.IsZero() && now.Sub(r.checked) < recheckEvery {
			continue
		}
		if checks >= maxChecks {
			return nil
		}
		checks++
		a, ok, err := t.read(ctx, r)
		if err != nil {
			return err
		}
		r.checked = now
		switch {
		case !ok:
			delete(t.running, id) // gone from the ledger (a slot forgotten): nothing to count
		case a.State != store.Running:
			t.ended(tk, id, a)
		}
	}
	return nil
}

// checkResolved reads, every recheckEvery, the slot of each task whose latest attempt ended
// failed or unknown without a person's decision, for one: the tail reads attempts by their start,
// and once resolve changes an attempt already read. The first read is recheckEvery after the
// attempt was seen to end (a decision takes a person longer), and at most maxResolveChecks slots
// are read per scrape, so a fleet of failing tasks costs a bounded read per scrape.
func (t *tracker) checkResolved(ctx context.Context, now time.Time) error {
	checks := 0
	for name, tk := range t.tasks {
		l := tk.last
		if l == nil || l.resolved != "" || (l.state != store.Failed && l.state != store.Unknown) {
			continue
		}
		if l.checked.IsZero() || now.Sub(l.checked) < recheckEvery {
			if l.checked.IsZero() {
				l.checked = now
			}
			continue
		}
		if checks >= maxResolveChecks {
			return nil
		}
		checks++
		st, err := t.st.Slot(ctx, name, l.slot)
		if err != nil {
			return err
		}
		l.checked = now
		if a := st.Last; a != nil && a.Number == l.number && a.Resolution != nil {
			l.resolved = a.Resolution.As
		}
	}
	return nil
}

// read returns r's attempt as the ledger has it now: the slot's last attempt, or, when a later
// one has begun (so r's has ended), r's own from the slot's history. ok is false when the ledger
// no longer has it.
func (t *tracker) read(ctx context.Context, r *run) (a store.Attempt, ok bool, err error) {
	st, err := t.st.Slot(ctx, r.task, r.slot)
	switch {
	case err != nil:
		return a, false, err
	case st.Last == nil || st.Last.Number < r.number:
		return a, false, nil
	case st.Last.Number == r.number:
		return *st.Last, true, nil
	}
	started := r.started.Truncate(time.Microsecond)
	// Before the first place of the next microsecond: r's attempt is among the first entries.
	before := store.CursorOf(started.Add(time.Microsecond), false, "", 0).String()
	q := store.HistoryQuery{Task: r.task, Slot: r.slot, Before: before, Limit: slotScan}
	err = store.EachHistory(ctx, t.st, q, func(e store.Entry) error {
		if e.State.IsAttempt() && e.Number == r.number {
			a, ok = e.Attempt, true
			return errStop
		}
		if e.StartedAt.Before(started) {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return a, ok, err
}

// prune forgets the entries counted that the tail will not read again.
func (t *tracker) prune(now time.Time) {
	if t.mark == nil {
		return
	}
	limit := t.window(now)
	for id, at := range t.seen {
		if at.Before(limit) {
			delete(t.seen, id)
		}
	}
}
