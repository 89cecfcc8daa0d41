package kvstore

// A slot's document keeps its newest attempts and events; older ones move, a chunk at a time, to
// archive documents of the same task, so that what a run reads and writes stays flat however many
// attempts its slot has had. A task without a slot puts every run in one slot: a job due every
// minute adds half a million attempts a year, and one document holding them all made every run
// read and rewrite all of them (1,000 runs: a Redis run 3.4× slower), took a ZooKeeper server down
// (OutOfMemoryError) at 809, and outgrows etcd's 1.5 MiB request and ZooKeeper's 1 MiB node at
// about 2,000, when every run fails.
//
// An archive document is a Doc whose slot is the slot's name, archiveSep and a sequence number:
// archiveSep holds a control character, which the ledger refuses in a slot (checkSlot), so an
// archive never meets a real slot. It is written before the slot's document drops what it holds;
// the document's Archived then acknowledges it (Docs). An archive the document does not
// acknowledge (a crash between the two writes, a lost race) is not shown; the next archiving takes
// it or passes over its name (archive). A document without a count gets one from the task's
// documents (recount). History and Prune read the archives through Archived and
// Docs, the slot's state only Archived; nothing on a run's path reads them. docs/store-contract.md,
// "A slot's archives", says the same for users.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/once-run/once/store"
)

const (
	// archiveAt is how many attempts (or events) a document holds before all but its newest
	// archiveKeep go to an archive: it holds at most archiveAt of each, and an archive normally
	// 32. A document an older once let grow is archived whole at its next write, in one archive.
	archiveAt   = 40
	archiveKeep = 8
)

// archiveSep joins a slot's name and an archive's sequence number.
const archiveSep = "\x1farchive:"

// Archived is what a slot's document keeps of its archived attempts and events: how to find them,
// and what the slot's state needs of them.
type Archived struct {
	Docs       int    `json:"docs"`                    // archive documents written and acknowledged: sequence 1..Docs
	Through    int    `json:"through,omitempty"`       // the highest archived attempt number
	Attempts   int    `json:"attempts,omitempty"`      // how many attempts went to archives
	Events     int    `json:"events,omitempty"`        // how many events went to archives
	Checkpoint string `json:"checkpoint,omitempty"`    // the newest checkpoint among the archived attempts
	CheckAt    int    `json:"checkpoint_at,omitempty"` // its attempt's number
	Resolved   int    `json:"resolved,omitempty"`      // the highest archived attempt a person resolved
	Failures   int    `json:"failures,omitempty"`      // archived failed or unknown attempts after Resolved
	Skipped    []int  `json:"skipped,omitempty"`       // names passed over: archives that do not count
	Gone       []span `json:"gone,omitempty"`          // names emptied by prunes, then deleted: they do not count either
}

// span is a range of archive names, first and last included.
type span [2]int

// shows reports whether the archive named seq counts: acknowledged, and neither passed over nor
// gone. A document under a name that does not count is never shown, and a prune deletes it: a
// writer that read the slot long ago can write an archive again under a name a prune emptied and
// deleted (names are taken by create-only writes), and what it holds was pruned.
func (arc *Archived) shows(seq int) bool {
	return seq >= 1 && seq <= arc.Docs && !slices.Contains(arc.Skipped, seq) && !arc.gone(seq)
}

func (arc *Archived) gone(seq int) bool {
	for _, g := range arc.Gone {
		if seq >= g[0] && seq <= g[1] {
			return true
		}
	}
	return false
}

// withGone returns arc.Gone with the names of seqs added, in a new slice: sorted spans, adjacent
// ones merged, so that it holds one span per run of names gone (prunes empty the oldest first).
func (arc *Archived) withGone(seqs []int) []span {
	var all []span
	all = append(all, arc.Gone...)
	for _, n := range seqs {
		all = append(all, span{n, n})
	}
	slices.SortFunc(all, func(a, b span) int { return a[0] - b[0] })
	var out []span
	for _, g := range all {
		if k := len(out) - 1; k >= 0 && g[0] <= out[k][1]+1 {
			out[k][1] = max(out[k][1], g[1])
			continue
		}
		out = append(out, g)
	}
	return out
}

// ArchiveSlot is the slot name of the seq'th archive of slot.
func ArchiveSlot(slot string, seq int) string {
	return slot + archiveSep + fmt.Sprintf("%010d", seq)
}

// splitArchive returns the slot an archive document belongs to and its sequence number; ok is
// false for a slot's own document.
func splitArchive(slot string) (base string, seq int, ok bool) {
	i := strings.Index(slot, archiveSep)
	if i < 0 {
		return slot, 0, false
	}
	n, err := strconv.Atoi(slot[i+len(archiveSep):])
	if err != nil {
		return slot, 0, false
	}
	return slot[:i], n, true
}

// IsArchive reports whether the document is an archive of a slot's older attempts and events
// (not a slot of its own).
func (d *Doc) IsArchive() bool {
	_, _, ok := splitArchive(d.Slot)
	return ok
}

