package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// testKeysRunEnded: a run claimant whose run ended is gone although the task's lease is still live
// with its token (store.Claimant). The slots of a sequence (catch-up, backfill, a daemon's catch-up)
// run one after another under one lease, each a run of its own: a key the first slot's run left
// pending is unknown to the second's, as to a later run under a new token — not pending under a
// live claimant, which the second would skip with nothing said. A key pending under a run still
// running stays pending, and so does one under a run id the ledger records no attempt of (a
// program's own id: its grant alone tells), for a false "gone" would do its work twice.
func testKeysRunEnded(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	k := keysClient(t, dsn)
	ctx := ctxT(t)
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "seq", Holder: "h1", RunID: "seq-1", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer s.Release(ctx, l)
	begin(t, s, l, "d1", "seq-1", 1)
	c1 := store.Claimant{Task: "seq", RunID: "seq-1", Token: l.Token}
	claim(t, k, store.ClaimRequest{Scope: "seq", Keys: []string{"a", "b"}, Pending: true, Claimant: c1})
	own := store.Claimant{Task: "seq", RunID: "no-attempt", Token: l.Token}
	claim(t, k, store.ClaimRequest{Scope: "seq", Keys: []string{"own"}, Pending: true, Claimant: own})
	if st := stateOf(t, k, "seq", "a"); st != store.KeyPending {
		t.Fatalf("key pending under a running attempt: state %q, want pending", st)
	}
	finish(t, s, "seq-1", l.Token, store.Failed, 3)

	// The next slot, under the same lease and token.
	begin(t, s, l, "d2", "seq-2", 1)
	c2 := store.Claimant{Task: "seq", RunID: "seq-2", Token: l.Token}
	if got := claim(t, k, store.ClaimRequest{Scope: "seq", Keys: []string{"a"}, Pending: true, Claimant: c2}); got[0] {
		t.Fatal("a key pending under an ended run was claimed again as new")
	}
	if m := lookup(t, k, "seq", "a", "b", "own"); m["a"].State != store.KeyUnknown || m["b"].State != store.KeyUnknown || m["a"].RunID != "seq-1" {
		t.Fatalf("keys left pending by a run that ended, its lease still live with its token: %+v, want a and b unknown (run seq-1)", m)
	}
	if st := stateOf(t, k, "seq", "own"); st != store.KeyPending {
		t.Fatalf("key pending under a run id with no attempt, its token live: state %q, want pending", st)
	}
	if ch, err := k.Reclaim(ctx, "seq", []string{"a", "own"}, &c2, false); err != nil || !slices.Equal(ch, []string{"a"}) {
		t.Fatalf("Reclaim by the next slot's run: %v, %v; want a only", ch, err)
	}
	if st := stateOf(t, k, "seq", "a"); st != store.KeyPending {
		t.Fatalf("key reclaimed by the running next slot: state %q, want pending", st)
	}
	if n, err := k.Forget(ctx, "seq", time.Now().Add(time.Minute), true); err != nil || n != 1 {
		t.Fatalf("Forget: %d, %v; want 1 (b, whose run ended)", n, err)
	}
	if m := lookup(t, k, "seq", "a", "b", "own"); len(m) != 2 || m["b"].Key != "" {
		t.Fatalf("after Forget: %v, want a and own kept", m)
	}
	if err := k.Complete(ctx, "seq", []string{"a"}, "seq-2", nil); err != nil {
		t.Fatalf("Complete by the next slot's run: %v", err)
	}
	finish(t, s, "seq-2", l.Token, store.Succeeded, 0)
}

// testKeysRunEndedGuards: the attempt that ends a run claimant is its task's, under any of the
// task's live grants. A claimant naming a run id that is another task's ended attempt stays
// pending (its task's grant is live): a match on the run id alone would read it gone and hand
// its work out again. With seats (limit 2), a key of the seat whose run ended is unknown while
// the seat is still held, and one of the other seat's running run stays pending.
func testKeysRunEndedGuards(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	k := keysClient(t, dsn)
	ctx := ctxT(t)
	o, err := s.Acquire(ctx, store.AcquireRequest{Task: "other", Holder: "h0", RunID: "x-1", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	begin(t, s, o, "d1", "x-1", 1)
	finish(t, s, "x-1", o.Token, store.Failed, 3)
	defer s.Release(ctx, o)
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "seq", Holder: "h1", RunID: "seq-1", TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	defer s.Release(ctx, l)
	begin(t, s, l, "d1", "seq-1", 1)
	cross := store.Claimant{Task: "seq", RunID: "x-1", Token: l.Token}
	claim(t, k, store.ClaimRequest{Scope: "guards", Keys: []string{"cross"}, Pending: true, Claimant: cross})
	if st := stateOf(t, k, "guards", "cross"); st != store.KeyPending {
		t.Fatalf("key pending under a live grant of seq, its run id another task's ended attempt: state %q, want pending", st)
	}
	finish(t, s, "seq-1", l.Token, store.Succeeded, 0)

	a := seat(t, s, "pool", "ha", 2, time.Minute)
	b := seat(t, s, "pool", "hb", 2, time.Minute)
	defer s.Release(ctx, a)
	defer s.Release(ctx, b)
	begin(t, s, a, "p1", "pool-a", 1)
	begin(t, s, b, "p2", "pool-b", 1)
	claim(t, k, store.ClaimRequest{Scope: "guards", Keys: []string{"a"}, Pending: true, Claimant: store.Claimant{Task: "pool", RunID: "pool-a", Token: a.Token}})
	claim(t, k, store.ClaimRequest{Scope: "guards", Keys: []string{"b"}, Pending: true, Claimant: store.Claimant{Task: "pool", RunID: "pool-b", Token: b.Token}})
	finish(t, s, "pool-a", a.Token, store.Failed, 1)
	if m := lookup(t, k, "guards", "a", "b"); m["a"].State != store.KeyUnknown || m["b"].State != store.KeyPending {
		t.Fatalf("seats: %+v; want a unknown (its run ended, its seat held) and b pending (its run running)", m)
	}
	finish(t, s, "pool-b", b.Token, store.Succeeded, 0)
}
