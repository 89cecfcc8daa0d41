package sqltest

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/internal/sqlstore"
	"github.com/once-run/once/store"
)

// Opener opens a SQL store at a DSN and returns it with its shared core.
type Opener func(ctx context.Context, dsn string) (store.Store, *sqlstore.Store, error)

// IdleTx checks the idle-transaction timeout of a SQL store (sqlstore.IdleTxTimeout): a store
// opened at dsn sets it by default (show reads the session's value in seconds), and a holder gone
// inside a ledger transaction — its session left open with the task's lease row locked, as behind
// a partition that drops the FIN — blocks the next holder only until the server ends that session.
// override is the DSN parameter, with its leading & and a value of one second, that shortens the
// timeout for the test.
func IdleTx(t *testing.T, dsn string, open Opener, show, override string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, core, err := open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var secs float64
	if err := core.DB.QueryRowContext(ctx, show).Scan(&secs); err != nil {
		t.Fatalf("%s: %v", show, err)
	}
	if want := sqlstore.IdleTxTimeout.Seconds(); secs != want {
		t.Fatalf("idle-transaction timeout of a session is %vs, want %vs", secs, want)
	}

	short, gone, err := open(ctx, dsn+override)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	l, err := short.Acquire(ctx, store.AcquireRequest{Task: "idle", Holder: "gone", RunID: "r1", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// The vanished holder: a ledger-style transaction that locked the lease row and never ended.
	conn, err := gone.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var tok int64
	if err := conn.QueryRowContext(ctx, gone.Q("SELECT token FROM {p}leases WHERE task = ? FOR UPDATE"), "idle").Scan(&tok); err != nil || tok != l.Token {
		t.Fatalf("lock the lease row: token %d, %v", tok, err)
	}
	time.Sleep(1100 * time.Millisecond) // the lease has expired; its row is still locked
	began := time.Now()
	actx, acancel := context.WithTimeout(ctx, 20*time.Second)
	defer acancel()
	next, err := short.Acquire(actx, store.AcquireRequest{Task: "idle", Holder: "next", RunID: "r2", TTL: time.Second})
	if err != nil {
		t.Fatalf("the next holder stayed blocked by the vanished holder's transaction for %s: %v", time.Since(began).Round(time.Millisecond), err)
	}
	if next.Token <= l.Token {
		t.Fatalf("next token %d, want above %d", next.Token, l.Token)
	}
	if d := time.Since(began); d > 8*time.Second {
		t.Fatalf("the next holder waited %s, want about the 1s timeout", d)
	}
	t.Logf("the next holder waited %s for the server to end the idle transaction", time.Since(began).Round(time.Millisecond))
}
