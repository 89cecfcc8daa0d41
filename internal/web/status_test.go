package web

import (
	"database/sql"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/once-run/once/store"
)

// A person's resolution of a task's last attempt is its status on the overview: an unknown
// attempt resolved as succeeded is done, one resolved as failed is failed.
func TestStatusFollowsResolution(t *testing.T) {
	for _, c := range []struct {
		state store.State
		as    store.State
		want  string
	}{
		{store.Unknown, "", statusUnknown},
		{store.Unknown, store.Succeeded, statusOK},
		{store.Unknown, store.Failed, statusFailed},
		{store.Failed, store.Succeeded, statusOK},
		{store.Failed, "", statusFailed},
		{store.Succeeded, "", statusOK},
	} {
		a := &store.Attempt{State: c.state}
		if c.as != "" {
			a.Resolution = &store.Resolution{As: c.as, By: "ops"}
		}
		if got := status(TaskRow{Last: a}); got != c.want {
			t.Errorf("last attempt %s resolved as %q: status %s, want %s", c.state, c.as, got, c.want)
		}
	}
}

// A task's last success: its newest succeeded attempt, whether it is on the overview's page of the
// task's newest entries (found there, no second read) or older than the page.
func TestLastSuccess(t *testing.T) {
	sd := newSeeded(t)
	okA := sd.run("a", "s1", "h", store.Succeeded)
	sd.run("a", "s2", "h", store.Failed)
	sd.run("b", "s1", "h", store.Failed)
	okC := sd.run("c", "s0", "h", store.Succeeded)
	for i := range 2*trendLen + 1 {
		sd.run("c", "f"+string(rune('a'+i)), "h", store.Failed)
	}
	srv, _ := sd.server("")
	for _, c := range []struct {
		task string
		want *store.Attempt
	}{{"a", &okA}, {"b", nil}, {"c", &okC}} {
		row, err := srv.taskRow(t.Context(), c.task, false)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.want == nil && row.LastSuccess != nil:
			t.Errorf("%s: last success %v, want none", c.task, row.LastSuccess)
		case c.want != nil && (row.LastSuccess == nil || !row.LastSuccess.Equal(*c.want.EndedAt)):
			t.Errorf("%s: last success %v, want %v", c.task, row.LastSuccess, c.want.EndedAt)
		}
	}
}

// A task whose newest store.SuccessScan attempts all failed: its older ones are not read, so its
// last success is not known, and the row says so (the page and the API) rather than "never".
func TestLastSuccessNotKnown(t *testing.T) {
	_, sd, ok, db := succeededRaw(t)
	// The failures since, written straight into the ledger (a thousand runs take a minute).
	insertFailures(t, db, store.SuccessScan, ok.EndedAt.UnixMicro()+1000)
	srv, ts := sd.server("")
	row, err := srv.taskRow(t.Context(), "d", false)
	if err != nil {
		t.Fatal(err)
	}
	if row.LastSuccess != nil || row.NoSuccessIn != store.SuccessScan {
		t.Fatalf("last success %v, no success in %d: want none and %d", row.LastSuccess, row.NoSuccessIn, store.SuccessScan)
	}
	if _, body := get(t, ts, "/"); !strings.Contains(body, "none in the newest "+strconv.Itoa(store.SuccessScan)+" attempts") {
		t.Errorf("the overview does not say the last success is not known:\n%s", body)
	}
	if _, body := get(t, ts, "/api/v1/tasks"); !strings.Contains(body, `"no_success_in": `+strconv.Itoa(store.SuccessScan)) {
		t.Errorf("the API does not say the last success is not known:\n%s", body)
	}
	// One success more among the newest: it is the last success again.
	sd.run("d", "s1", "h", store.Succeeded)
	if row, err = srv.taskRow(t.Context(), "d", false); err != nil || row.LastSuccess == nil || row.NoSuccessIn != 0 {
		t.Fatalf("after a success: %+v, %v", row, err)
	}
}

