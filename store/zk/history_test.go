package zk

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once/internal/costs"
	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/internal/kvstore/kvtest"
	"github.com/once-run/once/store"
)

// TestArchiveMarksRoundTrips: an archive's marks fall in buckets its slot's document made already
// (the same instants): its write finds those that exist in one parallel read, not one failed multi
// per bucket (33 multis before). The multis are counted (the relay's round trips are logged: the
// parallel reads count unevenly).
// An archive is written on a run's path (every 32 runs of a slot), and its attempts are usually
// each in a second of their own (a job due every minute).
func TestArchiveMarksRoundTrips(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s, relay, multis := multisCounted(ctx, t)
	k := kv{s}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var attempts []store.Attempt
	for i := range 32 {
		at := base.Add(time.Duration(i) * time.Minute)
		attempts = append(attempts, store.Attempt{Task: "t", Slot: "s", RunID: "r", Number: i + 1, State: store.Succeeded, StartedAt: at, EndedAt: &at})
	}
	if _, err := k.Save(ctx, &kvstore.Doc{Task: "t", Slot: "s", Attempts: attempts}, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	before, m0 := relay.Trips(), multis.Load()
	arc := &kvstore.Doc{Task: "t", Slot: kvstore.ArchiveSlot("s", 1), Attempts: attempts}
	if _, err := k.Save(ctx, arc, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	n := multis.Load() - m0
	t.Logf("an archive of 32 attempts in 32 seconds whose buckets exist: %d multis, %d round trips", n, relay.Trips()-before)
	if n > 2 {
		t.Errorf("the archive's write sent %d multis: one per bucket that exists", n)
	}
	// Every mark of both documents is in the index.
	for _, d := range []*kvstore.Doc{{Task: "t", Slot: "s", Attempts: attempts}, arc} {
		for _, m := range d.Marks() {
			ok, _, err := s.c.Exists(s.markPath("t", m))
			if err != nil || !ok {
				t.Fatalf("mark %s of %q: %v %v", m, d.Slot, ok, err)
			}
		}
	}
}

// TestForgetDropsBuckets: a document's delete (a forget, a prune of an archive) takes its marks
// out and the buckets they leave empty, so that the index does not keep a node per second the
// task ran in after its history is pruned, nor, once the task's last document went, the task's
// directories.
func TestForgetDropsBuckets(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	k := kv{s}
	base := time.Now().Add(-30 * 24 * time.Hour).Truncate(time.Second)
	var attempts []store.Attempt
	for i := range 8 {
		at := base.Add(time.Duration(i) * 3 * time.Hour) // L2 buckets of their own
		attempts = append(attempts, store.Attempt{Task: "t", Slot: "s", RunID: "r", Number: i + 1, State: store.Succeeded, StartedAt: at, EndedAt: &at})
	}
	keep := time.Now().Add(-time.Minute)
	for _, d := range []*kvstore.Doc{
		{Task: "t", Slot: "s", Attempts: attempts},
		{Task: "t", Slot: "other", Attempts: []store.Attempt{{Task: "t", Slot: "other", RunID: "o", Number: 1, State: store.Succeeded, StartedAt: keep, EndedAt: &keep}}},
	} {
		if _, err := k.Save(ctx, d, 0, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	d, ver, _, err := k.Load(ctx, "t", "s")
	if err != nil || d == nil {
		t.Fatal(d, err)
	}
	if err := k.Delete(ctx, d, ver); err != nil {
		t.Fatal(err)
	}
	l1s, _, err := s.c.Children(s.historyDir("t"))
	if err != nil {
		t.Fatal(err)
	}
	other := kvstore.Mark{At: keep.UnixMicro(), Task: "t", Slot: "other"}.Key()
	if len(l1s) != 1 || l1s[0] != other[:markLevels[0]] {
		t.Fatalf("the task's index holds the buckets %v after its slot's delete: want only %s's", l1s, other[:markLevels[0]])
	}
	if ok, _, err := s.c.Exists(s.markPath("t", other)); err != nil || !ok {
		t.Fatalf("the other slot's mark: %v %v", ok, err)
	}
	// The task's last document, with a missed event (a mark in the index of its kind too): its
	// delete leaves no directory of the task's in either index, nor in HistoryTasks.
	if err := s.Record(ctx, store.Event{Task: "t", Slot: "other", Kind: store.Missed, Holder: "n"}); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.c.Exists(s.indexDir("t", store.Missed)); err != nil || !ok {
		t.Fatalf("the index of missed events: %v %v", ok, err)
	}
	if d, ver, _, err = k.Load(ctx, "t", "other"); err != nil || d == nil {
		t.Fatal(d, err)
	}
	if err := k.Delete(ctx, d, ver); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{s.historyDir("t"), s.kindRoot() + "/" + esc("t")} {
		if ok, _, err := s.c.Exists(dir); err != nil || ok {
			t.Errorf("%s after the task's last document went: exists %v, %v", dir, ok, err)
		}
	}
	if tasks, err := k.HistoryTasks(ctx); err != nil || len(tasks) != 0 {
		t.Errorf("HistoryTasks after the task's last document went: %v, %v", tasks, err)
	}
}

// olderDoc rewrites the document of task t's slot s behind the store's back as a once before the
// document's flag leaves it (no "flag": true), and loads it again.
func olderDoc(ctx context.Context, t *testing.T, s *Store, flag string) (*kvstore.Doc, kvstore.Version) {
	t.Helper()
	k := kv{s}
	d, _, _, err := k.Load(ctx, "t", "s")
	if err != nil {
		t.Fatal(err)
	}
	b := string(d.Marshal())
	older := strings.Replace(b, `,"`+flag+`":true`, "", 1)
	if older == b {
		t.Fatalf("the document has no %q to take out: %s", flag, b)
	}
	if _, err := s.c.Set(s.docPath("t", "s"), []byte(older), -1); err != nil {
		t.Fatal(err)
	}
	d, ver, _, err := k.Load(ctx, "t", "s")
	if err != nil {
		t.Fatal(err)
	}
	return d, ver
}

// TestOlderDocMarksRoundTrips: this once's first write of a document an older once wrote (no
// "hx", its marks not known to be in the index) puts them all, in parallel: up to 80 (archiveAt
// attempts and events) on a run's path. Its round trips are logged, not asserted (parallel
// requests count unevenly): 9 measured, 40 one after the other.
func TestOlderDocMarksRoundTrips(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s, relay := relayed(ctx, t, nil)
	k := kv{s}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	var attempts []store.Attempt
	for i := range 32 {
		at := base.Add(time.Duration(i) * time.Minute)
		attempts = append(attempts, store.Attempt{Task: "t", Slot: "s", RunID: "r", Number: i + 1, State: store.Succeeded, StartedAt: at, EndedAt: &at})
	}
	if _, err := k.Save(ctx, &kvstore.Doc{Task: "t", Slot: "s", Attempts: attempts}, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	d, ver := olderDoc(ctx, t, s, "hx") // an older once's write: no "hx"
	at := time.Now()
	d.Attempts = append(d.Attempts, store.Attempt{Task: "t", Slot: "s", RunID: "r", Number: 33, State: store.Succeeded, StartedAt: at, EndedAt: &at})
	before := relay.Trips()
	if _, err := k.Save(ctx, d, ver, 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("this once's first write of an older once's document of 33 marks: %d round trips (40 one after the other)", relay.Trips()-before)
	for _, m := range d.Marks() {
		if ok, _, err := s.c.Exists(s.markPath("t", m)); err != nil || !ok {
			t.Fatalf("mark %s: %v %v", m, ok, err)
		}
	}
}

// TestPageAcrossTasks: a page of history across tasks reads the tasks' indexes in parallel (one
// after the other they cost four round trips or more a task: 99 for 24 tasks, measured through a
// relay; logged, not asserted, as parallel reads count unevenly); its entries, all of one
// microsecond, are those and in the order of the read of every document.
func TestPageAcrossTasks(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s, relay := relayed(ctx, t, nil)
	k := kv{s}
	at := time.Now().Add(-time.Hour)
	for i := range 24 {
		task := "t" + strings.Repeat("x", i)
		a := store.Attempt{Task: task, Slot: "s", RunID: "r", Number: 1, State: store.Succeeded, StartedAt: at, EndedAt: &at}
		if _, err := k.Save(ctx, &kvstore.Doc{Task: task, Slot: "s", Attempts: []store.Attempt{a}}, 0, 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.History(ctx, store.HistoryQuery{Limit: 1}); err != nil { // the index's built mark
		t.Fatal(err)
	}
	before := relay.Trips()
	es, err := s.History(ctx, store.HistoryQuery{Limit: 10})
	if err != nil || len(es) != 10 {
		t.Fatalf("History: %d entries, %v", len(es), err)
	}
	t.Logf("a page of 10 across 24 tasks: %d round trips", relay.Trips()-before)
	scan := kvstore.Ledger{KV: struct{ kvstore.KV }{k}} // no HistoryKV: every document read
	want, err := scan.History(ctx, store.HistoryQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if es[i].Cursor != want[i].Cursor || es[i].Task != want[i].Task {
			t.Fatalf("entry %d: %s %s, want %s %s", i, es[i].Task, es[i].Cursor, want[i].Task, want[i].Cursor)
		}
	}
}

// TestForgetRacesNewDocument: the delete of a task's last document (which drops the task's index
// directories once empty) and the write of a new document of the same task at the same time: the
// new document's marks, in both indexes, and the task in HistoryTasks are there after either
// order (a write into a directory deleted meanwhile makes it again: fixMark).
func TestForgetRacesNewDocument(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	kvtest.ForgetRacesNewDocument(t, ctx, s, kv{s}, 20, nil)
}

// TestEarlierKindMarksExist: the first write of a document an earlier once wrote (its marks of the
// kinds after missed not known to be in: no "hk2") whose kind marks the indexes' build put already
// puts them again without a failed multi per mark: a slot's document holds up to 40 skipped events
// or failed attempts (archiveAt), and one failed multi each took the write past its retries.
func TestEarlierKindMarksExist(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s, _, multis := multisCounted(ctx, t)
	k := kv{s}
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	d := &kvstore.Doc{Task: "t", Slot: "s"}
	code := 1
	for i := range 30 {
		at := base.Add(time.Duration(i) * time.Minute)
		d.Attempts = append(d.Attempts, store.Attempt{Task: "t", Slot: "s", RunID: "r", Number: i + 1, State: store.Failed, ExitCode: &code, StartedAt: at, EndedAt: &at})
		d.Events = append(d.Events, kvstore.Event{Kind: store.Skipped, At: at.Add(time.Second)})
	}
	if _, err := k.Save(ctx, d, 0, 0, ""); err != nil { // every mark, those of a kind too: as the build puts them
		t.Fatal(err)
	}
	d, ver := olderDoc(ctx, t, s, "hk2") // an earlier once's write: no "hk2"
	// A millisecond after the newest skip, in the buckets it made: at time.Now() the event could
	// fall in a kind's 72-minute bucket not made yet (2–3 multis more: a fresh-clone run's 5).
	d.Events = append(d.Events, kvstore.Event{Kind: store.Skipped, At: base.Add(29*time.Minute + time.Second + time.Millisecond)})
	m0 := multis.Load()
	if _, err := k.Save(ctx, d, ver, 0, ""); err != nil {
		t.Fatalf("this once's first write of an earlier once's document: %v", err)
	}
	t.Logf("this once's first write of an earlier once's document with 60 kind marks in the index: %d multis", multis.Load()-m0)
	if n := multis.Load() - m0; n > 3 {
		t.Errorf("the write sent %d multis: one per mark there", n)
	}
	for _, m := range d.Marks() {
		if ok, _, err := s.c.Exists(s.markPath("t", m)); err != nil || !ok {
			t.Fatalf("mark %s: %v %v", m, ok, err)
		}
	}
}

// TestKindNewBucketMultis: a write whose event is its kind's first in a new L2 bucket (72 minutes)
// of an L1 bucket there sends 3 multis (its own, failing at the kind's bucket; one that checks the
// directories above and makes the L2 bucket; its own again); a kind's first in the task, 4 (the
// second fails at the first directory missing, a third makes them); the next in its L2 bucket, 1.
func TestKindNewBucketMultis(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	s, _, multis := multisCounted(ctx, t)
	k := kv{s}
	l1 := time.UnixMicro(1 << 40 * (time.Now().UnixMicro() >> 40)) // an L1 bucket's start: 12.7 days
	for i, c := range []struct {
		at   time.Time
		want int64
	}{{l1.Add(time.Minute), 4}, {l1.Add(2 * time.Hour), 3}, {l1.Add(2*time.Hour + 3*time.Second), 1}} {
		d := &kvstore.Doc{Task: "t", Slot: fmt.Sprintf("s%d", i), Events: []kvstore.Event{{Kind: store.Busy, At: c.at}}}
		if _, err := k.Save(ctx, d, 0, 0, ""); err != nil { // its document and the task's buckets, first
			t.Fatal(err)
		}
		d, ver, _, err := k.Load(ctx, "t", d.Slot)
		if err != nil {
			t.Fatal(err)
		}
		d.Events = append(d.Events, kvstore.Event{Kind: store.Skipped, At: c.at.Add(2 * time.Second)}) // not in the task's L3 bucket just made
		m0 := multis.Load()
		if _, err := k.Save(ctx, d, ver, 0, ""); err != nil {
			t.Fatal(err)
		}
		if n := multis.Load() - m0; n != c.want {
			t.Errorf("a skipped event at %v: %d multis, want %d", c.at, n, c.want)
		}
		for _, m := range d.Marks() {
			if ok, _, err := s.c.Exists(s.markPath("t", m)); err != nil || !ok {
				t.Fatalf("mark %s: %v %v", m, ok, err)
			}
		}
	}
}

// relayed opens a store on a fresh prefix through a relay that counts its round trips (a session
// of an hour: no pings in the count), trace (if not nil) seeing each request; both close when t ends.
func relayed(ctx context.Context, t *testing.T, trace func([]byte)) (*Store, *costs.Relay) {
	t.Helper()
	u, err := url.Parse(withPrefix(t) + "&session_timeout=1h")
	if err != nil {
		t.Fatal(err)
	}
	relay, err := costs.NewRelay(ctx, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	relay.Trace = trace
	t.Cleanup(func() { relay.Close() })
	u.Host = relay.Addr()
	s, err := Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, relay
}

// multisCounted is relayed with a count of the multis sent (a multi waits for its answer).
func multisCounted(ctx context.Context, t *testing.T) (*Store, *costs.Relay, *atomic.Int64) {
	t.Helper()
	multis := new(atomic.Int64)
	s, relay := relayed(ctx, t, func(b []byte) { // a request: length, xid, opcode (14: multi)
		if len(b) >= 12 && binary.BigEndian.Uint32(b[8:12]) == 14 {
			multis.Add(1)
		}
	})
	return s, relay, multis
}
