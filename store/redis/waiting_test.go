package redis

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store/storetest"
)

// TestWaitingIndexBuilt: on a ledger written by a once without the waiting index (no index, no
// mark), the first Waiting builds it from the documents, and lists the slots waiting.
func TestWaitingIndexBuilt(t *testing.T) {
	dsn := storetest.WithPrefix(t, serverDSN(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.WaitingLedger(t, s)
	if err := s.c.Del(ctx, s.tkey("job", "waiting"), s.waitingIndexed()).Err(); err != nil {
		t.Fatal(err)
	}
	storetest.CheckUpgraded(t, s)
	if n, err := s.c.ZCard(ctx, s.tkey("job", "waiting")).Result(); err != nil || n != 2 {
		t.Fatalf("index after the first Waiting: %d entries, %v", n, err)
	}
}
