package costs

import (
	"context"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// lookupBudget is the round trips of a Lookup of one key pending under a run claimant on each
// networked store (docs/effects.md): gone, when the task's lease is no longer live with the claim's
// token; live, when its grant is live and its attempt is running; ended, when its grant is live
// (the sequence's next slot holds it) and its attempt ended; again is the ended case read again by
// the same client; done is a key pending under the running run read with keys done by runs that
// ended under the same live grant (what a sequence's later claim of the same list reads): the runs
// of done keys are not read. The SQL stores decide in the one statement; the KV stores read the
// record and the leases, and for a live grant the run's index entry and its slot's document, once
// per client for a run found ended (it stays ended).
var lookupBudget = map[string]struct{ gone, live, ended, again, done int64 }{
	"postgres": {1, 1, 1, 1, 1}, "mysql": {1, 1, 1, 1, 1}, "redis": {3, 5, 5, 3, 5}, "etcd": {2, 4, 4, 2, 4}, "zk": {5, 7, 7, 5, 7},
}

// TestRoundTripsPerLookup counts the round trips of Lookup through a Relay in each case of
// lookupBudget, and holds each to its budget (with the store's slack).
func TestRoundTripsPerLookup(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			dsn := countedDSN(t, st)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			relay, via := relayed(t, ctx, dsn)
			w, err := store.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			r, err := store.Open(ctx, via)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			wk, rk := w.(store.Keys), r.(store.Keys)
			count := func(keys ...string) int64 {
				t.Helper()
				time.Sleep(100 * time.Millisecond)
				before := relay.Trips()
				if _, err := rk.Lookup(ctx, "costs", keys); err != nil {
					t.Fatal(err)
				}
				return relay.Trips() - before
			}
			pend := func(key string, l store.Lease, run string) {
				t.Helper()
				c := store.Claimant{Task: l.Task, RunID: run, Token: l.Token}
				if _, err := wk.Claim(ctx, store.ClaimRequest{Scope: "costs", Keys: []string{key}, Pending: true, Claimant: c}); err != nil {
					t.Fatal(err)
				}
			}
			count("warm") // the connection and, on Redis, the scripts
			old, err := w.Acquire(ctx, store.AcquireRequest{Task: "gone", Holder: "h", RunID: "g1", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			pend("gone", old, "g1")
			if err := w.Release(ctx, old); err != nil {
				t.Fatal(err)
			}
			l, err := w.Acquire(ctx, store.AcquireRequest{Task: "seq", Holder: "h", RunID: "s1", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Release(ctx, l)
			for _, run := range []string{"d1", "d2", "d3", "s1", "s2"} {
				if _, err := w.Begin(ctx, store.Attempt{Task: "seq", Slot: "d-" + run, RunID: run, Holder: "h", Token: l.Token}); err != nil {
					t.Fatal(err)
				}
				pend(run, l, run)
				if run[0] == 'd' {
					if err := wk.Complete(ctx, "costs", []string{run}, run, nil); err != nil {
						t.Fatal(err)
					}
				}
				if run != "s2" {
					code := 1
					if _, err := w.Finish(ctx, run, l.Token, store.Outcome{State: store.Failed, ExitCode: &code}); err != nil {
						t.Fatal(err)
					}
				}
			}
			got := struct{ gone, live, ended, again, done int64 }{count("gone"), count("s2"), count("s1"), count("s1"), count("s2", "d1", "d2", "d3")}
			t.Logf("%s: Lookup of a key pending under a run gone %d round trips, live %d, ended under a live grant %d, the same again %d, live beside 3 done keys %d",
				st.name, got.gone, got.live, got.ended, got.again, got.done)
			want := lookupBudget[st.name]
			for _, c := range []struct {
				name      string
				got, want int64
			}{{"gone", got.gone, want.gone}, {"live", got.live, want.live}, {"ended", got.ended, want.ended}, {"again", got.again, want.again}, {"done", got.done, want.done}} {
				if c.got < c.want || c.got > c.want+st.slack {
					t.Errorf("%s: Lookup (%s) took %d round trips, budget %d (slack %d)", st.name, c.name, c.got, c.want, st.slack)
				}
			}
		})
	}
}
