package metrics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/once-run/once/store"
)

// TestLeaseInfoEverySeatHolder: a task of --limit N held by several holders at once shows each of
// them (it showed the one listed last), its expiry is the latest seat's, and a task of many seat
// holders shows the first maxLeaseHolders by name.
func TestLeaseInfoEverySeatHolder(t *testing.T) {
	st, _ := openStore(t)
	c := newCollector(t, Config{Store: st})
	seat := func(holder string, ttl time.Duration) store.Lease {
		t.Helper()
		ls, err := st.Acquire(t.Context(), store.AcquireRequest{Task: "t", Holder: holder, RunID: "run-" + holder, TTL: ttl, Limit: 20})
		if err != nil {
			t.Fatal(err)
		}
		return ls
	}
	seat("node-b", time.Minute)
	seat("node-a", time.Minute)
	last := seat("node-a", 2*time.Minute) // node-a holds two seats
	got := scrape(t, c)
	want(t, got, map[string]float64{
		`once_task_lease_held{task="t"}`:                      1,
		`once_task_lease_info{holder="node-a",task="t"}`:      1,
		`once_task_lease_info{holder="node-b",task="t"}`:      1,
		`once_task_lease_expires_timestamp_seconds{task="t"}`: ts(last.Expires),
	})

	for i := range 15 {
		seat(fmt.Sprintf("node-%02d", i), time.Minute)
	}
	got = scrape(t, c)
	var holders []string
	for k := range got {
		if strings.HasPrefix(k, "once_task_lease_info{") {
			holders = append(holders, k)
		}
	}
	if len(holders) != maxLeaseHolders {
		t.Fatalf("%d holder series of 17 holders, want %d: %v", len(holders), maxLeaseHolders, holders)
	}
	want(t, got, map[string]float64{
		`once_task_lease_info{holder="node-00",task="t"}`: 1,
		`once_task_lease_info{holder="node-09",task="t"}`: 1,
		`once_task_lease_info{holder="node-a",task="t"}`:  absent,
	})
}

// slotCounting counts the Slot reads of each task (a wrapper of a real store; the capabilities
// the collector uses are passed on: the running index, the history's paging).
type slotCounting struct {
	store.Store
	mu    sync.Mutex
	reads map[string]int
}

func (s *slotCounting) Slot(ctx context.Context, task, slot string) (store.SlotState, error) {
	s.mu.Lock()
	s.reads[task]++
	s.mu.Unlock()
	return s.Store.Slot(ctx, task, slot)
}

func (s *slotCounting) count(task string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[task]
}

func (s *slotCounting) RunningAttempts(ctx context.Context, limit int) (store.RunningList, error) {
	return s.Store.(store.RunningLister).RunningAttempts(ctx, limit)
}

func (s *slotCounting) HistoryPageSize() int { return s.Store.(store.HistoryPager).HistoryPageSize() }

// TestSeatsRunningNotReadAgain: the attempts running under a --limit task's live seats are each
// their seat's newest, under their grant: their slots are not read at each scrape (only the seat
// whose grant expired last was taken as the task's, and the attempt of the other seat was read
// every recheckEvery); an attempt whose seat is released is read, and counted, as before.
func TestSeatsRunningNotReadAgain(t *testing.T) {
	raw, _ := openStore(t)
	st := &slotCounting{Store: raw, reads: map[string]int{}}
	l := &ledger{tb: t, st: raw}
	clk := &clock{now: time.Now()}
	c := newCollector(t, Config{Store: st, Now: clk.Now})
	c.t.overlap = 0 // the tail does not read the attempts again: only checkRunning sees them end
	scrape(t, c)
	seat := func(holder string, ttl time.Duration) store.Lease {
		t.Helper()
		ls, err := raw.Acquire(l.ctx(), store.AcquireRequest{Task: "t", Holder: holder, RunID: "lease-" + holder, TTL: ttl, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		return ls
	}
	a, b := seat("node-a", time.Minute), seat("node-b", 2*time.Minute) // node-b's expires last
	aa := l.begin(a, "s1")
	time.Sleep(2 * time.Millisecond)
	l.begin(b, "s2") // the task's newest attempt
	time.Sleep(2 * time.Millisecond)
	l.event("other", "", store.Busy) // the tail goes past them
	for i := range 4 {
		want(t, scrape(t, c), map[string]float64{`once_task_last_attempt_state{state="running",task="t"}`: 1,
			`once_task_holder_gone_attempts{task="t"}`: 0, `once_attempts_total{state="succeeded",task="t"}`: 0})
		clk.add(recheckEvery + time.Second)
		if n := st.count("t"); n != 0 {
			t.Fatalf("scrape %d: %d slot reads of the task whose two seats run their attempts, want 0", i+1, n)
		}
	}
	l.finish(a, aa, store.Succeeded)
	l.release(a)
	want(t, scrape(t, c), map[string]float64{`once_attempts_total{state="succeeded",task="t"}`: 1,
		`once_attempt_duration_seconds_count{task="t"}`: 1, `once_task_last_attempt_state{state="running",task="t"}`: 1})
	if n := st.count("t"); n != 1 {
		t.Fatalf("%d slot reads after node-a's seat was released, want 1 (its attempt's)", n)
	}
}
