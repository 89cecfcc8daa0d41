package zk

import (
	"testing"
	"time"

	"github.com/once-run/once/store/storetest"
)

// TestWaitingIndexBuilt: on a ledger written by a once without the waiting index (no index, no
// mark), the first Waiting builds it from the documents, and lists the slots waiting.
func TestWaitingIndexBuilt(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	s, err := Open(ctx, withPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.WaitingLedger(t, s)
	for _, p := range []string{s.waitPath("job", "a"), s.waitPath("job", "c"), s.waitingIndexed()} {
		if err := s.c.Delete(p, -1); err != nil {
			t.Fatalf("delete %s: %v", p, err)
		}
	}
	storetest.CheckUpgraded(t, s)
	if kids, _, err := s.c.Children(s.p + "/w"); err != nil || len(kids) != 2 {
		t.Fatalf("index after the first Waiting: %v, %v", kids, err)
	}
}
