package mysql

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// Ledger transactions run READ COMMITTED although Tx no longer asks for it per transaction: every
// connection's session is set so at connect, including connections the pool opens later.
func TestTransactionsAreReadCommitted(t *testing.T) {
	s, err := Open(ctxT(t, 30*time.Second), withPrefix(t, serverDSN(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.DB.SetMaxIdleConns(0) // each Tx on a new connection
	for i := range 3 {
		var level string
		err := s.Tx(ctxT(t, 10*time.Second), func(ctx context.Context, tx *sql.Tx) error {
			// MySQL 8 names the variable transaction_isolation, MariaDB 10 tx_isolation.
			if err := tx.QueryRowContext(ctx, "SELECT @@transaction_isolation").Scan(&level); err == nil {
				return nil
			}
			return tx.QueryRowContext(ctx, "SELECT @@tx_isolation").Scan(&level)
		})
		if err != nil {
			t.Fatal(err)
		}
		if level != "READ-COMMITTED" {
			t.Fatalf("transaction %d runs %s, want READ-COMMITTED", i, level)
		}
	}
}
