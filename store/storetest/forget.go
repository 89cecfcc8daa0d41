package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// KeysForgetBatched checks a Forget that deletes in batches (store.ForgetBatch): over more than two
// batches of keys, claimed in requests that straddle the batches' ends (keys claimed at one instant
// on either side), it forgets exactly what a single statement would — every done key claimed
// before the cutoff, none claimed after it, never a key pending under a live claimant — and a
// second Forget finds nothing. Run by the stores whose Forget is batched: the SQL stores, and the
// key-value ones, which walk the scope a page at a time.
func KeysForgetBatched(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	s := client(t, dsn)
	k := keysClient(t, dsn)
	ctx := ctxT(t)
	const per = 700 // keys per claim, so batch ends fall inside a claim's keys
	var done, live []string
	var cutoff time.Time
	for c := 0; len(done)+len(live) < 2*store.ForgetBatch+1500; c++ {
		keys := make([]string, per)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%03d-%03d", c, i)
		}
		req := store.ClaimRequest{Scope: "batched", Keys: keys}
		if c%5 == 3 {
			req.Pending, req.Claimant = true, store.Claimant{RunID: "live", Expires: time.Hour}
			live = append(live, keys...)
		} else {
			done = append(done, keys...)
		}
		claim(t, k, req)
		if c == 12 { // the cutoff: between this claim and the next, by the store's clock
			cutoff = storeNow(t, s).Add(time.Millisecond)
			time.Sleep(5 * time.Millisecond)
		}
	}
	after := done[len(done)-per*3:] // claimed after the cutoff (the last claims are done ones)
	n, err := k.Forget(ctx, "batched", cutoff, true)
	if want := 11 * per; err != nil || n != int64(want) { // claims 0–12: 13, of which 2 live (3, 8)
		t.Fatalf("Forget up to the cutoff: %d, %v; want %d", n, err, want)
	}
	if m := lookup(t, k, "batched", after...); len(m) != len(after) {
		t.Fatalf("Forget up to the cutoff forgot %d keys claimed after it", len(after)-len(m))
	}
	n, err = k.Forget(ctx, "batched", storeNow(t, s).Add(time.Minute), true)
	if want := len(done) - 11*per; err != nil || n != int64(want) {
		t.Fatalf("Forget of the rest: %d, %v; want %d", n, err, want)
	}
	if m := lookup(t, k, "batched", done...); len(m) != 0 {
		t.Fatalf("after Forget, %d done keys left", len(m))
	}
	if m := lookup(t, k, "batched", live...); len(m) != len(live) {
		t.Fatalf("Forget removed %d keys pending under a live claimant", len(live)-len(m))
	}
	if n, err := k.Forget(ctx, "batched", storeNow(t, s).Add(time.Minute), true); err != nil || n != 0 {
		t.Fatalf("second Forget: %d, %v; want 0", n, err)
	}
}

// storeNow is the store's time (store.Clock), else this host's: keys' claim times are the store's.
func storeNow(t *testing.T, s store.Store) time.Time {
	t.Helper()
	c, ok := s.(store.Clock)
	if !ok {
		return time.Now()
	}
	now, err := c.Now(ctxT(t))
	if err != nil {
		t.Fatalf("Now: %v", err)
	}
	return now
}
