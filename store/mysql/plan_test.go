package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/internal/sqlstore/sqltest"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// TestQueryPlans: every read that status, doctor, history, run (Slot) and prune make uses an
// index of each table it reads — no full table scan (type ALL), no filesort of a table (a
// filesort of the rows two limited index reads return is allowed), and unless the read has
// nothing to search by, no walk of a whole index (type index). Read with EXPLAIN on a ledger with
// rows in it, ANALYZE'd.
func TestQueryPlans(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sqltest.SeedPlanRows(t, s.Store)
	if _, err := s.DB.ExecContext(ctx, "ANALYZE TABLE "+s.Prefix+"attempts, "+s.Prefix+"events, "+s.Prefix+"waiting, "+s.Prefix+"leases, "+s.Prefix+"keys"); err != nil {
		t.Fatal(err)
	}
	explain := func(query string, args []any) []map[string]string {
		t.Helper()
		rows, err := s.DB.QueryContext(ctx, "EXPLAIN "+query, args...)
		if err != nil {
			t.Fatalf("explain %s: %v", query, err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var out []map[string]string
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for i, c := range cols {
				m[c] = vals[i].String
			}
			out = append(out, m)
		}
		return out
	}
	for _, p := range sqltest.Plans(t, s.Store) {
		plan := explain(p.Query, p.Args)
		for _, problem := range planProblems(plan, s.Prefix, p.Walk) {
			t.Errorf("%s: %s:\n%s", p.Name, problem, planString(plan))
		}
		if p.Name == sqltest.RunningPlan && !runningSearch(plan, s.Prefix) {
			t.Errorf("%s: not each task's lease, then a search of its running attempts in attempts_one_running:\n%s", p.Name, planString(plan))
		}
		if p.Name == sqltest.SlotsPlan && !slotsLast(plan) {
			t.Errorf("%s: each slot's last attempt not found by its unique key, after the slots asked for:\n%s", p.Name, planString(plan))
		}
		if alias := checkpointAlias[p.Name]; alias != "" && !searchesRef(plan, alias, "attempts_checkpoint") {
			t.Errorf("%s: the latest checkpoint not a search of attempts_checkpoint (a read back through the slot's attempts):\n%s", p.Name, planString(plan))
		}
		if p.Name == sqltest.AbandonPlan && !searches(plan, s.Prefix, "", "attempts_one_running") {
			t.Errorf("%s: not a range of attempts_one_running past the task's NULLs:\n%s", p.Name, planString(plan))
		}
		if table, alias, _ := strings.Cut(p.Primary, " "); p.Primary != "" && !searchesPrimary(plan, s.Prefix+table, alias) {
			t.Errorf("%s: not a range of the primary key of %s:\n%s", p.Name, s.Prefix+table, planString(plan))
		}
		t.Logf("%s:\n%s", p.Name, planString(plan))
	}
	// The checks catch what they are for: a filter no index serves, a sort.
	for _, bad := range []string{
		`SELECT * FROM ` + s.Prefix + `attempts WHERE lower(task) = ? OR task = concat(?, 'x') ORDER BY started_at DESC LIMIT 50`,
		`SELECT * FROM ` + s.Prefix + `attempts WHERE note = ? OR note = ?`,
		`SELECT * FROM ` + s.Prefix + `attempts WHERE task = ? OR task = ? ORDER BY note LIMIT 5`,
	} {
		if plan := explain(bad, []any{"joba0", "joba0"}); len(planProblems(plan, s.Prefix, false)) == 0 {
			t.Errorf("no problem found in the plan of %s:\n%s", bad, planString(plan))
		}
	}
}

// planProblems lists what is wrong with a plan's rows (one per table read).
func planProblems(plan []map[string]string, prefix string, walk bool) []string {
	var out []string
	for _, r := range plan {
		table, typ, extra := r["table"], r["type"], r["Extra"]
		if table == "" || strings.HasPrefix(table, "<") {
			continue // a derived table or a union's result: bounded by the limits inside
		}
		switch {
		case typ == "ALL":
			out = append(out, "full scan of "+table)
		case strings.Contains(extra, "filesort"):
			out = append(out, "sorts "+table+" instead of reading an index in order")
		case typ == "index" && !walk && !strings.Contains(extra, "Using index"):
			out = append(out, "walks an index of "+table+" where it should search it")
		}
	}
	return out
}

// searchesPrimary reports whether the plan reads table (named alias in the query, when not "")
// as a range of its primary key.
func searchesPrimary(plan []map[string]string, table, alias string) bool {
	for _, r := range plan {
		if (r["table"] == table || alias != "" && r["table"] == alias) && r["key"] == "PRIMARY" && r["type"] == "range" {
			return true
		}
	}
	return false
}

// checkpointAlias names the table alias of the read of a slot's latest checkpoint in the plans
// that make one.
var checkpointAlias = map[string]string{sqltest.SlotPlan: "c", sqltest.SlotsPlan: "c", sqltest.CheckpointPlan: "p"}

// searchesRef reports whether plan reads the table named alias by its first columns in index (ref):
// a slot's attempts with a checkpoint.
func searchesRef(plan []map[string]string, alias, index string) bool {
	for _, r := range plan {
		if r["table"] == alias && r["key"] == index && r["type"] == "ref" {
			return true
		}
	}
	return false
}

// searches reports whether plan reads the attempts (named alias in the query, when not "") as a
// range of index: not a ref of its first columns, which would walk the rows that the rest of the
// search skips.
func searches(plan []map[string]string, prefix, alias, index string) bool {
	for _, r := range plan {
		if (r["table"] == prefix+"attempts" || alias != "" && r["table"] == alias) && r["key"] == index && r["type"] == "range" {
			return true
		}
	}
	return false
}

// runningSearch reports whether plan reads the leases (one row per task) and, for each, searches
// attempts_one_running for the task's running attempts (ref or range): a walk of attempts would cost
// history.
func runningSearch(plan []map[string]string, prefix string) bool {
	if len(plan) != 2 {
		return false
	}
	l, a := plan[0], plan[1]
	return (l["table"] == "l" || l["table"] == prefix+"leases") && (a["table"] == "a" || a["table"] == prefix+"attempts") &&
		a["key"] == "attempts_one_running" && (a["type"] == "ref" || a["type"] == "range")
}

// slotsLast reports whether plan reads the slots asked for (a derived table) first, then each
// one's last attempt (alias a) by the whole of attempts_number (eq_ref: task, slot, the number its
// search found): a range of the slots' attempts filtered by their last number read every attempt
// of each.
func slotsLast(plan []map[string]string) bool {
	if len(plan) < 2 || !strings.HasPrefix(plan[0]["table"], "<derived") {
		return false
	}
	a := plan[1]
	return a["table"] == "a" && a["key"] == "attempts_number" && a["type"] == "eq_ref"
}

func planString(plan []map[string]string) string {
	var b strings.Builder
	for _, r := range plan {
		fmt.Fprintf(&b, "  %s %s %s key=%s ref=%s rows=%s %s\n", r["id"], r["select_type"], r["table"], r["key"], r["ref"], r["rows"], r["Extra"])
		b.WriteString("    type=" + r["type"] + "\n")
	}
	return b.String()
}

// TestHistoryUpgradeFromV2: a version 2 schema with slots waiting for review is upgraded in place
// (migration 003) and status lists the same slots, from the new waiting table. A migration cut
// short after its first ALTER TABLE runs again.
func TestHistoryUpgradeFromV2(t *testing.T) {
	dsn := withPrefix(t, serverDSN(t))
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	storetest.WaitingLedger(t, s)
	for _, q := range []string{
		"DROP TABLE {p}waiting",
		"ALTER TABLE {p}events DROP KEY events_task_time, DROP KEY events_slot_time",
		"DELETE FROM {p}schema_version WHERE version >= 3",
	} {
		if _, err := s.DB.ExecContext(ctx, s.Q(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	if s, err = Open(ctx, dsn); err != nil {
		t.Fatalf("open a version 2 schema with half of migration 003 applied: %v", err)
	}
	defer s.Close()
	storetest.CheckUpgraded(t, s)
}

// TestEventsUpgradeFromV3: a version 3 schema with skipped, busy and review events (the CHECK on
// kind the column declared in 001) is upgraded in place (migration 004) and keeps them; a newer
// schema is refused.
func TestEventsUpgradeFromV3(t *testing.T) {
	sqltest.EventsUpgradeFromV3(t, withPrefix(t, serverDSN(t)), opener, []string{
		"ALTER TABLE {p}events DROP KEY events_kind_time, DROP CONSTRAINT {p}events_kind, MODIFY kind VARCHAR(16) NOT NULL CHECK (kind IN ('skipped', 'busy', 'review'))",
	})
}

// TestEventsMigrationRunsAgain: migration 004 cut short after its ALTER TABLE of the CHECK (DDL
// commits by itself) runs again: the CHECK is not replaced twice, the index that exists is skipped.
func TestEventsMigrationRunsAgain(t *testing.T) {
	dsn := withPrefix(t, serverDSN(t))
	ctx := ctxT(t, time.Minute)
	s, sq, err := opener(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sq.DB.ExecContext(ctx, sq.Q("DELETE FROM {p}schema_version WHERE version >= 4")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, sq, err = opener(ctx, dsn); err != nil {
		t.Fatalf("open with migration 004 applied but not recorded: %v", err)
	}
	defer s.Close()
	if err := s.Record(ctx, store.Event{Task: "t", Slot: "s", Kind: store.Missed}); err != nil {
		t.Fatalf("Record of a missed event: %v", err)
	}
	var n int
	if err := sq.DB.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLE_CONSTRAINTS
		WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = ? AND CONSTRAINT_TYPE = 'CHECK'`, sq.Prefix+"events").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d CHECK constraints on the events table, %v; want 1", n, err)
	}
}

// TestSeatsUpgradeFromV4: a version 4 schema gets the lease_seats table on open (migration 005).
func TestSeatsUpgradeFromV4(t *testing.T) {
	sqltest.SeatsUpgradeFromV4(t, withPrefix(t, serverDSN(t)), opener)
}

// TestAttemptSeatsUpgradeFromV5: a version 5 schema gets the attempts' seats column on open
// (migration 006).
func TestAttemptSeatsUpgradeFromV5(t *testing.T) {
	sqltest.AttemptSeatsUpgradeFromV5(t, withPrefix(t, serverDSN(t)), opener)
}

// TestSchemaNewerWhileOpen: a newer once's migration after this store was opened stops it at its
// next CheckSchema, and it writes nothing more.
func TestSchemaNewerWhileOpen(t *testing.T) {
	sqltest.SchemaNewerWhileOpen(t, withPrefix(t, serverDSN(t)), opener)
}

// TestSchemaNewerRefusesWork: between two polls, a newer once's migration is found by the writes
// that start or end work themselves (in statements they make anyway), which refuse and write nothing.
func TestSchemaNewerRefusesWork(t *testing.T) {
	sqltest.SchemaNewerRefusesWork(t, withPrefix(t, serverDSN(t)), opener)
}

// TestDeepSlotReads: a read of a slot's state, Slot's and a block's (Slots), reads at most
// sqltest.MaxDeepSlotRows rows in a slot of sqltest.DeepSlotAttempts failed attempts, by the
// server's own count (the session's Handler_read_* counters): EXPLAIN does not show that a search
// stops at its LIMIT, and a plan that reads the slot's attempts reads them all.
func TestDeepSlotReads(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sqltest.SeedDeepSlot(t, s.Store)
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	reads := func() int64 {
		rows, err := conn.QueryContext(ctx, "SHOW SESSION STATUS LIKE 'Handler_read%'")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var n int64
		for rows.Next() {
			var name string
			var v int64
			if err := rows.Scan(&name, &v); err != nil {
				t.Fatal(err)
			}
			n += v
		}
		return n
	}
	base := -reads() + reads() // what SHOW STATUS itself reads
	for _, p := range sqltest.DeepSlotPlans(s.Store) {
		before := reads()
		rows, err := conn.QueryContext(ctx, p.Query, p.Args...)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if n := reads() - before - base; n > sqltest.MaxDeepSlotRows {
			t.Errorf("%s: %d rows read in a slot of %d attempts, want at most %d", p.Name, n, sqltest.DeepSlotAttempts, sqltest.MaxDeepSlotRows)
		} else {
			t.Logf("%s: %d rows read", p.Name, n)
		}
	}
}
