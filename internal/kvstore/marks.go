package kvstore

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/once-run/once/store"
)

// The history index (HistoryKV) holds a mark for each (document, instant, kind) its entries have:
// "document D holds at least one attempt (or event) at microsecond T". A mark does not name one
// entry: an event's place in its document (its cursor's Seq) changes when older events move to an
// archive or are pruned, and a mark must not. Each task has its own index, so that one script, one
// transaction or one multi writes a document and its marks (a Redis Cluster keeps a task's keys in
// one slot); history across tasks merges the tasks' indexes.
//
// A mark's key is text whose byte order is history order, oldest first: the instant (16 hex
// digits), the kind ('e' for events, after 'a' for attempts: events come first in history among
// entries of the same instant) and the document's slot in hex (a slot's bytes, in their order,
// whatever they hold). A store reads a page of them newest first with a range, a limit and a
// descending order.

// A task's index of a kind (a kind mark, Kind set) holds the same marks for the entries of that
// kind only, so that a read of one kind (HistoryQuery.Kind: once status's and doctor's newest
// missed events, once history --kind, the dashboard's filter of an event kind) costs its page, not
// every mark of the task. Its keys are the mark's key after "!KIND!": a backend keeps them apart
// from the task's marks (another range or directory; on Redis the same sorted set, where '!' sorts
// them below every mark, so that an older once's reads of the marks meet them only past the
// oldest, and pass over them: a key whose first 16 bytes are not hex is none of its marks). Every
// event kind has one (an event's kind never changes) and the attempt states a person looks for
// (failed, unknown: a write that moves an attempt into or out of one moves its mark, as any other
// change of the document's marks); running and succeeded are most of a history, which a walk of
// the task's marks finds at once. Missed came first (KindsMarked, the built mark of an earlier
// once); the others after (KindsMarked2): a ledger an earlier once wrote gets them on its first
// read of one of them. On ZooKeeper the first mark of an index of a kind in a task's 72 minutes
// makes its buckets in a write's own round trips (store/zk): a busy or a skipped run's, a failed one's.

// IndexedKinds are the kinds that have an index of their own (KindMarked).
var IndexedKinds = []store.State{store.Missed, store.Busy, store.Skipped, store.Review, store.Failed, store.Unknown}

// firstKinds are the kinds of IndexedKinds an earlier once indexed (Doc.KindsMarked).
var firstKinds = []store.State{store.Missed}

// Indexed reports whether kind has an index of its own.
func Indexed(kind store.State) bool { return slices.Contains(IndexedKinds, kind) }

// Mark is one entry of a task's history index, or of its index of a kind.
type Mark struct {
	At    int64 // microseconds since 1970
	Event bool
	Task  string
	Slot  string      // the document's: a slot, or an archive of one
	Kind  store.State // set for a mark of the index of that kind
}

// KindPrefix is the head of the keys of the index of kind ("": the task's marks).
func KindPrefix(kind store.State) string {
	if kind == "" {
		return ""
	}
	return "!" + string(kind) + "!"
}

// SplitKind splits a key into its kind ("" for a mark of the task's index) and the mark's key.
func SplitKind(key string) (store.State, string) {
	if !strings.HasPrefix(key, "!") {
		return "", key
	}
	i := strings.IndexByte(key[1:], '!')
	if i < 0 {
		return "", key
	}
	return store.State(key[1 : 1+i]), key[2+i:]
}

// markHead is the length of a mark key's instant and kind.
const markHead = 17

// Key is m's key in its task's index.
func (m Mark) Key() string {
	kind := "a"
	if m.Event {
		kind = "e"
	}
	return KindPrefix(m.Kind) + fmt.Sprintf("%016x", uint64(m.At)^1<<63) + kind + hex.EncodeToString([]byte(m.Slot))
}

// head is m's instant and kind as a mark key begins with them, without its index's prefix.
func (m Mark) head() string {
	kind := "a"
	if m.Event {
		kind = "e"
	}
	return fmt.Sprintf("%016x", uint64(m.At)^1<<63) + kind
}

