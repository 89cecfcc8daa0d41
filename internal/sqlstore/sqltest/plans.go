package sqltest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
)

// Plan is one statement the ledger runs, for a backend's query-plan test.
type Plan struct {
	Name  string
	Query string // rebound for the dialect
	Args  []any
	// Walk: a read with nothing to search by, which walks a time index in order to its limit.
	Walk bool
	// Primary: the read must be a range of the primary key of this table (without the prefix),
	// optionally followed by the alias the query gives it ("keys k").
	Primary string
}

// RunningPlan names the plan of status's list of running attempts, which a backend's plan test
// also checks reads its index of running attempts (a walk of another index would cost history).
const RunningPlan = "running attempts (status)"

// SlotsPlan names the plan of a block of slots' states (backfill --dry-run), which a backend's
// plan test also checks searches the attempts by task and slot (a walk of the task's attempts
// would cost its history).
const SlotsPlan = "slots: a block of slots' last attempts, failures, checkpoints, reviews"

// AbandonPlan names the plan of a start's read of the attempts earlier holders left running, which
// a backend's plan test also checks searches the task's running attempts alone (every run makes it:
// a walk of the task's attempts would cost its history).
const AbandonPlan = "start: a task's attempts left running, locked"

// SlotPlan and CheckpointPlan name the plans of a slot's read (every run's) and of prune's read
// of a slot's latest checkpoint, which a backend's plan test also checks search the slot's attempts
// with a checkpoint alone (a read back through the slot's attempts would cost its history).
const (
	SlotPlan       = "slot: last attempt, failures, checkpoint, review"
	CheckpointPlan = "prune: checkpoint of a slot"
)

// DeepSlotTask is the task whose slot "" DeepSlotPlans read: SeedDeepSlot writes DeepSlotAttempts
// failed attempts in it, none resolved (the failure count's worst case).
const (
	DeepSlotTask     = "deep"
	DeepSlotAttempts = 5000
)

// MaxDeepSlotRows is the most rows that a read of one slot's state may read in the deep slot:
// store.MaxFailures failures (twice where a server counts the rows of a derived table it filled:
// MariaDB's Handler_read_*) and the few rows of its other parts, however many attempts the slot
// has. A backend's plan test runs DeepSlotPlans and counts the rows its server read (a plan that
// reads the slot's attempts reads DeepSlotAttempts or more).
const MaxDeepSlotRows = 2*store.MaxFailures + 100

// SeedDeepSlot writes the deep slot (DeepSlotTask) straight into s's tables.
func SeedDeepSlot(tb testing.TB, s *sqlstore.Store) {
	SeedAttempts(tb, s, DeepSlotTask, "", "failed", DeepSlotAttempts, true)
}

// DeepSlotPlans are the reads of the deep slot's state, Slot's and a block's (the deep slot and
// one never tried), each with the number of deep slots it reads.
func DeepSlotPlans(s *sqlstore.Store) []Plan {
	t := DeepSlotTask
	return []Plan{{Name: SlotPlan, Query: s.SlotQuery(), Args: []any{t, "", t, "", t, "", t, ""}},
		{Name: SlotsPlan, Query: s.SlotsQuery(2), Args: []any{t, "", "x"}}}
}

