package kvtest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// retain checks store.Retainer (once run --retain on a key-value store): it prunes the whole task by
// prune's rule, then not again within its interval, and its document is never seen as a slot.
func retain(t *testing.T, dsn func(tb testing.TB) string) {
	t.Run("Retain", func(t *testing.T) {
		t.Parallel()
		s := open(t, dsn(t))
		kv := s.(interface{ Backend() kvstore.KV }).Backend()
		rt, ok := s.(store.Retainer)
		if !ok {
			t.Fatal("a key-value store is not a store.Retainer")
		}
		ctx := ctxT(t)
		now := time.Now()
		old := func(slot string) { // two attempts two hours old: the first goes, the slot's last stays
			code := 1
			d := &kvstore.Doc{Task: "ret", Slot: slot}
			for n := 1; n <= 2; n++ {
				at := now.Add(-2 * time.Hour).Add(time.Duration(n) * time.Second)
				d.Attempts = append(d.Attempts, store.Attempt{Task: "ret", Slot: slot, RunID: fmt.Sprintf("%s-%d", slot, n),
					Number: n, State: store.Failed, ExitCode: &code, StartedAt: at, EndedAt: &at})
			}
			d.Attempts[1].State, code = store.Succeeded, 0
			if _, err := kv.Save(ctx, d, 0, 0, ""); err != nil {
				t.Fatal(err)
			}
		}
		old("a")
		res, pruned, err := rt.Retain(ctx, "ret", now.Add(-time.Hour), time.Hour)
		if err != nil || !pruned || res.Attempts != 1 {
			t.Fatalf("first Retain: %+v, pruned %v, %v; want one attempt pruned", res, pruned, err)
		}
		old("b")
		if res, pruned, err := rt.Retain(ctx, "ret", now.Add(-time.Hour+time.Minute), time.Hour); err != nil || pruned || res != (store.PruneResult{}) {
			t.Fatalf("Retain within its interval: %+v, pruned %v, %v; want nothing", res, pruned, err)
		}
		if es, err := s.History(ctx, store.HistoryQuery{Task: "ret"}); err != nil || len(es) != 3 {
			t.Fatalf("history after a Retain within its interval: %d entries, %v; want 3", len(es), err)
		}
		if res, pruned, err := rt.Retain(ctx, "ret", now.Add(-time.Hour+2*time.Minute), 0); err != nil || !pruned || res.Attempts != 1 {
			t.Fatalf("Retain past its interval: %+v, pruned %v, %v; want one attempt pruned", res, pruned, err)
		}
		// Its document is no slot: not in history, not waiting, not forgotten as one.
		if es, err := s.History(ctx, store.HistoryQuery{Task: "ret"}); err != nil || len(es) != 2 {
			t.Fatalf("history: %d entries, %v; want the two slots' last attempts", len(es), err)
		}
		if ts, err := store.ListTasks(ctx, s, "", 10); err != nil || len(ts) != 0 && !(len(ts) == 1 && ts[0] == "ret") {
			t.Fatalf("tasks: %v, %v", ts, err)
		}
		if w, err := s.Waiting(ctx); err != nil || len(w) != 0 {
			t.Fatalf("waiting: %+v, %v", w, err)
		}
		if res, err := s.Prune(ctx, store.PruneRequest{Task: "ret", Before: time.Now(), ForgetSlots: true, DryRun: true}); err != nil || res.Slots != 2 {
			t.Fatalf("forget, dry run: %+v, %v; want the 2 slots", res, err)
		}
		// A clock that ran ahead (a year) does not stop the prunes of the hosts whose clock is right.
		if _, pruned, err := rt.Retain(ctx, "ret", now.AddDate(1, 0, 0), time.Hour); err != nil || !pruned {
			t.Fatalf("Retain a year ahead: pruned %v, %v", pruned, err)
		}
		old("c")
		if res, pruned, err := rt.Retain(ctx, "ret", now.Add(-time.Hour+3*time.Minute), time.Hour); err != nil || !pruned || res.Attempts != 1 {
			t.Fatalf("Retain after one a year ahead: %+v, pruned %v, %v; want one attempt pruned", res, pruned, err)
		}
		if m, _, _, err := kv.Load(ctx, "ret", "\x1fretain"); err != nil || m == nil || m.Retained == nil || !m.Retained.Equal(now.Add(-time.Hour+3*time.Minute)) {
			t.Fatalf("the retain document: %+v, %v", m, err)
		}
		if _, _, err := rt.Retain(ctx, "", now, time.Hour); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Retain of no task: %v, want ErrInvalid", err)
		}
	})
}
