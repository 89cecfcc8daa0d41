package kvstore

import (
	"sync"
	"time"
)

// memo remembers, for a short while, the documents this process read or wrote itself, so that the
// next write of the same run starts from them instead of reading the document again: Start reads
// the slot's document with the lease, Begin writes from that read, and FinishRelease from what
// Begin wrote. A remembered document is only a guess: every write is a compare-and-set of its
// version, so a document that changed meanwhile fails the write (ErrStale) and is read again.
//
// It also maps the run ids this process began to their slots, which spares Finish the run index
// lookup. A Ledger without a memo (the zero value) reads every time.
type memo struct {
	mu    sync.Mutex
	docs  map[string]memoDoc // by Doc.key()
	runs  map[string][2]string
	stamp func() time.Time // the KV's Stamper, or nil
	last  time.Time        // the latest time this ledger stamped a transition with
}

// memoDoc is a document as read or written: its encoding (decoded afresh for each use, so that
// a write that fails leaves nothing changed here), its version, and the store's time at the read
// it comes from (Load's now), with the instant of this host's clock that read stands for (anchor:
// taken when its answer came back). A write made from a remembered document keeps the read's time and
// anchor, so that a run writing more often than memoFresh still has its clock read again.
type memoDoc struct {
	b      []byte // nil: there was no document
	ver    Version
	now    time.Time
	anchor time.Time
}

// clock is the store's time read at this host's instant anchor, carried forward from there.
type clock struct{ now, anchor time.Time }

// Stamper is an optional KV capability: a KV whose Load stamps transitions with this host's clock
// (etcd, ZooKeeper) says so, and the memo stamps with it too. Without it, a remembered document's
// time is the store's as it was read, carried forward by this host's monotonic clock from the
// moment its answer came back: never ahead of the store's clock, behind it by at most that answer's
// way back. Never ahead, so that an outcome stamped so is never later than what another client
// does after it (anchored before the read was sent, a slow first read — a Cluster redirect, a dial —
// put a run's stamps milliseconds ahead: an event after another client's, or an attempt's end after
// the next holder's start, an overlap doctor would report); never before the read's own time, so
// never before the grant it was read with.
type Stamper interface {
	Stamp() time.Time
}

// memoFresh is how long after the read it comes from a remembered document is used. Past it the
// document is read again: a long run's outcome is stamped by a fresh read of the store's clock, not
// by this host's monotonic clock carried over the run. A remembered document is not used either
// when this host's wall clock and monotonic clock disagree about the time since that read by more
// than memoSkew: the machine was suspended (the monotonic clock stops) or its clock was set.
const (
	memoFresh = 10 * time.Second
	memoSkew  = time.Second
)

// memoMax bounds how many documents a long-lived process (the daemon, with thousands of jobs)
// keeps, and memoMaxDoc how large one may be (a task without slots keeps its runs in one document).
const (
	memoMax    = 512
	memoMaxDoc = 64 << 10
)

func newMemo(kv KV) *memo {
	m := &memo{docs: map[string]memoDoc{}, runs: map[string][2]string{}}
	if st, ok := kv.(Stamper); ok {
		m.stamp = st.Stamp
	}
	return m
}

// NewLedger is the ledger over kv, with a memo of the documents this process reads and writes.
func NewLedger(kv KV) Ledger { return Ledger{KV: kv, memo: newMemo(kv)} }

// clamp returns now, or just after the latest time this ledger stamped a transition with when now
// is not after it: the transitions one client writes are stamped in the order it writes them,
// whether their time was read with the document or carried forward by the memo.
func (m *memo) clamp(now time.Time) time.Time {
	if m == nil {
		return now
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !now.After(m.last) {
		now = m.last.Add(time.Microsecond)
	}
	m.last = now
	return now
}

func docKey(task, slot string) string { return task + "\x00" + slot }

// put remembers d (nil: no document) at version ver, read or written from a read whose clock was c.
func (m *memo) put(task, slot string, d *Doc, ver Version, c clock) {
	if m == nil {
		return
	}
	var b []byte
	if d != nil {
		if b = d.Marshal(); len(b) > memoMaxDoc {
			m.drop(task, slot)
			return
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.docs) >= memoMax {
		for k, e := range m.docs {
			if !fresh(e.anchor) || len(m.docs) >= memoMax {
				delete(m.docs, k)
			}
		}
	}
	m.docs[docKey(task, slot)] = memoDoc{b: b, ver: ver, now: c.now, anchor: c.anchor}
}

// fresh reports whether a read made at anchor may still be used (memoFresh, memoSkew).
func fresh(anchor time.Time) bool {
	mono := time.Since(anchor)
	wall := time.Now().Round(0).Sub(anchor.Round(0))
	return mono >= 0 && mono <= memoFresh && (wall-mono).Abs() <= memoSkew
}

// get returns a fresh remembered document of (task, slot): a copy (nil when there was none), its
// version, the time to stamp a transition with now (see Stamper) and the clock of the read it
// comes from; ok is false when there is none to use.
func (m *memo) get(task, slot string) (d *Doc, ver Version, now time.Time, c clock, ok bool) {
	if m == nil {
		return nil, 0, time.Time{}, clock{}, false
	}
	m.mu.Lock()
	e, found := m.docs[docKey(task, slot)]
	m.mu.Unlock()
	if !found || !fresh(e.anchor) {
		return nil, 0, time.Time{}, clock{}, false
	}
	if e.b != nil {
		var err error
		if d, err = Unmarshal(e.b); err != nil {
			return nil, 0, time.Time{}, clock{}, false
		}
	}
	c = clock{e.now, e.anchor}
	if m.stamp != nil {
		return d, e.ver, m.stamp(), c, true
	}
	return d, e.ver, e.now.Add(time.Since(e.anchor)).Truncate(time.Microsecond), c, true
}

// drop forgets (task, slot)'s document: a write found it changed.
func (m *memo) drop(task, slot string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.docs, docKey(task, slot))
}

// began remembers that run id began in (task, slot).
func (m *memo) began(runID, task, slot string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.runs) >= 4*memoMax {
		for k := range m.runs { // a forgotten run only costs its Finish a lookup
			delete(m.runs, k)
			break
		}
	}
	m.runs[runID] = [2]string{task, slot}
}

// run returns the slot run id began in, when this process began it.
func (m *memo) run(runID string) (task, slot string, ok bool) {
	if m == nil {
		return "", "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ts, ok := m.runs[runID]
	return ts[0], ts[1], ok
}

// ended forgets run id: its attempt is over.
func (m *memo) ended(runID string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.runs, runID)
}
