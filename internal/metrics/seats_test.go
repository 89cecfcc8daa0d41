package metrics

import (
	"fmt"
	"strings"
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
