package redis

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/internal/sqlstore/sqltest"
)

// TestWaitingIndexBuilt: on a ledger written by a once without the waiting index (no index, no
// mark), the first Waiting builds it from the documents, and lists the slots waiting.
func TestWaitingIndexBuilt(t *testing.T) {
	dsn := sqltest.WithPrefix(t, serverDSN(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sqltest.WaitingLedger(t, s)
	if err := s.c.Del(ctx, s.tkey("job", "waiting"), s.waitingIndexed()).Err(); err != nil {
		t.Fatal(err)
	}
	sqltest.CheckUpgraded(t, s)
	if n, err := s.c.ZCard(ctx, s.tkey("job", "waiting")).Result(); err != nil || n != 2 {
		t.Fatalf("index after the first Waiting: %d entries, %v", n, err)
	}
}
