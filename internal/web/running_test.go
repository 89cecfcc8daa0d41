package web

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// begin records attempt 1 of (task, slot) by holder under a grant of ttl, left running: with a
// short ttl, its holder "dies" (the lease expires, nothing ends the attempt).
func (sd *seeded) begin(task, slot, holder string, ttl time.Duration) store.Attempt {
	sd.t.Helper()
	ctx := context.Background()
	l, err := sd.s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: holder, RunID: "run-" + task + "-" + holder, TTL: ttl})
	if err != nil {
		sd.t.Fatal(err)
	}
	a, err := sd.s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: l.RunID, Number: 1, Holder: holder, Token: l.Token})
	if err != nil {
		sd.t.Fatal(err)
	}
	return a
}

// TestOverviewShowsHolderGone: an attempt still recorded as running whose holder's lease expired
// (the holder was killed) shows on the overview and in the API as "holder gone", with the once
// resolve commands to paste; one whose task is held again names that grant instead (resolve would
// refuse); one whose lease is live is running. Before, the overview took "running" from the
// leases alone: the dead holder's task showed its attempt as if nothing were wrong.
func TestOverviewShowsHolderGone(t *testing.T) {
	sd := newSeeded(t)
	sd.begin("dead-job", "d 1", "host-dead", 300*time.Millisecond)
	sd.begin("taken-job", "t1", "host-old", 300*time.Millisecond)
	sd.run("alive-job", "a1", "host-live", store.Running)
	time.Sleep(500 * time.Millisecond)
	// taken-job's task is granted again (a run that took the lease over, no Abandon yet).
	if _, err := sd.s.Acquire(context.Background(), store.AcquireRequest{Task: "taken-job", Holder: "host-new", RunID: "run-new", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	_, ts := sd.server("")

	_, body := get(t, ts, "/api/v1/running")
	var sec RunningSection
	if err := json.Unmarshal([]byte(body), &sec); err != nil {
		t.Fatal(err)
	}
	by := map[string]Running{}
	for _, r := range sec.Running {
		by[r.Task] = r
	}
	wantFailed := `once resolve --task dead-job --slot 'd 1' --as failed --store postgres://once:xxxxx@db/once`
	switch d, tk, al := by["dead-job"], by["taken-job"], by["alive-job"]; {
	case !sec.Listed || len(sec.Running) != 3:
		t.Fatalf("running: %s", body)
	case d.Lease != store.LeaseGone || d.Resolve == nil || d.Resolve.Failed != wantFailed || d.HeldBy != nil || d.State != store.Running:
		t.Fatalf("dead-job: %+v %+v, want lease gone and %s", d, d.Resolve, wantFailed)
	case !strings.HasSuffix(d.Resolve.Succeeded, "--as succeeded --store postgres://once:xxxxx@db/once") || !sec.PasswordHidden:
		t.Fatalf("dead-job: %+v (password hidden %v)", d.Resolve, sec.PasswordHidden)
	case tk.Lease != store.LeaseGone || tk.Resolve != nil || tk.HeldBy == nil || tk.HeldBy.Holder != "host-new":
		t.Fatalf("taken-job: %+v, want lease gone, held by host-new, no resolve commands", tk)
	case al.Lease != store.LeaseLive || al.Resolve != nil:
		t.Fatalf("alive-job: %+v, want lease live", al)
	}

	_, body = get(t, ts, "/api/v1/tasks")
	var p TaskPage
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	rows := map[string]TaskRow{}
	for _, r := range p.Tasks {
		rows[r.Task] = r
	}
	if r := rows["dead-job"]; r.Status != statusGone || len(r.Gone) != 1 || r.Gone[0].Resolve == nil || r.Gone[0].Resolve.Failed != wantFailed {
		t.Fatalf("dead-job's row: %+v", r)
	}
	if r := rows["taken-job"]; r.Status != statusRunning || len(r.Gone) != 1 || r.Gone[0].HeldBy == nil {
		t.Fatalf("taken-job's row: %+v", r)
	}
	if r := rows["alive-job"]; r.Status != statusRunning || len(r.Gone) != 0 {
		t.Fatalf("alive-job's row: %+v", r)
	}

	_, page := get(t, ts, "/")
	for _, want := range []string{
		`<tr data-task="dead-job"><td><a href="/timeline?task=dead-job">dead-job</a></td><td><span class="status s-gone">holder gone</span>`,
		`<section class="gone" id="gone"><h2>Holder gone (2)</h2>`,
		html.EscapeString(wantFailed),
		"The task is held now (host-new, token",
		"The store&#39;s password is shown as xxxxx",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the overview lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("%s", page)
	}
	// The same in Chinese: the state's label is translated, the commands are not.
	if _, zh := get(t, ts, "/?lang=zh-CN"); !strings.Contains(zh, "持有者已失联") || !strings.Contains(zh, html.EscapeString(wantFailed)) {
		t.Errorf("the Chinese overview lacks the holder-gone state or its commands")
	}
}

// failingRunning is a store whose list of running attempts cannot be read.
type failingRunning struct{ store.Store }

func (failingRunning) RunningAttempts(context.Context, int) (store.RunningList, error) {
	return store.RunningList{}, store.ErrUnavailable
}

// The overview is shown when the running list cannot be read, with a note saying so: it failed
// whole (500), the task table with it.
func TestOverviewWithoutTheRunningList(t *testing.T) {
	sd := newSeeded(t)
	sd.run("alive-job", "a1", "host-live", store.Running)
	srv, err := New(Config{Store: failingRunning{sd.s}, DSN: "sqlite:///x.db"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	res, body := get(t, ts, "/")
	if res.StatusCode != 200 || !strings.Contains(body, "alive-job") || !strings.Contains(body, "could not be read this time") {
		t.Fatalf("overview: %d\n%s", res.StatusCode, body)
	}
}

// endsAtLeases is a store whose Leases first ends run's attempt (Finish and Release): an attempt
// listed as running whose run ends before the leases are read. It counts the lists and the Slots.
type endsAtLeases struct {
	store.Store
	lease        store.Lease
	lists, slots int
}

func (e *endsAtLeases) RunningAttempts(ctx context.Context, limit int) (store.RunningList, error) {
	e.lists++
	return e.Store.(store.RunningLister).RunningAttempts(ctx, limit)
}

func (e *endsAtLeases) Slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	e.slots++
	return e.Store.Slot(ctx, task, slot)
}

func (e *endsAtLeases) Leases(ctx context.Context) ([]store.Lease, error) {
	if e.lease.RunID != "" {
		code := 0
		if _, err := e.Store.Finish(ctx, e.lease.RunID, e.lease.Token, store.Outcome{State: store.Succeeded, ExitCode: &code}); err != nil {
			return nil, err
		}
		if err := e.Store.Release(ctx, e.lease); err != nil {
			return nil, err
		}
		e.lease = store.Lease{}
	}
	return e.Store.Leases(ctx)
}

// The attempts whose holder is gone are told from the list of attempts running read twice, around
// the leases, not by a Slot each (seconds on a remote store with 100 of them): an attempt that
// ends between the list and the leases is not called holder gone, one running before and after
// is.
func TestHolderGoneWithoutASlotEach(t *testing.T) {
	sd := newSeeded(t)
	sd.begin("dead-job", "d1", "host-dead", 300*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	ctx := context.Background()
	l, err := sd.s.Acquire(ctx, store.AcquireRequest{Task: "ends-job", Holder: "host-e", RunID: "run-ends", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sd.s.Begin(ctx, store.Attempt{Task: "ends-job", Slot: "e1", RunID: l.RunID, Number: 1, Holder: l.Holder, Token: l.Token}); err != nil {
		t.Fatal(err)
	}
	st := &endsAtLeases{Store: sd.s, lease: l}
	srv, err := New(Config{Store: st, DSN: "sqlite:///x.db"})
	if err != nil {
		t.Fatal(err)
	}
	sec, _, err := srv.running(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.Running) != 1 || sec.Running[0].Task != "dead-job" || sec.Running[0].Lease != store.LeaseGone || sec.Running[0].Resolve == nil {
		t.Fatalf("running: %+v, want dead-job's attempt alone, holder gone", sec.Running)
	}
	if st.lists != 2 || st.slots != 0 {
		t.Fatalf("the read listed the attempts running %d times and read %d slots: want 2 and 0", st.lists, st.slots)
	}
}

// The timeline draws an attempt whose holder is gone apart from a running one (class gone, in the
// API holder_gone), with a legend in both languages; the slot's page says so, with the commands.
func TestTimelineMarksHolderGone(t *testing.T) {
	sd := newSeeded(t)
	sd.begin("dead-job", "d1", "host-dead", 300*time.Millisecond)
	sd.run("alive-job", "a1", "host-live", store.Running)
	sd.run("done-job", "o1", "host-live", store.Succeeded)
	time.Sleep(500 * time.Millisecond)
	_, ts := sd.server("")

	_, body := get(t, ts, "/api/v1/timeline")
	var tl Timeline
	if err := json.Unmarshal([]byte(body), &tl); err != nil {
		t.Fatal(err)
	}
	for task, want := range map[string]bool{"dead-job": true, "alive-job": false, "done-job": false} {
		if bs := tl.Bars[task]; len(bs) != 1 || bs[0].HolderGone != want {
			t.Errorf("%s's bars: %+v, want one with holder_gone %v", task, bs, want)
		}
	}
	_, page := get(t, ts, "/timeline?task=dead-job")
	for _, want := range []string{`<rect class="bar running gone"`, "HOLDER GONE", `<ul class="legend">`, `<rect class="bar running gone" width="18" height="10"/></svg> holder gone</li>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the task's timeline lacks %s", want)
		}
	}
	if _, page := get(t, ts, "/timeline?task=alive-job"); strings.Contains(page, `<rect class="bar running gone" x=`) {
		t.Errorf("alive-job's running attempt is drawn as holder gone")
	}
	if _, zh := get(t, ts, "/timeline?lang=zh-CN"); !strings.Contains(zh, "</svg> 持有者已失联</li>") || !strings.Contains(zh, "重叠（两个持有者同时运行）") {
		t.Errorf("the Chinese timeline's legend lacks holder gone or overlapping")
	}

	_, page = get(t, ts, "/slot?task=dead-job&slot=d1")
	for _, want := range []string{`<span class="status s-gone">holder gone</span>`, `<section class="gone" id="gone">`,
		html.EscapeString(`once resolve --task dead-job --slot d1 --as failed --store postgres://once:xxxxx@db/once`)} {
		if !strings.Contains(page, want) {
			t.Errorf("dead-job's slot page lacks %s", want)
		}
	}
	if _, page := get(t, ts, "/slot?task=alive-job&slot=a1"); strings.Contains(page, "s-gone") {
		t.Errorf("alive-job's slot page says holder gone")
	}
	_, body = get(t, ts, "/api/v1/slot?task=dead-job&slot=d1")
	var d SlotDetail
	if err := json.Unmarshal([]byte(body), &d); err != nil || d.HolderGone == nil || d.HolderGone.Resolve == nil {
		t.Errorf("/api/v1/slot of dead-job: holder_gone %+v (%v)", d.HolderGone, err)
	}
}

// changesAtLeases is a store whose first Leases first runs change: what other holders do between
// ReadRunning's first list and its read of the leases.
type changesAtLeases struct {
	store.Store
	change func()
}

func (c *changesAtLeases) RunningAttempts(ctx context.Context, limit int) (store.RunningList, error) {
	return c.Store.(store.RunningLister).RunningAttempts(ctx, limit)
}

func (c *changesAtLeases) Leases(ctx context.Context) ([]store.Lease, error) {
	if f := c.change; f != nil {
		c.change = nil
		f()
	}
	return c.Store.Leases(ctx)
}

// seat records attempt 1 of (task, slot) under a seat of task (once run --limit 2), left running.
func (sd *seeded) seat(task, slot, holder string, ttl time.Duration) store.Lease {
	sd.t.Helper()
	ctx := context.Background()
	l, err := sd.s.Acquire(ctx, store.AcquireRequest{Task: task, Holder: holder, RunID: "run-" + task + "-" + slot, TTL: ttl, Limit: 2})
	if err != nil {
		sd.t.Fatal(err)
	}
	if _, err := sd.s.Begin(ctx, store.Attempt{Task: task, Slot: slot, RunID: l.RunID, Number: 1, Holder: holder, Token: l.Token}); err != nil {
		sd.t.Fatal(err)
	}
	return l
}

// What happens between ReadRunning's two lists makes no live holder gone: a lease renewed and a
// seat taken then leave the live attempts live, a seat whose holder died beside a live one is gone
// and names that grant, and an attempt pushed past the second list's limit by attempts begun
// meanwhile is left out with More, not judged.
func TestReadRunningAroundTheLeases(t *testing.T) {
	sd := newSeeded(t)
	ctx := context.Background()
	sd.seat("m-seat", "a", "host-dead", 300*time.Millisecond)
	sd.seat("m-seat", "b", "host-b", time.Minute)
	live, err := sd.s.Acquire(ctx, store.AcquireRequest{Task: "n-live", Holder: "host-n", RunID: "run-n", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sd.s.Begin(ctx, store.Attempt{Task: "n-live", Slot: "n1", RunID: live.RunID, Number: 1, Holder: live.Holder, Token: live.Token}); err != nil {
		t.Fatal(err)
	}
	sd.begin("z-dead", "z1", "host-dead", 300*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // seat a's and z-dead's grants expire
	st := &changesAtLeases{Store: sd.s, change: func() {
		if _, err := sd.s.Renew(ctx, live, time.Minute); err != nil {
			t.Error(err)
		}
		sd.seat("m-seat", "c", "host-c", time.Minute) // the seat a's holder left
		sd.begin("a-new", "x1", "host-x", time.Minute)
	}}
	rr, _, err := store.ReadRunning(ctx, st, 4)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]store.RunningNow{}
	for _, r := range rr.Attempts {
		got[r.Task+"/"+r.Slot] = r
	}
	if r := got["n-live/n1"]; r.Lease != store.LeaseLive {
		t.Errorf("n-live, whose lease was renewed between the reads: %+v, want live", r)
	}
	if r := got["m-seat/b"]; r.Lease != store.LeaseLive {
		t.Errorf("m-seat's live seat b: %+v, want live", r)
	}
	if r := got["m-seat/a"]; r.Lease != store.LeaseGone || r.HeldBy == nil || r.HeldBy.Holder == "host-dead" {
		t.Errorf("m-seat's seat a, whose holder died: %+v (held by %+v), want gone and held by a live seat", r, r.HeldBy)
	}
	if _, ok := got["z-dead/z1"]; ok || !rr.More {
		t.Errorf("z-dead, past the second list's limit of 4: listed %v, more %v; want left out, more", ok, rr.More)
	}
	if len(got) != 3 {
		t.Errorf("listed %v; want the three above (attempts begun after the first list are not judged)", rr.Attempts)
	}
}

// When the running list cannot be read, the leases (what the leases page polls every second) read
// each lease's attempt from its task's newest entries, for at most leaseReads leases a request: a
// fleet holding many leases costs a bounded read; the others are shown without their figures.
func TestLeasesWithoutTheListReadABoundedNumber(t *testing.T) {
	sd := newSeeded(t)
	const held = leaseReads + 10
	for i := range held {
		sd.run(fmt.Sprintf("job-%02d", i), "s1", "h", store.Running)
	}
	rs := &historyRecorder{Store: failingRunning{sd.s}}
	srv, err := New(Config{Store: rs, DSN: "sqlite:///x.db"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := srv.leases(t.Context())
	if err != nil || len(rows) != held {
		t.Fatalf("%d leases of %d, %v", len(rows), held, err)
	}
	if len(rs.reads) > leaseReads {
		t.Fatalf("%d history reads for %d leases, want at most %d", len(rs.reads), held, leaseReads)
	}
	read := 0
	for _, r := range rows {
		switch {
		case !r.Unread && r.Slot == "s1":
			read++
		case r.Unread && r.Slot == "":
		default:
			t.Fatalf("lease row %+v", r)
		}
	}
	if read != leaseReads {
		t.Fatalf("%d leases shown with their attempt, want %d", read, leaseReads)
	}
}
