package sqltest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// KeysUpgradeFromV1: a version 1 schema (no keys table) at dsn is upgraded to version 2 on open,
// under the migration lock, and keeps its leases.
func KeysUpgradeFromV1(t *testing.T, dsn string, open Opener) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, sq, err := open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, store.AcquireRequest{Task: "old", Holder: "h", RunID: "r", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP TABLE {p}keys", "DELETE FROM {p}schema_version WHERE version >= 2"} {
		if _, err := sq.DB.ExecContext(ctx, sq.Q(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	s, _, err = open(ctx, dsn)
	if err != nil {
		t.Fatalf("open a version 1 schema: %v", err)
	}
	defer s.Close()
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 1 {
		t.Fatalf("leases after upgrade: %v, %v", ls, err)
	}
	k, ok := s.(store.Keys)
	if !ok {
		t.Fatalf("%T does not keep business keys", s)
	}
	got, err := k.Claim(ctx, store.ClaimRequest{Scope: "s", Keys: []string{"k"}})
	if err != nil || !got[0] {
		t.Fatalf("claim after upgrade: %v, %v", got, err)
	}
}

// EventsUpgradeFromV3: a version 3 schema at dsn (what downgrade, run in order with {p} for the
// table prefix, makes of a current one: the events table's CHECK without missed, no index by kind)
// with skipped, busy and review events is upgraded on open (migration 004) and keeps every entry as
// it was, then keeps missed events (storetest.CheckEventsUpgraded). Then a schema newer than this once
// knows is refused, fail closed: an older once meets a migrated schema the same way.
func EventsUpgradeFromV3(t *testing.T, dsn string, open Opener, downgrade []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, sq, err := open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	before := storetest.EventsLedger(t, s)
	for _, q := range append(downgrade, "DELETE FROM {p}schema_version WHERE version >= 4") {
		if _, err := sq.DB.ExecContext(ctx, sq.Q(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Record(ctx, store.Event{Task: "ev", Kind: store.Missed}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the version 3 schema took a missed event: %v", err)
	}
	s.Close()
	s, sq, err = open(ctx, dsn)
	if err != nil {
		t.Fatalf("open a version 3 schema: %v", err)
	}
	storetest.CheckEventsUpgraded(t, s, before)
	var v int
	latest := schemaVersion[sq.Flavor]
	if err := sq.DB.QueryRowContext(ctx, sq.Q("SELECT MAX(version) FROM {p}schema_version")).Scan(&v); err != nil || v != latest {
		t.Fatalf("schema version after the upgrade: %d, %v; want %d", v, err, latest)
	}
	newer := latest + 1
	if _, err := sq.DB.ExecContext(ctx, sq.Q("INSERT INTO {p}schema_version (version, applied_at) VALUES (?, CURRENT_TIMESTAMP)"), newer); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, _, err = open(ctx, dsn)
	if want := fmt.Sprintf("schema version %d", newer); !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "upgrade once") {
		t.Fatalf("open a version %d schema: %v; want ErrUnavailable: %s … upgrade once", newer, err, want)
	}
}

// schemaVersion is the newest migration of each flavor's schema (store/postgres/migrations,
// store/mysql/migrations): raise it with each new migration. MySQL/MariaDB's 007 has no PostgreSQL
// twin (its partial index was there since 003).
var schemaVersion = map[string]int{sqlstore.Postgres: 6, sqlstore.MySQL: 7}

// downgraded opens a fresh schema, grants the exclusive lease of task "old" (to "x", run "rx")
// with an attempt of slot "s0" under it, releases it, sets the schema back with stmts, and opens
// it again: the store upgraded from version from, and the grant made before.
func downgraded(t *testing.T, ctx context.Context, dsn string, open Opener, from int, stmts ...string) (store.Store, store.Lease) {
	t.Helper()
	s, sq, err := open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	lx, err := s.Acquire(ctx, store.AcquireRequest{Task: "old", Holder: "x", RunID: "rx", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "old", Slot: "s0", RunID: "rx", Holder: "x", Token: lx.Token}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, lx); err != nil {
		t.Fatal(err)
	}
	stmts = append(stmts, fmt.Sprintf("DELETE FROM {p}schema_version WHERE version > %d", from))
	for _, q := range stmts {
		if _, err := sq.DB.ExecContext(ctx, sq.Q(q)); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s.Close()
	s, _, err = open(ctx, dsn)
	if err != nil {
		t.Fatalf("open a version %d schema: %v", from, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, lx
}

// SeatsUpgradeFromV4: a version 4 schema (no lease_seats table) with an exclusive grant is
// upgraded on open (migration 005), and grants seats with tokens after the exclusive grant's.
func SeatsUpgradeFromV4(t *testing.T, dsn string, open Opener) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, lx := downgraded(t, ctx, dsn, open, 4, "DROP TABLE {p}lease_seats")
	for i, h := range []string{"a", "b"} {
		l, err := s.Acquire(ctx, store.AcquireRequest{Task: "old", Holder: h, RunID: "r" + h, TTL: time.Minute, Limit: 2})
		if want := lx.Token + int64(i) + 1; err != nil || l.Token != want {
			t.Fatalf("seat %d after the upgrade: %+v, %v; want token %d", i+1, l, err, want)
		}
	}
	if ls, err := s.Leases(ctx); err != nil || len(ls) != 2 {
		t.Fatalf("leases after two seats: %+v, %v", ls, err)
	}
}

// AttemptSeatsUpgradeFromV5: a version 5 schema (attempts without the seats column) gets the
// column on open (migration 006); its old attempts read Limit 0, a seat's attempt keeps its Limit.
func AttemptSeatsUpgradeFromV5(t *testing.T, dsn string, open Opener) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, _ := downgraded(t, ctx, dsn, open, 5, "ALTER TABLE {p}attempts DROP COLUMN seats")
	if st, err := s.Slot(ctx, "old", "s0"); err != nil || st.Last == nil || st.Last.Limit != 0 {
		t.Fatalf("an old attempt after the upgrade: %+v, %v; want Limit 0", st.Last, err)
	}
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "old", Holder: "a", RunID: "ra", TTL: time.Minute, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "old", Slot: "s1", RunID: "ra", Holder: "a", Token: l.Token, Limit: 3}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Slot(ctx, "old", "s1"); err != nil || st.Last == nil || st.Last.Limit != 3 {
		t.Fatalf("a seat's attempt after the upgrade: %+v, %v; want Limit 3", st.Last, err)
	}
}

// SchemaNewerWhileOpen: a store opened at dsn before a newer once upgraded its schema (a once
// daemon, once serve) finds it at its next CheckSchema (store.ErrSchemaAhead, naming both
// versions), and from then on every call fails so without touching the server: a lease acquire
// writes nothing, Slot and Slots (store.SlotsReader) refuse alike. Until then both read: a read
// checks no version (SchemaGuard is the writes'). CheckSchema on the current schema is nil.
func SchemaNewerWhileOpen(t *testing.T, dsn string, open Opener) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, raw, err := open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sc, ok := s.(store.SchemaChecker)
	if !ok {
		t.Fatalf("%T is no store.SchemaChecker", s)
	}
	if err := sc.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema on the current schema: %v", err)
	}
	newer := raw.Schema + 1
	if _, err := raw.DB.ExecContext(ctx, raw.Q("INSERT INTO {p}schema_version (version, applied_at) VALUES (?, {now})"), newer); err != nil {
		t.Fatal(err)
	}
	slotsRead(t, ctx, s, nil) // reads check no version: Slot and Slots read until a check finds it
	err = sc.CheckSchema(ctx)
	want := fmt.Sprintf("schema version %d, this once understands %d", newer, raw.Schema)
	if !errors.Is(err, store.ErrSchemaAhead) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("CheckSchema after a newer once upgraded the store: %v; want ErrSchemaAhead saying %q", err, want)
	}
	slotsRead(t, ctx, s, store.ErrSchemaAhead) // then both refuse, as every call does
	_, err = s.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "h", RunID: "r", TTL: time.Minute})
	if !errors.Is(err, store.ErrSchemaAhead) {
		t.Fatalf("acquire after CheckSchema found a newer schema: %v; want ErrSchemaAhead", err)
	}
	var n int
	if err := raw.DB.QueryRowContext(ctx, raw.Q("SELECT count(*) FROM {p}leases")).Scan(&n); err != nil || n != 0 {
		t.Fatalf("leases after the refused acquire: %d, %v; want none", n, err)
	}
}

