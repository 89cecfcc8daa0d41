package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// The Replace cases: AcquireRequest.Replace takes a live grant over (once run --replace).

func replaceReq(task, holder string, ttl time.Duration) store.AcquireRequest {
	return store.AcquireRequest{Task: task, Holder: holder, RunID: "run-" + holder, TTL: ttl, Replace: true}
}

// testLeaseReplace: a replacing Acquire ends a live grant at once, with the next token, and says
// how long the old holder may still believe it holds the lease; the old holder's lease calls and
// ledger writes are refused from then on, and a LossNotifier tells it.
func testLeaseReplace(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b, c := client(t, dsn), client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	const ttl = 20 * time.Second
	la := acquire(t, a, "job", "a", ttl)
	la, err := a.Renew(ctx, la, ttl)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	begin(t, a, la, "s", "run-a", 1)
	var lost <-chan struct{}
	if n, ok := a.(store.LossNotifier); ok {
		lost = n.Lost(la)
	}

	lb, err := b.Acquire(ctx, replaceReq("job", "b", ttl))
	if err != nil {
		t.Fatalf("Acquire with Replace over a live grant: %v", err)
	}
	if lb.Holder != "b" || lb.RunID != "run-b" || lb.Token <= la.Token {
		t.Fatalf("replacing grant %+v, want holder b with a token above %d", lb, la.Token)
	}
	checkTTL(t, lb, ttl)
	r := lb.Replaced
	if r == nil || r.Holder != "a" || r.RunID != "run-a" || r.Token != la.Token {
		t.Fatalf("Replaced = %+v, want a's grant %+v", r, la)
	}
	if !slices.Equal(r.Tokens, []int64{la.Token}) {
		t.Fatalf("Replaced.Tokens = %v, want a's token %d alone", r.Tokens, la.Token)
	}
	// The old holder may believe in its grant for up to its TTL (2 s more for a store that bounds
	// it by a lease of whole seconds, rounded down); never less than what is left of it.
	if left := r.Expires.Sub(lb.Acquired); left < ttl/2 || left > ttl+granularity+2*time.Second+timeSlack {
		t.Fatalf("Replaced.Expires - Acquired = %s, want about the %s TTL", left, ttl)
	}
	wantLease(t, c, store.Lease{Task: lb.Task, Holder: lb.Holder, RunID: lb.RunID, Token: lb.Token, Acquired: lb.Acquired, Expires: lb.Expires})

	_, err = a.Renew(ctx, la, ttl)
	wantErr(t, "renew of the replaced grant", err, store.ErrNotHeld)
	wantErr(t, "report of the replaced holder", a.Report(ctx, "run-a", la.Token, store.Report{Note: "late"}), store.ErrNotHeld)
	code := 0
	_, err = a.Finish(ctx, "run-a", la.Token, store.Outcome{State: store.Succeeded, ExitCode: &code})
	wantErr(t, "finish of the replaced holder", err, store.ErrNotHeld)
	_, err = a.Begin(ctx, store.Attempt{Task: "job", Slot: "t", RunID: "run-a2", Number: 1, Holder: "a", Token: la.Token})
	wantErr(t, "begin of the replaced holder", err, store.ErrNotHeld)
	wantErr(t, "release of the replaced grant", a.Release(ctx, la), store.ErrNotHeld)
	if lost != nil {
		select {
		case <-lost:
		case <-time.After(10 * time.Second):
			t.Fatal("LossNotifier did not announce the takeover within 10s")
		}
	}

	ab, err := b.Abandon(ctx, "job", lb.Token)
	if err != nil || len(ab) != 1 || ab[0].RunID != "run-a" || ab[0].State != store.Unknown {
		t.Fatalf("Abandon after the takeover = %+v, %v; want a's attempt unknown", ab, err)
	}
	_, err = b.Renew(ctx, lb, ttl)
	if err != nil {
		t.Fatalf("the replacing holder's Renew: %v", err)
	}

	replaceAgain(t, b, c, lb)
}

