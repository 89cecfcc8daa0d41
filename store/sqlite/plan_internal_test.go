package sqlite

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestQueryPlans: every read that status, doctor, history, run (Slot) and prune make is an index
// search or an ordered index walk that stops at its limit — never a scan of a whole table, nor a
// sort of one. EXPLAIN QUERY PLAN is read on a ledger with rows in it (ANALYZE'd), so the planner
// chooses as it would on a big one.
func TestQueryPlans(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "once.db"), Options{Prefix: "p_"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seedPlanRows(t, s)
	c := store.CursorOf(time.Now(), false, "", 7).String()
	e := store.CursorOf(time.Now(), true, "", 7).String()
	type plan struct {
		name  string
		query string
		args  []any
		// walk: an ordered walk of a time index is expected (no filter to search by).
		walk bool
	}
	var plans []plan
	for _, q := range []struct {
		name string
		q    store.HistoryQuery
		walk bool
	}{
		{"history", store.HistoryQuery{Limit: 50}, true},
		{"history --limit 0", store.HistoryQuery{}, true},
		{"history --before attempt", store.HistoryQuery{Limit: 50, Before: c}, false},
		{"history --before event", store.HistoryQuery{Limit: 50, Before: e}, false},
		{"history --after", store.HistoryQuery{Limit: 50, After: c}, false},
		{"history --task", store.HistoryQuery{Task: "job", Limit: 50}, false},
		{"history --task --before", store.HistoryQuery{Task: "job", Limit: 50, Before: c}, false},
		{"history --task --after", store.HistoryQuery{Task: "job", Limit: 50, After: e}, false},
		{"history --task --slot", store.HistoryQuery{Task: "job", Slot: "s1", Limit: 50}, false},
		{"history --task --slot --before", store.HistoryQuery{Task: "job", Slot: "s1", Limit: 50, Before: e}, false},
		{"doctor's scan", store.HistoryQuery{Limit: 10000}, true},
		{"history --kind missed (status, doctor)", store.HistoryQuery{Kind: store.Missed, Limit: 100}, false},
		{"history --kind missed --before", store.HistoryQuery{Kind: store.Missed, Limit: 50, Before: e}, false},
		{"history --kind missed --after", store.HistoryQuery{Kind: store.Missed, Limit: 50, After: c}, false},
		{"history --task --kind busy", store.HistoryQuery{Task: "job", Kind: store.Busy, Limit: 50}, false},
		{"history --task --slot --kind missed", store.HistoryQuery{Task: "job", Slot: "s1", Kind: store.Missed, Limit: 50}, false},
		{"history --kind failed", store.HistoryQuery{Kind: store.Failed, Limit: 50}, true},
	} {
		query, args, err := s.historyQuery(q.q)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, plan{q.name, query, args, q.walk})
	}
	now := time.Now().UnixMicro()
	plans = append(plans,
		plan{"waiting", waitingQuery(s.t), nil, true},
		plan{"running attempts (status)", runningQuery(s.t), []any{store.MaxRunningList + 1}, true},
		plan{"slot: last attempt", lastQuery(s.t), []any{"job", "s1"}, false},
		plan{"slot: failures, checkpoint, review", slotQuery(s.t), []any{"job", "s1", 1}, false},
		plan{slotsPlan, slotsQuery(s.t, 3), []any{"job", "s1", "s7", "s3"}, false},
		plan{"prune attempts", s.pruneAttemptsQuery(false, false), []any{now, 0, 0, 0}, true},
		plan{"prune attempts of a task", s.pruneAttemptsQuery(false, true), []any{now, 0, 0, 0, "job"}, false},
		plan{"prune attempts, forget slots", s.pruneAttemptsQuery(true, false), []any{now, now, now, 0, 0, 0}, true},
		plan{"prune events", s.pruneEventsQuery(false), []any{now, 0, 0, 0}, true},
		plan{"prune events of a task", s.pruneEventsQuery(true), []any{now, 0, 0, 0, "job"}, false},
		// once serve's task list and the metrics: a task's last success among its newest attempts.
		plan{"last success of a task, within its newest 1,000 attempts", newestSuccessQuery(s.t), []any{"job", store.SuccessScan}, false},
		plan{"attempts of a task, up to 1,001", attemptsUpToQuery(s.t), []any{"job", store.SuccessScan + 1}, false},
		plan{"waiting row of a slot (trigger)", s.waitingSelect("?1", "?2"), []any{"job", "s1"}, false},
		plan{"tasks: first page", tasksQuery(s.t), []any{"", store.MaxTasksPage}, false},
		plan{"tasks: page after a name", tasksQuery(s.t), []any{"jobk", 50}, false},
		plan{"scopes: first page", s.scopesQuery(), []any{"", 50}, false},
		plan{"scopes: page after a scope", s.scopesQuery(), []any{"scope1", 50}, false},
		plan{"scope keys: first page", s.scopeKeysQuery(), []any{now, "big", "", 1000}, false},
		plan{"scope keys: page after a key", s.scopeKeysQuery(), []any{now, "big", "key600", 1000}, false},
	)
	for _, p := range plans {
		lines := explain(t, s, p.query, p.args)
		for _, problem := range planProblems(lines, p.walk) {
			t.Errorf("%s: %s:\n%s", p.name, problem, strings.Join(lines, "\n"))
		}
		// The task index is a range of the leases' primary key (its automatic index).
		if pk := "SEARCH " + s.t.leases + " USING COVERING INDEX sqlite_autoindex_" + s.t.leases + "_1 (task>?)"; strings.HasPrefix(p.name, "tasks") &&
			(len(lines) != 1 || strings.TrimSpace(lines[0]) != pk) {
			t.Errorf("%s: not %s:\n%s", p.name, pk, strings.Join(lines, "\n"))
		}
		// The running attempts are a walk of the partial index that holds them alone.
		if idx := "SCAN " + s.t.attempts + " USING INDEX " + s.t.attempts + "_running"; strings.HasPrefix(p.name, "running") &&
			(len(lines) != 1 || strings.TrimSpace(lines[0]) != idx) {
			t.Errorf("%s: not %s:\n%s", p.name, idx, strings.Join(lines, "\n"))
		}
		// A block of slots: each slot's last attempt found by the whole primary key, after a
		// search of its number; a search by (task, slot) alone read every attempt of the slot.
		if last := "USING INDEX sqlite_autoindex_" + s.t.attempts + "_2 (task=? AND slot=? AND number=?)"; p.name == slotsPlan && !strings.Contains(strings.Join(lines, "\n"), "SEARCH a "+last) {
			t.Errorf("%s: not %s:\n%s", p.name, last, strings.Join(lines, "\n"))
		}
		// A page of scopes steps through the keys' index (scope, …) a scope at a time.
		if strings.HasPrefix(p.name, "scopes") && strings.Count(strings.Join(lines, "\n"), "(scope>?)") != 2 {
			t.Errorf("%s: not a search of the keys' index per step:\n%s", p.name, strings.Join(lines, "\n"))
		}
		t.Logf("%s:\n%s", p.name, strings.Join(lines, "\n"))
	}
	// The checks catch what they are for: the history query once had, a filter on no index.
	for _, bad := range []string{
		`SELECT * FROM ` + s.t.attempts + ` WHERE (?1 = '' OR task = ?1) ORDER BY started_at DESC LIMIT 50`,
		`SELECT * FROM ` + s.t.attempts + ` WHERE note = ?1`,
		`SELECT task FROM ` + s.t.attempts + ` WHERE task = ?1 ORDER BY note`,
	} {
		if len(planProblems(explain(t, s, bad, []any{"job"}), false)) == 0 {
			t.Errorf("no problem found in the plan of %s", bad)
		}
	}
}

