package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/internal/sqlstore/sqltest"
	"github.com/once-run/once/store/storetest"
)

// TestQueryPlans: every read that status, doctor, history, run (Slot) and prune make is an index
// search or an ordered index walk that stops at its limit — never a sequential scan of a table,
// nor a sort of one (a sort of the rows two limited index reads return is allowed). Read with
// EXPLAIN on a ledger with rows in it, ANALYZE'd, with sequential scans and sorts priced out, so
// that a plan with neither exists or the test fails.
func TestQueryPlans(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sqltest.SeedPlanRows(t, s.Store)
	for _, tb := range []string{"attempts", "events", "waiting", "leases", "keys"} {
		if _, err := s.DB.ExecContext(ctx, "ANALYZE "+s.Prefix+tb); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, set := range []string{"SET enable_seqscan = off", "SET enable_sort = off", "SET enable_bitmapscan = off"} {
		if _, err := conn.ExecContext(ctx, set); err != nil {
			t.Fatal(err)
		}
	}
	explain := func(query string, args []any) planNode {
		t.Helper()
		var out string
		if err := conn.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+query, args...).Scan(&out); err != nil {
			t.Fatalf("explain %s: %v", query, err)
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
			t.Fatalf("explain output %s: %v", out, err)
		}
		return plans[0].Plan
	}
	for _, p := range sqltest.Plans(t, s.Store) {
		plan := explain(p.Query, p.Args)
		for _, problem := range plan.problems(s.Prefix, p.Walk) {
			t.Errorf("%s: %s:\n%s", p.Name, problem, plan.String(""))
		}
		if p.Name == sqltest.RunningPlan && !plan.uses(s.Prefix+"attempts", s.Prefix+"attempts_one_running") {
			t.Errorf("%s: not a walk of the partial index of running attempts:\n%s", p.Name, plan.String(""))
		}
		if p.Name == sqltest.SlotsPlan || p.Name == sqltest.SlotPlan {
			if scan := plan.unlimited(s.Prefix+"attempts", false); scan != "" {
				t.Errorf("%s: %s reads the slot's attempts to no Limit (a slot's last attempt, its checkpoint, its failures: each stops at its Limit):\n%s", p.Name, scan, plan.String(""))
			}
		}
		if p.Name == sqltest.BeginSlotlessPlan && plan.reads(s.Prefix+"attempts") {
			t.Errorf("%s: reads the slot's attempts (every attempt of the task):\n%s", p.Name, plan.String(""))
		}
		if table, _, _ := strings.Cut(p.Primary, " "); p.Primary != "" && !plan.searches(s.Prefix+table, s.Prefix+table+"_pkey") {
			t.Errorf("%s: not a range of %s_pkey:\n%s", p.Name, s.Prefix+table, plan.String(""))
		}
		t.Logf("%s:\n%s", p.Name, plan.String(""))
	}
	// The checks catch what they are for: a filter no index serves, a walk that filters, a sort.
	for _, bad := range []string{
		`SELECT * FROM ` + s.Prefix + `attempts WHERE lower(task) = $1 ORDER BY started_at DESC LIMIT 50`,
		`SELECT * FROM ` + s.Prefix + `attempts WHERE note = $1`,
		`SELECT * FROM ` + s.Prefix + `attempts WHERE task = $1 ORDER BY note LIMIT 5`,
	} {
		if plan := explain(bad, []any{"joba0"}); len(plan.problems(s.Prefix, false)) == 0 {
			t.Errorf("no problem found in the plan of %s:\n%s", bad, plan.String(""))
		}
	}
}

// runSearch reports whether n searches the attempts' run id index for one run id (a new UUID per
// attempt: one row, which a filter by task then checks — a business key's claimant, whose run
// must be the attempt of the key's task).
func runSearch(n planNode) bool {
	return strings.HasSuffix(n.IndexName, "_attempts_run") && strings.HasPrefix(n.IndexCond, "(run_id = ")
}

type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	IndexCond    string     `json:"Index Cond"`
	Filter       string     `json:"Filter"`
	Plans        []planNode `json:"Plans"`
}

// problems lists what is wrong with the plan under n: a table read by a sequential scan; a
// sort with a table scan under it and no Limit in between (a sort of a whole table); unless
// walk, an index scan with no condition or filtering by task (a walk where a search was due).
func (n planNode) problems(prefix string, walk bool) []string {
	var out []string
	table := strings.HasPrefix(n.RelationName, prefix)
	switch {
	case n.NodeType == "Seq Scan" && table:
		out = append(out, "sequential scan of "+n.RelationName)
	case n.NodeType == "Sort" || n.NodeType == "Incremental Sort":
		if n.scansTable(prefix) {
			out = append(out, "sorts a table read instead of reading an index in order")
		}
	case strings.Contains(n.NodeType, "Index") && table && !walk && (n.IndexCond == "" || strings.Contains(n.Filter, "task") && !runSearch(n)):
		out = append(out, "walks index "+n.IndexName+" where it should search it")
	case n.NodeType == "Aggregate":
		// Counting is allowed over the partial indexes only (a slot's failures), and over a run
		// id's (a run id is a new UUID per attempt: its rows are one, a reused id's a few): an
		// aggregate over another index reads every attempt of the slot.
		for _, c := range n.Plans {
			if strings.HasPrefix(c.RelationName, prefix) && !strings.HasSuffix(c.IndexName, "_failures") &&
				!strings.HasSuffix(c.IndexName, "_resolved") && !strings.HasSuffix(c.IndexName, "_checkpoint") &&
				!strings.HasSuffix(c.IndexName, "_events_slot") && !strings.HasSuffix(c.IndexName, "_attempts_run") {
				out = append(out, "aggregates over "+c.IndexName+", reading every row it finds")
			}
		}
	}
	for _, c := range n.Plans {
		out = append(out, c.problems(prefix, walk)...)
	}
	return out
}

