package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// readCounter counts the store.ReadLastSuccess reads the overview makes, per task (the real read
// of the real store, counted).
type readCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func countReads(srv *Server) *readCounter {
	c := &readCounter{n: map[string]int{}}
	srv.success.read = func(ctx context.Context, l store.Ledger, task string) (store.LastSuccess, error) {
		c.mu.Lock()
		c.n[task]++
		c.mu.Unlock()
		return store.ReadLastSuccess(ctx, l, task)
	}
	return c
}

func (c *readCounter) get(task string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[task]
}

// The overview keeps a failing task's last success while the task's newest entries stay as they
// were: a reload reads it again only for the tasks whose history moved, and every row it shows is
// the row an uncached read makes (a new success or failure, an event, a person's resolve; an
// attempt that was running when the last success was read and ends in success later, its lease
// live or its holder gone, is never hidden behind a kept "never").
func TestOverviewKeepsLastSuccess(t *testing.T) {
	sd := newSeeded(t)
	ctx := t.Context()
	okA := sd.run("a", "s0", "h", store.Succeeded)
	for i := range 2*trendLen + 1 { // the success is older than the row's newest entries
		sd.run("a", fmt.Sprintf("f%d", i), "h", store.Failed)
		sd.run("b", fmt.Sprintf("f%d", i), "h", store.Failed)
	}
	live := sd.begin("c", "c1", "h", time.Hour)
	dead := sd.begin("g", "g1", "h", 50*time.Millisecond)
	for i := range 2*trendLen + 1 { // a busy contender's events: newer than the running attempts
		for _, task := range []string{"c", "g"} {
			if err := sd.s.Record(ctx, store.Event{Task: task, Slot: fmt.Sprintf("e%d", i), Kind: store.Busy, Holder: "h2"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv, ts := sd.server("")
	reads := countReads(srv)
	uncached, _ := sd.server("")
	rows := func() map[string]TaskRow {
		t.Helper()
		_, body := get(t, ts, "/api/v1/tasks")
		var p TaskPage
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		out := map[string]TaskRow{}
		for _, r := range p.Tasks {
			fresh, err := uncached.taskRow(ctx, r.Task, false)
			if err != nil {
				t.Fatal(err)
			}
			if !sameSuccess(r, fresh) {
				t.Fatalf("%s: the overview shows last success %v (not known %v, in %d), a fresh read %v (%v, %d)", r.Task,
					r.LastSuccess, r.LastSuccessUnknown, r.NoSuccessIn, fresh.LastSuccess, fresh.LastSuccessUnknown, fresh.NoSuccessIn)
			}
			out[r.Task] = r
		}
		return out
	}
	want := func(task string, n int) {
		t.Helper()
		if got := reads.get(task); got != n {
			t.Fatalf("%s: %d reads of its last success, want %d", task, got, n)
		}
	}

	r := rows()
	if r["a"].LastSuccess == nil || !r["a"].LastSuccess.Equal(*okA.EndedAt) || r["b"].LastSuccess != nil {
		t.Fatalf("first load: a %v, b %v", r["a"].LastSuccess, r["b"].LastSuccess)
	}
	want("a", 1)
	want("b", 1)
	// Polled until g's holder is gone (its lease expired).
	for deadline := time.Now().Add(30 * time.Second); r["g"].Status != statusGone; r = rows() {
		if time.Now().After(deadline) {
			t.Fatalf("g: status %q, want %q", r["g"].Status, statusGone)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Unchanged: no read again for a and b; c (lease live) and g (holder gone) are read each time.
	nc, ng := reads.get("c"), reads.get("g")
	rows()
	want("a", 1)
	want("b", 1)
	want("c", nc+1)
	want("g", ng+1)

	// A new failure of a: read again, once.
	sd.run("a", "f-new", "h", store.Failed)
	rows()
	rows()
	want("a", 2)
	want("b", 1)
	// An event of b, then a person's resolve of b's last attempt (no success: the kept "never" holds).
	if err := sd.s.Record(ctx, store.Event{Task: "b", Slot: "x", Kind: store.Skipped, Holder: "h2"}); err != nil {
		t.Fatal(err)
	}
	rows()
	want("b", 2)
	if _, err := sd.s.Resolve(ctx, store.ResolveRequest{Task: "b", Slot: fmt.Sprintf("f%d", 2*trendLen), As: store.Succeeded, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	if r = rows(); r["b"].Status != statusOK || r["b"].LastSuccess != nil {
		t.Fatalf("b resolved: status %q, last success %v", r["b"].Status, r["b"].LastSuccess)
	}
	// A new success of b: shown at once.
	okB := sd.run("b", "s-new", "h", store.Succeeded)
	if r = rows(); r["b"].LastSuccess == nil || !r["b"].LastSuccess.Equal(*okB.EndedAt) {
		t.Fatalf("b succeeded: last success %v, want %v", r["b"].LastSuccess, okB.EndedAt)
	}
	// The attempts running behind the events end in success: shown at once, though the newest
	// entries of c and g are as they were.
	for _, a := range []store.Attempt{live, dead} {
		if _, err := sd.s.Finish(ctx, a.RunID, a.Token, store.Outcome{State: store.Succeeded}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sd.s.Release(ctx, store.Lease{Task: "c", Holder: "h", Token: live.Token}); err != nil {
		t.Fatal(err)
	}
	r = rows()
	for _, task := range []string{"c", "g"} {
		if r[task].LastSuccess == nil {
			t.Fatalf("%s: its running attempt succeeded, the overview shows no last success", task)
		}
	}
	// Requests at once (the server answers 8), while a moves: the race detector watches the cache.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				if res, err := http.Get(ts.URL + "/api/v1/tasks"); err == nil {
					res.Body.Close()
				}
			}
		})
	}
	for i := range 5 {
		sd.run("a", fmt.Sprintf("g%d", i), "h", store.Failed)
	}
	wg.Wait()
	rows()
}

func sameSuccess(a, b TaskRow) bool {
	if (a.LastSuccess == nil) != (b.LastSuccess == nil) || a.LastSuccess != nil && !a.LastSuccess.Equal(*b.LastSuccess) {
		return false
	}
	return a.LastSuccessUnknown == b.LastSuccessUnknown && a.NoSuccessIn == b.NoSuccessIn
}

// BenchmarkOverviewFailing: a page of the overview (s.tasks, what / and /api/v1/tasks read) of 50
// tasks failing for their newest 2,000 attempts each, on SQLite: "first" is a server's first load
// (a store.ReadLastSuccess per row), "reload" the next ones (the rows' last successes kept).
func BenchmarkOverviewFailing(b *testing.B) {
	const tasks, failures = 50, 2000
	s, db := rawLedger(b)
	sd := &seeded{t: b, s: s}
	var from int64
	for i := range tasks {
		ok := sd.run(fmt.Sprintf("job-%02d", i), "s0", "h", store.Succeeded)
		from = max(from, ok.EndedAt.UnixMicro()+1000)
	}
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 * ?2)
		INSERT INTO attempts (task, slot, number, run_id, state, holder, token, started_at, ended_at)
		SELECT printf('job-%02d', i % ?1), 'f' || i, 1, 'r' || i, 'failed', 'h', 1, ?3 + i * 1000, ?3 + i * 1000 + 500 FROM n`,
		tasks, failures, from); err != nil {
		b.Fatal(err)
	}
	page := func(b *testing.B, srv *Server) {
		p, err := srv.tasks(b.Context(), "", maxTasks)
		if err != nil || len(p.Tasks) != tasks || !p.Tasks[0].LastSuccessUnknown {
			b.Fatalf("%d tasks, %v", len(p.Tasks), err)
		}
	}
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			srv, _ := sd.server("")
			b.StartTimer()
			page(b, srv)
		}
	})
	b.Run("first-8-at-once", func(b *testing.B) { // 8 first loads at once: reads per load
		var reads atomic.Int64
		for b.Loop() {
			b.StopTimer()
			srv, _ := sd.server("")
			read := srv.success.read
			srv.success.read = func(ctx context.Context, l store.Ledger, task string) (store.LastSuccess, error) {
				reads.Add(1)
				return read(ctx, l, task)
			}
			b.StartTimer()
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					if p, err := srv.tasks(b.Context(), "", maxTasks); err != nil || len(p.Tasks) != tasks {
						b.Errorf("%d tasks, %v", len(p.Tasks), err)
					}
				})
			}
			wg.Wait()
		}
		b.ReportMetric(float64(reads.Load())/float64(b.N), "reads/op")
	})
	b.Run("reload", func(b *testing.B) {
		srv, _ := sd.server("")
		page(b, srv)
		for b.Loop() {
			page(b, srv)
		}
	})
}

// TestKeptLastSuccessAges: a result kept under an unchanged key is read again once it is
// successKeep old (a prune or a restored backup does not change the key).
func TestKeptLastSuccessAges(t *testing.T) {
	reads := 0
	c := successCache{m: map[string]cachedSuccess{}, read: func(context.Context, store.Ledger, string) (store.LastSuccess, error) {
		reads++
		return store.LastSuccess{Unknown: true, Looked: store.SuccessScan}, nil
	}}
	es := []store.Entry{{Attempt: store.Attempt{State: store.Failed}, Cursor: "c1"}}
	for i := 0; i < 3; i++ {
		if _, err := c.lastSuccess(context.Background(), nil, "t", es, true); err != nil {
			t.Fatal(err)
		}
	}
	if reads != 1 {
		t.Fatalf("%d reads for three lookups under one key, want 1", reads)
	}
	v := c.m["t"]
	v.read = v.read.Add(-successKeep)
	c.m["t"] = v
	if _, err := c.lastSuccess(context.Background(), nil, "t", es, true); err != nil {
		t.Fatal(err)
	}
	if reads != 2 {
		t.Fatalf("%d reads after the kept result aged, want 2", reads)
	}
}

// Reloads at once that all miss the kept last successes (a server's first load: 8 requests, as
// many as the server answers at once) read each task's last success once: the others wait for that
// read, under the same key, and show what it found. The first read of each task waits until all
// 8 requests asked for it or 2 s passed, so that requests that each read would all be counted.
func TestOverviewReloadsAtOnceReadOnce(t *testing.T) {
	sd := newSeeded(t)
	okA := sd.run("a", "s0", "h", store.Succeeded)
	for i := range 2*trendLen + 1 { // the success is older than the row's newest entries
		sd.run("a", fmt.Sprintf("f%d", i), "h", store.Failed)
		sd.run("b", fmt.Sprintf("f%d", i), "h", store.Failed)
	}
	srv, ts := sd.server("")
	const n = 8
	var mu sync.Mutex
	reads := map[string]int{}
	arrived := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	srv.success.read = func(ctx context.Context, l store.Ledger, task string) (store.LastSuccess, error) {
		mu.Lock()
		reads[task]++
		if reads[task] == n {
			close(arrived[task])
		}
		mu.Unlock()
		select {
		case <-arrived[task]:
		case <-time.After(2 * time.Second):
		}
		return store.ReadLastSuccess(ctx, l, task)
	}
	var wg sync.WaitGroup
	pages := make([]TaskPage, n)
	for i := range n {
		wg.Go(func() {
			res, err := http.Get(ts.URL + "/api/v1/tasks")
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Body.Close()
			if err := json.NewDecoder(res.Body).Decode(&pages[i]); err != nil {
				t.Errorf("reload %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	for _, task := range []string{"a", "b"} {
		if reads[task] != 1 {
			t.Errorf("%s: %d reads of its last success by %d reloads at once, want 1", task, reads[task], n)
		}
	}
	for _, p := range pages {
		for _, r := range p.Tasks {
			switch {
			case r.Task == "a" && (r.LastSuccess == nil || !r.LastSuccess.Equal(*okA.EndedAt)):
				t.Errorf("a: last success %v, want %v", r.LastSuccess, okA.EndedAt)
			case r.Task == "b" && (r.LastSuccess != nil || r.LastSuccessUnknown):
				t.Errorf("b: last success %v (not known %v), want never", r.LastSuccess, r.LastSuccessUnknown)
			}
		}
	}
}

// A request that waits for another's read of a last success (the same key) reads on its own when
// that read failed (its request cancelled, say): it is not given the other's error.
func TestWaitedForReadFails(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	reads := 0
	c := successCache{m: map[string]cachedSuccess{}, read: func(ctx context.Context, _ store.Ledger, _ string) (store.LastSuccess, error) {
		mu.Lock()
		reads++
		first := reads == 1
		mu.Unlock()
		if first {
			close(started)
			<-release
			return store.LastSuccess{}, context.Canceled
		}
		return store.LastSuccess{Unknown: true, Looked: store.SuccessScan}, nil
	}}
	es := []store.Entry{{Attempt: store.Attempt{State: store.Failed}, Cursor: "c1"}}
	first := make(chan error, 1)
	go func() { _, err := c.lastSuccess(context.Background(), nil, "t", es, true); first <- err }()
	<-started
	second := make(chan store.LastSuccess, 1)
	go func() {
		ls, err := c.lastSuccess(context.Background(), nil, "t", es, true)
		if err != nil {
			t.Errorf("the waiting request: %v", err)
		}
		second <- ls
	}()
	time.Sleep(50 * time.Millisecond) // give the second request time to join (it may also come late: then it reads itself)
	close(release)
	if err := <-first; err == nil {
		t.Fatal("the first read's error was lost")
	}
	if ls := <-second; !ls.Unknown {
		t.Fatalf("the waiting request got %+v, want its own read's result", ls)
	}
	if reads != 2 {
		t.Fatalf("%d reads, want 2 (the failed one, then the waiter's own)", reads)
	}
}
