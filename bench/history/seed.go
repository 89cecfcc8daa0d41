package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/mysql"
	"github.com/once-run/once/store/postgres"
	"github.com/once-run/once/store/sqlite"
)

const batch = 500

// seedSQLite writes the rows in one transaction of multi-row INSERTs, with the file's
// durability relaxed for the load (a crash while seeding only loses the seed).
func seedSQLite(ctx context.Context, dsn, shape string, n int) (int, error) {
	path, opts, err := sqlite.ParseDSN(dsn)
	if err != nil {
		return 0, err
	}
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=synchronous(OFF)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	p := opts.Prefix
	flush := func(as, es []row) error {
		if len(as) > 0 {
			q := "INSERT INTO " + p + "attempts (task, slot, number, run_id, state, holder, token, started_at, ended_at, exit_code) VALUES " +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, 'bench:1', 1, ?, ?, ?),", len(as)), ",")
			args := make([]any, 0, 8*len(as))
			for _, r := range as {
				args = append(args, r.task, r.slot, r.number, r.run, r.state, r.started, r.ended, r.exit)
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
		if len(es) > 0 {
			q := "INSERT INTO " + p + "events (task, slot, kind, run_id, holder, token, attempt, at, note) VALUES " +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, 'bench:2', 0, ?, ?, ''),", len(es)), ",")
			args := make([]any, 0, 6*len(es))
			for _, r := range es {
				args = append(args, r.task, r.slot, r.state, r.run, r.number, r.started)
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
		return nil
	}
	count, err := batches(shape, n, batch, flush)
	if err != nil {
		return 0, err
	}
	// A task is known (store.TaskLister) once it held a lease: one released lease row per task.
	if _, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO "+p+"leases (task, holder, run_id, token, acquired_at, expires_at) SELECT DISTINCT task, '', '', 1, 0, 0 FROM "+p+"attempts"); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	_, err = db.ExecContext(ctx, "ANALYZE")
	return count, err
}

// seedPostgres writes the rows with COPY.
func seedPostgres(ctx context.Context, dsn, shape string, n int) (int, error) {
	cfg, err := postgres.ParseDSN(dsn)
	if err != nil {
		return 0, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Conn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	// COPY takes large batches well.
	count, err := batches(shape, n, 50*batch, func(as, es []row) error {
		if len(as) > 0 {
			vs := make([][]any, 0, len(as))
			for _, r := range as {
				vs = append(vs, []any{r.task, r.slot, int32(r.number), r.run, r.state, "bench:1", int64(1),
					time.UnixMicro(r.started), time.UnixMicro(r.ended), int32(r.exit)})
			}
			if _, err := conn.CopyFrom(ctx, pgx.Identifier{cfg.Prefix + "attempts"},
				[]string{"task", "slot", "attempt", "run_id", "state", "holder", "token", "started_at", "ended_at", "exit_code"},
				pgx.CopyFromRows(vs)); err != nil {
				return err
			}
		}
		if len(es) > 0 {
			vs := make([][]any, 0, len(es))
			for _, r := range es {
				vs = append(vs, []any{r.task, r.slot, r.state, r.run, "bench:2", int64(0), int32(r.number), "", time.UnixMicro(r.started)})
			}
			if _, err := conn.CopyFrom(ctx, pgx.Identifier{cfg.Prefix + "events"},
				[]string{"task", "slot", "kind", "run_id", "holder", "token", "attempt", "note", "happened_at"},
				pgx.CopyFromRows(vs)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if _, err := conn.Exec(ctx, "INSERT INTO "+cfg.Prefix+"leases (task, holder, run_id, token, acquired_at, expires_at) SELECT DISTINCT task, '', '', 1, to_timestamp(0), to_timestamp(0) FROM "+cfg.Prefix+"attempts ON CONFLICT (task) DO NOTHING"); err != nil {
		return 0, err
	}
	for _, t := range []string{"attempts", "events", "leases"} {
		if _, err := conn.Exec(ctx, "ANALYZE "+cfg.Prefix+t); err != nil {
			return 0, err
		}
	}
	return count, nil
}

// seedMySQL writes the rows with multi-row INSERTs.
func seedMySQL(ctx context.Context, dsn, shape string, n int) (int, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return 0, err
	}
	c, err := gomysql.NewConnector(cfg.Driver)
	if err != nil {
		return 0, err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	p := cfg.Prefix
	ts := func(us int64) string { return time.UnixMicro(us).UTC().Format("2006-01-02 15:04:05.000000") }
	flush := func(as, es []row) error {
		if len(as) > 0 {
			q := "INSERT INTO " + p + "attempts (task, slot, attempt, run_id, state, holder, token, started_at, ended_at, exit_code, checkpoint, note) VALUES " +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, 'bench:1', 1, ?, ?, ?, '', ''),", len(as)), ",")
			args := make([]any, 0, 8*len(as))
			for _, r := range as {
				args = append(args, r.task, r.slot, r.number, r.run, r.state, ts(r.started), ts(r.ended), r.exit)
			}
			if _, err := db.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
		if len(es) > 0 {
			q := "INSERT INTO " + p + "events (task, slot, kind, run_id, holder, token, attempt, note, happened_at) VALUES " +
				strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, 'bench:2', 0, ?, '', ?),", len(es)), ",")
			args := make([]any, 0, 6*len(es))
			for _, r := range es {
				args = append(args, r.task, r.slot, r.state, r.run, r.number, ts(r.started))
			}
			if _, err := db.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
		return nil
	}
	count, err := batches(shape, n, batch, flush)
	if err != nil {
		return 0, err
	}
	if _, err := db.ExecContext(ctx, "INSERT IGNORE INTO "+p+"leases (task, holder, run_id, token, acquired_at, expires_at) SELECT DISTINCT task, '', '', 1, '1970-01-01 00:00:01', '1970-01-01 00:00:01' FROM "+p+"attempts"); err != nil {
		return 0, err
	}
	for _, t := range []string{"attempts", "events", "leases"} {
		if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+p+t); err != nil {
			return 0, err
		}
	}
	return count, nil
}

// batches hands the rows of shape (rows) to flush, attempts and events apart, size rows at a
// time, the last batch possibly empty; it returns how many rows flush took.
func batches(shape string, n, size int, flush func(as, es []row) error) (int, error) {
	var as, es []row
	count := 0
	send := func() error {
		if err := flush(as, es); err != nil {
			return err
		}
		count += len(as) + len(es)
		as, es = as[:0], es[:0]
		return nil
	}
	err := rows(shape, n, func(r row) error {
		if r.event {
			es = append(es, r)
		} else {
			as = append(as, r)
		}
		if len(as)+len(es) >= size {
			return send()
		}
		return nil
	})
	if err == nil {
		err = send()
	}
	return count, err
}

// drop removes the tables of a SQL server store's prefix.
func drop(ctx context.Context, dsn string) error {
	if cfg, err := postgres.ParseDSN(dsn); err == nil {
		conn, err := pgx.ConnectConfig(ctx, cfg.Conn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		for _, t := range []string{"attempts", "events", "leases", "lease_seats", "keys", "waiting", "schema_version"} {
			if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+cfg.Prefix+t+" CASCADE"); err != nil {
				return err
			}
		}
		return nil
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return fmt.Errorf("drop: PostgreSQL and MySQL only: %w", err)
	}
	c, err := gomysql.NewConnector(cfg.Driver)
	if err != nil {
		return err
	}
	db := sql.OpenDB(c)
	defer db.Close()
	for _, t := range []string{"attempts", "events", "leases", "lease_seats", "keys", "waiting", "schema_version"} {
		if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+cfg.Prefix+t); err != nil {
			return err
		}
	}
	return nil
}

// seedAPI writes the rows through the store's own Ledger (the key-value stores, whose documents
// the tool does not write directly): tasks of 100 slots, each attempt begun and finished, each
// event recorded. Slow (a few round trips per row): for thousands of rows, not millions.
func seedAPI(ctx context.Context, dsn, shape string, n int) (int, error) {
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	leases := map[string]store.Lease{}
	count := 0
	err = rows(shape, n, func(r row) error {
		l, ok := leases[r.task]
		if !ok {
			if l, err = s.Acquire(ctx, store.AcquireRequest{Task: r.task, Holder: "bench:1", RunID: "seed", TTL: time.Hour}); err != nil {
				return err
			}
			leases[r.task] = l
		}
		count++
		if r.event {
			return s.Record(ctx, store.Event{Task: r.task, Slot: r.slot, Kind: store.State(r.state), RunID: r.run, Holder: "bench:2", Attempt: r.number})
		}
		if _, err := s.Begin(ctx, store.Attempt{Task: r.task, Slot: r.slot, RunID: r.run, Number: r.number, Holder: "bench:1", Token: l.Token}); err != nil {
			return err
		}
		code := r.exit
		_, err := s.Finish(ctx, r.run, l.Token, store.Outcome{State: store.State(r.state), ExitCode: &code})
		return err
	})
	for _, l := range leases {
		_ = s.Release(ctx, l)
	}
	return count, err
}
