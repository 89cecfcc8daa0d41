package web

import (
	"testing"

	"github.com/once-run/once/store"
)

// seedTies writes n attempts of task d straight into the ledger, two at each start time (ties the
// cursor's sequence orders), every third succeeded, and an event beside every fifth.
func seedTies(t *testing.T, n int) (store.Store, *Server) {
	t.Helper()
	s, db := rawLedger(t)
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
		INSERT INTO attempts (task, slot, number, run_id, state, holder, token, started_at, ended_at)
		SELECT 'd', 's' || i, 1, 'r' || i, CASE WHEN i % 3 = 0 THEN 'succeeded' ELSE 'failed' END, 'h', 1,
			1700000000000000 + (i / 2) * 1000, 1700000000000000 + (i / 2) * 1000 + 500 FROM n`, n); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 5 UNION ALL SELECT i + 5 FROM n WHERE i + 5 <= ?1)
		INSERT INTO events (task, slot, kind, run_id, holder, token, attempt, at, note)
		SELECT 'd', 's' || i, 'busy', 'b' || i, 'x', 0, 0, 1700000000000000 + (i / 2) * 1000, '' FROM n`, n); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Store: s, DSN: "sqlite:///x.db"})
	if err != nil {
		t.Fatal(err)
	}
	return s, srv
}

// Following next through a history filtered in the web layer (an attempt state of a task) gives
// every entry the store's own filter gives, once each, in order, across ties and across pages
// that hold fewer than asked (or none); the walk ends.
func TestHistoryFilteredPagesFollowNext(t *testing.T) {
	s, srv := seedTies(t, 60)
	for _, kind := range []store.State{store.Succeeded, store.Failed, store.Busy} {
		want, err := s.History(t.Context(), store.HistoryQuery{Task: "d", Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		var got []store.Entry
		f := HistoryFilter{HistoryQuery: store.HistoryQuery{Task: "d", Kind: kind, Limit: 4}}
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatalf("%s: more than 100 pages", kind)
			}
			p, err := srv.history(t.Context(), f)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, p.Entries...)
			if p.Next == "" {
				break
			}
			if p.Next == f.Before {
				t.Fatalf("%s: next %s does not move", kind, p.Next)
			}
			f.Before = p.Next
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d entries through the pages, the store's filter has %d", kind, len(got), len(want))
		}
		for i := range want {
			if got[i].Cursor != want[i].Cursor {
				t.Fatalf("%s: entry %d is %s, want %s", kind, i, got[i].Cursor, want[i].Cursor)
			}
		}
	}
}

// A page after a cursor (towards newer entries) holds the entries nearest the cursor, filtered or
// not, as the store's own page after it does.
func TestHistoryFilteredPageAfter(t *testing.T) {
	s, srv := seedTies(t, 60)
	all, err := s.History(t.Context(), store.HistoryQuery{Task: "d"})
	if err != nil {
		t.Fatal(err)
	}
	from := all[len(all)-10].Cursor // ten entries from the oldest
	for _, kind := range []store.State{"", store.Succeeded, store.Failed, store.Busy} {
		want, err := s.History(t.Context(), store.HistoryQuery{Task: "d", Kind: kind, After: from, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		p, err := srv.history(t.Context(), HistoryFilter{HistoryQuery: store.HistoryQuery{Task: "d", Kind: kind, After: from, Limit: 3}})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) != len(want) {
			t.Fatalf("kind %q: %d entries after the cursor, want %d", kind, len(p.Entries), len(want))
		}
		for i := range want {
			if p.Entries[i].Cursor != want[i].Cursor {
				t.Errorf("kind %q: entry %d after the cursor is %s, want %s (the nearest)", kind, i, p.Entries[i].Cursor, want[i].Cursor)
			}
		}
	}
}
