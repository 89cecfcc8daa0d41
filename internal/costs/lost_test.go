package costs

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/storetest"
)

// The last write of a run on the SQL stores is one autocommitted statement (FinishRelease): when
// the connection is lost after the server committed it and before its answer came, the store's
// retry must find the outcome its earlier try recorded and take it for its own — not report a
// conflict, which the run would log as an outcome it could not record.
func TestFinishReleaseAnswerLost(t *testing.T) {
	for _, st := range []struct{ name, env, mark string }{
		{"postgres", "ONCE_TEST_POSTGRES", "WITH i AS"}, // sqlstore.FinishReleasePostgres
		{"mysql", "ONCE_TEST_MYSQL", "STRAIGHT_JOIN"},   // sqlstore.FinishReleaseMySQL
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := storetest.WithPrefix(t, storetest.ServerDSN(t, st.env, st.name))
			relay, via := relayed(t, ctx, dsn)
			relay.CutAnswerTo = func(b []byte) bool { return bytes.Contains(b, []byte(st.mark)) }
			s, err := store.Open(ctx, via)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			res, err := once.Do(ctx, once.Options{Store: s, Task: "lost", Slot: "s1", Holder: "h:1", TTL: time.Minute},
				func(context.Context, *once.Run) error { return nil })
			if err != nil || res.Decision != once.Ran || res.RecordErr != nil || res.Attempt == nil || res.Attempt.State != store.Succeeded {
				t.Fatalf("run: %+v, %v; want it ran and its outcome recorded", res, err)
			}
			if !relay.cutDone.Load() {
				t.Fatal("no answer was cut: the test did not test the retry")
			}
			if ls, err := s.Leases(ctx); err != nil || len(ls) != 0 {
				t.Fatalf("leases after the run: %+v, %v; want none (released with the outcome)", ls, err)
			}
		})
	}
}
