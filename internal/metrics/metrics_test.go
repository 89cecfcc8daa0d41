package metrics

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/once-run/once/store"
)

var absent = math.NaN()

// TestTaskGaugesAndCounters: runs made with the Ledger API, as the collector sees them scrape by
// scrape. What happened before the first scrape dates the gauges but is not counted.
func TestTaskGaugesAndCounters(t *testing.T) {
	st, _ := openStore(t)
	l := &ledger{tb: t, st: st}
	before := l.run("t", "d1", store.Succeeded)
	l.event("t", "d1", store.Skipped)
	c := newCollector(t, Config{Store: st})

	got := scrape(t, c)
	want(t, got, map[string]float64{
		`once_task_last_success_timestamp_seconds{task="t"}`:       ts(*before.EndedAt),
		`once_task_last_attempt_timestamp_seconds{task="t"}`:       ts(before.StartedAt),
		`once_task_last_attempt_state{state="succeeded",task="t"}`: 1,
		`once_task_last_attempt_state{state="running",task="t"}`:   0,
		`once_attempts_total{state="succeeded",task="t"}`:          0,
		`once_events_total{kind="skipped",task="t"}`:               0,
		`once_attempt_duration_seconds_count{task="t"}`:            0,
		`once_task_lease_held{task="t"}`:                           0,
		`once_task_lease_info{holder="h",task="t"}`:                absent,
		`once_task_waiting_review_slots{task="t"}`:                 0,
		`once_tasks`:          1,
		`once_tasks_left_out`: 0,
		`once_store_up`:       1,
	})

	ls := l.acquire("t", "node-a", time.Minute)
	a := l.begin(ls, "d2")
	got = scrape(t, c)
	want(t, got, map[string]float64{
		`once_task_last_attempt_state{state="running",task="t"}`:   1,
		`once_task_last_attempt_state{state="succeeded",task="t"}`: 0,
		`once_task_last_attempt_timestamp_seconds{task="t"}`:       ts(a.StartedAt),
		`once_task_lease_held{task="t"}`:                           1,
		`once_task_lease_info{holder="node-a",task="t"}`:           1,
		`once_task_lease_expires_timestamp_seconds{task="t"}`:      ts(ls.Expires),
	})

	// The run cannot tell: unknown, and the slot waits for a person.
	l.finish(ls, a, store.Unknown)
	l.release(ls)
	l.event("t", "d2", store.Review)
	l.event("t", "d3", store.Busy)
	l.event("t", "d3", store.Busy)
	l.event("t", "d4", store.Missed)
	got = scrape(t, c)
	want(t, got, map[string]float64{
		`once_attempts_total{state="unknown",task="t"}`:          1,
		`once_attempts_total{state="succeeded",task="t"}`:        0,
		`once_task_last_attempt_state{state="unknown",task="t"}`: 1,
		`once_task_waiting_review_slots{task="t"}`:               1,
		`once_events_total{kind="review",task="t"}`:              1,
		`once_events_total{kind="busy",task="t"}`:                2,
		`once_events_total{kind="missed",task="t"}`:              1,
		`once_events_total{kind="skipped",task="t"}`:             0,
		`once_attempt_duration_seconds_count{task="t"}`:          1,
		`once_task_lease_held{task="t"}`:                         0,
		`once_task_lease_info{holder="node-a",task="t"}`:         absent,
		`once_task_last_success_timestamp_seconds{task="t"}`:     ts(*before.EndedAt),
	})

	// A person resolves it; the next run succeeds.
	if _, err := st.Resolve(l.ctx(), store.ResolveRequest{Task: "t", Slot: "d2", As: store.Failed, By: "ops"}); err != nil {
		t.Fatal(err)
	}
	ok := l.run("t", "d2", store.Succeeded)
	l.run("u", "", store.Failed)
	got = scrape(t, c)
	want(t, got, map[string]float64{
		`once_task_waiting_review_slots{task="t"}`:              0,
		`once_attempts_total{state="succeeded",task="t"}`:       1,
		`once_attempts_total{state="unknown",task="t"}`:         1,
		`once_task_last_success_timestamp_seconds{task="t"}`:    ts(*ok.EndedAt),
		`once_attempt_duration_seconds_count{task="t"}`:         2,
		`once_attempts_total{state="failed",task="u"}`:          1,
		`once_task_last_attempt_state{state="failed",task="u"}`: 1,
		`once_task_last_success_timestamp_seconds{task="u"}`:    absent,
		`once_tasks`: 2,
	})
	// Nothing new: nothing counted again.
	again := scrape(t, c)
	for k, v := range got {
		if strings.HasSuffix(strings.SplitN(k, "{", 2)[0], "_total") && again[k] != v {
			t.Errorf("%s: %v, then %v with nothing new", k, v, again[k])
		}
	}
}