// replaceAgain: a replacement of the replacement lb; Replace on a free or released lease is a
// plain Acquire; store.Starter refuses Replace.
func replaceAgain(t *testing.T, b, c store.Store, lb store.Lease) {
	ctx := ctxT(t)
	const ttl = 20 * time.Second
	lc, err := c.Acquire(ctx, replaceReq("job", "c", ttl))
	if err != nil || lc.Token <= lb.Token || lc.Replaced == nil || lc.Replaced.Holder != "b" || lc.Replaced.Token != lb.Token {
		t.Fatalf("second takeover = %+v, %v; want c over b", lc, err)
	}
	_, err = b.Renew(ctx, lb, ttl)
	wantErr(t, "renew of the second replaced grant", err, store.ErrNotHeld)
	lf, err := c.Acquire(ctx, replaceReq("free", "c", ttl))
	if err != nil || lf.Replaced != nil {
		t.Fatalf("Replace on a free lease = %+v, %v; want a plain grant", lf, err)
	}
	if err := c.Release(ctx, lf); err != nil {
		t.Fatalf("Release: %v", err)
	}
	lf2, err := c.Acquire(ctx, replaceReq("free", "c", ttl))
	if err != nil || lf2.Replaced != nil || lf2.Token <= lf.Token {
		t.Fatalf("Replace on a released lease = %+v, %v; want a plain grant above token %d", lf2, err, lf.Token)
	}
	if st, ok := c.(store.Starter); ok {
		_, err := st.Start(ctx, replaceReq("job", "d", ttl), "s")
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("Start with Replace: %v, want ErrConflict", err)
		}
	}
}

// testReplaceFencesAtOnce: a replaced holder's ledger writes are refused from the moment its
// renewal is, not only from when the replacing Acquire returns. A holder that sees its loss records
// its attempt's outcome; while the replacement is under way that write must fail, so the attempt
// stays running and the replacing holder's Abandon hands it over (once resolves it as "replaced";
// had the old holder recorded it unknown itself, the slot would wait for review). A store whose
// takeover takes more than one write (etcd, ZooKeeper) must end the old grant's fence in the first.
// Rounds over an exclusive grant and a seat (which the takeover ends with every other seat: a seat
// acquired after it is busy); while b replaces, the old holder watches for its loss (its
// store.LossNotifier, and Leases read in a loop) and records its attempt as soon as it sees it.
func testReplaceFencesAtOnce(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	a, b := client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	const ttl = 20 * time.Second
	for round := range 6 {
		for _, limit := range []int{0, 2} {
			task := fmt.Sprintf("fence%d-%d", round, limit)
			runA := "run-a-" + task
			la, err := a.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "a", RunID: runA, TTL: ttl, Limit: limit})
			if err != nil {
				t.Fatalf("Acquire(%s, limit %d): %v", task, limit, err)
			}
			begin(t, a, la, "s", runA, 1)
			var lost <-chan struct{}
			if n, ok := a.(store.LossNotifier); ok {
				lost = n.Lost(la)
			}
			done := make(chan error, 1)
			go func() {
				if err := awaitLoss(ctx, a, la, lost); err != nil {
					done <- err
					return
				}
				code := 1
				_, err := a.Finish(ctx, runA, la.Token, store.Outcome{State: store.Failed, ExitCode: &code, Note: "lease lost"})
				done <- err
			}()
			lb, err := b.Acquire(ctx, replaceReq(task, "b", ttl))
			if err != nil || lb.Replaced == nil || lb.Replaced.Token != la.Token {
				t.Fatalf("%s: Acquire with Replace = %+v, %v; want a's grant replaced", task, lb, err)
			}
			wantErr(t, task+": finish by the replaced holder once it saw its loss", <-done, store.ErrNotHeld)
			ab, err := b.Abandon(ctx, task, lb.Token)
			if err != nil || len(ab) != 1 || ab[0].RunID != runA {
				t.Fatalf("%s: Abandon after the takeover = %+v, %v; want a's attempt, still running until then", task, ab, err)
			}
			if limit > 0 {
				// The replaced seat is gone with the fence: a seat wanted now is beside the exclusive grant.
				_, err := a.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "c", RunID: "run-c-" + task, TTL: ttl, Limit: limit})
				wantErr(t, task+": a seat while the replacing exclusive grant is live", err, store.ErrBusy)
			}
		}
	}
}

