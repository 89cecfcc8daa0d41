package etcd

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/once-run/once/internal/kvstore/kvtest"
)

// TestRunningIndex: the running index as a ledger an older once wrote leaves it (internal/kvstore/kvtest).
func TestRunningIndex(t *testing.T) {
	raw := func(t *testing.T, dsn string) *Store {
		s, err := Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	txn := func(t *testing.T, s *Store, ops ...op) {
		if _, err := s.c.txn(context.Background(), txnReq{Success: ops}); err != nil {
			t.Fatal(err)
		}
	}
	kvtest.Archives(t, harness().DSN)
	kvtest.HistoryIndex(t, harness().DSN, func(t *testing.T, dsn string) {
		s := raw(t, dsn)
		txn(t, s, opDelPrefix(s.p+"x/"), opDelPrefix(s.p+"y/"), opDelPrefix(s.p+"z/"), opDel(s.historyIndexed(), false), opDel(s.kindsIndexed(), false))
	})
	kvtest.RunningIndex(t, kvtest.Hooks{
		DSN: harness().DSN,
		Unindex: func(t *testing.T, dsn string) {
			s := raw(t, dsn)
			txn(t, s, opDelPrefix(s.p+"a/")) // the entries and the tasks' marks
		},
		Drop: func(t *testing.T, dsn, task, slot string) {
			s := raw(t, dsn)
			txn(t, s, opDel(s.runningKey(task, slot), false))
		},
		Stray: func(t *testing.T, dsn, task, slot string) {
			s := raw(t, dsn)
			txn(t, s, opPut(s.runningKey(task, slot), "", 0))
		},
		Listed: func(t *testing.T, dsn, task string) []string {
			s := raw(t, dsn)
			gr, err := s.c.getPrefix(context.Background(), s.runningDir(task))
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, kv := range gr.Kvs {
				sl, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), s.runningDir(task)))
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, sl)
			}
			slices.Sort(out)
			return out
		},
	})
}