// A history page filtered by an attempt state reads at most maxScan entries of the task: past more
// failures than that, the page of kind=succeeded is empty with a Next, and the next page has it.
func TestHistoryKindReadsAPage(t *testing.T) {
	_, sd, ok, db := succeededRaw(t)
	insertFailures(t, db, maxScan, ok.EndedAt.UnixMicro()+1000)
	srv, _ := sd.server("")
	f := HistoryFilter{HistoryQuery: store.HistoryQuery{Task: "d", Kind: store.Succeeded, Limit: 1}}
	p, err := srv.history(t.Context(), f)
	if err != nil || len(p.Entries) != 0 || p.Next == "" {
		t.Fatalf("first page: %+v, %v: want none and a next page", p, err)
	}
	f.Before = p.Next
	if p, err = srv.history(t.Context(), f); err != nil || len(p.Entries) != 1 || p.Entries[0].RunID != ok.RunID {
		t.Fatalf("second page: %+v, %v: want the success", p, err)
	}
}

// historyOnly hides the store's SuccessFinder: ReadLastSuccess reads History, as on the key-value
// stores.
type historyOnly struct{ store.Store }

// On a store read through History, a task whose newest 4×store.SuccessScan entries are all events
// (a slot skipped every minute for days) has no attempt among them: its last success is not
// known, and its row says so, not "never" (no_success_in is 0 there).
func TestLastSuccessNotKnownBehindEvents(t *testing.T) {
	s, sd, ok, db := succeededRaw(t)
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
		INSERT INTO events (task, slot, kind, run_id, holder, token, attempt, at, note)
		SELECT 'd', 's0', 'skipped', 'k' || i, 'h', 0, 0, ?2 + i * 1000, '' FROM n`,
		4*store.SuccessScan+1, ok.EndedAt.UnixMicro()+1000); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Store: historyOnly{s}, DSN: "sqlite:///x.db"})
	if err != nil {
		t.Fatal(err)
	}
	row, err := srv.taskRow(t.Context(), "d", false)
	if err != nil {
		t.Fatal(err)
	}
	if row.LastSuccess != nil || !row.LastSuccessUnknown || row.NoSuccessIn != 0 {
		t.Fatalf("last success %v, unknown %v, no success in %d: want not known", row.LastSuccess, row.LastSuccessUnknown, row.NoSuccessIn)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	if _, body := get(t, ts, "/"); !strings.Contains(body, ">not known<") {
		t.Errorf("the overview does not say the last success is not known:\n%s", body)
	}
	if _, body := get(t, ts, "/api/v1/tasks"); !strings.Contains(body, `"last_success_unknown": true`) {
		t.Errorf("the API does not say the last success is not known:\n%s", body)
	}
	// The SQL store's own read finds it: attempts only.
	own, _ := sd.server("")
	if row, err = own.taskRow(t.Context(), "d", false); err != nil || row.LastSuccess == nil || row.LastSuccessUnknown {
		t.Fatalf("through SuccessFinder: %+v, %v", row, err)
	}
}

// rawLedger opens a SQLite ledger in a fresh file, and the same file as a plain database, to write
// history straight into (a thousand runs through the store take a minute); both closed when tb
// ends.
func rawLedger(tb testing.TB) (store.Store, *sql.DB) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "once.db")
	s, err := store.Open(tb.Context(), "sqlite://"+path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	db, err := sql.Open("sqlite", path)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return s, db
}

// succeededRaw opens a raw ledger (rawLedger) in which task d's slot s0 succeeded, and returns the
// store, its seeder, that attempt, and the plain database.
func succeededRaw(t *testing.T) (store.Store, *seeded, store.Attempt, *sql.DB) {
	t.Helper()
	s, db := rawLedger(t)
	sd := &seeded{t: t, s: s}
	return s, sd, sd.run("d", "s0", "h", store.Succeeded), db
}

// insertFailures writes n failed attempts of task d (slots f1…fn) into db, a millisecond apart
// from the microsecond from.
func insertFailures(t *testing.T, db *sql.DB, n int, from int64) {
	t.Helper()
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
		INSERT INTO attempts (task, slot, number, run_id, state, holder, token, started_at, ended_at)
		SELECT 'd', 'f' || i, 1, 'r' || i, 'failed', 'h', 1, ?2 + i * 1000, ?2 + i * 1000 + 500 FROM n`,
		n, from); err != nil {
		t.Fatal(err)
	}
}