// Plans lists the statements status, doctor, history, run (its start, Slot) and prune make, with
// arguments.
func Plans(tb testing.TB, s *sqlstore.Store) []Plan {
	tb.Helper()
	now := time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC)   // in SeedPlanRows' history, as a real cursor or cutoff is
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // where prune's walk begins
	c, e := store.CursorOf(now, false, "", 7).String(), store.CursorOf(now, true, "", 7).String()
	out := []Plan{{"fence (every fenced write): the lease row locked, the schema version", s.Q(sqlstore.FenceQuery), []any{"joba0"}, false, ""},
		{SlotsPlan, s.SlotsQuery(3), []any{"joba0", "s1", "s7", "s3"}, false, ""}, // backfill --dry-run; Slot's below
		{AbandonPlan, s.AbandonQuery(), []any{"joba0", 5, "joba0"}, false, ""}}
	for _, q := range []struct {
		name string
		q    store.HistoryQuery
		walk bool
	}{
		{"history", store.HistoryQuery{Limit: 50}, true},
		{"history --before attempt", store.HistoryQuery{Limit: 50, Before: c}, false},
		{"history --before event", store.HistoryQuery{Limit: 50, Before: e}, false},
		{"history --after", store.HistoryQuery{Limit: 50, After: c}, false},
		{"history --task", store.HistoryQuery{Task: "joba0", Limit: 50}, false},
		{"history --task --before", store.HistoryQuery{Task: "joba0", Limit: 50, Before: c}, false},
		{"history --task --after", store.HistoryQuery{Task: "joba0", Limit: 50, After: e}, false},
		{"history --task --slot", store.HistoryQuery{Task: "joba0", Slot: "s1", Limit: 50}, false},
		{"history --task --slot --before", store.HistoryQuery{Task: "joba0", Slot: "s1", Limit: 50, Before: e}, false},
		{"doctor's scan", store.HistoryQuery{Limit: 10000}, true},
		{"history --kind missed (status, doctor)", store.HistoryQuery{Kind: store.Missed, Limit: 100}, false},
		{"history --kind missed --before", store.HistoryQuery{Kind: store.Missed, Limit: 50, Before: e}, false},
		{"history --kind missed --after", store.HistoryQuery{Kind: store.Missed, Limit: 50, After: c}, false},
		{"history --task --kind busy", store.HistoryQuery{Task: "joba0", Kind: store.Busy, Limit: 50}, false},
		{"history --kind failed", store.HistoryQuery{Kind: store.Failed, Limit: 50}, true},
	} {
		query, args, err := s.HistoryQuery(q.q)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, Plan{Name: q.name, Query: query, Args: args, Walk: q.walk})
	}
	out = append(out, writes(s)...)
	tasks, err := s.TasksQuery(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	out = append(out,
		Plan{"waiting", s.Q(sqlstore.WaitingQuery), nil, true, ""},
		// status's RUNNING: a walk of the index of running attempts alone.
		Plan{RunningPlan, s.RunningQuery(), []any{store.MaxRunningList + 1}, true, ""},
		Plan{SlotPlan, s.SlotQuery(), []any{"joba0", "s1", "joba0", "s1", "joba0", "s1", "joba0", "s1"}, false, ""},
		Plan{CheckpointPlan, s.CheckpointQuery(), []any{"joba0", "s1"}, false, ""},
		Plan{"prune attempts", s.PruneAttemptsQuery(false, false), []any{now, start, start, 0}, true, ""},
		Plan{"prune attempts of a task", s.PruneAttemptsQuery(false, true), []any{now, start, start, 0, "joba0"}, false, ""},
		Plan{"prune attempts, forget slots", s.PruneAttemptsQuery(true, false), []any{now, now, now, start, start, 0}, true, ""},
		Plan{"prune events", s.PruneEventsQuery(false), []any{now, start, start, 0}, true, ""},
		Plan{"prune events of a task", s.PruneEventsQuery(true), []any{now, start, start, 0, "joba0"}, false, ""},
		Plan{"last success of a task, within its newest 1,000 attempts (once serve, metrics)", s.NewestSuccessQuery(store.SuccessScan), []any{"joba0"}, false, ""},
		Plan{"attempts of a task, up to 1,001", s.AttemptsUpToQuery(store.SuccessScan + 1), []any{"joba0"}, false, ""},
		// once serve's overview: a page of the task index, the first and one from a name on.
		Plan{"tasks: first page", tasks, []any{"", store.MaxTasksPage}, false, "leases"},
		Plan{"tasks: page after a name", tasks, []any{"jobk1", 50}, false, "leases"},
		// once serve's scopes: a page of scopes (a step through an index on scope per scope),
		// and a page of one scope's keys (a range of the primary key).
		Plan{"scopes: first page", s.ScopesQuery(), []any{"", 50}, false, ""},
		Plan{"scopes: page after a scope", s.ScopesQuery(), []any{"scope1", 50}, false, ""},
		Plan{"scope keys: first page", s.ScopeKeysQuery(), []any{"big", "", 1000}, false, "keys k"},
		Plan{"scope keys: page after a key", s.ScopeKeysQuery(), []any{"big", "key600", 1000}, false, "keys k"},
	)
	return out
}

// BeginSlotlessPlan names the plan of a begin in the slot "" of a task run without --slot, every
// attempt of which is in that slot: a backend's plan test also checks it reads none of them (the
// slot's last attempt matters to a begin in another slot only).
const BeginSlotlessPlan = "begin in the slot of a task without --slot: the lease row locked, the attempt inserted"

// writes lists the flavor's statements of a run's begin and finish, with arguments.
func writes(s *sqlstore.Store) []Plan {
	code := 0
	if s.Flavor == sqlstore.Postgres {
		begin := func(slot string) []any {
			return []any{"joba0", 1, "joba0", slot, "joba0", slot, "joba0", slot, "plan-r", 1, "h", 1, 0, "", "", "", 0}
		}
		q, args := s.FinishReleasePostgres("r7", store.Lease{Task: "joba0", Holder: "h", Token: 1},
			store.Outcome{State: store.Succeeded, ExitCode: &code, Note: "done"})
		return []Plan{{"finish: a run's attempt", s.Q(sqlstore.RunQueryPostgres), []any{"r7"}, false, ""},
			{"finish: a run's attempt and its lease row, locked", s.Q(sqlstore.RunLockQuery), []any{"r7"}, false, ""},
			{"begin: the lease row locked, the wait ended, the attempt inserted", s.Q(sqlstore.BeginPostgres), begin("s9"), false, ""},
			{BeginSlotlessPlan, s.Q(sqlstore.BeginPostgres), begin(""), false, ""},
			{"finish and release: the lease row locked, the attempt ended, the lease released", q, args, false, ""}}
	}
	q, args := s.FinishReleaseMySQL("r7", store.Lease{Task: "joba0", Holder: "h", Token: 1},
		store.Outcome{State: store.Succeeded, ExitCode: &code, Note: "done"})
	return []Plan{{"finish: a run's attempt", s.Q(sqlstore.RunQuery), []any{"r7"}, false, ""},
		{"finish and release: the lease row, then the run's attempt, both updated", q, args, false, ""}}
}

