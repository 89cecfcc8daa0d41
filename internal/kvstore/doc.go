package kvstore

import (
	"encoding/json"
	"fmt"
	"slices"

	"time"

	"github.com/once-run/once/store"
)

// Event is a recorded event inside a Doc.
type Event struct {
	Kind    store.State `json:"kind"`
	RunID   string      `json:"run_id,omitempty"`
	Holder  string      `json:"holder,omitempty"`
	Token   int64       `json:"token,omitempty"`
	Attempt int         `json:"attempt,omitempty"`
	Note    string      `json:"note,omitempty"`
	At      time.Time   `json:"at"`
}

// Doc is everything the ledger keeps about one (task, slot), attempts in number order.
type Doc struct {
	Task     string          `json:"task"`
	Slot     string          `json:"slot"`
	Attempts []store.Attempt `json:"attempts,omitempty"`
	Events   []Event         `json:"events,omitempty"`
	// Archived is what went to archive documents (archive.go): the oldest attempts and events of
	// a slot that has had many. nil when nothing did.
	Archived *Archived `json:"archived,omitempty"`
	// Retained is set in a task's retain document only (retain.go): the time its last Retain
	// pruned up to.
	Retained *time.Time `json:"retained,omitempty"`
	// Marked says the document's marks are in its task's history index (marks.go): every write
	// of a once that keeps the index sets it, and an older once's write drops it (a field it does
	// not know), so the next write of this once puts all the document's marks again.
	Marked bool `json:"hx,omitempty"`
	// KindsMarked says the same of its marks in its task's indexes of a kind (Doc.KindMarks),
	// which a once before them (or an older once's write) did not put.
	KindsMarked bool `json:"hk,omitempty"`
	// KindsMarked2 says the same of its marks in the indexes of the kinds indexed after missed
	// (marks.go), which an earlier once that set KindsMarked did not put.
	KindsMarked2 bool `json:"hk2,omitempty"`

	waited   bool     // as read (Unmarshal): the slot waited for a person
	ran      bool     // as read (Unmarshal): an attempt was running
	read     []string // as read (Unmarshal): its marks' keys known to be in the indexes (readMarks)
	unknown  []string // as read (Unmarshal): its other marks' keys (Unknown)
	unmarked bool     // Unmarked: the next write says Marked false
}

// Waited reports whether the document waited for a person as it was read from the store (false
// for a new one): a backend whose index needs to know whether an entry exists reads it here.
func (d *Doc) Waited() bool { return d.waited }

// Ran reports whether an attempt was running in the document as it was read from the store (false
// for a new one): a backend whose running index needs to know whether an entry exists reads it here.
func (d *Doc) Ran() bool { return d.ran }

// Runs reports whether an attempt of d is running: its slot belongs in the running index
// (RunningKV).
func (d *Doc) Runs() bool {
	for _, a := range d.Attempts {
		if a.State == store.Running {
			return true
		}
	}
	return false
}

// Marshal encodes d for storage.
func (d *Doc) Marshal() []byte {
	d.Marked, d.KindsMarked, d.KindsMarked2 = !d.unmarked, !d.unmarked, !d.unmarked
	b, err := json.Marshal(d)
	if err != nil { // only plain data: cannot fail
		panic(err)
	}
	return b
}

// Unmarshal decodes a stored document; a corrupt one is ErrUnavailable (nothing can be decided).
func Unmarshal(b []byte) (*Doc, error) {
	var d Doc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: corrupt ledger document: %v", store.ErrUnavailable, err)
	}
	if err := d.check(); err != nil {
		return nil, fmt.Errorf("%w: corrupt ledger document of task %q slot %q: %v (not one once writes: restore it from a backup; deleting it in the store lets the slot run again)",
			store.ErrUnavailable, store.Clip(d.Task, 64), store.Clip(d.Slot, 64), err)
	}
	_, d.waited = d.Waits()
	d.ran = d.Runs()
	d.read = d.readMarks()
	for _, k := range d.Marks() {
		if _, ok := slices.BinarySearch(d.read, k); !ok {
			d.unknown = append(d.unknown, k)
		}
	}
	return &d, nil
}