// awaitLoss returns nil when l is lost: lost is closed (a store.LossNotifier's channel, nil
// without one) or Leases no longer lists l. It reads and does not renew: a takeover starts over
// when a renewal comes between its read and its write.
func awaitLoss(ctx context.Context, s store.Store, l store.Lease, lost <-chan struct{}) error {
	for {
		select {
		case <-lost:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("the loss was not seen: %w", ctx.Err())
		default:
		}
		ls, err := s.Leases(ctx)
		if err != nil {
			return fmt.Errorf("leases: %w", err)
		}
		if !slices.ContainsFunc(ls, func(g store.Lease) bool { return g.Task == l.Task && g.Token == l.Token }) {
			return nil
		}
	}
}

// testReplaceEndsEverySeat: a Replace over live seats ends them all and names every one of them in
// Replaced.Tokens (so that once settles each seat's attempt as replaced); a seat that had expired
// before is not among them (its attempt is a vanished holder's), though Abandon hands over its
// attempt too. Two tasks: the expired seat taken first, and taken last (a store that keeps a
// summary of its seats then has the expired seat's token in it).
func testReplaceEndsEverySeat(t *testing.T, h Harness) {
	dsn := h.DSN(t)
	x, a, b, d := client(t, dsn), client(t, dsn), client(t, dsn), client(t, dsn)
	ctx := ctxT(t)
	const short, ttl = 3 * time.Second, 30 * time.Second
	type round struct {
		task       string
		lx, la, lb store.Lease
	}
	var rounds []round
	for _, task := range []string{"first", "last"} {
		r := round{task: task}
		if task == "first" {
			r.lx = seat(t, x, task, "x", 3, short)
		}
		r.la = seat(t, a, task, "a", 3, ttl)
		r.lb = seat(t, b, task, "b", 3, ttl)
		if task == "last" {
			r.lx = seat(t, x, task, "x", 3, short)
		}
		begin(t, x, r.lx, "sx", "run-x-"+task, 1)
		begin(t, a, r.la, "sa", "run-a-"+task, 1)
		begin(t, b, r.lb, "sb", "run-b-"+task, 1)
		rounds = append(rounds, r)
	}
	for _, r := range rounds {
		for deadline := time.Now().Add(short + granularity + 5*time.Second); slices.ContainsFunc(seatsOf(t, d, r.task),
			func(l store.Lease) bool { return l.Token == r.lx.Token }); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: seat with TTL %s still listed after %s", r.task, short, time.Since(r.lx.Acquired))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, r := range rounds {
		ld, err := d.Acquire(ctx, replaceReq(r.task, "d", ttl))
		if err != nil {
			t.Fatalf("%s: Acquire with Replace over live seats: %v", r.task, err)
		}
		want := []int64{r.la.Token, r.lb.Token}
		if ld.Replaced == nil || !slices.Equal(ld.Replaced.Tokens, want) {
			t.Fatalf("%s: Replaced %+v; want the live seats' tokens %v (not the expired seat's %d)", r.task, ld.Replaced, want, r.lx.Token)
		}
		if left := ld.Replaced.Expires.Sub(ld.Acquired); left < ttl/2 {
			t.Fatalf("%s: Replaced.Expires - Acquired = %s, want about the live seats' %s TTL", r.task, left, ttl)
		}
		for i, l := range []store.Lease{r.la, r.lb} {
			_, err := []store.Store{a, b}[i].Renew(ctx, l, ttl)
			wantErr(t, r.task+": renew of a replaced seat", err, store.ErrNotHeld)
		}
		ab, err := d.Abandon(ctx, r.task, ld.Token)
		var got []string
		for _, at := range ab {
			got = append(got, at.RunID)
		}
		slices.Sort(got)
		if err != nil || !slices.Equal(got, []string{"run-a-" + r.task, "run-b-" + r.task, "run-x-" + r.task}) {
			t.Fatalf("%s: Abandon after the takeover = %v, %v; want the three seats' attempts", r.task, got, err)
		}
	}
}
