package metrics

import (
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// clock is a Config.Now a test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestResolutionClearsTheLastState: once resolve on a task's latest attempt, failed or unknown,
// is its state in once_task_last_attempt_state within recheckEvery (the documented alert on a
// failed last attempt stops firing when a person settles it), for a collector that saw the attempt
// end and for one started after the decision; and a later attempt's state wins again.
func TestResolutionClearsTheLastState(t *testing.T) {
	st, _ := openStore(t)
	l := &ledger{tb: t, st: st}
	clk := &clock{now: time.Now()}
	c := newCollector(t, Config{Store: st, Now: clk.Now})
	c.t.overlap = 0 // the tail does not read the attempts again: only checkResolved sees a decision
	scrape(t, c)
	l.run("f", "d1", store.Failed)
	l.run("u", "d1", store.Unknown)
	l.run("ok", "d1", store.Succeeded)
	time.Sleep(2 * time.Millisecond)
	l.event("other", "", store.Busy) // the tail goes past them
	state := func(task, st string) string {
		return `once_task_last_attempt_state{state="` + st + `",task="` + task + `"}`
	}
	want(t, scrape(t, c), map[string]float64{state("f", "failed"): 1, state("u", "unknown"): 1, state("ok", "succeeded"): 1})
	for _, r := range []store.ResolveRequest{{Task: "f", Slot: "d1", As: store.Succeeded, By: "alice"},
		{Task: "u", Slot: "d1", As: store.Failed, By: "alice"}} {
		if _, err := st.Resolve(l.ctx(), r); err != nil {
			t.Fatal(err)
		}
	}
	clk.add(recheckEvery / 2)
	want(t, scrape(t, c), map[string]float64{state("f", "failed"): 1, state("u", "unknown"): 1}) // not read yet
	clk.add(recheckEvery)
	got := scrape(t, c)
	want(t, got, map[string]float64{state("f", "succeeded"): 1, state("f", "failed"): 0,
		state("u", "failed"): 1, state("u", "unknown"): 0, state("ok", "succeeded"): 1,
		`once_attempts_total{state="failed",task="f"}`: 1, `once_attempts_total{state="succeeded",task="f"}`: 0})
	clk.add(2 * recheckEvery)
	scrape(t, c) // resolved: neither is read again
	if l := c.t.tasks["f"].last; !l.checked.Before(clk.Now().Add(-recheckEvery)) {
		t.Errorf("a resolved attempt's slot was read again (checked %v)", l.checked)
	}

	fresh := newCollector(t, Config{Store: st, Now: clk.Now})
	want(t, scrape(t, fresh), map[string]float64{state("f", "succeeded"): 1, state("u", "failed"): 1})

	l.run("f", "d2", store.Failed)
	want(t, scrape(t, c), map[string]float64{state("f", "failed"): 1, state("f", "succeeded"): 0})
}