// SchemaNewerRefusesWork: stores opened at dsn before a newer once upgraded the schema (a once
// daemon or once serve between two polls) learn of it from the writes that start or end work
// themselves, without CheckSchema: Begin (PostgreSQL's one statement and the long way), Start,
// Finish, FinishRelease and an acquire (exclusive, a seat, a takeover) each fail with
// store.ErrSchemaAhead and ErrUnavailable, and write nothing (the exclusive acquire, which commits
// alone, gives its grant back); the store then refuses every call.
func SchemaNewerRefusesWork(t *testing.T, dsn string, open Opener) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cases := aheadCases(ctx)
	stores := make([]store.Store, len(cases))
	var raw *sqlstore.Store
	for i := range stores {
		s, sq, err := open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i], raw = s, sq
	}
	g := aheadGrants(t, ctx, stores[0])
	newer := raw.Schema + 1
	if _, err := raw.DB.ExecContext(ctx, raw.Q("INSERT INTO {p}schema_version (version, applied_at) VALUES (?, {now})"), newer); err != nil {
		t.Fatal(err)
	}
	before := ledgerRows(t, ctx, raw)
	want := fmt.Sprintf("schema version %d, this once understands %d", newer, raw.Schema)
	for i, c := range cases {
		err := c.do(stores[i], g)
		if !errors.Is(err, store.ErrSchemaAhead) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s after a newer once upgraded the store: %v; want ErrSchemaAhead saying %q", c.name, err, want)
		}
		if _, err := stores[i].Leases(ctx); !errors.Is(err, store.ErrSchemaAhead) {
			t.Errorf("a read after %s was refused: %v; want ErrSchemaAhead", c.name, err)
		}
	}
	if after := ledgerRows(t, ctx, raw); after != before {
		t.Errorf("the refused writes changed the store:\n%s\nwas\n%s", after, before)
	}
}