// TestAttemptAcrossScrapesCountedOnce: an attempt that started before a scrape and ended after it
// is counted exactly once, whether the tail reads its entry again (it ended within the overlap)
// or not (a long run: its slot is read when its lease is gone), and so is one that was running
// when the collector started.
func TestAttemptAcrossScrapesCountedOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		overlap time.Duration
	}{{"within the overlap", defaultOverlap}, {"past the overlap", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := openStore(t)
			l := &ledger{tb: t, st: st}
			early := l.acquire("early", "h", time.Minute)
			ea := l.begin(early, "")
			c := newCollector(t, Config{Store: st})
			c.t.overlap = tc.overlap
			scrape(t, c)

			ls := l.acquire("long", "h", time.Minute)
			a := l.begin(ls, "")
			got := scrape(t, c)
			want(t, got, map[string]float64{`once_task_last_attempt_state{state="running",task="long"}`: 1})
			// Later entries move the tail past the attempt's place in history.
			time.Sleep(2 * time.Millisecond)
			l.event("other", "", store.Busy)
			scrape(t, c)
			l.finish(ls, a, store.Succeeded)
			l.release(ls)
			l.finish(early, ea, store.Failed)
			l.release(early)
			for i := range 3 {
				got = scrape(t, c)
				want(t, got, map[string]float64{
					`once_attempts_total{state="succeeded",task="long"}`:          1,
					`once_attempt_duration_seconds_count{task="long"}`:            1,
					`once_task_last_attempt_state{state="succeeded",task="long"}`: 1,
					`once_attempts_total{state="failed",task="early"}`:            1,
					`once_events_total{kind="busy",task="other"}`:                 1,
				})
				if t.Failed() {
					t.Fatalf("scrape %d after the end", i+1)
				}
			}
		})
	}
}

// TestSequenceUnderOneLease: a run of several slots under one lease begins the next slot's
// attempt while it holds the lease; the previous one is counted then, not at the release.
func TestSequenceUnderOneLease(t *testing.T) {
	st, _ := openStore(t)
	l := &ledger{tb: t, st: st}
	c := newCollector(t, Config{Store: st})
	c.t.overlap = 0
	scrape(t, c)
	ls := l.acquire("seq", "h", time.Minute)
	a := l.begin(ls, "s1")
	time.Sleep(2 * time.Millisecond)
	l.event("other", "", store.Busy) // the tail goes past it
	scrape(t, c)
	l.finish(ls, a, store.Succeeded)
	time.Sleep(2 * time.Millisecond)
	b := l.begin(ls, "s2")
	got := scrape(t, c)
	want(t, got, map[string]float64{
		`once_attempts_total{state="succeeded",task="seq"}`:        1,
		`once_task_last_attempt_state{state="running",task="seq"}`: 1,
		`once_task_last_attempt_timestamp_seconds{task="seq"}`:     ts(b.StartedAt),
	})
}

// TestVanishedHolder: a holder that vanished leaves its attempt running; the next holder marks
// it unknown (Abandon), and that is counted.
func TestVanishedHolder(t *testing.T) {
	st, _ := openStore(t)
	l := &ledger{tb: t, st: st}
	c := newCollector(t, Config{Store: st})
	c.t.overlap = 0
	scrape(t, c)
	gone := l.acquire("v", "gone", 50*time.Millisecond)
	l.begin(gone, "")
	time.Sleep(2 * time.Millisecond)
	l.event("other", "", store.Busy) // the tail goes past it
	scrape(t, c)
	time.Sleep(100 * time.Millisecond)
	got := scrape(t, c) // the lease has expired: the slot is read, still running
	// Its holder is gone: once_task_holder_gone_attempts says so until the next holder marks it.
	want(t, got, map[string]float64{`once_attempts_total{state="unknown",task="v"}`: 0, `once_task_lease_held{task="v"}`: 0,
		`once_task_holder_gone_attempts{task="v"}`: 1, `once_task_holder_gone_attempts{task="other"}`: 0})
	next := l.acquire("v", "next", time.Minute)
	if _, err := st.Abandon(l.ctx(), "v", next.Token); err != nil {
		t.Fatal(err)
	}
	// The next holder's own attempt of the slot begins before the next scrape: the abandoned one
	// is found in the slot's history.
	time.Sleep(2 * time.Millisecond)
	l.begin(next, "")
	c.t.running[attemptID(store.Attempt{Task: "v", Number: 1})].checked = time.Time{} // not wait 30 s
	got = scrape(t, c)
	want(t, got, map[string]float64{`once_attempts_total{state="unknown",task="v"}`: 1,
		`once_task_last_attempt_state{state="running",task="v"}`: 1, `once_task_holder_gone_attempts{task="v"}`: 0})
	if len(c.t.running) != 1 {
		t.Errorf("%d running attempts tracked, want 1 (the next holder's)", len(c.t.running))
	}
}

// TestStoreDown: a store that fails is once_store_up 0, and the scrape still exports the rest.
func TestStoreDown(t *testing.T) {
	st, _ := openStore(t)
	l := &ledger{tb: t, st: st}
	c := newCollector(t, Config{Store: st})
	scrape(t, c)
	l.run("t", "", store.Succeeded)
	want(t, scrape(t, c), map[string]float64{`once_store_up`: 1, `once_attempts_total{state="succeeded",task="t"}`: 1})
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, c)
	want(t, got, map[string]float64{`once_store_up`: 0, `once_attempts_total{state="succeeded",task="t"}`: 1, `once_tasks`: 1})
	if c.Err() == nil {
		t.Error("Err() is nil after a failed read")
	}
	if _, ok := got[`once_scrape_duration_seconds`]; !ok {
		t.Error("no once_scrape_duration_seconds")
	}
}

