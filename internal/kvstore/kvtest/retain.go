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
// prune's rule, then not again within its interval, then what crossed the cutoff since, and its
// document is never seen as a slot.
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
		// two attempts from ago on: the first goes, the slot's last stays
		oldAt := func(slot string, ago time.Duration) {
			code := 1
			d := &kvstore.Doc{Task: "ret", Slot: slot}
			for n := 1; n <= 2; n++ {
				at := now.Add(-ago).Add(time.Duration(n) * time.Second)
				d.Attempts = append(d.Attempts, store.Attempt{Task: "ret", Slot: slot, RunID: fmt.Sprintf("%s-%d", slot, n),
					Number: n, State: store.Failed, ExitCode: &code, StartedAt: at, EndedAt: &at})
			}
			d.Attempts[1].State, code = store.Succeeded, 0
			if _, err := kv.Save(ctx, d, 0, 0, ""); err != nil {
				t.Fatal(err)
			}
		}
		old := func(slot string) { oldAt(slot, 2*time.Hour) }
		old("a")
		res, pruned, err := rt.Retain(ctx, "ret", now.Add(-time.Hour), time.Hour)
		if err != nil || !pruned || res.Attempts != 1 {
			t.Fatalf("first Retain: %+v, pruned %v, %v; want one attempt pruned", res, pruned, err)
		}
		oldAt("b", time.Hour-30*time.Second) // after the first Retain's cutoff: the next one prunes it
		old("z")                             // before it, less a minute: left to once prune (PruneRequest.Since)
		if res, pruned, err := rt.Retain(ctx, "ret", now.Add(-time.Hour+time.Minute), time.Hour); err != nil || pruned || res != (store.PruneResult{}) {
			t.Fatalf("Retain within its interval: %+v, pruned %v, %v; want nothing", res, pruned, err)
		}
		if es, err := s.History(ctx, store.HistoryQuery{Task: "ret"}); err != nil || len(es) != 5 {
			t.Fatalf("history after a Retain within its interval: %d entries, %v; want 5", len(es), err)
		}
		if res, pruned, err := rt.Retain(ctx, "ret", now.Add(-time.Hour+2*time.Minute), 0); err != nil || !pruned || res.Attempts != 1 {
			t.Fatalf("Retain past its interval: %+v, pruned %v, %v; want one attempt pruned", res, pruned, err)
		}
		// Its document is no slot: not in history, not waiting, not forgotten as one.
		if es, err := s.History(ctx, store.HistoryQuery{Task: "ret"}); err != nil || len(es) != 4 {
			t.Fatalf("history: %d entries, %v; want the three slots' last attempts and z's first", len(es), err)
		}
		if ts, err := store.ListTasks(ctx, s, "", 10); err != nil || len(ts) != 0 && !(len(ts) == 1 && ts[0] == "ret") {
			t.Fatalf("tasks: %v, %v", ts, err)
		}
		if w, err := s.Waiting(ctx); err != nil || len(w) != 0 {
			t.Fatalf("waiting: %+v, %v", w, err)
		}
		if res, err := s.Prune(ctx, store.PruneRequest{Task: "ret", Before: time.Now(), ForgetSlots: true, DryRun: true}); err != nil || res.Slots != 3 {
			t.Fatalf("forget, dry run: %+v, %v; want the 3 slots", res, err)
		}
		// A clock that ran ahead (a year) does not stop the prunes of the hosts whose clock is right.
		if _, pruned, err := rt.Retain(ctx, "ret", now.AddDate(1, 0, 0), time.Hour); err != nil || !pruned {
			t.Fatalf("Retain a year ahead: pruned %v, %v", pruned, err)
		}
		old("c")
		if res, pruned, err := rt.Retain(ctx, "ret", now.Add(-time.Hour+3*time.Minute), time.Hour); err != nil || !pruned || res.Attempts != 2 {
			t.Fatalf("Retain after one a year ahead: %+v, pruned %v, %v; want the whole task pruned: c's first attempt and z's", res, pruned, err)
		}
		if m, _, _, err := kv.Load(ctx, "ret", "\x1fretain"); err != nil || m == nil || m.Retained == nil || !m.Retained.Equal(now.Add(-time.Hour+3*time.Minute)) {
			t.Fatalf("the retain document: %+v, %v", m, err)
		}
		if _, _, err := rt.Retain(ctx, "", now, time.Hour); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("Retain of no task: %v, want ErrInvalid", err)
		}
	})
}
