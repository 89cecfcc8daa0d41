package etcd

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
	for _, k := range []string{s.waitKey("job", "a"), s.waitKey("job", "c"), s.waitingIndexed()} {
		if _, err := s.c.txn(ctx, txnReq{Success: []op{opDel(k, false)}}); err != nil {
			t.Fatal(err)
		}
	}
	storetest.CheckUpgraded(t, s)
	if gr, err := s.c.getPrefix(ctx, s.p+"w/"); err != nil || len(gr.Kvs) != 2 {
		t.Fatalf("index after the first Waiting: %v, %v", gr, err)
	}
}