// slotsPlan names the plan of a block of slots' states (backfill --dry-run).
const slotsPlan = "slots: a block of slots' last attempts, failures, checkpoints, reviews"

// slotsAsked are the tables a full scan of is allowed: a row per scope of a page or slot asked for.
var slotsAsked = map[string]bool{"sc": true, "task_asked": true, "slots_asked": true, "last_asked": true}

var fullScan = regexp.MustCompile(`^SCAN (\w+)$`) // SCAN t, without USING … INDEX

// planProblems lists what is wrong with a plan: a table read whole, a table sorted, or (unless
// walk: a read with no filter, which walks a time index to its limit) an index walked where a
// search was due.
func planProblems(lines []string, walk bool) []string {
	var out []string
	for _, l := range lines {
		l := strings.TrimSpace(l)
		// sc is the scopes' recursive step (scopesQuery), one row per scope of the page; the
		// others are a block of slots' parameters and their last numbers (slotsQuery), a row each.
		if m := fullScan.FindStringSubmatch(l); m != nil && !slotsAsked[m[1]] {
			out = append(out, "full scan of "+m[1])
		}
		// Sorting is allowed only of the entries of one instant (FOR LAST n TERMS: the kind and
		// id after the time the index gives in order), never of a whole result.
		if strings.Contains(l, "USE TEMP B-TREE FOR ORDER BY") {
			out = append(out, "sorts instead of reading an index in order")
		}
		if strings.HasPrefix(l, "SCAN") && strings.Contains(l, "USING") && !walk {
			out = append(out, "walks an index where it should search it")
		}
	}
	return out
}

