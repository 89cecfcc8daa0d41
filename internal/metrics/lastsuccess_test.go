package metrics

import (
	"database/sql"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// A task's last success older than its newest store.SuccessScan attempts is not read (its first
// read costs the same whatever its history): its series is absent, as documented, not a lie, and
// once_task_last_success_unknown says so (OnceNoRecentSuccess fires on it); one within them is
// found, past the first read's taskScan entries and the bootstrap's window.
func TestLastSuccessBeyondTheScan(t *testing.T) {
	st, path := openStore(t)
	l := &ledger{tb: t, st: st}
	// x succeeded, then y, then y failed 150 times and x bootstrapScan+1 times, a millisecond apart.
	base := time.Now().Add(-time.Hour).UnixMicro()
	insert := func(task, state string, from, n int) { seedRun(t, path, task, state, from, n, base) }
	insert("x", "succeeded", 0, 1)
	insert("y", "succeeded", 1, 1)
	insert("y", "failed", 2, 150)
	insert("x", "failed", 200, bootstrapScan+1)
	insert("z", "failed", 20000, store.SuccessScan) // never succeeded, all its attempts read
	l.run("y", "late", store.Failed)                // y in the bootstrap's window too
	c := newCollector(t, Config{Store: st, Timeout: time.Minute})
	got := scrape(t, c)
	for len(c.t.toLoad) > 0 {
		got = scrape(t, c)
	}
	ySuccess := float64(base+1*1000+500) / 1e6
	want(t, got, map[string]float64{
		`once_task_last_success_timestamp_seconds{task="x"}`: absent,
		`once_task_last_success_unknown{task="x"}`:           1,
		`once_task_last_success_timestamp_seconds{task="y"}`: ySuccess,
		`once_task_last_success_unknown{task="y"}`:           absent,
		`once_task_last_success_timestamp_seconds{task="z"}`: absent, // never succeeded: known
		`once_task_last_success_unknown{task="z"}`:           absent,
	})
	// A success later is the last success.
	ok := l.run("x", "now", store.Succeeded)
	want(t, scrape(t, c), map[string]float64{
		`once_task_last_success_timestamp_seconds{task="x"}`: ts(*ok.EndedAt),
		`once_task_last_success_unknown{task="x"}`:           absent,
	})
}

// seedRun writes n attempts of task in state straight into the ledger at path, the i-th
// (from on) starting at base + i ms.
func seedRun(t *testing.T, path, task, state string, from, n int, base int64) {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO attempts (task, slot, number, run_id, state, holder, token, started_at, ended_at, note)
		WITH RECURSIVE seq(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < ?1 + ?2)
		SELECT ?3, printf('s%07d', i), 1, printf('r%07d', i), ?4, 'seed', 1, ?5 + i * 1000, ?5 + i * 1000 + 500, '' FROM seq`,
		from, n, task, state, base); err != nil {
		t.Fatal(err)
	}
}
