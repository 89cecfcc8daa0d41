package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/once-run/once/store"
	"github.com/once-run/once/store/postgres"
	"github.com/once-run/once/store/sqlite"
)

// seedKeys writes n business keys in 200 scopes: half of them in one scope, "big"; 1 % are pending
// under a claim that expired (unknown: what the keys pages look for), the rest done.
func seedKeys(ctx context.Context, dsn string, n int) error {
	s, err := store.Open(ctx, dsn) // creates (or upgrades) the schema the normal way
	if err != nil {
		return err
	}
	s.Close()
	began := time.Now()
	scheme, _ := store.Scheme(dsn)
	switch scheme {
	case "sqlite":
		err = seedKeysSQLite(ctx, dsn, n)
	case "postgres", "postgresql":
		err = seedKeysPostgres(ctx, dsn, n)
	default:
		err = fmt.Errorf("seed-keys writes SQLite and PostgreSQL tables only")
	}
	if err != nil {
		return err
	}
	fmt.Printf("seeded %d keys in %s\n", n, time.Since(began).Round(time.Millisecond))
	return nil
}

func seedKeysSQLite(ctx context.Context, dsn string, n int) error {
	path, opts, err := sqlite.ParseDSN(dsn)
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=synchronous(OFF)")
	if err != nil {
		return err
	}
	defer db.Close()
	now := time.Now().UnixMicro()
	if _, err := db.ExecContext(ctx, `WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < ?1)
		INSERT INTO `+opts.Prefix+`keys (scope, key, state, fingerprint, task, run_id, token, expires_at, claimed_at, done_at)
		SELECT CASE WHEN i % 2 = 0 THEN 'big' ELSE printf('scope-%03d', i % 199) END, printf('key-%09d', i),
			CASE WHEN i % 100 = 7 THEN 'pending' ELSE 'done' END, '', '', 'bench-run', 0,
			CASE WHEN i % 100 = 7 THEN 1 ELSE 0 END, ?2 - i, CASE WHEN i % 100 = 7 THEN NULL ELSE ?2 - i END FROM c`, n, now); err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "ANALYZE")
	return err
}

func seedKeysPostgres(ctx context.Context, dsn string, n int) error {
	cfg, err := postgres.ParseDSN(dsn)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Conn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO `+cfg.Prefix+`keys (scope, ikey, state, run_id, expires_at, claimed_at, done_at)
		SELECT CASE WHEN i % 2 = 0 THEN 'big' ELSE 'scope-' || lpad((i % 199)::text, 3, '0') END, 'key-' || lpad(i::text, 9, '0'),
			CASE WHEN i % 100 = 7 THEN 'pending' ELSE 'done' END, 'bench-run',
			CASE WHEN i % 100 = 7 THEN to_timestamp(1) END, now() - i * interval '1 microsecond',
			CASE WHEN i % 100 = 7 THEN NULL ELSE now() END
		FROM generate_series(0, $1::bigint - 1) i`, n); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "ANALYZE "+cfg.Prefix+"keys")
	return err
}