// SeedPlanRows writes 4,000 attempts and 12,000 events (three a slot: busy, but 14 missed and 13
// review) over 400 tasks ("joba0" …) and 10 slots each ("s0" …), so the planner has tables worth an
// index, a task or a rare kind of event is a small part of them, and a slot's events are more than
// the one its review is (with one event a slot, PostgreSQL's estimates of the slot's indexes tie),
// and the 400 tasks' lease rows (4,000 more tasks released long ago: a page is a small part of the
// index). The caller then runs the backend's ANALYZE.
func SeedPlanRows(tb testing.TB, s *sqlstore.Store) {
	tb.Helper()
	ctx := context.Background()
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	const per = 500
	for b := range 8 {
		var vals, evs []string
		var args, eargs []any
		for j := range per {
			i := b*per + j
			task, slot := fmt.Sprintf("job%c%d", 'a'+i%20, i%400/20), fmt.Sprintf("s%d", i/400)
			at := base.Add(time.Duration(i) * time.Minute)
			vals = append(vals, "(?, ?, 1, ?, 'succeeded', 'h', 1, ?, ?, '', '')")
			args = append(args, task, slot, fmt.Sprintf("r%d", i), at, at.Add(time.Second))
			// Busy events (a launch on every host: several a slot), now and then a review or a
			// missed one.
			for k := range 3 {
				kind := "busy"
				switch {
				case k == 0 && i%300 == 0:
					kind = "missed"
				case k == 0 && i%300 == 150:
					kind = "review"
				}
				evs = append(evs, "(?, ?, ?, 'b', 'h', 0, 0, '', ?)")
				eargs = append(eargs, task, slot, kind, at.Add(time.Duration(k+1)*time.Millisecond))
			}
		}
		if _, err := s.DB.ExecContext(ctx, s.Q(`INSERT INTO {p}attempts (task, slot, attempt, run_id, state, holder, token,
			started_at, ended_at, checkpoint, note) VALUES `+strings.Join(vals, ", ")), args...); err != nil {
			tb.Fatal(err)
		}
		if _, err := s.DB.ExecContext(ctx, s.Q(`INSERT INTO {p}events (task, slot, kind, run_id, holder, token, attempt, note,
			happened_at) VALUES `+strings.Join(evs, ", ")), eargs...); err != nil {
			tb.Fatal(err)
		}
	}
	seedLeases(tb, s, base)
	seedKeys(tb, s, base)
}

// seedKeys writes 6,000 keys in 31 scopes, one of them ("big") with 200, a fifth of them pending
// under a run of joba0.
func seedKeys(tb testing.TB, s *sqlstore.Store, at time.Time) {
	tb.Helper()
	cols, val := "scope, ikey, state, fingerprint, task, run_id, token, claimed_at, done_at", "(?, ?, ?, '', 'joba0', 'r', 1, ?, ?)"
	if s.Flavor == sqlstore.MySQL {
		cols, val = cols+", claim_id", "(?, ?, ?, '', 'joba0', 'r', 1, ?, ?, '0123456789abcdef')"
	}
	for b := range 6 {
		var vals []string
		var args []any
		for j := range 1000 {
			i := b*1000 + j
			scope, state, done := fmt.Sprintf("scope%d", i%30), "done", any(at)
			if i%30 == 0 {
				scope = "big"
			}
			if i%5 == 0 {
				state, done = "pending", nil
			}
			vals = append(vals, val)
			args = append(args, scope, fmt.Sprintf("key%d", i), state, at, done)
		}
		if _, err := s.DB.ExecContext(context.Background(), s.Q(`INSERT INTO {p}keys (`+cols+`) VALUES `+strings.Join(vals, ", ")), args...); err != nil {
			tb.Fatal(err)
		}
	}
}

// seedLeases writes a lease row for each of SeedPlanRows' 400 tasks, and 4,000 of tasks released.
func seedLeases(tb testing.TB, s *sqlstore.Store, at time.Time) {
	tb.Helper()
	for b := range 11 {
		var vals []string
		var args []any
		for j := range 400 {
			task := fmt.Sprintf("job%c%d", 'a'+j%20, j/20)
			if b > 0 {
				task = fmt.Sprintf("old%d-%d", b, j)
			}
			holder, run := "", ""
			if task == "joba0" { // held, so that a plan of finish and release reads on past the lease row
				holder, run = "h", "r7"
			}
			vals = append(vals, "(?, ?, ?, 1, ?, ?)")
			args = append(args, task, holder, run, at, at)
		}
		if _, err := s.DB.ExecContext(context.Background(), s.Q(`INSERT INTO {p}leases (task, holder, run_id, token, acquired_at,
			expires_at) VALUES `+strings.Join(vals, ", ")), args...); err != nil {
			tb.Fatal(err)
		}
	}
}
