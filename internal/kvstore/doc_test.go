package kvstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// FuzzDoc: a document any writer left (an older or newer once, a buggy or hostile one) decodes or is
// refused as corrupt, never a panic; what once reads of a decoded one (its state, marks, entries, what
// an archive and a prune take) is read without one too; and a decoded document written again reads
// back as itself: the same bytes, state and marks.
func FuzzDoc(f *testing.F) {
	f.Add([]byte(`{"task":"t","slot":"s","attempts":[{"task":"t","slot":"s","run_id":"r","attempt":1,"state":"unknown","started_at":"2026-12-01T00:00:00Z"}],"events":[{"kind":"review","attempt":1,"at":"2026-12-01T00:00:01+01:00"}],"hx":true}`))
	f.Add([]byte(`{"task":"t","slot":"s\u001farchive:0000000001","attempts":[{"attempt":3,"state":"failed","started_at":"0001-01-01T00:00:00Z"}],"hk":true,"hk2":true}`))
	f.Add([]byte(`{"task":"t","slot":"","archived":{"docs":3,"through":2,"skipped":[2],"gone":[[1,1]],"resolved":1,"failures":4},"retained":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"task":"t","slot":"s","attempts":[{"attempt":9223372036854775807,"state":"running"}],"archived":{"docs":9223372036854775807}}`))
	f.Add([]byte(`{"task":1,"attempts":{}}`))
	f.Add([]byte(`{"attempts":[{"exit_code":-1,"resolution":{"as":"succeeded"}}],"events":[{"kind":"missed","attempt":-5,"at":"9999-12-31T23:59:59.999999999Z"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Unmarshal(b)
		if err != nil {
			return
		}
		read(d)
		enc := d.Marshal()
		again, err := Unmarshal(enc)
		if err != nil {
			t.Fatalf("%s: written again as %s, which does not read: %v", b, enc, err)
		}
		read(again)
		if enc2 := again.Marshal(); !bytes.Equal(enc, enc2) {
			t.Fatalf("%s: written as %s, then as %s", b, enc, enc2)
		}
		if s1, s2 := js(d.State()), js(again.State()); s1 != s2 {
			t.Fatalf("%s: state %s, read again %s", b, s1, s2)
		}
		if m1, m2 := js(d.Marks()), js(again.Marks()); m1 != m2 || len(again.Unknown()) != 0 {
			t.Fatalf("%s: marks %s, read again %s (unknown %q)", b, m1, m2, again.Unknown())
		}
		for _, k := range d.Marks() {
			if m, ok := ParseMark(d.Task, k); !ok || m.Key() != k {
				t.Fatalf("%s: its mark %q reads as %+v, %v", b, k, m, ok)
			}
		}
	})
}

// read calls what once reads of a stored document.
func read(d *Doc) {
	d.Waits()
	d.Runs()
	d.MarkChanges()
	chunk(d)
	pruneFacts(d, store.PruneRequest{Before: time.Now()})
	entries(d, store.HistoryQuery{}, nil, nil, nil, func(e store.Entry, c store.Cursor) {
		if _, err := store.ParseCursor(e.Cursor); err != nil && len(e.Cursor) < 1024 {
			panic("a cursor given out does not parse: " + err.Error())
		}
	})
	if d.Archived != nil {
		for seq := range 3 {
			d.Archived.shows(seq)
		}
	}
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// FuzzMark: any key decodes as a mark or is not one (ok false), never a panic; a key read as a mark is
// the key that mark is written under (a key once does not write is not taken for one: a stale mark is
// removed by its key); and a mark's key reads back as the mark.
func FuzzMark(f *testing.F) {
	f.Add("t", "7fffffffffffffffa73", int64(0), true, "s", "")
	f.Add("t", "!failed!8000000000000000e", int64(-1), false, "", "failed")
	f.Add("t", "!nope!8000000000000000e", int64(1<<62), false, "\xff\x00", "missed")
	f.Add("", "8000000000000000E", int64(0), false, "", "running")
	f.Add("t", "7FFFFFFFFFFFFFFFa73", int64(0), false, "", "") // upper case: not a key once writes
	f.Add("t", "!!0000000000000000a", int64(0), false, "", "") // no kind between the !s: nor this
	f.Fuzz(func(t *testing.T, task, key string, at int64, event bool, slot, kind string) {
		if m, ok := ParseMark(task, key); ok && m.Key() != key {
			t.Fatalf("%q reads as %+v, whose key is %q", key, m, m.Key())
		}
		m := Mark{At: at, Event: event, Task: task, Slot: slot, Kind: store.State(kind)}
		if !Indexed(m.Kind) {
			m.Kind = ""
		}
		if got, ok := ParseMark(task, m.Key()); !ok || got != m {
			t.Fatalf("%+v: key %q reads as %+v, %v", m, m.Key(), got, ok)
		}
	})
}

// TestHostileDocuments: numbers no once writes are refused as corrupt (ErrUnavailable: nothing is
// decided on them), and a slot counting the most archives a document may name is read with one
// listing of its task, not a walk of its names. Before, 9223372036854775807 archives hung every read
// of the slot, and a negative count of failures let a task run past --max-attempts.
func TestHostileDocuments(t *testing.T) {
	for _, b := range []string{
		`{"task":"t","slot":"s","archived":{"docs":9223372036854775807}}`,
		`{"task":"t","slot":"s","archived":{"docs":1,"failures":-3}}`,
		`{"task":"t","slot":"s","archived":{"docs":1,"through":9223372036854775807}}`,
		`{"task":"t","slot":"s","attempts":[{"attempt":9223372036854775807,"state":"failed"}]}`,
		`{"task":"t","slot":"s","attempts":[{"attempt":-1,"state":"failed"}]}`,
		`{"task":"t","slot":"s","events":[{"kind":"review","attempt":-1}]}`,
	} {
		if d, err := Unmarshal([]byte(b)); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s: %+v, %v; want ErrUnavailable", b, d, err)
		}
	}
	m := newMem()
	now := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	d := &Doc{Task: "t", Slot: "s", Attempts: []store.Attempt{{Task: "t", Slot: "s", RunID: "r", Number: 1, State: store.Failed, StartedAt: now}},
		Archived: &Archived{Docs: maxArchives}}
	if _, err := m.Save(context.Background(), d, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	es, err := (Ledger{KV: m}).History(context.Background(), store.HistoryQuery{Task: "t", Slot: "s"})
	runtime.ReadMemStats(&after)
	if err != nil || len(es) != 1 || m.docs != 1 {
		t.Fatalf("%d entries, %d listings, error %v; want the one attempt from one listing", len(es), m.docs, err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 { // was 733 MiB: every name listed first
		t.Errorf("the slot's history allocated %d MiB", n>>20)
	}
}

// TestRecordRefusesWhatReadsRefuse: an event whose attempt number a read would refuse as corrupt is
// refused before it is written (ErrInvalid); written, it made its slot unreadable for good.
func TestRecordRefusesWhatReadsRefuse(t *testing.T) {
	ctx, l := context.Background(), Ledger{KV: newMem()}
	most := int64(maxNumber) // a value, not a constant: an int of 32 bits holds neither bound
	bad, good := []int{-1}, math.MaxInt32
	if strconv.IntSize == 64 {
		bad, good = append(bad, int(most+1)), int(most)
	}
	for _, n := range bad {
		if err := l.Record(ctx, store.Event{Task: "t", Slot: "s", Kind: store.Review, Attempt: n}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("attempt %d: %v; want ErrInvalid", n, err)
		}
	}
	if err := l.Record(ctx, store.Event{Task: "t", Slot: "s", Kind: store.Review, Attempt: good}); err != nil {
		t.Fatal(err)
	}
	if st, err := l.Slot(ctx, "t", "s"); err != nil {
		t.Fatalf("the slot does not read: %+v, %v", st, err)
	}
}