// archivable reports whether a may leave its slot's document: it is not running. What a slot's
// state reads beyond the archived summary — its last attempt (whether it waits), the one running —
// is among the newest the document keeps; an unknown attempt an older one, never resolved (only
// the last can be), is counted in Archived.Failures.
func archivable(a store.Attempt) bool { return a.State != store.Running }

// chunk picks what the next archive of d takes: when it holds archiveAt attempts or more, its
// oldest up to all but archiveKeep (up to a running one, which is the newest anyway); and when it
// holds archiveAt events or more, its oldest up to all but archiveKeep, but for the newest review
// of the last attempt (it makes the slot wait).
func chunk(d *Doc) (attempts []store.Attempt, events []Event) {
	if len(d.Attempts) >= archiveAt {
		for _, a := range d.Attempts[:len(d.Attempts)-archiveKeep] {
			if !archivable(a) {
				break
			}
			attempts = append(attempts, a)
		}
	}
	if len(d.Events) >= archiveAt {
		review := -1
		if n := len(d.Attempts); n > 0 {
			for i := len(d.Events) - 1; i >= 0; i-- {
				if e := d.Events[i]; e.Kind == store.Review && e.Attempt == d.Attempts[n-1].Number {
					review = i
					break
				}
			}
		}
		for i, e := range d.Events[:len(d.Events)-archiveKeep] {
			if i != review {
				events = append(events, e)
			}
		}
	}
	return attempts, events
}

// maxSkips bounds how many archive names one archiving passes over (see archive).
const maxSkips = 4

// archive moves d's oldest attempts and events to a new archive document when d holds too many
// (chunk), and acknowledges it in d.Archived; d is then saved by the caller, with its own
// compare-and-set. The archive is written first, unfenced (it holds only what has ended), and
// never rewritten. When one of the same name exists, written by an archiving whose document write
// did not happen (a crash, a lost race, a writer fenced out): if everything it holds is still in d,
// that is what d archives; if not (it was made from an older read, since pruned, or belongs to a
// slot forgotten and begun again), its name is skipped (Archived.Skipped: never shown, and prune
// deletes it) and the next one taken. A failure to write or read leaves d as it was, to try again
// at its next write.
func (l Ledger) archive(ctx context.Context, d *Doc) {
	attempts, events := chunk(d)
	if len(attempts) == 0 && len(events) == 0 {
		return
	}
	arc := Archived{}
	if d.Archived != nil {
		arc = *d.Archived
		arc.Skipped = append([]int(nil), arc.Skipped...)
	} else if len(d.Attempts) > 0 && d.Attempts[0].Number > 1 {
		// No count, and attempts gone: archived by a once whose count an older once's write
		// dropped, or pruned. Count the slot's archives, if any, from the task's documents (once:
		// the count is saved with d, even when there are none). A slot's first archiving (its
		// attempts from the first) lists nothing.
		var err error
		if arc, err = l.recount(ctx, d); err != nil {
			return
		}
	}
	docs0, seq := arc.Docs, arc.Docs+1
	a := &Doc{Task: d.Task, Attempts: attempts, Events: events}
	for skips := 0; ; {
		a.Slot = ArchiveSlot(d.Slot, seq)
		_, err := l.KV.Save(ctx, a, 0, 0, "")
		if err == nil {
			break
		}
		if !errors.Is(err, ErrStale) {
			return
		}
		ex, _, _, err := l.KV.Load(ctx, a.Task, a.Slot)
		if err != nil || ex == nil { // gone again (a prune): try at the next write
			return
		}
		if empty(ex) { // emptied by a prune, and counted by it: on to the next name
			arc.Docs = seq
			seq++
			continue
		}
		if holds(d, ex) {
			a = ex
			break
		}
		if skips == maxSkips { // what was passed over is saved with d; the rest is for its next write
			if arc.Docs > docs0 || d.Archived == nil {
				d.Archived = &arc
			}
			return
		}
		arc.Skipped = append(arc.Skipped, seq)
		skips++
		arc.Docs = seq
		seq++
	}
	arc.Docs = seq
	arc.fold(a)
	d.Archived = &arc
	d.Attempts, d.Events = without(d, a)
}

// recount returns the count of d's slot's archives as the task's documents show them: each archive
// of the slot, in sequence order (the order they were written in, oldest first), folded in, up to
// the first whose entries d still holds (a crash between its write and d's: archive takes it);
// names missing (deleted by a prune) are not counted. A document that lost its count gets it back.
func (l Ledger) recount(ctx context.Context, d *Doc) (Archived, error) {
	docs, err := l.KV.Docs(ctx, d.Task)
	if err != nil {
		return Archived{}, err
	}
	type found struct {
		seq int
		doc *Doc
	}
	var arcs []found
	for _, x := range docs {
		if base, seq, ok := splitArchive(x.Slot); ok && base == d.Slot && x.Task == d.Task {
			arcs = append(arcs, found{seq, x})
		}
	}
	slices.SortFunc(arcs, func(a, b found) int { return a.seq - b.seq })
	var arc Archived
	for _, x := range arcs {
		if !empty(x.doc) && holds(d, x.doc) { // still in d: an archiving whose document write did not happen
			break
		}
		arc.fold(x.doc)
		arc.Docs = x.seq
	}
	return arc, nil
}

