package once_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/store"
)

// Options.Replace, in one process with the local lock: the holder's work is cancelled through
// its lost lease, the replacing work starts only after it returned, the replaced attempt is
// unknown and resolved failed with a note naming the replacing run, and the slot runs again.
func TestReplaceStopsHolderBeforeItsWorkStarts(t *testing.T) {
	s, _ := newStore(t)
	dir := filepath.Join(t.TempDir(), "locks")
	o := once.Options{Store: s, Task: "t", Slot: "s", LockDir: dir, TTL: 900 * time.Millisecond}
	var mu sync.Mutex
	var aEnded, bStarted time.Time
	started := make(chan struct{})
	aDone := make(chan once.Result, 1)
	go func() {
		oa := o
		oa.Holder = "A"
		r, err := once.Do(context.Background(), oa, func(ctx context.Context, run *once.Run) error {
			close(started)
			<-ctx.Done()
			time.Sleep(100 * time.Millisecond) // stopping takes a moment; B must wait for it
			mu.Lock()
			aEnded = time.Now()
			mu.Unlock()
			return ctx.Err()
		})
		if err != nil {
			t.Error(err)
		}
		aDone <- r
	}()
	<-started
	ob := o
	ob.Holder, ob.Replace = "B", true
	rb := do(t, ob, func(ctx context.Context, run *once.Run) error {
		mu.Lock()
		bStarted = time.Now()
		mu.Unlock()
		if run.Previous != store.Unknown || run.Attempt != 2 {
			t.Errorf("replacing run: previous %q attempt %d, want unknown and 2", run.Previous, run.Attempt)
		}
		return nil
	})
	ra := <-aDone
	if rb.Decision != once.Ran || rb.Attempt.State != store.Succeeded {
		t.Fatalf("replacing run: %+v", rb)
	}
	if ra.Decision != once.Ran || ra.RecordErr == nil {
		t.Fatalf("replaced run: %+v, want its outcome refused", ra)
	}
	if aEnded.IsZero() || !bStarted.After(aEnded) {
		t.Fatalf("B started at %v, A's work ended at %v: two at once", bStarted, aEnded)
	}
	if len(rb.Abandoned) != 1 || rb.Abandoned[0].Holder != "A" {
		t.Fatalf("abandoned %+v, want A's attempt", rb.Abandoned)
	}
	h, err := s.History(context.Background(), store.HistoryQuery{Task: "t", Kind: store.Unknown})
	if err != nil || len(h) != 1 {
		t.Fatalf("history %+v, %v", h, err)
	}
	if res := h[0].Resolution; res == nil || res.As != store.Failed || res.By != "B" || !strings.Contains(res.Note, "replaced by run "+rb.Attempt.RunID) {
		t.Fatalf("replaced attempt's resolution %+v", h[0].Resolution)
	}
}

// Options.Replace on a task nobody holds is a plain run.
func TestReplaceOnAFreeTaskRuns(t *testing.T) {
	s, _ := newStore(t)
	r := do(t, once.Options{Store: s, Task: "t", Replace: true, TTL: time.Second}, ok)
	if r.Decision != once.Ran || r.Attempt.State != store.Succeeded || len(r.Abandoned) != 0 {
		t.Fatalf("%+v", r)
	}
}

// Options.Replace over seats (Options.Limit) ends every live seat, and each seat's attempt is
// settled as replaced — resolved failed by the replacing run — not left waiting for review as a
// vanished holder's would be.
func TestReplaceOverSeatsResolvesEach(t *testing.T) {
	s, _ := newStore(t)
	// Not a test of expiry: a TTL of 3 s leaves the replacing run's outcome a try of 1 s under -race
	// and load (900 ms: 300 ms tries, and the lease ran out before one got the write lock).
	o := once.Options{Store: s, Task: "t", TTL: 3 * time.Second, Limit: 2}
	var started sync.WaitGroup
	done := make(chan once.Result, 2)
	for _, h := range []string{"A1", "A2"} {
		started.Add(1)
		oa := o
		oa.Holder, oa.Slot = h, "s-"+h
		go func() {
			r, err := once.Do(context.Background(), oa, func(ctx context.Context, run *once.Run) error {
				started.Done()
				<-ctx.Done()
				return ctx.Err()
			})
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
	}
	started.Wait()
	ob := o
	ob.Holder, ob.Slot, ob.Replace, ob.Limit = "B", "s-B", true, 0
	rb := do(t, ob, ok)
	for range 2 {
		if r := <-done; r.Decision != once.Ran || r.RecordErr == nil {
			t.Fatalf("replaced seat's run: %+v, want its outcome refused", r)
		}
	}
	if rb.Decision != once.Ran || rb.Attempt.State != store.Succeeded || len(rb.Abandoned) != 2 {
		t.Fatalf("replacing run: %+v, want it ran after both seats' attempts were abandoned", rb)
	}
	h, err := s.History(context.Background(), store.HistoryQuery{Task: "t", Kind: store.Unknown})
	if err != nil || len(h) != 2 {
		t.Fatalf("history %+v, %v; want the two seats' attempts unknown", h, err)
	}
	for _, e := range h {
		if res := e.Resolution; res == nil || res.As != store.Failed || res.By != "B" || !strings.Contains(res.Note, "replaced by run "+rb.Attempt.RunID) {
			t.Fatalf("replaced seat %s: resolution %+v, want failed by B, replaced", e.Slot, e.Resolution)
		}
	}
	if w, err := s.Waiting(context.Background()); err != nil || len(w) != 0 {
		t.Fatalf("waiting for review: %+v, %v; want none", w, err)
	}
}
