// Package kvtest tests, against a real server, what the key-value stores (Redis, etcd, ZooKeeper)
// keep beyond the conformance suite's reach: the running index (kvstore.RunningKV) as a ledger an
// older once wrote leaves it — not built, an attempt missing from it, an entry left in it. Each
// backend's test calls RunningIndex with hooks that change the index behind the store's back.
// The history index's cases (HistoryIndex, Archives) and the race of a task's last document's
// delete with a new document's write (ForgetRacesNewDocument) are shared the same way.
package kvtest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// Hooks reach a backend's running index directly.
type Hooks struct {
	// DSN returns the DSN of a fresh, empty, isolated prefix.
	DSN func(tb testing.TB) string
	// Unindex removes the prefix's running index and the mark that says it was built: the ledger
	// as an older once wrote it.
	Unindex func(t *testing.T, dsn string)
	// Drop takes (task, slot) out of the index: an attempt an older once began.
	Drop func(t *testing.T, dsn, task, slot string)
	// Stray puts (task, slot) in the index, whatever its document says: an entry an older once's
	// write left behind.
	Stray func(t *testing.T, dsn, task, slot string)
	// Listed returns the slots of task in the index.
	Listed func(t *testing.T, dsn, task string) []string
}

const ttl = 1200 * time.Millisecond

// RunningIndex runs the cases.
func RunningIndex(t *testing.T, h Hooks) {
	t.Run("Upgrade", func(t *testing.T) { t.Parallel(); testUpgrade(t, h) })
	t.Run("MissingEntry", func(t *testing.T) { t.Parallel(); testMissing(t, h) })
	t.Run("StrayEntry", func(t *testing.T) { t.Parallel(); testStray(t, h) })
}

func open(t *testing.T, dsn string) store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// crashed leaves task's lease expired with an attempt running in each of slots, as a holder that
// vanished does.
func crashed(t *testing.T, s store.Store, task string, slots ...string) store.Lease {
	t.Helper()
	ctx := ctxT(t)
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: "gone", RunID: "gone", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range slots {
		if _, err := s.Begin(ctx, store.Attempt{Task: task, Slot: sl, RunID: "r-" + sl, Holder: l.Holder, Token: l.Token}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ttl + time.Second) // a backend may round the TTL up to whole seconds
	return l
}

// start is Start on a fresh client, retried while the expired lease still reads busy.
func start(t *testing.T, dsn, task, slot string) store.Started {
	t.Helper()
	st, ok := open(t, dsn).(store.Starter)
	if !ok {
		t.Fatal("the store is not a store.Starter")
	}
	ctx := ctxT(t)
	for deadline := time.Now().Add(5 * time.Second); ; {
		got, err := st.Start(ctx, store.AcquireRequest{Task: task, Holder: "next", RunID: "next-" + slot, TTL: time.Minute}, slot)
		if err == nil {
			return got
		}
		if !errors.Is(err, store.ErrBusy) || time.Now().After(deadline) {
			t.Fatalf("Start(%s, %s): %v", task, slot, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func runs(as []store.Attempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.RunID)
	}
	slices.Sort(out)
	return out
}

// testUpgrade: on a ledger whose running index was never built, Start finds what a vanished
// holder left running in every slot (it reads the task's documents, once), and builds the index:
// the next holder that vanishes is found through it.
func testUpgrade(t *testing.T, h Hooks) {
	dsn := h.DSN(t)
	s := open(t, dsn)
	crashed(t, s, "job", "d1", "d2")
	crashed(t, s, "other", "o1")
	wantRunning(t, s, []string{"r-d1", "r-d2", "r-o1"}, nil)
	h.Unindex(t, dsn)
	// Without the index, status cannot list the tasks' attempts: it names the tasks instead.
	wantRunning(t, s, nil, []string{"job", "other"})
	got := start(t, dsn, "job", "d3")
	wantRunning(t, s, nil, []string{"other"})
	if r := runs(got.Abandoned); !slices.Equal(r, []string{"r-d1", "r-d2"}) {
		t.Fatalf("Start on a ledger without a running index abandoned %v, want r-d1 and r-d2", r)
	}
	if got.Slot.Last != nil {
		t.Fatalf("slot d3 read %+v, want no attempt", got.Slot)
	}
	if err := s.Release(ctxT(t), got.Lease); err != nil {
		t.Fatal(err)
	}
	crashed(t, s, "job", "d4")
	if l := h.Listed(t, dsn, "job"); !slices.Equal(l, []string{"d4"}) {
		t.Fatalf("the running index lists %v, want d4", l)
	}
	wantRunning(t, s, []string{"r-d4"}, []string{"other"})
	got = start(t, dsn, "job", "d5")
	if r := runs(got.Abandoned); !slices.Equal(r, []string{"r-d4"}) {
		t.Fatalf("Start abandoned %v, want r-d4", r)
	}
	if l := h.Listed(t, dsn, "job"); len(l) != 0 {
		t.Fatalf("the running index lists %v after the abandon, want nothing", l)
	}
}

// wantRunning checks the run ids of the attempts s lists as running (store.RunningLister) and the
// tasks it says it cannot list.
func wantRunning(t *testing.T, s store.Store, want, unlisted []string) {
	t.Helper()
	l, err := s.(store.RunningLister).RunningAttempts(ctxT(t), store.MaxRunningList)
	if err != nil {
		t.Fatal(err)
	}
	if r := runs(l.Attempts); !slices.Equal(r, want) || !slices.Equal(l.Unlisted, unlisted) || l.More {
		t.Fatalf("RunningAttempts: %v, unlisted %q, more %v; want %v, unlisted %q", r, l.Unlisted, l.More, want, unlisted)
	}
}

// testMissing: an attempt missing from a built index (an older once began it) is still found when
// its own slot is started: Start reads the slot's document with the lease.
func testMissing(t *testing.T, h Hooks) {
	dsn := h.DSN(t)
	s := open(t, dsn)
	got := start(t, dsn, "job", "d0") // the index is built
	if err := s.Release(ctxT(t), got.Lease); err != nil {
		t.Fatal(err)
	}
	crashed(t, s, "job", "d1")
	h.Drop(t, dsn, "job", "d1")
	got = start(t, dsn, "job", "d1")
	if r := runs(got.Abandoned); !slices.Equal(r, []string{"r-d1"}) {
		t.Fatalf("Start of the slot abandoned %v, want r-d1", r)
	}
	if got.Slot.Last == nil || got.Slot.Last.State != store.Unknown || !got.Slot.Waiting {
		t.Fatalf("the slot read %+v, want its attempt unknown, waiting", got.Slot)
	}
}

// testStray: an entry whose document has no running attempt sends Start the long way once, which
// takes it out; nothing is abandoned.
func testStray(t *testing.T, h Hooks) {
	dsn := h.DSN(t)
	s := open(t, dsn)
	ctx := ctxT(t)
	l, err := s.Acquire(ctx, store.AcquireRequest{Task: "job", Holder: "a", RunID: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: "job", Slot: "d1", RunID: "r1", Holder: l.Holder, Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, "r1", l.Token, store.Outcome{State: store.Succeeded}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
	h.Stray(t, dsn, "job", "d1")
	h.Stray(t, dsn, "job", "gone") // a slot without a document (an older once pruned it)
	got := start(t, dsn, "job", "d2")
	if len(got.Abandoned) != 0 {
		t.Fatalf("Start abandoned %v", runs(got.Abandoned))
	}
	if l := h.Listed(t, dsn, "job"); len(l) != 0 {
		t.Fatalf("the running index still lists %v", l)
	}
}