type fleet Fleet

func (f fleet) FleetStats() Fleet { return Fleet(f) }

func TestFleet(t *testing.T) {
	st, _ := openStore(t)
	next := time.Now().Add(time.Hour).Truncate(time.Second)
	f := fleet{Fired: 5, Refused: 1, Missed: 2, ReloadFailures: 3, AccountsDeferred: 4, AccountsWaiting: 2, ClockOffset: -1500 * time.Millisecond, ClockOK: true,
		Jobs: 2, Running: 1, PerJob: []JobStats{
			{Job: "b", NextFire: next},
			{Job: "a", NextFire: next, LastFire: next.Add(-time.Hour), FireLag: 250 * time.Millisecond},
		}}
	got := scrape(t, newCollector(t, Config{Store: st, Fleet: f, MaxTasks: 1}))
	want(t, got, map[string]float64{
		`once_daemon_fired_total`:                              5,
		`once_daemon_refused_total`:                            1,
		`once_daemon_missed_total`:                             2,
		`once_daemon_reload_failures_total`:                    3,
		`once_daemon_accounts_deferred_total`:                  4,
		`once_daemon_accounts_waiting`:                         2,
		`once_daemon_clock_offset_seconds`:                     -1.5,
		`once_daemon_clock_ok`:                                 1,
		`once_daemon_jobs`:                                     2,
		`once_daemon_running`:                                  1,
		`once_daemon_job_next_fire_timestamp_seconds{job="a"}`: ts(next),
		`once_daemon_job_fire_lag_seconds{job="a"}`:            0.25,
		`once_daemon_job_next_fire_timestamp_seconds{job="b"}`: absent, // MaxTasks 1
	})
	if _, ok := scrape(t, newCollector(t, Config{Store: st}))[`once_daemon_jobs`]; ok {
		t.Error("once_daemon_jobs without a daemon")
	}
}

func TestHandler(t *testing.T) {
	st, _ := openStore(t)
	(&ledger{tb: t, st: st}).run("t", "", store.Succeeded)
	c := newCollector(t, Config{Store: st})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, s := range []string{"once_store_up 1", `once_task_last_attempt_state{state="succeeded",task="t"} 1`,
		"go_goroutines", "process_start_time_seconds", "# TYPE once_attempt_duration_seconds histogram"} {
		if !strings.Contains(string(body), s) {
			t.Errorf("no %q in /metrics:\n%s", s, body)
		}
	}
	var fams []*dto.MetricFamily
	for _, f := range gather(t, c) {
		fams = append(fams, f)
	}
	if problems, err := promlint.NewWithMetricFamilies(fams).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
}

func TestNewNeedsAStore(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a store: no error")
	}
}

// TestWriterClockAhead: an entry dated a minute ahead (a writer whose clock is ahead) does not
// make the tail skip the entries the others write meanwhile.
func TestWriterClockAhead(t *testing.T) {
	st, path := openStore(t)
	l := &ledger{tb: t, st: st}
	c := newCollector(t, Config{Store: st})
	scrape(t, c)
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO events (task, slot, kind, run_id, holder, token, attempt, at, note)
		VALUES ('ahead', '', 'busy', 'r', 'h', 0, 0, ?, '')`, time.Now().Add(time.Minute).UnixMicro()); err != nil {
		t.Fatal(err)
	}
	want(t, scrape(t, c), map[string]float64{`once_events_total{kind="busy",task="ahead"}`: 1})
	l.run("t", "", store.Succeeded)
	l.event("t", "", store.Busy)
	for range 2 {
		want(t, scrape(t, c), map[string]float64{`once_attempts_total{state="succeeded",task="t"}`: 1,
			`once_events_total{kind="busy",task="t"}`: 1, `once_events_total{kind="busy",task="ahead"}`: 1})
	}
}

// hanging is a store whose Leases hangs until its context ends (a server that stopped answering).
type hanging struct{ store.Store }

func (h hanging) Leases(ctx context.Context) ([]store.Lease, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestStoreHangs: a store that does not answer is once_store_up 0 within Config.Timeout, and the
// scrape answers.
func TestStoreHangs(t *testing.T) {
	st, _ := openStore(t)
	(&ledger{tb: t, st: st}).run("t", "", store.Succeeded)
	c := newCollector(t, Config{Store: hanging{st}, Timeout: 200 * time.Millisecond})
	t0 := time.Now()
	got := scrape(t, c)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("scrape took %v with a 200ms timeout", d)
	}
	want(t, got, map[string]float64{`once_store_up`: 0, `once_tasks`: 1})
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Errorf("Err() = %v, want the deadline", c.Err())
	}
}