// maxNumber bounds the numbers a document holds (attempt numbers, archive counts): far above any
// slot's, and below where once's arithmetic on them (the next attempt, a sum) would overflow.
// The same bound store.CheckEvent and Attempt.Check hold new writes to.
const maxNumber = store.MaxNumber

// maxArchives bounds a slot's archive names (Archived.Docs): reads walk the names one by one, so
// another writer's huge count (9223372036854775807) hung every read of the slot (one archive
// holds 32 entries: this is half a billion).
const maxArchives = 1 << 24

// check refuses numbers no once writes (another writer's: older, buggy or hostile), which once
// would act on: a negative count of failures lets a task run past --max-attempts, the largest
// attempt number makes the next one negative.
func (d *Doc) check() error {
	for _, a := range d.Attempts {
		if a.Number < 0 || int64(a.Number) > maxNumber { // int64: on 32 bits, maxNumber is no int
			return fmt.Errorf("attempt number %d is out of range", a.Number)
		}
	}
	for _, e := range d.Events {
		if e.Attempt < 0 || int64(e.Attempt) > maxNumber {
			return fmt.Errorf("an event of attempt number %d, out of range", e.Attempt)
		}
	}
	if arc := d.Archived; arc != nil {
		for _, n := range []int{arc.Through, arc.Attempts, arc.Events, arc.CheckAt, arc.Resolved, arc.Failures} {
			if n < 0 || int64(n) > maxNumber {
				return fmt.Errorf("an archived count of %d, out of range", n)
			}
		}
		if arc.Docs < 0 || arc.Docs > maxArchives {
			return fmt.Errorf("%d archives (at most %d)", arc.Docs, maxArchives)
		}
	}
	return nil
}

// Unknown returns the keys of d's marks as it was read that were not known to be in the indexes
// (an older or earlier once wrote it), sorted: marks of entries the stored document holds, which a
// backend may put before the write that adds them (MarkChanges), one there left as it is.
func (d *Doc) Unknown() []string { return d.unknown }

// State computes the slot state of d.
func (d *Doc) State() store.SlotState {
	st := store.SlotState{Task: d.Task, Slot: d.Slot}
	n := len(d.Attempts)
	if n == 0 {
		return st
	}
	last := d.Attempts[n-1]
	st.Last = &last
	for i := n - 1; i >= 0; i-- {
		a := d.Attempts[i]
		if st.Checkpoint == "" && a.Checkpoint != "" {
			st.Checkpoint = a.Checkpoint
		}
	}
	resolved := 0
	for _, a := range d.Attempts {
		if a.Resolution != nil {
			resolved = a.Number
		}
	}
	if arc := d.Archived; arc != nil { // the archived attempts, older than every kept one
		if st.Checkpoint == "" {
			st.Checkpoint = arc.Checkpoint
		}
		if resolved == 0 {
			resolved = arc.Resolved
			st.Failures = arc.Failures
		}
	}
	for _, a := range d.Attempts {
		if a.Number > resolved && (a.State == store.Failed || a.State == store.Unknown) {
			st.Failures++
		}
	}
	st.Failures = min(st.Failures, store.MaxFailures)
	review := false
	for _, e := range d.Events {
		if e.Kind == store.Review && e.Attempt == last.Number {
			review = true
		}
	}
	st.Waiting = last.Resolution == nil && (last.State == store.Unknown || review)
	return st
}

// Waits reports whether the slot waits for a person (store.SlotState.Waiting) and since when:
// its last attempt's end, or start when it has none (the order of Waiting).
func (d *Doc) Waits() (time.Time, bool) {
	if d.IsArchive() { // what it holds is its slot's past: the slot's own document says whether it waits
		return time.Time{}, false
	}
	st := d.State()
	if !st.Waiting {
		return time.Time{}, false
	}
	if st.Last.EndedAt != nil {
		return *st.Last.EndedAt, true
	}
	return st.Last.StartedAt, true
}

// key is the cursor key of a document's entries: its task and slot.
func (d *Doc) key() string { return docKey(d.Task, d.Slot) }
