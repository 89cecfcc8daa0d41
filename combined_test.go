package once_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once"
	"github.com/once-run/once/flock"
	"github.com/once-run/once/store"
	"github.com/once-run/once/store/sqlite"
)

// plain hides the optional capabilities of the store it wraps (store.Starter, store.Finisher,
// store.LazyRecorder): the guard's path for stores that lack them.
type plain struct{ store.Store }

// The guard decides the same with and without the combined calls.
func TestCombinedAndPlainPathsAgree(t *testing.T) {
	for _, c := range []struct {
		name string
		wrap func(store.Store) store.Store
	}{
		{"combined", func(s store.Store) store.Store { return s }},
		{"plain", func(s store.Store) store.Store { return plain{s} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw, _ := newStore(t)
			s := c.wrap(raw)
			if _, ok := s.(store.Starter); ok != (c.name == "combined") {
				t.Fatal("wrapper does not hide the capabilities")
			}
			ctx := context.Background()
			// A holder vanished with its attempt running.
			l, err := raw.Acquire(ctx, store.AcquireRequest{Task: "t", Holder: "gone", RunID: "r0", TTL: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := raw.Begin(ctx, store.Attempt{Task: "t", Slot: "d", RunID: "r0", Holder: "gone", Token: l.Token}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(400 * time.Millisecond)
			o := once.Options{Store: s, Task: "t", Slot: "d", TTL: time.Second, OnUnknown: once.PolicyRerun}
			r := do(t, o, ok)
			if r.Decision != once.Ran || r.Attempt.State != store.Succeeded || r.Attempt.Number != 2 ||
				len(r.Abandoned) != 1 || r.Abandoned[0].RunID != "r0" || r.Abandoned[0].State != store.Unknown {
				t.Fatalf("after a vanished holder: %+v %+v", r, r.Attempt)
			}
			if ls, err := raw.Leases(ctx); err != nil || len(ls) != 0 {
				t.Fatalf("lease not released: %+v %v", ls, err)
			}
			if r := do(t, o, ok); r.Decision != once.Skipped || r.Attempt.Number != 2 {
				t.Fatalf("second run: %+v", r)
			}
			// Min-hold keeps the lease after the outcome is recorded: the outcome cannot release it.
			o.Slot, o.MinHold = "e", 300*time.Millisecond
			began := time.Now()
			r = do(t, o, func(context.Context, *once.Run) error { return errors.New("boom") })
			if d := time.Since(began); d < 300*time.Millisecond {
				t.Fatalf("returned after %s, before min-hold", d)
			}
			if r.Attempt.State != store.Failed {
				t.Fatalf("failed run: %+v", r.Attempt)
			}
			if ls, err := raw.Leases(ctx); err != nil || len(ls) != 0 {
				t.Fatalf("lease after min-hold: %+v %v", ls, err)
			}
		})
	}
}

// The store is opened only once the local lock is held; a launch that finds the task held on this
// machine opens it to record its busy event, and nothing else.
func TestOpenAfterTheLocalLock(t *testing.T) {
	s, _ := newStore(t)
	dir := filepath.Join(t.TempDir(), "locks")
	opened := 0
	o := once.Options{Task: "t", LockDir: dir, TTL: time.Second, Holder: "me",
		Open: func(ctx context.Context) (store.Store, error) {
			opened++
			if lk, err := flock.Acquire(ctx, dir, "t", 0); err == nil {
				lk.Release()
				t.Error("the store was opened before the local lock was taken")
			}
			return s, nil
		}}
	if r := do(t, o, ok); r.Decision != once.Ran || opened != 1 {
		t.Fatalf("%+v, opened %d times", r, opened)
	}
	lk, err := flock.Acquire(context.Background(), dir, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release()
	if r := do(t, o, ok); r.Decision != once.Busy || opened != 2 {
		t.Fatalf("%+v, opened %d times", r, opened)
	}
	es, err := s.History(context.Background(), store.HistoryQuery{Task: "t"})
	if err != nil || len(es) != 2 || es[0].State != store.Busy || !strings.Contains(es[0].Note, "another once on this machine") {
		t.Fatalf("history: %+v %v", es, err)
	}
	// An Open that fails is the result.
	o.Open = func(context.Context) (store.Store, error) { return nil, store.ErrUnavailable }
	if _, err := once.Do(context.Background(), o, ok); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Do with a failing Open: %v", err)
	}
}

// A run on the embedded store is two durable writes: begin, and finish with release; the start
// (lease, abandoned attempts, slot) is committed without a sync (store.LazyStarter), and Begin's
// sync covers it. A launch whose slot is done writes nothing durably and takes no lease
// (store.LocalReads): its skipped event is recorded without a sync. A regression here costs every
// run of every host.
func TestRunIsTwoDurableWritesOnSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "once.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	count := func() int64 {
		b, err := os.ReadFile(sqlite.MarkerPath(path))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		n, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	r := do(t, once.Options{Store: s, Task: "t", Slot: "d", TTL: time.Second}, ok)
	if n := count() - before; n != 2 || r.Decision != once.Ran || r.Attempt.Token != 1 {
		t.Fatalf("a run made %d counted writes, want 2 (%+v)", n, r)
	}
	before = count()
	r = do(t, once.Options{Store: s, Task: "t", Slot: "d", TTL: time.Second}, ok)
	if n := count() - before; n != 0 || r.Decision != once.Skipped || r.Attempt == nil || r.Attempt.Token != 1 {
		t.Fatalf("a skip made %d counted writes, want 0 (%+v)", n, r)
	}
	es, err := s.History(context.Background(), store.HistoryQuery{Task: "t"})
	if err != nil || len(es) != 2 || es[0].State != store.Skipped || es[0].Token != 0 {
		t.Fatalf("history after the skip: %+v %v", es, err)
	}
	// The skip took no lease: the next run's token is the next one.
	if r = do(t, once.Options{Store: s, Task: "t", Slot: "e", TTL: time.Second}, ok); r.Attempt == nil || r.Attempt.Token != 2 {
		t.Fatalf("the run after the skip: %+v, want token 2", r)
	}
	// A done slot is skipped even while another holder has the task's lease; a slot not done is busy.
	held, err := s.Acquire(context.Background(), store.AcquireRequest{Task: "t", Holder: "other", RunID: "x", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release(context.Background(), held)
	if r = do(t, once.Options{Store: s, Task: "t", Slot: "d", TTL: time.Second}, ok); r.Decision != once.Skipped {
		t.Fatalf("a done slot while the lease is held elsewhere: %+v, want skipped", r)
	}
	if r = do(t, once.Options{Store: s, Task: "t", Slot: "f", TTL: time.Second}, ok); r.Decision != once.Busy {
		t.Fatalf("a new slot while the lease is held elsewhere: %+v, want busy", r)
	}
}
