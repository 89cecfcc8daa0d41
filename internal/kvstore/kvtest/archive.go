package kvtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/once-run/once/internal/kvstore"
	"github.com/once-run/once/store"
)

// Archives checks a long slot's archives (kvstore's archive.go) on a backend, against a real
// server: the slot's document stays small; an archive written by an archiving whose document write
// did not happen (a crash between the two) is not shown, and is what the next archiving takes as
// archived, so nothing is lost or listed twice; a document an older once let grow is archived whole
// at its next write. dsn gives a fresh, empty prefix.
func Archives(t *testing.T, dsn func(tb testing.TB) string) {
	t.Run("Archives", func(t *testing.T) {
		t.Parallel()
		s := open(t, dsn(t))
		kv := s.(interface{ Backend() kvstore.KV }).Backend()
		ctx := ctxT(t)
		l := lease(t, s, "arc")
		check := func(n int) {
			t.Helper()
			es, err := s.History(ctx, store.HistoryQuery{Task: "arc"})
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != n {
				t.Fatalf("after %d attempts history lists %d entries", n, len(es))
			}
			for i, e := range es {
				if want := fmt.Sprintf("r%03d", n-i); e.RunID != want || e.Number != n-i || e.Slot != "" {
					t.Fatalf("after %d attempts entry %d is %s #%d of slot %q, want %s", n, i, e.RunID, e.Number, e.Slot, want)
				}
			}
		}
		for i := 1; i <= 200; i++ {
			run := fmt.Sprintf("r%03d", i)
			attempt(t, s, l, "", run, store.Succeeded)
			if i == 30 { // the crash: the first archive written (of fewer attempts), the document not
				d, _, _, err := kv.Load(ctx, "arc", "")
				if err != nil || d == nil {
					t.Fatalf("load: %v", err)
				}
				crashed := &kvstore.Doc{Task: "arc", Slot: kvstore.ArchiveSlot("", 1), Attempts: d.Attempts[:20]}
				if _, err := kv.Save(ctx, crashed, 0, 0, ""); err != nil {
					t.Fatal(err)
				}
			}
			if i == 30 || i == 45 || i == 200 {
				check(i) // not shown before the document acknowledges it, shown once after
			}
		}
		d, _, _, err := kv.Load(ctx, "arc", "")
		if err != nil || d == nil {
			t.Fatalf("load: %v", err)
		}
		if len(d.Attempts) > 40 || d.Archived == nil || d.Archived.Attempts+len(d.Attempts) != 200 || d.Archived.Through != d.Attempts[0].Number-1 {
			t.Fatalf("the slot's document keeps %d attempts, archived %+v", len(d.Attempts), d.Archived)
		}
		if st, err := s.Slot(ctx, "arc", ""); err != nil || st.Last == nil || st.Last.Number != 200 || st.Failures != 0 {
			t.Fatalf("slot: %+v, %v", st, err)
		}
		lostCount(t, s, kv, l)
		grown(t, s, kv)
		reviewsAndPrune(t, s, kv)
		forget(t, s, kv)
		checkpointAfterLoss(t, s, kv)
	})
	retain(t, dsn)
}