// explain returns the lines of EXPLAIN QUERY PLAN, indented by depth.
func explain(t *testing.T, s *Store, query string, args []any) []string {
	t.Helper()
	rows, err := s.db.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	defer rows.Close()
	depth := map[int]int{}
	var out []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		depth[id] = depth[parent] + 1
		out = append(out, strings.Repeat("  ", depth[id]-1)+detail)
	}
	return out
}

// seedPlanRows writes a few thousand attempts and events over many tasks and slots, and lease
// rows for 2,000 tasks, and runs ANALYZE, so the planner has statistics like a real ledger's.
func seedPlanRows(t *testing.T, s *Store) {
	t.Helper()
	tx, err := s.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		task, slot := "job"+string(rune('a'+i%20)), "s"+strings.Repeat("x", i%7)+string(rune('0'+i%10))
		if _, err := tx.Exec(`INSERT INTO `+s.t.attempts+` (task, slot, number, run_id, state, holder, token, started_at, ended_at)
			VALUES (?, ?, (SELECT coalesce(max(number), 0) + 1 FROM `+s.t.attempts+` WHERE task = ? AND slot = ?), ?, 'succeeded', 'h', 1, ?, ?)`,
			task, slot, task, slot, "r"+strconv.Itoa(i), int64(i)*1000, int64(i)*1000+500); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			kind := "busy"
			if i%300 == 0 {
				kind = "missed"
			}
			if _, err := tx.Exec(`INSERT INTO `+s.t.events+` (task, slot, kind, run_id, holder, token, attempt, at, note)
				VALUES (?, ?, ?, 'b', 'h', 0, 0, ?, '')`, task, slot, kind, int64(i)*1000+7); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A lease row for each task, and many of tasks released long ago.
	for i := range 2000 {
		task := "old" + strconv.Itoa(i)
		if i < 20 {
			task = "job" + string(rune('a'+i))
		}
		if _, err := tx.Exec(`INSERT INTO `+s.t.leases+` (task, holder, run_id, token, acquired_at, expires_at)
			VALUES (?, '', '', 1, 0, 0)`, task); err != nil {
			t.Fatal(err)
		}
	}
	// Keys in 30 scopes, one of them large, some pending under runs.
	for i := range 6000 {
		scope, state, done := "scope"+strconv.Itoa(i%30), "done", any(int64(i))
		if i%30 == 0 {
			scope = "big"
		}
		if i%5 == 0 {
			state, done = "pending", nil
		}
		if _, err := tx.Exec(`INSERT INTO `+s.t.keys+` (scope, key, state, fingerprint, task, run_id, token, expires_at, claimed_at, done_at)
			VALUES (?, ?, ?, '', 'job', 'r', 1, 0, ?, ?)`, scope, "key"+strconv.Itoa(i), state, int64(i), done); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Exec("ANALYZE"); err != nil {
		t.Fatal(err)
	}
}

// TestDeepSlotPlans: with the statistics of slots of many attempts (5,000 succeeded in one, 5,000
// failed in another), a read of a slot's state, Slot's and a block's, still reads each part by
// the index that stops at its rows: the slot's failures by their partial index (the primary key's
// range after the resolution reads every succeeded attempt of the slot), each slot's last attempt
// in a block by the whole primary key.
func TestDeepSlotPlans(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "once.db"), Options{Prefix: "p_"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seedDeepSlots(t, s, 5000)
	failures := "SEARCH f USING INDEX " + s.t.attempts + "_failures (task=? AND slot=? AND number>?)"
	last := "SEARCH a USING INDEX sqlite_autoindex_" + s.t.attempts + "_2 (task=? AND slot=? AND number=?)"
	for _, p := range []struct {
		name, query string
		args        []any
		want        []string
	}{
		{"slot", slotQuery(s.t), []any{"ok", "", 5000}, []string{failures}},
		{slotsPlan, slotsQuery(s.t, 2), []any{"ok", "", "x"}, []string{failures, last}},
	} {
		lines := explain(t, s, p.query, p.args)
		plan := strings.Join(lines, "\n")
		for _, w := range p.want {
			if !strings.Contains(plan, w) {
				t.Errorf("%s: not %s:\n%s", p.name, w, plan)
			}
		}
		for _, problem := range planProblems(lines, false) {
			t.Errorf("%s: %s:\n%s", p.name, problem, plan)
		}
	}
}