// fold counts the archive a in the summary.
func (arc *Archived) fold(a *Doc) {
	arc.Attempts += len(a.Attempts)
	arc.Events += len(a.Events)
	for _, x := range a.Attempts {
		arc.Through = max(arc.Through, x.Number)
		if x.Checkpoint != "" {
			arc.Checkpoint, arc.CheckAt = x.Checkpoint, x.Number
		}
		if x.Resolution != nil {
			arc.Resolved, arc.Failures = x.Number, 0
		}
		if x.Number > arc.Resolved && (x.State == store.Failed || x.State == store.Unknown) {
			arc.Failures++
		}
	}
}

// attemptKey identifies an attempt within its slot.
type attemptKey struct {
	n   int
	run string
}

type eventKey struct {
	kind    store.State
	run     string
	attempt int
	at      int64
	note    string
}

func keyOf(e Event) eventKey { return eventKey{e.Kind, e.RunID, e.Attempt, e.At.UnixNano(), e.Note} }

func empty(d *Doc) bool { return len(d.Attempts) == 0 && len(d.Events) == 0 }

// holds reports whether every attempt and event of the archive a is in d.
func holds(d, a *Doc) bool {
	as := map[attemptKey]bool{}
	for _, x := range d.Attempts {
		as[attemptKey{x.Number, x.RunID}] = true
	}
	for _, x := range a.Attempts {
		if !as[attemptKey{x.Number, x.RunID}] {
			return false
		}
	}
	es := map[eventKey]int{}
	for _, e := range d.Events {
		es[keyOf(e)]++
	}
	for _, e := range a.Events {
		if es[keyOf(e)]--; es[keyOf(e)] < 0 {
			return false
		}
	}
	return true
}

// without returns d's attempts and events less those the archive a holds.
func without(d, a *Doc) ([]store.Attempt, []Event) {
	as := map[attemptKey]bool{}
	for _, x := range a.Attempts {
		as[attemptKey{x.Number, x.RunID}] = true
	}
	es := map[eventKey]int{}
	for _, e := range a.Events {
		es[keyOf(e)]++
	}
	var kept []store.Attempt
	for _, x := range d.Attempts {
		if !as[attemptKey{x.Number, x.RunID}] {
			kept = append(kept, x)
		}
	}
	var keptE []Event
	for _, e := range d.Events {
		if es[keyOf(e)] > 0 {
			es[keyOf(e)]--
			continue
		}
		keptE = append(keptE, e)
	}
	return kept, keptE
}

// acknowledged returns, for History and Prune, the slot documents among docs by (task, slot),
// and whether each archive among them is one its slot's document acknowledges. An archive whose
// slot's document is gone is not: a forget deletes the document first, then its archives, and a
// forget that stopped half way leaves them for the next prune to delete.
func acknowledged(docs []*Doc) (slots map[string]*Doc, ok func(d *Doc) bool) {
	slots = map[string]*Doc{}
	for _, d := range docs {
		if !d.IsArchive() {
			slots[docKey(d.Task, d.Slot)] = d
		}
	}
	return slots, func(d *Doc) bool {
		base, seq, arc := splitArchive(d.Slot)
		if !arc {
			return true
		}
		m := slots[docKey(d.Task, base)]
		return m != nil && m.Archived != nil && m.Archived.shows(seq)
	}
}

// checkSlot refuses a slot name with the archives' separator's control character: a slot is
// checked where a user names it (the CLI), but a library caller could pass one.
func checkSlot(slot string) error {
	if strings.IndexByte(slot, archiveSep[0]) >= 0 {
		return fmt.Errorf("%w: slot %q contains %q, which the ledger keeps for its archives: use printable characters", store.ErrInvalid, slot, archiveSep[:1])
	}
	return nil
}

// counted gives d back the count of its slot's archives (Doc.Archived) when an older once, which
// does not know archives, rewrote the document and dropped it: attempts are gone from d (its first
// is not attempt 1), or an older once wrote it last (no history-index field) and it has events.
// Without the count the slot's state misses its archived failures and resolutions (a run past
// --max-attempts began) and history its archived entries. The count is read from the task's
// documents (recount) and saved with d's next write, even when there are none.
func (l Ledger) counted(ctx context.Context, d *Doc) error {
	if d == nil || d.Archived != nil || d.IsArchive() {
		return nil
	}
	gone := len(d.Attempts) > 0 && d.Attempts[0].Number > 1
	if !gone && (d.Marked || len(d.Events) == 0) {
		return nil
	}
	arc, err := l.recount(ctx, d)
	if err != nil {
		return err
	}
	d.Archived = &arc
	return nil
}