// grown: a document an older once let grow is archived whole at its next write.
func grown(t *testing.T, s store.Store, kv kvstore.KV) {
	ctx := ctxT(t)
	code := 0
	old := &kvstore.Doc{Task: "old", Slot: ""}
	for i := 1; i <= 150; i++ {
		end := time.Now()
		old.Attempts = append(old.Attempts, store.Attempt{Task: "old", RunID: fmt.Sprintf("o%03d", i), Number: i,
			State: store.Failed, ExitCode: &code, StartedAt: end, EndedAt: &end})
	}
	old.Attempts[2].State, old.Attempts[2].ExitCode = store.Unknown, nil // a holder vanished: never resolved, and archived all the same
	if _, err := kv.Save(ctx, old, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	lo := lease(t, s, "old")
	if _, err := s.Begin(ctx, store.Attempt{Task: "old", RunID: "o151", Holder: lo.Holder, Token: lo.Token}); err != nil {
		t.Fatal(err)
	}
	d, _, _, err := kv.Load(ctx, "old", "")
	if err != nil || d == nil || len(d.Attempts) != 9 || d.Archived == nil || d.Archived.Attempts != 142 || d.Archived.Failures != 142 {
		t.Fatalf("the grown document after a write: %d attempts, archived %+v, %v", len(d.Attempts), d.Archived, err)
	}
	if st, err := s.Slot(ctx, "old", ""); err != nil || st.Failures != 150 || st.Last == nil || st.Last.Number != 151 {
		t.Fatalf("the grown slot: %+v, %v", st, err)
	}
	if es, err := s.History(ctx, store.HistoryQuery{Task: "old"}); err != nil || len(es) != 151 || es[0].RunID != "o151" || es[150].RunID != "o001" {
		t.Fatalf("the grown slot's history: %d entries, %v", len(es), err)
	}
}

// reviewsAndPrune: a slot refused again and again while it waits (a review event each time) keeps
// its document small and still waits; a prune of everything deletes the archives it empties.
func reviewsAndPrune(t *testing.T, s store.Store, kv kvstore.KV) {
	ctx := ctxT(t)
	l := lease(t, s, "wait")
	attempt(t, s, l, "s", "w1", store.Failed)
	for i := range 100 {
		if err := s.Record(ctx, store.Event{Task: "wait", Slot: "s", Kind: store.Review, Attempt: 1, Note: fmt.Sprint("refused ", i)}); err != nil {
			t.Fatal(err)
		}
	}
	d, _, _, err := kv.Load(ctx, "wait", "s")
	if err != nil || d == nil || len(d.Events) > 40 {
		t.Fatalf("a slot with 100 review events keeps %d in its document (%v)", len(d.Events), err)
	}
	if st, err := s.Slot(ctx, "wait", "s"); err != nil || !st.Waiting {
		t.Fatalf("the slot no longer waits: %+v, %v", st, err)
	}
	if es, err := s.History(ctx, store.HistoryQuery{Task: "wait", Kind: store.Review}); err != nil || len(es) != 100 {
		t.Fatalf("history lists %d review events, want 100 (%v)", len(es), err)
	}
	// The slot's own history (its document and archives, read on their own) is the task's, page by page.
	all, err := s.History(ctx, store.HistoryQuery{Task: "wait"})
	if err != nil || len(all) != 101 {
		t.Fatalf("the task's history: %d entries, want 101 (%v)", len(all), err)
	}
	for _, q := range []store.HistoryQuery{{Task: "wait", Slot: "s"}, {Task: "wait", Slot: "s", Before: all[30].Cursor, Limit: 40}} {
		es, err := s.History(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		want := all
		if q.Before != "" {
			want = all[31:71]
		}
		if len(es) != len(want) || es[0].Cursor != want[0].Cursor || es[len(es)-1].Cursor != want[len(want)-1].Cursor {
			t.Fatalf("the slot's history (before %q): %d entries, want %d, the task's", q.Before, len(es), len(want))
		}
	}
	// Prune everything in "arc" (settled): the archives it empties go.
	time.Sleep(10 * time.Millisecond)
	if _, err := s.Prune(ctx, store.PruneRequest{Task: "arc", Before: time.Now()}); err != nil {
		t.Fatal(err)
	}
	docs, err := kv.Docs(ctx, "arc")
	if err != nil || len(docs) != 1 {
		t.Fatalf("after a prune of everything the task has %d documents (%v): emptied archives were kept", len(docs), err)
	}
	shown, err := s.History(ctx, store.HistoryQuery{Task: "arc"})
	if err != nil {
		t.Fatal(err)
	}
	// A writer that read the slot before all that writes its archive again, under a name the
	// prune emptied and deleted: what it holds was pruned, and is never shown again.
	code, end := 0, time.Now().Add(-time.Hour)
	stale := &kvstore.Doc{Task: "arc", Slot: kvstore.ArchiveSlot("", 2)}
	for i := 40; i < 72; i++ {
		stale.Attempts = append(stale.Attempts, store.Attempt{Task: "arc", RunID: fmt.Sprintf("r%03d", i), Number: i,
			State: store.Failed, ExitCode: &code, StartedAt: end, EndedAt: &end})
	}
	if _, err := kv.Save(ctx, stale, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	if es, err := s.History(ctx, store.HistoryQuery{Task: "arc"}); err != nil || len(es) != len(shown) {
		t.Fatalf("an archive written again after a prune: history lists %d entries, %d before (%v)", len(es), len(shown), err)
	}
	if _, err := s.Prune(ctx, store.PruneRequest{Task: "arc", Before: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if docs, err := kv.Docs(ctx, "arc"); err != nil || len(docs) != 1 {
		t.Fatalf("an archive written again after a prune was not deleted by the next: %d documents (%v)", len(docs), err)
	}
}

// lostCount: an older once rewrites the slot's document without "archived" (a field it does not
// know); the next archiving counts the slot's archives again, and history shows every attempt once.
func lostCount(t *testing.T, s store.Store, kv kvstore.KV, l store.Lease) {
	ctx := ctxT(t)
	d, ver, _, err := kv.Load(ctx, "arc", "")
	if err != nil || d == nil || d.Archived == nil {
		t.Fatalf("load: %+v, %v", d, err)
	}
	was := *d.Archived
	d.Archived = nil
	if _, err := kv.Save(ctx, d, ver, 0, ""); err != nil {
		t.Fatal(err)
	}
	for i := 201; i <= 240; i++ { // enough for the next archiving
		run := fmt.Sprintf("r%03d", i)
		attempt(t, s, l, "", run, store.Succeeded)
	}
	d, _, _, err = kv.Load(ctx, "arc", "")
	if err != nil || d == nil || d.Archived == nil || d.Archived.Docs <= was.Docs || d.Archived.Attempts+len(d.Attempts) != 240 {
		t.Fatalf("after a write without the count: archived %+v (was %+v), %d kept, %v", d.Archived, was, len(d.Attempts), err)
	}
	es, err := s.History(ctx, store.HistoryQuery{Task: "arc"})
	if err != nil || len(es) != 240 || es[0].RunID != "r240" || es[239].RunID != "r001" {
		t.Fatalf("history after the count was lost and found: %d entries, %v", len(es), err)
	}
}

// forget: a slot forgotten (prune ForgetSlots) goes with every archive of it.
func forget(t *testing.T, s store.Store, kv kvstore.KV) {
	ctx := ctxT(t)
	l := lease(t, s, "gone")
	code := 0
	for i := 1; i <= 100; i++ {
		run := fmt.Sprintf("g%03d", i)
		attempt(t, s, l, "s", run, store.Succeeded)
	}
	time.Sleep(10 * time.Millisecond)
	cut := time.Now()
	dry, err := s.Prune(ctx, store.PruneRequest{Task: "gone", Before: cut, ForgetSlots: true, DryRun: true})
	if err != nil || dry.Slots != 1 || dry.Attempts != 100 {
		t.Fatalf("forget, dry run: %+v, %v; want 1 slot and 100 attempts", dry, err)
	}
	res, err := s.Prune(ctx, store.PruneRequest{Task: "gone", Before: cut, ForgetSlots: true})
	if err != nil || res != dry {
		t.Fatalf("forget: %+v, %v; want what the dry run said, %+v", res, err, dry)
	}
	if docs, err := kv.Docs(ctx, "gone"); err != nil || len(docs) != 0 {
		t.Fatalf("after the slot was forgotten %d documents are left (%v)", len(docs), err)
	}
	// What a forget that stopped half way leaves, an archive without its slot's document, is not
	// shown, and the next prune deletes it.
	end := time.Now()
	orphan := &kvstore.Doc{Task: "gone", Slot: kvstore.ArchiveSlot("s", 2), Attempts: []store.Attempt{
		{Task: "gone", Slot: "s", RunID: "g002", Number: 2, State: store.Succeeded, ExitCode: &code, StartedAt: end, EndedAt: &end}}}
	if _, err := kv.Save(ctx, orphan, 0, 0, ""); err != nil {
		t.Fatal(err)
	}
	if es, err := s.History(ctx, store.HistoryQuery{Task: "gone"}); err != nil || len(es) != 0 {
		t.Fatalf("history shows %d entries of a forgotten slot (%v)", len(es), err)
	}
	if _, err := s.Prune(ctx, store.PruneRequest{Task: "gone", Before: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if docs, err := kv.Docs(ctx, "gone"); err != nil || len(docs) != 0 {
		t.Fatalf("an archive without its slot's document was not pruned: %d documents (%v)", len(docs), err)
	}
}

// checkpointAfterLoss: a slot whose archived checkpoint outlived a prune, and whose document then
// lost its count, counts its archives again in the order they were written: its checkpoint is the
// newest, and history shows what the prune left.
func checkpointAfterLoss(t *testing.T, s store.Store, kv kvstore.KV) {
	ctx := ctxT(t)
	l := lease(t, s, "cp")
	code := 0
	for i := 1; i <= 100; i++ {
		run := fmt.Sprintf("c%03d", i)
		if _, err := s.Begin(ctx, store.Attempt{Task: "cp", RunID: run, Holder: l.Holder, Token: l.Token}); err != nil {
			t.Fatal(err)
		}
		if i == 10 || i == 60 {
			if err := s.Report(ctx, run, l.Token, store.Report{Checkpoint: run}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: store.Succeeded, ExitCode: &code}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	if _, err := s.Prune(ctx, store.PruneRequest{Task: "cp", Before: time.Now()}); err != nil {
		t.Fatal(err)
	}
	d, ver, _, err := kv.Load(ctx, "cp", "")
	if err != nil || d == nil {
		t.Fatalf("load: %v", err)
	}
	d.Archived = nil // an older once's write
	if _, err := kv.Save(ctx, d, ver, 0, ""); err != nil {
		t.Fatal(err)
	}
	for i := 101; i <= 140; i++ {
		attempt(t, s, l, "", fmt.Sprintf("c%03d", i), store.Succeeded)
	}
	st, err := s.Slot(ctx, "cp", "")
	if err != nil || st.Checkpoint != "c060" {
		t.Fatalf("checkpoint after the count was lost and found: %q (%v), want c060", st.Checkpoint, err)
	}
	if es, err := s.History(ctx, store.HistoryQuery{Task: "cp"}); err != nil || len(es) != 42 || es[41].RunID != "c060" {
		t.Fatalf("history after the count was lost and found: %d entries (%v), want 42 ending with c060", len(es), err)
	}
}

// lease takes task's lease for a minute, as holder "h".
func lease(t *testing.T, s store.Store, task string) store.Lease {
	t.Helper()
	l, err := s.Acquire(ctxT(t), store.AcquireRequest{Task: task, Holder: "h", RunID: "r", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// attempt begins run in slot of l's task and finishes it as st.
func attempt(t *testing.T, s store.Store, l store.Lease, slot, run string, st store.State) {
	t.Helper()
	ctx, code := ctxT(t), 0
	if st == store.Failed {
		code = 1
	}
	if _, err := s.Begin(ctx, store.Attempt{Task: l.Task, Slot: slot, RunID: run, Holder: l.Holder, Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, run, l.Token, store.Outcome{State: st, ExitCode: &code}); err != nil {
		t.Fatal(err)
	}
}