// searches reports whether n reads table through a search (a condition) of index.
func (n planNode) searches(table, index string) bool {
	if n.RelationName == table && n.IndexName == index && n.IndexCond != "" {
		return true
	}
	for _, c := range n.Plans {
		if c.searches(table, index) {
			return true
		}
	}
	return false
}

// unlimited names a scan of table under n with no Limit above it (limited: n is under one), ""
// when there is none: in the read of a slot's state, a scan that may read every attempt of the
// slot (a filter of the slots' attempts by their last number did).
func (n planNode) unlimited(table string, limited bool) string {
	if !limited && n.RelationName == table && strings.HasSuffix(n.NodeType, "Scan") {
		return n.NodeType + " " + n.IndexName + " " + n.IndexCond
	}
	for _, c := range n.Plans {
		if scan := c.unlimited(table, limited || n.NodeType == "Limit"); scan != "" {
			return scan
		}
	}
	return ""
}

// uses reports whether n reads table through index (a search or a walk).
func (n planNode) uses(table, index string) bool {
	if n.RelationName == table && n.IndexName == index {
		return true
	}
	for _, c := range n.Plans {
		if c.uses(table, index) {
			return true
		}
	}
	return false
}

// reads reports whether a scan of table is anywhere under n.
func (n planNode) reads(table string) bool {
	if strings.HasSuffix(n.NodeType, "Scan") && n.RelationName == table {
		return true
	}
	for _, c := range n.Plans {
		if c.reads(table) {
			return true
		}
	}
	return false
}

// scansTable reports whether a scan of a table is below n with no Limit in between.
func (n planNode) scansTable(prefix string) bool {
	for _, c := range n.Plans {
		if c.NodeType == "Limit" {
			continue
		}
		if strings.HasSuffix(c.NodeType, "Scan") && strings.HasPrefix(c.RelationName, prefix) || c.scansTable(prefix) {
			return true
		}
	}
	return false
}

func (n planNode) String(indent string) string {
	s := fmt.Sprintf("%s%s %s %s %s %s\n", indent, n.NodeType, n.RelationName, n.IndexName, n.IndexCond, n.Filter)
	for _, c := range n.Plans {
		s += c.String(indent + "  ")
	}
	return s
}

// TestHistoryUpgradeFromV2: a version 2 schema with slots waiting for review is upgraded in place
// (migration 003) and status lists the same slots, from the new waiting table.
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
		"DROP INDEX {p}attempts_time", "DROP INDEX {p}attempts_task_time", "DROP INDEX {p}attempts_slot_time",
		"DROP INDEX {p}events_time_id", "DROP INDEX {p}events_task_time", "DROP INDEX {p}events_slot_time",
		"DROP INDEX {p}attempts_failures", "DROP INDEX {p}attempts_resolved", "DROP INDEX {p}attempts_checkpoint",
		"CREATE INDEX {p}attempts_started ON {p}attempts (started_at)", "CREATE INDEX {p}events_time ON {p}events (happened_at)",
		"DELETE FROM {p}schema_version WHERE version >= 3",
	} {
		if _, err := s.DB.ExecContext(ctx, s.Q(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	if s, err = Open(ctx, dsn); err != nil {
		t.Fatalf("open a version 2 schema: %v", err)
	}
	defer s.Close()
	storetest.CheckUpgraded(t, s)
}

// TestEventsUpgradeFromV3: a version 3 schema with skipped, busy and review events is upgraded in
// place (migration 004: the CHECK on kind allows missed) and keeps them; a newer schema is refused.
func TestEventsUpgradeFromV3(t *testing.T) {
	sqltest.EventsUpgradeFromV3(t, withPrefix(t, serverDSN(t)), opener, []string{
		"DROP INDEX {p}events_kind_time",
		"ALTER TABLE {p}events DROP CONSTRAINT {p}events_kind_check, ADD CONSTRAINT {p}events_kind_check CHECK (kind IN ('skipped', 'busy', 'review'))",
	})
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
// sqltest.MaxDeepSlotRows rows of the attempts in a slot of sqltest.DeepSlotAttempts failed
// attempts, by EXPLAIN ANALYZE's count (analyzed.attemptRows): a plan's shape does not show that a scan under a subquery reads the slot's attempts.
func TestDeepSlotReads(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sqltest.SeedDeepSlot(t, s.Store)
	if _, err := s.DB.ExecContext(ctx, "ANALYZE "+s.Prefix+"attempts"); err != nil {
		t.Fatal(err)
	}
	for _, p := range sqltest.DeepSlotPlans(s.Store) {
		var out string
		if err := s.DB.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+p.Query, p.Args...).Scan(&out); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		var plans []struct{ Plan analyzed }
		if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
			t.Fatalf("explain output %s: %v", out, err)
		}
		if n := plans[0].Plan.attemptRows(s.Prefix + "attempts"); n > sqltest.MaxDeepSlotRows {
			t.Errorf("%s: %.0f rows of the attempts read in a slot of %d, want at most %d:\n%s", p.Name, n, sqltest.DeepSlotAttempts, sqltest.MaxDeepSlotRows, out)
		} else {
			t.Logf("%s: %.0f rows of the attempts read", p.Name, n)
		}
	}
}