// aheadGrant is what SchemaNewerRefusesWork's cases write under: the grant of task "run" with
// attempt "r1" running under it, and the grant of task "held".
type aheadGrant struct{ run, held store.Lease }

// aheadGrants makes the grants before the schema is upgraded, and releases task "free"'s.
func aheadGrants(t *testing.T, ctx context.Context, s store.Store) aheadGrant {
	t.Helper()
	var g aheadGrant
	var err error
	for _, p := range []struct {
		l    *store.Lease
		task string
	}{{&g.run, "run"}, {&g.held, "held"}} {
		if *p.l, err = s.Acquire(ctx, store.AcquireRequest{Task: p.task, Holder: "h", RunID: "r1", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "run", Slot: "s", RunID: "r1", Holder: "h", Token: g.run.Token}); err != nil {
		t.Fatal(err)
	}
	free, err := s.Acquire(ctx, store.AcquireRequest{Task: "free", Holder: "h", RunID: "r0", TTL: time.Minute})
	if err == nil {
		err = s.Release(ctx, free)
	}
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// aheadCases are the writes SchemaNewerRefusesWork makes after the upgrade, each on a store of
// its own (the first refusal marks the store).
func aheadCases(ctx context.Context) []struct {
	name string
	do   func(store.Store, aheadGrant) error
} {
	code := 0
	done := store.Outcome{State: store.Succeeded, ExitCode: &code}
	begin := func(n int) func(s store.Store, g aheadGrant) error {
		return func(s store.Store, g aheadGrant) error {
			_, err := s.Begin(ctx, store.Attempt{Task: "held", Slot: "s", RunID: "r2", Holder: "h", Token: g.held.Token, Number: n})
			return err
		}
	}
	acquire := func(req store.AcquireRequest) func(s store.Store, g aheadGrant) error {
		return func(s store.Store, g aheadGrant) error {
			req.Holder, req.RunID, req.TTL = "h2", "r3", time.Minute
			_, err := s.Acquire(ctx, req)
			return err
		}
	}
	return []struct {
		name string
		do   func(store.Store, aheadGrant) error
	}{
		{"begin of attempt 1", begin(1)}, // PostgreSQL: one statement
		{"begin of the next attempt", begin(0)},
		{"start", func(s store.Store, g aheadGrant) error {
			_, err := s.(store.Starter).Start(ctx, store.AcquireRequest{Task: "free", Holder: "h2", RunID: "r3", TTL: time.Minute}, "s")
			return err
		}},
		{"finish", func(s store.Store, g aheadGrant) error { _, err := s.Finish(ctx, "r1", g.run.Token, done); return err }},
		{"finish and release", func(s store.Store, g aheadGrant) error {
			_, err := s.(store.Finisher).FinishRelease(ctx, "r1", g.run, done)
			return err
		}},
		{"acquire", acquire(store.AcquireRequest{Task: "free"})},
		{"acquire of a seat", acquire(store.AcquireRequest{Task: "seats", Limit: 2})},
		{"takeover", acquire(store.AcquireRequest{Task: "held", Replace: true})},
	}
}

// ledgerRows is what SchemaNewerRefusesWork's writes would change, as text: the live grants (an
// acquire that committed alone gave its grant back, its token counted), the seats, the attempts
// and the waits.
func ledgerRows(t *testing.T, ctx context.Context, s *sqlstore.Store) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		"SELECT task, holder, run_id, token FROM {p}leases WHERE holder <> '' ORDER BY task",
		"SELECT task, token, holder FROM {p}lease_seats ORDER BY task, token",
		"SELECT task, slot, attempt, run_id, state, token FROM {p}attempts ORDER BY id",
		"SELECT task, slot FROM {p}waiting ORDER BY task, slot",
	} {
		rows, err := s.DB.QueryContext(ctx, s.Q(q))
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%v\n", vals)
		}
		rows.Close()
		b.WriteString("--\n")
	}
	return b.String()
}

// slotsRead reads a slot with Slot and with Slots (store.SlotsReader), which must both fail with
// want, or both read it when want is nil.
func slotsRead(t *testing.T, ctx context.Context, s store.Store, want error) {
	t.Helper()
	_, err := s.Slot(ctx, "t", "s")
	_, errs := s.(store.SlotsReader).Slots(ctx, "t", []string{"s"})
	for name, err := range map[string]error{"Slot": err, "Slots": errs} {
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Errorf("%s: %v; want %v", name, err, want)
		}
	}
}