// ParseMark reads a key of task's index, or of its index of a kind; ok is false for a key this
// once does not write.
//
// A key read as a mark is the key that mark is written under (another writer's "!!" + a mark, or its
// hex in upper case, is none): a stale mark is removed by its key, and such a one stayed, to be
// met and its document read again by every page that came to it.
func ParseMark(task, key string) (Mark, bool) {
	kind, rest := SplitKind(key)
	if kind != "" && !Indexed(kind) || kind == "" && rest != key {
		return Mark{}, false
	}
	key = rest
	if len(key) < markHead || key[16] != 'a' && key[16] != 'e' || strings.ContainsAny(key, "ABCDEF") {
		return Mark{}, false
	}
	u, err := strconv.ParseUint(key[:16], 16, 64)
	if err != nil {
		return Mark{}, false
	}
	slot, err := hex.DecodeString(key[markHead:])
	if err != nil {
		return Mark{}, false
	}
	return Mark{At: int64(u ^ 1<<63), Event: key[16] == 'e', Task: task, Slot: string(slot), Kind: kind}, true
}

// cmp orders marks in history order: -1 when m comes first (newer, or as new and first).
func (m Mark) cmp(o Mark) int {
	switch {
	case m.At != o.At:
		return -cmpInt(m.At, o.At)
	case m.Event != o.Event:
		if m.Event {
			return -1
		}
		return 1
	}
	return -strings.Compare(docKey(m.Task, m.Slot), docKey(o.Task, o.Slot))
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func markOf(d *Doc, at time.Time, event bool) Mark {
	return Mark{At: at.Truncate(time.Microsecond).UnixMicro(), Event: event, Task: d.Task, Slot: d.Slot}
}

// Marks returns the keys of d's marks, sorted, without repeats: those of its task's index and
// those of its indexes of a kind (KindMarks).
func (d *Doc) Marks() []string {
	var out []string
	for _, a := range d.Attempts {
		out = append(out, markOf(d, a.StartedAt, false).Key())
	}
	for _, e := range d.Events {
		out = append(out, markOf(d, e.At, true).Key())
	}
	out = append(out, d.KindMarks()...)
	slices.Sort(out)
	return slices.Compact(out)
}

// KindMarks returns the keys of d's marks in its task's indexes of a kind (IndexedKinds).
func (d *Doc) KindMarks() []string {
	var out []string
	for _, a := range d.Attempts {
		if Indexed(a.State) {
			m := markOf(d, a.StartedAt, false)
			m.Kind = a.State
			out = append(out, m.Key())
		}
	}
	for _, e := range d.Events {
		if Indexed(e.Kind) {
			m := markOf(d, e.At, true)
			m.Kind = e.Kind
			out = append(out, m.Key())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// readMarks are the keys of d's marks known to be in the indexes as it was read: its task's index
// when Marked, its indexes of a kind when KindsMarked (missed) or KindsMarked2 (the others).
func (d *Doc) readMarks() []string {
	var out []string
	for _, k := range d.Marks() {
		if kind, _ := SplitKind(k); d.InIndex(kind) {
			out = append(out, k)
		}
	}
	return out
}

// InIndex reports whether d's marks of kind ("": its task's index) were known to be in the index
// as it was read.
func (d *Doc) InIndex(kind store.State) bool {
	switch {
	case kind == "":
		return d.Marked
	case slices.Contains(firstKinds, kind):
		return d.KindsMarked
	}
	return d.KindsMarked2
}

// MarkChanges returns the marks a write of d adds to its task's indexes and those it removes: the
// difference between d's marks and those of d as it was read. A document read without the field
// that says its marks are in the index (written by an older once, or new) adds all of its own and
// removes none (a mark left behind is passed over, and taken out, by the page that meets it); so
// does one read without the field that says its marks of a kind are in (KindsMarked), for those.
func (d *Doc) MarkChanges() (add, del []string) {
	now := d.Marks()
	for _, k := range now {
		if _, ok := slices.BinarySearch(d.read, k); !ok {
			add = append(add, k)
		}
	}
	for _, k := range d.read {
		if _, ok := slices.BinarySearch(now, k); !ok {
			del = append(del, k)
		}
	}
	return add, del
}

// ReadMarks returns the marks of d as it was read, for a delete of d: none when it was read
// without the field that says they are in the index (those of a kind: KindsMarked).
func (d *Doc) ReadMarks() []string { return d.read }

// Unmarked makes the next write of d say its marks are not all in the index: a backend that
// cannot put them all in the write of the document puts the rest after it, and a crash in between
// leaves the next write of d to put them all again.
func (d *Doc) Unmarked() { d.unmarked = true }
